"""`nox -s pr -- --onto URL REF`: the series as a branch upstream can merge.

Upstream at REF (a branch such as main, a tag or a sha; https, file:// or a
local path) is fetched into a kit-owned clone, .work/upstream/, verified by
the commit REF resolves to. Each patch is judged there exactly as rebase judges
it; patches upstream already has are left out, a conflict is refused with the
patch, file and hunk named, and a patch that needs a 3-way merge is applied only
with --3way. The applied commits are then rewritten in upstream's form (kit
trailers stripped, signed off) as branch pr/vN on top of REF. Nothing leaves
the machine unless --push-to names the fork to push to.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from scripts import gitcmd
from scripts.checks import precommit
from scripts.checks.lint import SeriesLint, Tools, lint_tree
from scripts.checks.proof import OffNpuProof
from scripts.digests import sha256_text
from scripts.errors import KitError
from scripts.pr.branch import Signer, rewrite
from scripts.rebase import trial
from scripts.rebase.verdicts import Verdict, judge_series
from scripts.series import Patch

MARKER = "kit-upstream-clone"  # in .git/: this folder is the kit's, it may reset it
GITHUB = re.compile(
    r"^(?:https://github\.com/|git@github\.com:|ssh://git@github\.com/)([^/]+)/([^/]+?)(?:\.git)?/?$"
)


class OntoError(KitError):
    """The series cannot be put onto upstream's history as asked."""


def kit_clone(clone: Path) -> Path:
    """The kit's own clone of upstream, made on first use; a folder the kit did not make is refused."""
    if clone.exists() and not (clone / ".git" / MARKER).is_file():
        raise OntoError(
            f".work/{clone.name} exists and was not made by the kit",
            "move it away; the kit keeps its clone of upstream there",
        )
    if not clone.exists():
        clone.mkdir(parents=True)
        gitcmd.init(clone)
        (clone / ".git" / MARKER).write_text(
            "made by the kit for nox -s pr -- --onto\n", encoding="utf-8"
        )
    return clone


def fetch_ref(clone: Path, url: str, ref: str) -> str:
    """Fetch REF from url into the clone, check it out detached and clean; the commit, verified."""
    commit = trial.resolve_ref(url, ref, clone)
    try:
        gitcmd.fetch_commit(clone, url, commit, "--no-tags")
    except gitcmd.ServedOther as exc:
        what = f"{url} served {exc.got} for {ref}, not {commit}"
        raise OntoError(what, "try again: the ref moved while fetching") from None
    except KitError as exc:
        raise OntoError(
            f"cannot fetch {ref} ({commit[:12]}) from {url} ({exc.what})",
            "check the URL and network",
        ) from exc
    gitcmd.detach(clone, commit, force=True)
    gitcmd.clean(clone)
    return commit


def refusal(found: list[Verdict], threeway: bool) -> str | None:
    """Why the series cannot be put onto REF as asked (None when it can)."""
    conflict = next((v for v in found if v.outcome == "conflict"), None)
    if conflict:
        return f"{conflict.name} conflicts with upstream: {conflict.detail}"
    merged = [v.name for v in found if v.outcome in ("3-way", "upstream-partial", "fuzz")]
    if merged and not threeway:
        return f"{', '.join(merged)} apply only with a merge (3-way or reduced context) on upstream's tree"
    return None


def build(
    clone: Path,
    base: str,
    checkout: Path,
    patches: list[Patch],
    commits: list[str],
    signer: Signer,
    branch: str,
    threeway: bool,
) -> tuple[list[Verdict], list[str]]:
    """(the verdict per patch, the upstream-form commits on top of base: objects only, no branch);
    raises on a refusal. The branches are set when the run records (revision.record): a refusal
    after this leaves none."""
    found = judge_series(clone, checkout, patches, commits, with_history=True)
    why = refusal(found, threeway)
    if why:
        gitcmd.detach(clone, base, force=True)
        fix = (
            "pass --3way to accept the merge"
            if "only with a merge" in why
            else "rebase the series first"
        )
        raise OntoError(
            f"not making {branch}: {why}",
            f"{fix} (nox -s rebase -- --git URL REF shows every patch)",
        )
    applied = gitcmd.rev_list(clone, f"{base}..HEAD")
    made = rewrite(clone, base, applied, signer)
    return found, made


@dataclass(frozen=True)
class RefState:
    """The clone's refs and HEAD before a run: what a refusal restores."""

    existed: bool
    refs: dict[str, str]
    head: str | None


