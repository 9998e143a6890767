"""Whose gates run: a git tree's own `.pre-commit-config.yaml`, or the kit's table for the release
wheel.

A tree's config decides every hook, its rev, args and file filters. Remote hooks run from the
package registry where the kit's table (ci/upstream-hooks.toml) maps their repository to a package,
at the config's rev; `repo: local` hooks run from the tree's own files (language python in a gate
env of their own, made once per config digest under .work/gate-envs by scripts/legs/gateenv.py, with
their additional_dependencies). Anything else is unchecked: it fails lint on each file the series
touches that the hook would see.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scripts import gitcmd
from scripts.checks.hooks import CONFIG, KNOWN_TAGS, LANGUAGES, Bins, Hook, HooksError, packages
from scripts.digests import sha256_text

RELEASE = "the kit's table for the release, which ships no config (ci/upstream-hooks.toml)"
FILE_STAGES = {
    "pre-commit",
    "commit",
}  # the stages `pre-commit run` uses in CI ("commit": the old name)
RELEASE_REV = re.compile(r"^v?(?P<version>\d+(\.\d+)*)$")
ENV_LAYOUT = "gate-env-1"  # part of the env's digest: a change of how it is made makes a new one


@dataclass(frozen=True)
class GateSource:
    """The hooks that judge the series and where they come from (shown in lint's and pr's reports)."""

    label: str
    hooks: tuple[Hook, ...]
    config: str = ""  # the tree's config text ("" for the kit's table)
    requirements: tuple[str, ...] = ()  # what the gate env holds beyond the table's packages

    @property
    def is_tree(self) -> bool:
        return bool(self.config)

    @property
    def needs_env(self) -> bool:
        return bool(self.requirements) or any(
            h.run == "local" and h.language == "python" for h in self.hooks
        )

    @property
    def digest(self) -> str:
        return sha256_text(f"{ENV_LAYOUT}\n{sys.version.split()[0]}\n{self.config}")


def release_gates(table: tuple[Hook, ...]) -> GateSource:
    return GateSource(RELEASE, table)


def strings(value: object, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if (
        isinstance(value, str)
        or not isinstance(value, list)
        or not all(isinstance(v, str) for v in value)
    ):
        raise HooksError(
            f"{CONFIG}: {what} is not a list of strings", f"fix {what} in the tree's {CONFIG}"
        )
    return tuple(value)


def both(first: str, second: str) -> str:
    """One regex that re.search finds where both do (pre-commit applies the top-level and the hook's
    `files`)."""
    if not first or not second:
        return first or second
    return f"^(?=.*?(?:{first}))(?=.*?(?:{second}))"


def either(first: str, second: str) -> str:
    return f"(?:{first})|(?:{second})" if first and second else first or second


def short_repo(url: str) -> str:
    return url.removesuffix("/").removesuffix(".git")


def remote_hook(url: str, rev: str, hook_id: str, common: dict, table: tuple[Hook, ...]) -> Hook:
    """A remote hook as the registry package the kit's table maps its repository to, at the config's
    rev."""
    template = next(
        (
            h
            for h in table
            if short_repo(h.repo) == short_repo(url) and h.id == hook_id and h.package
        ),
        None,
    )
    if template is None:
        return Hook(
            hook_id,
            url,
            "no",
            rev,
            why=f"{url} at {rev}: no registry package the kit maps this hook to",
            **common,
        )
    name = template.package.partition("==")[0]
    release = RELEASE_REV.match(rev)
    if rev == template.rev:
        package = template.package
    elif release:
        package = f"{name}=={release['version']}"
    else:
        return Hook(
            hook_id,
            url,
            "no",
            rev,
            why=f"rev {rev} of {url} is no release of {name} on the registry",
            **common,
        )
    defaults = {"types": template.types} if "types" not in common else {}
    return Hook(
        hook_id,
        url,
        template.run,
        rev,
        package,
        template.entry,
        kit_args=template.kit_args,
        **{**defaults, **common},
    )


# every language pre-commit knows: a local hook in one the kit does not run is unchecked; any other
# is a typo
PRE_COMMIT_LANGUAGES = frozenset(
    "conda coursier dart docker docker_image dotnet fail golang haskell julia lua node perl pygrep "
    "python r ruby "
    "rust script swift system unsupported unsupported_script".split()
)


def local_hook(hook_id: str, row: dict, common: dict) -> Hook:
    language = row.get("language")
    if language not in PRE_COMMIT_LANGUAGES:
        raise HooksError(
            f"{CONFIG}: local hook {hook_id} has language {language!r}, which pre-commit does not "
            "know",
            f"give {hook_id} one of pre-commit's languages (python, system, script, ...) in the "
            f"tree's {CONFIG}",
        )
    if not isinstance(row.get("entry"), str) or not row["entry"].strip():
        raise HooksError(
            f"{CONFIG}: local hook {hook_id} has no entry",
            f"give {hook_id} an `entry:` in the tree's {CONFIG}",
        )
    if language not in LANGUAGES:
        return Hook(
            hook_id,
            "local",
            "no",
            why=f"language {language} is not one the kit runs ({', '.join(LANGUAGES)})",
            **common,
        )
    return Hook(hook_id, "local", "local", entry=row["entry"], language=language, **common)


def tree_hooks(data: object, table: tuple[Hook, ...]) -> tuple[tuple[Hook, ...], tuple[str, ...]]:
    """(the hooks, the python local hooks' additional_dependencies) of a parsed
    `.pre-commit-config.yaml`."""
    if not isinstance(data, dict):
        raise HooksError(
            f"{CONFIG} is not a mapping",
            f"make the tree's {CONFIG} a pre-commit config (repos: ...)",
        )
    if not isinstance(data.get("repos"), list):
        raise HooksError(
            f"{CONFIG} has no `repos:` list",
            f"make repos: a list of repositories in the tree's {CONFIG}",
        )
    top_files, top_exclude = str(data.get("files") or ""), str(data.get("exclude") or "")
    default_stages = set(strings(data.get("default_stages"), "default_stages"))
    hooks, deps = [], []
    for number, repo in enumerate(data["repos"], 1):
        if (
            not isinstance(repo, dict)
            or not isinstance(repo.get("hooks"), list)
            or "repo" not in repo
        ):
            raise HooksError(
                f"{CONFIG}: repository #{number} of repos has no `repo:` or no `hooks:` list",
                f"give it both in the tree's {CONFIG}",
            )
        url, rev = str(repo["repo"]), str(repo.get("rev", ""))
        for place, row in enumerate(repo["hooks"], 1):
            if not isinstance(row, dict) or not isinstance(row.get("id"), str):
                raise HooksError(
                    f"{CONFIG}: hook #{place} of {url} has no id",
                    f"give it an `id:` in the tree's {CONFIG}",
                )
            hook_id = str(row["id"])
            common = {
                "files": both(top_files, str(row.get("files") or "")),
                "exclude": either(top_exclude, str(row.get("exclude") or "")),
                "args": strings(row.get("args"), f"{hook_id}'s args"),
                "pass_filenames": row.get("pass_filenames", True) is not False,
            }
            for key in ("types", "types_or", "exclude_types"):
                if key in row:
                    common[key] = strings(row[key], f"{hook_id}'s {key}")
            stages = set(strings(row.get("stages"), f"{hook_id}'s stages")) or default_stages
            unknown = sorted(
                {t for k in ("types", "types_or", "exclude_types") for t in common.get(k, ())}
                - KNOWN_TAGS
            )
            if stages and not stages & FILE_STAGES:
                hooks.append(
                    Hook(
                        hook_id,
                        url,
                        "no",
                        rev,
                        why=f"runs at {', '.join(sorted(stages))}, not on files",
                        stand_in="pr's DCO check" if "commit-msg" in stages else "not a file gate",
                    )
                )
            elif unknown:
                hooks.append(
                    Hook(
                        hook_id,
                        url,
                        "no",
                        rev,
                        why=f"file types {', '.join(unknown)} the kit cannot tell",
                        files=common["files"],
                        exclude=common["exclude"],
                    )
                )
            elif url == "meta":
                hooks.append(
                    Hook(
                        hook_id,
                        url,
                        "no",
                        why="checks the config itself",
                        stand_in="not a file gate",
                    )
                )
            elif url == "local":
                hook = local_hook(hook_id, row, common)
                hooks.append(hook)
                if hook.language == "python":
                    deps += strings(
                        row.get("additional_dependencies"), f"{hook_id}'s additional_dependencies"
                    )
            else:
                hooks.append(remote_hook(url, rev, hook_id, common, table))
    return tuple(hooks), tuple(dict.fromkeys(deps))


def parse_config(text: str, where: str, table: tuple[Hook, ...]) -> GateSource:
    """The gates of a tree whose `.pre-commit-config.yaml` is text (read as data, never run)."""
    try:
        import yaml  # only a tree's gates need it: the release's table is TOML
    except ImportError:
        raise HooksError(
            "pyyaml is not installed, and the tree's gates are read from its YAML config",
            "run the command through nox (its session installs pyyaml), or pip install pyyaml",
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise HooksError(
            f"{CONFIG} of {where} is not YAML ({str(exc).splitlines()[0]})",
            "fix the tree's config (pre-commit cannot read it either)",
        ) from None
    try:
        hooks, deps = tree_hooks(data, table)
    # the rows are read without knowing whose tree: it is named here, once
    except HooksError as exc:
        raise HooksError(exc.what.replace(CONFIG, f"{CONFIG} of {where}", 1), exc.fix) from None
    table_packages = set(packages(table))
    extra = [p for p in packages(hooks) if p not in table_packages]
    return GateSource(f"{CONFIG} of {where}", hooks, text, tuple(dict.fromkeys([*extra, *deps])))


def tree_gates(repo: Path, commit: str, where: str, table: tuple[Hook, ...]) -> GateSource:
    """The gates of the tree at commit of repo; a tree without a config has none (pre-commit would run
    nothing)."""
    text = gitcmd.show_file(repo, commit, CONFIG)
    label = f"{where} at {commit[:12]}"
    if text is None:
        return GateSource(
            f"{label}, which has no {CONFIG}: no hooks", (), f"# no {CONFIG} at {commit}\n"
        )
    return parse_config(text, label, table)


def gate_bins(
    source: GateSource, table_bin: Path | None, make_env: Callable[[GateSource], Path]
) -> Bins:
    """Where each of source's hooks finds its program; make_env builds (or reuses) the gate env when
    needed."""
    in_table = frozenset(p for p in packages(source.hooks) if p not in source.requirements)
    if not source.is_tree or not source.needs_env:
        return Bins(table_bin, in_table)
    return Bins(table_bin, in_table, make_env(source) / "bin")
