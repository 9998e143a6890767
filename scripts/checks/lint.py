"""Lint the series: upstream's pre-commit gate (its hooks, ruff under its settings) on the files and
lines the series touches, then the kit's own checks (scripts/checks/rules.py) on the lines the
series adds, and the off-NPU proof (scripts/checks/proof.py): what `nox -s lint` and the PR precheck
report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scripts import gitcmd
from scripts.checkout import PRISTINE_TAG
from scripts.checkout.pristine import combined_diff
from scripts.checks import hooks, precommit
from scripts.checks.proof import OffNpuProof, off_npu_proof
from scripts.checks.ruff import resolve_ruff, ruff_check, ruff_format_unclean, ruff_version
from scripts.checks.rules import Finding, added_line_set, own_checks
from scripts.diffparse import parse
from scripts.pin import load_pin
from scripts.series import Patch
from scripts.workspace import Workspace


@dataclass(frozen=True)
class SeriesLint:
    files: list[str]  # touched .py files present in the tree
    hooks: list[
        Finding
    ]  # upstream's pre-commit hooks (other than ruff), on the lines the series adds
    hook_rows: list[
        tuple[str, str, str]
    ]  # (hook id, version, what happened): every hook of upstream's config
    ruff: list[Finding]  # ruff check on the lines the series adds
    unformatted: list[Finding]  # files ruff format would change that were clean before the series
    own: list[Finding]  # KIT001-KIT006
    off_npu: OffNpuProof  # KIT007
    pre_existing: list[Finding]  # ruff and the hooks on upstream's own lines: shown, not counted
    # whose gates ran: a tree's config at a commit, or the kit's table
    gates: str = precommit.RELEASE

    @property
    def findings(self) -> list[Finding]:
        return [*self.hooks, *self.ruff, *self.unformatted, *self.own, *self.off_npu.findings]

    def rows(self) -> list[tuple[str, int]]:
        return [
            ("upstream hooks (other than ruff)", len(self.hooks)),
            ("ruff-check", len(self.ruff)),
            ("ruff-format", len(self.unformatted)),
            ("kit checks", len(self.own)),
            ("off-NPU proof (KIT007)", len(self.off_npu.findings)),
            ("pre-existing (upstream)", len(self.pre_existing)),
        ]


@dataclass(frozen=True)
class Tools:
    """What lint runs: ruff (resolve_ruff's answer), the folder of the kit's table's hook programs
    (None: PATH), the table itself, and where a tree's gate env is kept."""

    ruff: str
    hooks_bin: Path | None
    hooks: tuple[hooks.Hook, ...]
    ci_dir: Path
    make_env: Callable[
        [precommit.GateSource], Path
    ]  # a tree's gate env (scripts/legs/gateenv.py), made once


def as_finding(f: hooks.HookFinding) -> Finding:
    if f.message.startswith(hooks.UNCHECKED):
        fix = f"the kit cannot run it: run `pre-commit run {f.hook} --files {f.file}` where it can, or leave the file"
        return Finding(f.file, f.line, f.hook, f.message, fix)
    return Finding(
        f.file, f.line, f.hook, f.message, f"make the line pass upstream's {f.hook} hook"
    )


def ruff_of(
    tools: Tools, source: precommit.GateSource, bins: hooks.Bins
) -> tuple[str | None, Path | None]:
    """(the ruff to run, its config) for source's ruff hooks; (None, None) when its config has none. A
    tree's ruff reads the tree's own settings (pyproject.toml) at the config's rev where that
    differs."""
    ruff_hooks = [h for h in source.hooks if h.run == "ruff"]
    if not ruff_hooks:
        return None, None
    if not source.is_tree:
        return tools.ruff, tools.ci_dir / "ruff-upstream.toml"
    mine = ruff_hooks[0].package in source.requirements
    return (hooks.executable("ruff", bins.env) if mine else tools.ruff), None


def lint_series(
    tools: Tools,
    source: precommit.GateSource,
    bins: hooks.Bins,
    tree: Path,
    pristine: Path,
    series_diff: str,
    off_npu: OffNpuProof,
    moved: frozenset[str] = frozenset(),
) -> SeriesLint:
    """source's hooks, ruff (as source sets it) and kit checks on tree, with the off-NPU proof the
    caller made from the commits; series_diff is pristine..HEAD, pristine the tree before, moved the
    files renamed since."""
    diffs = parse(series_diff)
    files = [d.path for d in diffs if d.path.endswith(".py") and (tree / d.path).is_file()]
    added = added_line_set(series_diff)
    gate = hooks.run_gate(
        source.hooks,
        tree,
        added,
        {d.path for d in diffs if d.new_file},
        bins,
        tools.ci_dir,
        whole_tree=source.is_tree,
    )
    ruff, config = ruff_of(tools, source, bins)
    found = ruff_check(ruff, config, tree, files) if ruff and files else []
    ours = [f for f in found if f.line in added.get(f.file, set())]
    pristine_files = [f for f in files if (pristine / f).is_file()]
    was_unformatted = (
        set(ruff_format_unclean(ruff, config, pristine, pristine_files)) if ruff else set()
    )
    unformatted = [
        Finding(
            f, 1, "ruff-format", "ruff format would reformat this file", "run ruff format on it"
        )
        for f in (ruff_format_unclean(ruff, config, tree, files) if ruff else [])
        if f not in was_unformatted
    ]
    pre_existing = [f for f in found if f not in ours] + [as_finding(f) for f in gate.pre_existing]
    return SeriesLint(
        files,
        [as_finding(f) for f in gate.counted],
        gate.rows,
        ours,
        unformatted,
        own_checks(series_diff, tree, moved),
        off_npu,
        pre_existing,
        source.label,
    )


def checkout_gates(ws: Workspace, tools: Tools) -> precommit.GateSource:
    """The checkout's gates: its pristine tree's own config when that is the pin's git commit (the git
    source, by the pin or by apply --source git), else (the release wheel) the kit's table."""
    pin = load_pin(ws.pin_file)
    commit = gitcmd.rev_parse(ws.checkout, PRISTINE_TAG)
    if not pin.git_commit or commit != pin.git_commit:
        return precommit.release_gates(tools.hooks)
    return precommit.tree_gates(ws.checkout, commit, f"{pin.git_url} {pin.git_tag}", tools.hooks)


def lint_tree(
    tools: Tools,
    source: precommit.GateSource,
    repo: Path,
    base: str,
    proof: OffNpuProof,
    pristine: Path,
) -> SeriesLint:
    """lint_series on repo's working tree (HEAD: base with the series) under source's gates; pristine:
    base's tree."""
    bins = precommit.gate_bins(source, tools.hooks_bin, tools.make_env)
    return lint_series(tools, source, bins, repo, pristine, gitcmd.diff(repo, base, "HEAD"), proof)


def lint_checkout(ws: Workspace, tools: Tools, patches: list[Patch]) -> tuple[SeriesLint, str]:
    """(the series' findings, ruff's version) on the kit's checkout: `lint` and `pr` both run exactly
    this."""
    version = ruff_version(tools.ruff)
    source = checkout_gates(ws, tools)
    proof = off_npu_proof(ws.checkout, patches)
    moved = frozenset(gitcmd.renamed_between(ws.checkout, PRISTINE_TAG, "HEAD"))
    bins = precommit.gate_bins(source, tools.hooks_bin, tools.make_env)
    series = combined_diff(ws.checkout)
    result = lint_series(tools, source, bins, ws.checkout, ws.pristine_tree, series, proof, moved)
    return result, version


def tools_for(
    ws: Workspace,
    ruff: str,
    hooks_bin: str | None,
    make_env: Callable[[precommit.GateSource], Path],
) -> Tools:
    """The lint tools, resolved once from the caller's folder (ruff: a path or a name on PATH)."""
    folder = Path(hooks_bin).expanduser().resolve() if hooks_bin else None
    if folder is not None and not folder.is_dir():
        raise hooks.HooksError(
            f"--hooks-bin {hooks_bin}: no such folder",
            "pass the bin folder of a venv holding upstream's hook packages (nox -s lint does)",
        )
    return Tools(
        resolve_ruff(ruff), folder, hooks.load_hooks(ws.upstream_hooks), ws.ci_dir, make_env
    )
