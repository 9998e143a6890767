"""The user's package index, read once with pip's own rules and handed to every installer the kit
starts: nox's sessions, the leg envs, the gate envs, the e2e session, registry look-ups.

pip reads its settings from, highest first: the environment (PIP_INDEX_URL, ...), the file that
PIP_CONFIG_FILE names (os.devnull: no file at all), the site file (the venv's pip.conf), the user's
(~/.config/pip/pip.conf, ~/.pip/pip.conf), the global ones (pip/pip.conf in each XDG config dir, then /etc/pip.conf);
and for `pip install` a key of [install] beats the same key of [global]. The kit finds and reads
none of that itself: the pinned pip (ci/kit-tools.txt) does (`pip config debug`: each source under
its kind, in pip's order; `pip config list` sorts the files by name and so loses their order), and
only the merge, which pip makes as it parses options, is made here as pip makes it: per section the
later source wins, then the environment over [install] over [global].

uv reads neither pip.conf nor PIP_*: the same settings reach it as UV_* variables (installer_env) or
options (uv_index_args), unless the user configured uv's index (UV_* index variables, a uv.toml):
then uv's own settings win.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.metadata
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import tomllib

from scripts import kittools, procgroup
from scripts.errors import KitError
from scripts.workspace import Workspace

PYPI_SIMPLE = "https://pypi.org/simple"
# The python whose pip reads the settings: the noxfile names its own interpreter (the README's
# venv) to the sessions it starts, whose uv-made venvs have no pip.
PIP_PYTHON = "KIT_PIP_PYTHON"
# pip's sections, lowest first, as `pip install` ranks them.
SECTIONS = ("global", "install", ":env:")
# pip's kinds of source, lowest first (pip's own override order).
KINDS = ("global", "user", "site", "env", "env_var")
ENV_LINE = re.compile(r"  PIP_(\w+)=(.*)")
FILE_LINE = re.compile(r"    ([^\s.]+)\.([\w-]+): ?(.*)")
# The settings that say where packages come from and how they are trusted.
KEYS = ("index-url", "extra-index-url", "find-links", "trusted-host", "cert")
# Set by a user who configured uv's index: then uv's own settings win and none of pip's is carried.
UV_INDEX_VARS = (
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_NO_INDEX",
)
UV_TOML_KEYS = ("index-url", "extra-index-url", "index", "find-links", "no-index")


@dataclass(frozen=True)
class IndexSettings:
    """pip's effective index settings for `pip install` (an empty index_url: PyPI)."""

    index_url: str = ""
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    cert: str = ""