def ref_state(clone: Path) -> RefState:
    if not (clone / ".git").is_dir():
        return RefState(clone.exists(), {}, None)
    refs = {ref: gitcmd.rev_parse(clone, ref) for ref in gitcmd.refs(clone)}
    return RefState(True, refs, gitcmd.verify(clone, "HEAD"))


def restore(clone: Path, before: RefState) -> None:
    """Undo what a refused run made in the clone: a clone it made is removed; otherwise every ref it
    made or moved is put back, and HEAD too."""
    if not before.existed:
        shutil.rmtree(clone, ignore_errors=True)
        return
    if not (clone / ".git" / MARKER).is_file():
        return  # a folder that was not the kit's clone then: the kit made nothing in it
    now = ref_state(clone)
    for ref in now.refs.keys() - before.refs.keys():
        gitcmd.delete_ref(clone, ref)
    for ref, sha in before.refs.items():
        if now.refs.get(ref) != sha:
            gitcmd.update_ref(clone, ref, sha)
    if before.head is not None and now.head != before.head:
        gitcmd.detach(clone, before.head, force=True)


def target_gates(
    clone: Path, base: str, where: str, tools: Tools, proof: OffNpuProof
) -> SeriesLint:
    """The series on REF (the clone's branch) judged by REF's own gates: its `.pre-commit-config.yaml`
    and tools/, as upstream's CI will judge the PR."""
    source = precommit.tree_gates(where, base)
    return lint_tree(tools, source, clone, base, proof)


# Where a target tree keeps its PR template and states its DCO rule (GitHub's places, then the usual
# guides).
TEMPLATES = (
    ".github/PULL_REQUEST_TEMPLATE.md",
    ".github/pull_request_template.md",
    "PULL_REQUEST_TEMPLATE.md",
)
DCO_FILES = (".github/dco.yml", "CONTRIBUTING.md", ".github/CONTRIBUTING.md")
DCO_WORDS = re.compile(r"\bDCO\b|Developer Certificate of Origin|Signed-off-by", re.I)


@dataclass(frozen=True)
class TargetRules:
    """The PR template and DCO rule of the target tree, as the PR is judged by them."""

    # the template's text (None: the target has none; the kit's own sections are used)
    template: str | None
    template_from: str
    dco_from: str


def target_rules(clone: Path, base: str) -> TargetRules:
    """The target's PR template and where it states its DCO rule; commits are signed off either way."""
    found = next(
        ((p, t) for p in TEMPLATES if (t := gitcmd.show_file(clone, base, p)) is not None), None
    )
    dco = next(
        (p for p in DCO_FILES if DCO_WORDS.search(gitcmd.show_file(clone, base, p) or "")), None
    )
    return TargetRules(
        found[1] if found else None,
        f"{found[0]} of the target"
        if found
        else "the kit's sections (the target has no PR template)",
        f"{dco} of the target"
        if dco
        else "none stated by the target; every commit is signed off all the same",
    )


def gate_report(result: SeriesLint) -> str:
    """What REF's gates say: the series' own lines first (they fail the PR), then upstream's
    pre-existing ones."""
    own = "\n".join(f"  {f}" for f in result.findings) or "  none"
    theirs = "\n".join(f"  {f}" for f in result.pre_existing) or "  none"
    return (
        f"Gates of the target ({result.gates}):\n"
        f"on the series' own lines ({len(result.findings)}):\n{own}\n"
        f"pre-existing upstream, not the series' ({len(result.pre_existing)}):\n{theirs}"
    )


def push_reason(stdout: str, stderr: str) -> str:
    """Why git push failed, in git's words: a refused ref's porcelain line, else git's first
    fatal:/error: line (the advice git prints after it, "make sure ... the repository exists", is
    not the reason)."""
    refused = [line.split("\t")[-1] for line in stdout.splitlines() if line.startswith("!")]
    if refused:
        return refused[0].strip()
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    reason = next(
        (line for line in said if line.startswith(("fatal:", "error:", "remote: error:"))), None
    )
    return reason or (said[0] if said else "git push said nothing")


# git's words for a refused ref whose tip on the fork is not what the lease or a fast-forward allows
OTHERS_WORDS = ("stale info", "fetch first", "non-fast-forward")


def fork_key(target: str) -> str:
    """The fork's own name among the kit's refs: what was pushed to one fork is no lease on another."""
    return sha256_text(target)[:16]


