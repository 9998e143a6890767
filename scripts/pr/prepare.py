"""`nox -s pr`: prepare the upstream PR from the applied series.

Writes .work/pr/vN/ (N = the series revision, see scripts/revisions.py):
  NNNN-<slug>.patch  format-patch files as upstream gets them (no kit trailers, signed off)
  cover.txt          title, branch, scope, precheck, range-diff against the previous revision
  pr-body.md         upstream's template filled from the patch messages and the recorded runs
  series/            the kit's patches of this revision (for later range-diffs)
and the branch pr/vN in the checkout. Title and Purpose come from the series
cover, patches/cover.md (see scripts/pr/cover.py). A new revision is recorded in
patches/revisions.toml only when the series or its cover changed since the last one.

The branch in the checkout sits on the kit's pristine commit (with the default
wheel source a synthetic one, unrelated to upstream's history): it is for
review. `--onto URL REF` makes the branch upstream can merge, on REF in a
kit-owned clone (scripts/pr/onto.py); `--push-to FORK` pushes it and prints the
`gh pr create` command (`--open` runs it). Without them nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from scripts import revisions
from scripts.checks import scope
from scripts.checks.lint import SeriesLint, Tools
from scripts.checks.proof import OffNpuProof
from scripts.errors import KitError
from scripts.pr import onto, rangediff
from scripts.pr.branch import Signer
from scripts.pr.cover import compare
from scripts.rebase import trial
from scripts.rebase.verdicts import DROPPED
from scripts.report import outcomes_table, progress, table
from scripts.series import Patch
from scripts.workspace import Workspace


class PrError(KitError):
    """The PR cannot be prepared as asked."""


def previous_range_diff(
    ws: Workspace, prev: revisions.Revision | None, new_tip: str, identity: str
) -> str:
    if prev is None:
        return "First revision: no range-diff."
    ws.work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ws.work, prefix=".pr-range-diff-") as tmp:
        found = revisions.find_series(prev, ws.pr_dir / prev.label / "series", ws.root, Path(tmp))
        if found is None:
            return (
                f"Range-diff against {prev.label}: not available (its patches are neither in "
                f".work/pr/{prev.label}/series nor in the kit's git history)."
            )
        old, where = found
        try:
            text = rangediff.range_diff(
                ws.checkout, new_tip, old, Signer(identity, prev.prepared), Path(tmp)
            )
        except rangediff.RangeDiffUnavailableError as exc:
            return f"Range-diff against {prev.label}: not available ({exc.what})."
    return f"Range-diff against {prev.label} (from {where}):\n\n{text.rstrip()}"


def cover_text(
    title: str,
    rev: revisions.Revision,
    pin: str,
    where: str,
    identity: str,
    patches: list[Patch],
    scopes: list[scope.Scope],
    lint: SeriesLint,
    ruff: tuple[str, str],
    rdiff: str,
    cover_diff: str,
    onto_report: str = "",
) -> str:
    warning = scope.rfc_warning(scope.total(scopes))
    ruff_note = (
        "" if ruff[0] == ruff[1] else f"  (not upstream's pinned {ruff[1]}: results may differ)"
    )
    findings = "\n".join(str(f) for f in lint.findings) or "no findings"
    listing = "\n".join(f"  {p.name}  {p.subject}" for p in patches)
    return f"""{title}