def config_entries(config_debug: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of every setting `pip config debug` shows, lowest precedence first.

    pip prints each source under its kind (env_var, env, global, site, user) and, within a kind, its
    files in the order pip reads them (a later file wins); a variable's value as a Python literal, a
    file's as written, a multi-line value on the lines after its key, at the same indent.
    """
    found: dict[str, list[tuple[str, str, str]]] = {kind: [] for kind in KINDS}
    kind = ""
    for line in config_debug.splitlines():
        if not line.startswith(" ") and line.endswith(":"):
            kind = line[:-1]
        elif kind == "env_var" and (var := ENV_LINE.fullmatch(line)):
            with contextlib.suppress(ValueError, SyntaxError):
                value = ast.literal_eval(var[2])
                found[kind].append((":env:", var[1].lower().replace("_", "-"), str(value)))
        elif kind in found and (entry := FILE_LINE.fullmatch(line)):
            found[kind].append((entry[1], entry[2], entry[3]))
        elif kind in found and line.startswith("    ") and found[kind]:
            section, key, value = found[kind][-1]
            found[kind][-1] = (section, key, f"{value}\n{line.strip()}")
    return [entry for kind in KINDS for entry in found[kind]]


def settings_from_config_debug(config_debug: str) -> IndexSettings:
    """The settings `pip install` uses: per section the last source wins (pip drops empty values),
    then the environment over [install] over [global]."""
    sections: dict[str, dict[str, str]] = {section: {} for section in SECTIONS}
    for section, key, value in config_entries(config_debug):
        if section in sections and key in KEYS:
            sections[section][key] = value.strip()
    found: dict[str, str] = {}
    for section in SECTIONS:
        found |= {key: value for key, value in sections[section].items() if value}
    return IndexSettings(
        index_url=found.get("index-url", ""),
        extra_index_urls=tuple(found.get("extra-index-url", "").split()),
        find_links=tuple(found.get("find-links", "").split()),
        trusted_hosts=tuple(found.get("trusted-host", "").split()),
        cert=found.get("cert", ""),
    )


def has_pinned_pip(python: Path, pin: str) -> bool:
    """Whether a venv's python carries pip at the pin (its dist-info: no process started)."""
    prefix = python.parent.parent
    return any(prefix.glob(f"lib/python*/site-packages/pip-{pin}.dist-info"))


def pip_command(environ: Mapping[str, str], kit: Workspace | None = None) -> list[str]:
    """The pip pinned for the kit's code (ci/kit-tools.txt, what the README installs), wherever the
    kit runs: the python the noxfile named, this interpreter, the README's venv, else uv runs the
    pin in a tool env of its own."""
    kit = kit or Workspace.of_kit()
    pin = kittools.version("pip", kit.ci_dir / "kit-tools.txt")
    named = environ.get(PIP_PYTHON, "")
    if named and has_pinned_pip(Path(named), pin):
        return [named, "-m", "pip"]
    try:
        here = importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        here = ""
    if here == pin:
        return [sys.executable, "-m", "pip"]
    readme_venv = kit.root / ".venv" / "bin" / "python"
    if has_pinned_pip(readme_venv, pin):
        return [str(readme_venv), "-m", "pip"]
    beside = Path(sys.executable).parent / "uv"
    uv = str(beside) if beside.is_file() else shutil.which("uv", path=environ.get("PATH"))
    if uv is not None:
        return [uv, "tool", "run", "--quiet", "--from", f"pip=={pin}", "pip"]
    raise KitError(
        f"pip=={pin} is not installed for {sys.executable} and uv is not there to run it (pip's "
        "settings name the package index)",
        "run the kit from the README's venv (python3 -m venv .venv && .venv/bin/pip install -r "
        "ci/kit-tools.txt)",
    )


def bootstrap_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What uv needs to fetch pip itself where uv runs it: what pip's variables say (no file can be
    read before pip is there)."""
    variables = "".join(f"  {k}={v!r}\n" for k, v in environ.items() if k.startswith("PIP_"))
    return {**environ, **uv_env(settings_from_config_debug(f"env_var:\n{variables}"), environ)}


def read(environ: Mapping[str, str]) -> IndexSettings:
    """pip's index settings for the environment environ (pip runs once per distinct environment)."""
    return _read(tuple(sorted(environ.items())))


