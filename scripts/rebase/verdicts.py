"""The verdict for each patch of the series on a target tree, on the evidence, strongest first:

  1. it reverse-applies                     -> already upstream (verbatim)
  2. its `git patch-id --stable` is that of a commit in the target's history,
     and the target holds it                -> already upstream (verbatim)
  3. it does not apply as is, and every line it adds is in the target,
     whitespace and comments aside (YAML/TOML: the same data)
                                            -> already upstream (equivalent)
  4. it does not apply as is, some hunks are upstream (reverse-apply or
     equivalent), others not                -> already upstream (partial): the rest applied
  else it is applied: clean / offset / fuzz (-C1) / 3-way / conflict (file and hunk named).

A patch upstream merged and later reverted applies again: its detail names the commit.
Used by rebase (on a release or git ref) and by pr --onto (on upstream's branch).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from scripts import diffparse, gitcmd
from scripts.checkout.apply import apply_one
from scripts.rebase import equivalence
from scripts.report import progress, step
from scripts.series import Patch

FUZZ_CONTEXT = 1  # lines of context that must still match for "fuzz"
APPLIES = ("clean", "offset", "fuzz", "3-way")
DROPPED = ("upstream-verbatim", "upstream-equivalent")
OUTCOMES = (*APPLIES, "upstream-partial", *DROPPED, "conflict")
SHOWN = {
    "upstream-verbatim": "already upstream (verbatim)",
    "upstream-equivalent": "already upstream (equivalent)",
    "upstream-partial": "already upstream (partial)",
}
CURRENT_REF = "refs/kit/current-series"


@dataclass(frozen=True)
class Verdict:
    name: str
    outcome: str  # one of OUTCOMES
    detail: str = ""
    # (hunk, "upstream" | "not upstream")
    hunks: list[tuple[str, str]] = field(default_factory=list)

    @property
    def shown(self) -> str:
        return SHOWN.get(self.outcome, self.outcome)


def history_patch_ids(repo: Path, files: list[str]) -> dict[str, str]:
    """{patch-id: commit} of the target's commits touching files (its whole history)."""
    return dict(gitcmd.patch_ids(repo, gitcmd.history_diffs(repo, files)))


def hunk_upstream(repo: Path, hunk: diffparse.Hunk, post_image: str | None) -> bool:
    """One hunk is in the target: it reverse-applies alone, or its added lines (its data) are there."""
    if gitcmd.applies(repo, hunk.text, "-R"):
        return True
    return equivalence.file_equivalent(
        hunk.path, hunk.added, post_image, gitcmd.show_file(repo, "HEAD", hunk.path)
    )


def apply_rest(repo: Path, hunks: list[diffparse.Hunk], commit: str) -> str:
    """Apply some hunks of a patch (3-way where needed) and commit them as the patch's own commit; the
    outcome."""
    text = "".join(h.text for h in hunks)
    threeway = not gitcmd.applies(repo, text)
    proc = gitcmd.apply_to_index(repo, text, threeway)
    if proc.returncode != 0 or gitcmd.unmerged(repo):
        gitcmd.reset_hard(repo)
        return "conflict"
    gitcmd.recommit(repo, commit)
    return "3-way" if threeway else "clean"


def try_apply(repo: Path, patch: Patch) -> Verdict:
    """Apply the whole patch as well as it goes; a conflict leaves repo as it was."""
    exact = gitcmd.apply_check(repo, patch.path).returncode == 0
    if not exact and gitcmd.apply_check(repo, patch.path, f"-C{FUZZ_CONTEXT}").returncode == 0:
        gitcmd.must(gitcmd.am(repo, patch.path, f"-C{FUZZ_CONTEXT}"))
        return Verdict(
            patch.name, "fuzz", f"applies only with {FUZZ_CONTEXT} line(s) of context matching"
        )
    result = apply_one(repo, patch, threeway=True)
    if result.outcome == "conflict":
        gitcmd.must(gitcmd.abort(repo, "am"))
    detail = result.detail
    if result.outcome == "3-way":
        renamed = renames(repo, patch)
        detail = f"{detail}; {renamed}" if renamed else detail
    return Verdict(patch.name, result.outcome, detail)


def renames(repo: Path, patch: Patch) -> str:
    """Files of the patch that the target has under another name (git's rename detection found them)."""
    wanted = {h.path for h in diffparse.hunks(patch.text)}
    changed = gitcmd.changed_in(repo, "HEAD")
    moved = sorted(set(changed) - wanted)
    gone = sorted(p for p in wanted if gitcmd.show_file(repo, "HEAD", p) is None)
    return f"{', '.join(gone)} renamed upstream to {', '.join(moved)}" if gone and moved else ""


def judge(repo: Path, patch: Patch, commit: str, history: dict[str, str] | None) -> Verdict:
    """The verdict for one patch on the target at repo's HEAD; applying it (or its rest) moves HEAD."""
    if gitcmd.applies(repo, patch.text, "-R"):
        return Verdict(
            patch.name,
            "upstream-verbatim",
            "the target holds the change: the patch reverse-applies",
        )
    forward = gitcmd.applies(repo, patch.text)
    note = ""
    if history is not None:
        found = history.get(gitcmd.patch_id(repo, patch.text))
        if found and not forward:
            return Verdict(
                patch.name, "upstream-verbatim", f"patch-id of upstream commit {found[:12]}"
            )
        if found:
            note = f"upstream merged it in {found[:12]}, but the target does not hold it (reverted since)"
    # it applies as is: lines that happen to be elsewhere in the file are no evidence against that
    if forward:
        verdict = try_apply(repo, patch)
        return replace(verdict, detail="; ".join(x for x in (verdict.detail, note) if x))
    hunks = diffparse.hunks(patch.text)
    marks = [hunk_upstream(repo, h, gitcmd.show_file(repo, commit, h.path)) for h in hunks]
    rows = [
        (h.label, "upstream" if m else "not upstream") for h, m in zip(hunks, marks, strict=True)
    ]
    if hunks and all(marks):
        return Verdict(
            patch.name,
            "upstream-equivalent",
            "every line it adds is in the target (whitespace, comments, YAML/TOML layout aside)",
            rows,
        )
    if any(marks) and not all(marks):
        rest = [h for h, m in zip(hunks, marks, strict=True) if not m]
        applied = apply_rest(repo, rest, commit)
        upstream = ", ".join(h.label for h, m in zip(hunks, marks, strict=True) if m)
        if applied == "conflict":
            return Verdict(
                patch.name,
                "conflict",
                f"{rest[0].label}: the rest does not apply (upstream already has {upstream})",
                rows,
            )
        return Verdict(
            patch.name,
            "upstream-partial",
            f"upstream has {upstream}; the rest applied ({applied})",
            rows,
        )
    return try_apply(repo, patch)


def judge_series(
    repo: Path, current: Path, patches: list[Patch], commits: list[str], with_history: bool
) -> list[Verdict]:
    """Judge each patch on repo's HEAD in order; current holds the series' commits (their blobs are the
    3-way base)."""
    gitcmd.must(gitcmd.fetch_head(repo, current, CURRENT_REF))
    files = sorted({h.path for p in patches for h in diffparse.hunks(p.text)})
    history = history_patch_ids(repo, files) if with_history else None
    verdicts = []
    for i, (patch, commit) in enumerate(zip(patches, commits, strict=True), 1):
        verdict = judge(repo, patch, commit, history)
        progress(step(i, len(patches), patch.name, verdict.shown, verdict.detail))
        verdicts.append(verdict)
    return verdicts