Revision {rev.label} of the series against {pin} (series digest {rev.series_digest[:12]}).
{where}, each commit signed off by {identity} and authored by it (patches by others: by them, with their own sign-off).
Apply elsewhere with: git am -k {rev.label}/*.patch   (-k keeps upstream's [Prefix] subjects)

{listing}
{onto_report}
Scope
{table(scope.HEADERS, scope.rows(scopes))}
{f"WARNING: {warning}" if warning else f"Under upstream's {scope.RFC_THRESHOLD}-line RFC threshold."}

Precheck (nox -s lint): upstream's hooks, ruff {ruff[0]}{ruff_note} with upstream's settings, the kit's checks
{table(["upstream hook", "version", "here"], lint.hook_rows)}
{table(["check", "findings"], lint.rows())}
{findings}
{lint.off_npu.claim()}

{rdiff}

{cover_diff}
"""


def refuse_overwrite(out: Path, force: bool) -> None:
    if out.exists() and not force:
        raise PrError(
            f".work/pr/{out.name} already holds this revision",
            "pass --force to make it again (nox -s pr -- --force; a push still replaces only what "
            "the kit "
            "pushed), or move it away first",
        )


def write_output(out: Path, files: dict[str, str]) -> None:
    """Write the folder beside the target and swap it in: never half-written."""
    staging = out.with_name(f".{out.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    for name, text in files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_text(text, encoding="utf-8")
    if out.exists():
        progress(f"replacing .work/pr/{out.name} (--force)")
        shutil.rmtree(out)
    staging.rename(out)


def check_flags(args: argparse.Namespace) -> None:
    needs_onto = [
        flag
        for flag, on in (
            ("--3way", args.threeway),
            ("--push-to", args.push_to),
            ("--open", args.open),
        )
        if on
    ]
    if needs_onto and not args.onto:
        raise PrError(
            f"{', '.join(needs_onto)} work only with --onto URL REF",
            "add --onto https://github.com/vllm-project/vllm-omni main (or another URL and ref)",
        )
    if args.open and not args.push_to:
        raise PrError(
            "--open needs --push-to FORK (gh opens the PR from the pushed branch)", "add --push-to"
        )


def previous_cover(ws: Workspace, prev: revisions.Revision | None, text: str) -> str:
    if prev is None:
        return "Cover: first revision."
    if not prev.cover_digest:
        return (
            f"Cover against {prev.label}: {prev.label} was prepared before the series had a cover."
        )
    return compare(
        revisions.find_cover(prev, ws.pr_dir / prev.label / "series", ws.root), text, prev.label
    )


@dataclass(frozen=True)
class Onto:
    """pr/vN made on REF in the kit's clone: what it holds and what REF's own rules say of it."""

    kept: list[Patch]  # the patches upstream does not have yet
    made: list[str]  # their upstream commits
    base: str  # "URL REF (sha)"
    verdicts: str  # the verdict table
    gates: SeriesLint  # REF's own gates on the branch
    rules: onto.TargetRules  # REF's PR template and DCO rule


def put_onto(
    ws: Workspace,
    args: argparse.Namespace,
    patches: list[Patch],
    commits: list[str],
    signer: Signer,
    branch: str,
    tools: Tools,
    proof: OffNpuProof,
) -> Onto:
    """pr/vN made on REF in the kit's clone, judged by REF's gates."""
    url, ref = trial.git_url(args.onto[0]), args.onto[1]
    clone = onto.kit_clone(ws.upstream_clone)
    progress(f"fetching {url} {ref} into .work/{ws.upstream_clone.name}")
    base = onto.fetch_ref(clone, url, ref)
    verdicts, made = onto.build(
        clone, base, ws.checkout, patches, commits, signer, branch, args.threeway
    )
    verdict_table = outcomes_table([(v.name, v.shown, v.detail) for v in verdicts], "verdict")
    print(verdict_table)
    kept = [p for p, v in zip(patches, verdicts, strict=True) if v.outcome not in DROPPED]
    for v in verdicts:
        if v.outcome in DROPPED:
            progress(f"{v.name}: left out of {branch} ({v.shown})")
    progress(f"the gates of {ref}: its .pre-commit-config.yaml and tools/, on {branch}")
    gates = onto.target_gates(clone, base, f"{url} {ref}", tools, proof)
    print(onto.gate_report(gates))
    return Onto(
        kept,
        made,
        f"{url} {ref} ({base[:12]})",
        verdict_table,
        gates,
        onto.target_rules(clone, base),
    )


def refuse_open_without_gh(
    args: argparse.Namespace, branch: str, title: str, body_file: Path
) -> None:
    """--open with no usable gh is refused before anything is made or pushed, naming the command to run
    later."""
    if not args.open or not (why := onto.gh_ready()):
        return
    cmd = onto.gh_command(
        trial.git_url(args.onto[0]), args.push_to, branch, args.onto[1], title, body_file
    )
    raise PrError(
        f"cannot open the PR: {why}; nothing was made or pushed",
        "install gh and run gh auth login, or drop --open and, after the push, run: "
        f"{shlex.join(cmd)}",
    )


def push(ws: Workspace, args: argparse.Namespace, branch: str) -> None:
    """Push pr/vN to the fork when asked, before anything is recorded: a failed push leaves no revision
    behind. --force re-prepares .work/pr/vN; it never forces the push (onto.push replaces only what
    the kit pushed)."""
    if args.onto and args.push_to:
        onto.push(ws.upstream_clone, args.push_to, branch)
        progress(f"pushed {branch} to {args.push_to}")


def deliver(
    ws: Workspace, args: argparse.Namespace, branch: str, title: str, body_file: Path
) -> None:
    """Print (or run) `gh pr create` for a pushed branch; otherwise say what stays local."""
    if not args.onto:
        progress(
            f"{branch} is for review only; make the branch upstream can merge with: "
            "nox -s pr -- --onto https://github.com/vllm-project/vllm-omni main"
        )
        return
    if not args.push_to:
        progress(
            f"nothing pushed; to open the PR: nox -s pr -- --onto {' '.join(args.onto)} --push-to "
            "YOUR_FORK_URL"
        )
        return
    cmd = onto.gh_command(
        trial.git_url(args.onto[0]), args.push_to, branch, args.onto[1], title, body_file
    )
    print(shlex.join(cmd))
    if args.open:
        proc = subprocess.run(cmd, cwd=ws.root)
        if proc.returncode != 0:
            raise PrError(
                f"gh pr create exited {proc.returncode}", "see gh's message; the branch is pushed"
            )