# A reading is a function of the environment and of files that do not change while a command runs:
# one pip run per command, however many installers ask.
@functools.lru_cache(maxsize=8)
def _read(items: tuple[tuple[str, str], ...]) -> IndexSettings:
    environ = dict(items)
    argv = [*pip_command(environ), "config", "debug"]
    env = {**bootstrap_env(environ), "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}
    try:
        done = procgroup.run(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KitError(
            f"cannot read pip's index settings ({' '.join(argv[:3])}): {exc}",
            "check that pip runs: pip config debug",
        ) from None
    if done.returncode != 0:
        # what went wrong and where: pip names the file and line, uv the request and its cause
        lines = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()
        why = " ".join(line.strip() for line in lines[:3])
        raise KitError(
            f"pip config debug failed (exit {done.returncode}): {why}",
            "fix that file or variable (pip config debug shows what pip reads)",
        )
    return settings_from_config_debug(done.stdout)


def uv_toml_files(environ: Mapping[str, str]) -> list[Path]:
    """The uv.toml files uv reads: UV_CONFIG_FILE alone, else the user's and the system's ones."""
    if environ.get("UV_NO_CONFIG"):
        return []
    if environ.get("UV_CONFIG_FILE"):
        return [Path(environ["UV_CONFIG_FILE"])]
    home = environ.get("HOME", "")
    user = Path(environ.get("XDG_CONFIG_HOME") or f"{home}/.config") / "uv" / "uv.toml"
    system = [
        Path(d) / "uv" / "uv.toml" for d in environ.get("XDG_CONFIG_DIRS", "").split(":") if d
    ]
    return [user, *system, Path("/etc/uv/uv.toml")]


def uv_configured(environ: Mapping[str, str]) -> bool:
    """Whether the user set uv's index themselves (a variable, or a uv.toml that names one)."""
    if any(environ.get(name) for name in UV_INDEX_VARS):
        return True
    for path in uv_toml_files(environ):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        tables = [data, data.get("pip", {})]
        if any(isinstance(t, dict) and key in t for t in tables for key in UV_TOML_KEYS):
            return True
    return False


def pip_env(settings: IndexSettings) -> dict[str, str]:
    """The settings as pip's own variables: a pip in a child env (a gate env, virtualenv's seed)
    reads what this pip read."""
    values = {
        "PIP_INDEX_URL": settings.index_url,
        "PIP_EXTRA_INDEX_URL": " ".join(settings.extra_index_urls),
        "PIP_FIND_LINKS": " ".join(settings.find_links),
        "PIP_TRUSTED_HOST": " ".join(settings.trusted_hosts),
        "PIP_CERT": settings.cert,
    }
    return {name: value for name, value in values.items() if value}


def uv_env(settings: IndexSettings, environ: Mapping[str, str]) -> dict[str, str]:
    """The settings as uv's variables (none where uv is configured itself); pip's cert as
    SSL_CERT_FILE unless one is set."""
    out: dict[str, str] = {}
    if settings.cert and not environ.get("SSL_CERT_FILE"):
        out["SSL_CERT_FILE"] = settings.cert
    if uv_configured(environ):
        return out
    values = {
        "UV_DEFAULT_INDEX": settings.index_url,
        "UV_INDEX": " ".join(settings.extra_index_urls),
        # uv splits this one at commas, the others at spaces
        "UV_FIND_LINKS": ",".join(settings.find_links),
        "UV_INSECURE_HOST": " ".join(settings.trusted_hosts),
    }
    out |= {name: value for name, value in values.items() if value}
    # pip takes the best version across all indexes; uv's default stops at the first index that
    # has the name.
    if (settings.extra_index_urls or settings.find_links) and not environ.get("UV_INDEX_STRATEGY"):
        out["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return out


def installer_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that hand the user's package index to an installer the kit starts (pip or uv):
    merge them over the child's environment."""
    settings = read(environ)
    return {**pip_env(settings), **uv_env(settings, environ)}


def uv_index_args(
    settings: IndexSettings, environ: Mapping[str, str], extras: bool = True
) -> list[str]:
    """The same as uv options, for a uv called with arguments (empty where uv is configured itself).

    With `extras=False` only the main index is carried: resolving new pins must not depend on a
    machine's local extra indexes or wheel folders.
    """
    if uv_configured(environ):
        return []
    args = ["--index-url", settings.index_url] if settings.index_url else []
    if not extras:
        return args
    args += [a for url in settings.extra_index_urls for a in ("--extra-index-url", url)]
    args += [a for url in settings.find_links for a in ("--find-links", url)]
    args += [a for host in settings.trusted_hosts for a in ("--allow-insecure-host", host)]
    if settings.extra_index_urls or settings.find_links:
        args += ["--index-strategy", "unsafe-best-match"]
    return args


def indexes(settings: IndexSettings) -> list[str]:
    """The simple indexes a look-up asks, in pip's order: the main one (else PyPI), then the extras."""
    found = [settings.index_url or PYPI_SIMPLE, *settings.extra_index_urls]
    return list(dict.fromkeys(url.rstrip("/") for url in found))
