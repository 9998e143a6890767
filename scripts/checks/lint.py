"""Lint the series: upstream's gates (its pre-commit hooks, run by pre-commit:
scripts/checks/precommit.py) on the files and lines the series touches, then the kit's own checks
(scripts/checks/rules.py) on the lines the series adds, and the off-NPU proof
(scripts/checks/proof.py): what `nox -s lint` and the PR precheck report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scripts import gitcmd
from scripts.checkout import PRISTINE_TAG
from scripts.checkout.pristine import combined_diff
from scripts.checks import precommit
from scripts.checks.proof import OffNpuProof, off_npu_proof
from scripts.checks.rules import Finding, added_line_set, own_checks
from scripts.diffparse import parse
from scripts.pin import load_pin
from scripts.series import Patch
from scripts.workspace import Workspace


@dataclass(frozen=True)
class SeriesLint:
    files: list[str]  # touched files present in the tree
    # upstream's pre-commit hooks (other than ruff), on the lines the series adds
    hooks: list[Finding]
    # (hook id, version, what happened): every hook of the config pre-commit ran
    hook_rows: list[tuple[str, str, str]]
    ruff: list[Finding]  # ruff-check on the lines the series adds
    unformatted: list[Finding]  # ruff-format's changes on the lines the series adds
    own: list[Finding]  # KIT001-KIT006
    off_npu: OffNpuProof  # KIT007
    pre_existing: list[Finding]  # the hooks on upstream's own lines: shown, not counted
    # whose gates ran: a tree's config at a commit, or the kit's release config
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
    """What lint runs: the pinned pre-commit (and its store), the kit's table of hook packages, and
    the kit's ci/ folder (the release config); ruff_pin: the ruff upstream's release config pins."""

    pre_commit: precommit.PreCommit
    table: precommit.HookTable
    ci_dir: Path
    ruff_pin: str


def as_finding(f: precommit.HookFinding, source: precommit.GateSource) -> Finding:
    message = f.message.removeprefix("error: ")
    return Finding(f.file, f.line, f.hook, message, precommit.fix_of(f, source))


def lint_series(
    tools: Tools,
    source: precommit.GateSource,
    tree: Path,
    series_diff: str,
    off_npu: OffNpuProof,
    moved: frozenset[str] = frozenset(),
) -> SeriesLint:
    """source's gates (pre-commit on a scratch copy of tree) and the kit's checks, with the off-NPU
    proof the caller made from the commits; series_diff is pristine..HEAD, moved the files renamed
    since."""
    diffs = parse(series_diff)
    added = added_line_set(series_diff)
    gate = precommit.run_gates(
        tools.pre_commit, source, tools.table, tree, added, {d.path for d in diffs if d.new_file}
    )
    counted = [as_finding(f, source) for f in gate.counted]
    ruff_ids = ("ruff-check", "ruff")
    return SeriesLint(
        [d.path for d in diffs if (tree / d.path).is_file()],
        [f for f in counted if f.rule not in (*ruff_ids, "ruff-format")],
        gate.rows,
        [f for f in counted if f.rule in ruff_ids],
        [f for f in counted if f.rule == "ruff-format"],
        own_checks(series_diff, tree, moved),
        off_npu,
        [as_finding(f, source) for f in gate.pre_existing],
        source.label,
    )


def checkout_gates(ws: Workspace, tools: Tools) -> precommit.GateSource:
    """The checkout's gates: its tree's own config when its pristine commit is the pin's git commit
    (the git source, by the pin or by apply --source git), else (the release wheel) the kit's."""
    pin = load_pin(ws.pin_file)
    commit = gitcmd.rev_parse(ws.checkout, PRISTINE_TAG)
    if not pin.git_commit or commit != pin.git_commit:
        return precommit.release_gates(tools.ci_dir)
    return precommit.tree_gates(f"{pin.git_url} {pin.git_tag}", commit)


def lint_tree(
    tools: Tools, source: precommit.GateSource, repo: Path, base: str, proof: OffNpuProof
) -> SeriesLint:
    """lint_series on repo's working tree (HEAD: base with the series) under source's gates."""
    return lint_series(tools, source, repo, gitcmd.diff(repo, base, "HEAD"), proof)


def lint_checkout(ws: Workspace, tools: Tools, patches: list[Patch]) -> tuple[SeriesLint, str]:
    """(the series' findings, the ruff the gates ran) on the kit's checkout: `lint` and `pr` both run
    exactly this."""
    source = checkout_gates(ws, tools)
    proof = off_npu_proof(ws.checkout, patches)
    moved = frozenset(gitcmd.renamed_between(ws.checkout, PRISTINE_TAG, "HEAD"))
    series = combined_diff(ws.checkout)
    result = lint_series(tools, source, ws.checkout, series, proof, moved)
    ruff = next((v for hook, v, _ in result.hook_rows if hook in ("ruff-check", "ruff")), "none")
    return result, ruff


def tools_for(ws: Workspace) -> Tools:
    """The lint tools, found once before anything runs."""
    # pre-commit first: without it (and its pyyaml) nothing below can run
    pre_commit = precommit.find_pre_commit(ws.work)
    table = precommit.load_table(ws.ci_dir / precommit.PACKAGES)
    release = precommit.plan_rows(
        (ws.ci_dir / precommit.RELEASE_CONFIG).read_text(encoding="utf-8"), table, False
    )
    ruff = next((v for hook, v, _ in release if hook == "ruff-check"), "")
    return Tools(pre_commit, table, ws.ci_dir, ruff)