def pushed_ref(target: str, branch: str) -> str:
    """Where the kit's clone keeps what it last pushed of branch to that fork: a force-push may
    replace that, nothing else."""
    return f"refs/kit/pushed/{fork_key(target)}/{branch}"


def fork_target(remote: str) -> str:
    return remote if "://" in remote or remote.startswith("git@") else str(Path(remote).resolve())


def push(clone: Path, remote: str, tips: dict[str, str] | str) -> None:
    """Push each branch (name -> commit; a name alone: that branch's tip) to the user's fork, all
    or none (--atomic), with the user's own config (credentials live there).

    A branch the fork does not have, or one the push fast-forwards, is pushed; one the kit pushed
    to that fork before is replaced only while it is still what the kit pushed there
    (--force-with-lease per fork and branch): a commit someone else added (a maintainer's fix) is
    never overwritten, and the refusal names it. A push the fork refuses for its own reasons (a
    hook, a protected branch) is quoted in git's and the fork's words."""
    target = fork_target(remote)
    if isinstance(tips, str):
        tips = {tips: gitcmd.rev_parse(clone, tips)}
    leases, specs = [], []
    for branch, tip in tips.items():
        last = gitcmd.verify(clone, pushed_ref(target, branch))
        leases += [f"--force-with-lease=refs/heads/{branch}:{last}"] if last else []
        specs.append(f"{tip}:refs/heads/{branch}")
    proc = gitcmd.push_atomic(clone, target, specs, *leases)
    if proc.returncode == 0:
        for branch, tip in tips.items():
            gitcmd.update_ref(clone, pushed_ref(target, branch), tip, message="kit pushed")
        return
    lines = [line for line in proc.stdout.splitlines() if line.startswith("!")]
    theirs = next(
        (
            line.split("\t")[1].split(":refs/heads/")[-1]
            for line in lines
            if "[rejected]" in line and any(w in line for w in OTHERS_WORDS)
        ),
        None,
    )
    if theirs is not None:
        raise OntoError(
            f"the fork's {theirs} holds {others_commit(clone, target, theirs)}, which the kit did "
            "not push; not replacing it (nothing pushed or recorded)",
            "take it into the series (commit it in the checkout, nox -s refresh), or, to drop it, "
            f"delete the fork's branch yourself: git push {remote} --delete {theirs}; then run nox "
            "-s pr again",
        )
    said = [
        line.removeprefix("remote:").strip()
        for line in proc.stderr.splitlines()
        if line.startswith("remote:") and line.removeprefix("remote:").strip()
    ]
    reason = push_reason(proc.stdout, proc.stderr)
    raise OntoError(
        f"git push to {remote} failed: {reason}"
        + (f"; the fork said: {' / '.join(said)}" if said else "")
        + " (nothing pushed or recorded)",
        "fix what the fork's message names (or check its URL and your credentials), then run nox "
        "-s pr again",
    )


def others_commit(clone: Path, remote: str, branch: str) -> str:
    """The fork's branch tip, named (sha and subject) when it can be fetched."""
    seen = f"refs/kit/fork/{branch}"
    if gitcmd.fetch_as_user(clone, remote, f"+refs/heads/{branch}:{seen}").returncode != 0:
        return "commits"
    tip = gitcmd.rev_parse(clone, seen)
    gitcmd.delete_ref(clone, seen)  # a refusal leaves no ref of its own behind
    return f"commit {tip[:12]} ({gitcmd.commit_format(clone, tip, '%s').strip()[:60]!r})"


def github_repo(url: str) -> str | None:
    m = GITHUB.match(url)
    return f"{m[1]}/{m[2]}" if m else None


def gh_command(
    upstream_url: str, fork: str, branch: str, base: str, title: str, body_file: Path
) -> list[str]:
    """The `gh pr create` that opens the PR from the fork's branch against upstream's base."""
    owner = (github_repo(fork) or "FORK_OWNER/").split("/")[0]
    return [
        "gh",
        "pr",
        "create",
        "--repo",
        github_repo(upstream_url) or upstream_url,
        "--head",
        f"{owner}:{branch}",
        "--base",
        base,
        "--title",
        title,
        "--body-file",
        str(body_file),
    ]


def gh_ready() -> str | None:
    """Why `gh` cannot open the PR here (None when it can)."""
    if shutil.which("gh") is None:
        return "gh is not installed"
    if (
        subprocess.run(
            ["gh", "auth", "status"], capture_output=True, encoding="utf-8", errors="replace"
        ).returncode
        != 0
    ):
        return "gh is not authenticated (gh auth login)"
    return None
