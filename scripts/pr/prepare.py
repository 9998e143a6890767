"""`nox -s pr`: prepare the upstream PRs of the stack from the applied series.

Writes .work/pr/vN/ (N = the series revision, see scripts/revisions.py):
  <k>-<name>/NNNN-<slug>.patch  format-patch files of PR k as upstream gets them (signed off)
  <k>-<name>/pr-body.md         PR k's body in upstream's template
  cover.txt                     the stack: each PR's branch, patches, size and range-diff; precheck
  series/                       the kit's patches, cover and stack of this revision (range-diffs)
and the branches pr/<name>/vN, PR k on the target plus PRs 1..k-1 (patches/stack.toml,
scripts/pr/stack.py). A new revision is recorded in patches/revisions.toml only when the series,
its cover or its stack changed since the last one.

The branches in the checkout sit on the kit's pristine commit (with the default wheel source a
synthetic one, unrelated to upstream's history): they are for review. `--onto URL REF` makes the
branches upstream can merge, on REF in a kit-owned clone (scripts/pr/onto.py); `--push-to FORK`
pushes them, all or none, and prints one `gh pr create` per PR in merge order (`--open` runs
them). Without them nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts import revisions
from scripts.checks.lint import SeriesLint, Tools
from scripts.checks.proof import OffNpuProof
from scripts.errors import KitError
from scripts.pr import onto
from scripts.pr.branch import Signer
from scripts.pr.cover import compare
from scripts.rebase import trial
from scripts.rebase.verdicts import DROPPED, Verdict
from scripts.report import outcomes_table, progress, table
from scripts.series import Patch
from scripts.workspace import Workspace


class PrError(KitError):
    """The PR cannot be prepared as asked."""


def held_files(out: Path) -> dict[str, str]:
    return {
        f.relative_to(out).as_posix(): f.read_text(encoding="utf-8")
        for f in sorted(out.rglob("*"))
        if f.is_file()
    }


def refuse_overwrite(out: Path, files: dict[str, str], force: bool) -> None:
    """.work/pr/vN is replaced only with --force, or when the run makes exactly what it holds (the
    same revision prepared again, e.g. to push it: nothing is lost, so nothing needs forcing)."""
    if out.exists() and not force and held_files(out) != files:
        raise PrError(
            f".work/pr/{out.name} already holds this revision, with other content",
            "pass --force to make it again (nox -s pr -- --force; a push still replaces only what "
            "the kit pushed), or move it away first",
        )


def write_output(out: Path, files: dict[str, str]) -> None:
    """Write the folder beside the target and swap it in: never half-written."""
    staging = out.with_name(f".{out.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    for name, text in files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_text(text, encoding="utf-8")
    if out.exists():
        progress(f"replacing .work/pr/{out.name}")
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
    base_commit: str  # REF's commit
    found: list[Verdict]  # the verdict per patch
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
        base,
        verdicts,
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


def deliver(
    ws: Workspace, args: argparse.Namespace, label: str, bs: Any, upstream_url: str
) -> None:
    """Print (or run) one `gh pr create` per pushed PR, in merge order; otherwise the next step,
    as a command that runs as printed (--force: it makes .work/pr/vN again, now on the target)."""
    if not args.onto:
        progress(
            "the branches are for review only; make the branches upstream can merge with: "
            f"nox -s pr -- --force --onto {shlex.quote(upstream_url)} main"
        )
        return
    if not args.push_to:
        progress(
            f"nothing pushed; to push the branches and open the PRs: nox -s pr -- --force --onto "
            f"{shlex.join(args.onto)} --push-to YOUR_FORK_URL"
        )
        return
    url = trial.git_url(args.onto[0])
    progress(f"open the PRs in merge order, each after the one it depends on ({len(bs.prs)}):")
    for b in bs.prs:
        body_file = ws.pr_dir / label / b.pr.folder / "pr-body.md"
        cmd = onto.gh_command(
            url, args.push_to, b.pr.branch(label), args.onto[1], b.pr.title, body_file
        )
        print(shlex.join(cmd))
        if args.open:
            proc = subprocess.run(cmd, cwd=ws.root)
            if proc.returncode != 0:
                raise PrError(
                    f"gh pr create for {b.pr.branch(label)} exited {proc.returncode}",
                    "see gh's message; the branches are pushed: run the remaining commands above",
                )


def stack_cover(
    title: str,
    rev: revisions.Revision,
    pin: str,
    bs: Any,
    sizes: dict[str, int],
    rdiffs: dict[str, str],
    lint: SeriesLint,
    ruff: tuple[str, str],
    held: Sequence[tuple[Patch, str]],
    identity: str,
    cover_diff: str,
) -> str:
    """The stack's cover (for the submitter, not a PR body): each PR, what it carries, its size and
    its range-diff; the precheck; what is held back."""
    ruff_note = (
        "" if ruff[0] == ruff[1] else f"  (not upstream's pinned {ruff[1]}: results may differ)"
    )
    findings = "\n".join(str(f) for f in lint.findings) or "no findings"
    parts = []
    for b in bs.prs:
        listing = "\n".join(f"  {p.name}  {p.subject}" for p in b.kept)
        dropped = "".join(f"  left out, the target has it: {p.name} ({v})\n" for p, v in b.dropped)
        over = f"  over the line limit: {b.pr.over_limit}\n" if b.pr.over_limit else ""
        parts.append(
            f"PR {b.pr.index}: {b.pr.title}\n  branch {b.pr.branch(rev.label)} {bs.where}, "
            f"{len(b.commits)} commit(s), {sizes[b.pr.name]} changed lines\n{over}{listing}\n{dropped}"
            f"  range-diff {rdiffs[b.pr.name]}\n"
        )
    for b in bs.empty:
        parts.append(f"PR {b.pr.index} ({b.pr.name}): not sent, the target has every patch of it\n")
    held_lines = "".join(f"  {p.name}: {why}\n" for p, why in held) or "  none\n"
    return f"""{title}

Revision {rev.label} of the series against {pin} (series digest {rev.series_digest[:12]}), as
{len(bs.prs)} PR(s) in merge order, each commit signed off by {identity}.
Apply one elsewhere with: git am -k {rev.label}/<k>-<name>/*.patch   (on the PRs before it)

{chr(10).join(parts)}
Held (sent in no PR):
{held_lines}{bs.onto_report}
Precheck (nox -s lint): upstream's hooks, ruff {ruff[0]}{ruff_note} with upstream's settings, the kit's checks
{table(["upstream hook", "version", "here"], lint.hook_rows)}
{table(["check", "findings"], lint.rows())}
{findings}
{lint.off_npu.claim()}

{cover_diff}
"""
