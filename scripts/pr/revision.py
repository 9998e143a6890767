"""One revision of the PR stack, in order: check, compose, record.

The series is sent as the PRs patches/stack.toml declares (scripts/pr/stack.py), PR k on the target
plus PRs 1..k-1. Compute first, record last: every check (provenance, the stack's invariants, the
precheck, --onto and the target's gates, the output folder) passes before a branch, a pushed ref,
.work/pr/vN or patches/revisions.toml is written; a refusal restores the kit's clone of upstream as
it found it, so a refused run leaves nothing behind.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from scripts import gitcmd, records, revisions
from scripts.checkout import PRISTINE_TAG
from scripts.checkout.guards import verify_current
from scripts.checks import scope
from scripts.checks.lint import SeriesLint, Tools, lint_checkout
from scripts.pin import load_pin
from scripts.pr import onto, prepare, rangediff, stack, stackcheck
from scripts.pr.body import (
    DEPLOY_CONFIG,
    PLAN,
    REVIEWER,
    evidence,
    evidence_note,
    in_template,
    off_npu_text,
    performance_note,
    pr_body,
    pr_plan,
    result_lines,
)
from scripts.pr.branch import Signer, message_parts
from scripts.pr.cover import NAME, Cover, load
from scripts.rebase import trial
from scripts.report import progress, table
from scripts.series import Patch, header_trailers, load_series
from scripts.workspace import Workspace

EVIDENCE = "Upstream-Evidence"


@dataclass(frozen=True)
class Plan:
    """What this run would make, before anything is checked beyond the series' provenance."""

    pin_label: str
    patches: list[Patch]
    cover: Cover
    stack: stack.Stack
    digest: str
    rev: revisions.Revision
    is_new: bool
    prev: revisions.Revision | None
    signer: Signer
    identity: str
    out: Path


@dataclass(frozen=True)
class PrBranch:
    """One PR as made: what it carries, its upstream-form commits and what it sits on."""

    pr: stack.Pr
    kept: list[Patch]  # the patches it carries (on a target: those the target lacks)
    commits: list[str]  # their upstream-form commits, in the branches' repository
    base: str  # the target plus the PRs before it
    review: tuple[str, str]  # (base, tip) of its review commits on the pristine, in the checkout
    dropped: list[tuple[Patch, str]]  # left out, with the verdict: the target already has them

    @property
    def tip(self) -> str:
        return self.commits[-1] if self.commits else self.base


@dataclass(frozen=True)
class Branches:
    prs: list[PrBranch]  # the PRs that carry something, in merge order
    empty: list[PrBranch]  # PRs the target already has entirely: no branch, no body
    repo: Path
    where: str
    onto_report: str
    rules: onto.TargetRules | None
    target: str  # what the first PR sits on, for the bodies


def plan(ws: Workspace, args: argparse.Namespace, identity: str) -> Plan:
    pin = load_pin(ws.pin_file)
    patches = load_series(ws.patches)
    if not patches:
        raise prepare.PrError(
            "the series is empty: nothing to send upstream",
            "add patches (commit in the checkout, nox -s refresh)",
        )
    cover = load(ws.patches)
    declared = stack.load(ws.patches, patches, cover.title)
    digest = verify_current(ws.checkout, pin, patches).series_digest
    revs = revisions.load(ws.revisions_file)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    kit_commit = revisions.head_commit_holding(ws.root, digest)
    rev, is_new = revisions.current(
        revs, digest, pin.label, kit_commit, now, cover.digest, declared.digest
    )
    # the revision's date: the same revision gives the same commit ids
    signer = Signer(identity, rev.prepared)
    prev = next((r for r in reversed(revs) if r.number < rev.number), None)
    out = ws.pr_dir / rev.label
    first = declared.prs[0]
    prepare.refuse_open_without_gh(
        args, first.branch(rev.label), first.title, out / first.folder / "pr-body.md"
    )
    return Plan(
        pin.label, patches, cover, declared, digest, rev, is_new, prev, signer, identity, out
    )


def precheck(ws: Workspace, tools: Tools, p: Plan) -> tuple[SeriesLint, str] | None:
    """The series' lint; None (after printing its findings) when it has any."""
    progress(
        "precheck: upstream's pre-commit hooks, ruff with upstream's settings, kit checks, off-NPU "
        "proof"
    )
    lint, ruff_version = lint_checkout(ws, tools, p.patches)
    if lint.findings:
        for finding in lint.findings:
            print(finding)
        progress(
            f"precheck: {len(lint.findings)} finding(s): nothing recorded or made (no "
            f"{p.rev.label} in patches/revisions.toml, no .work/pr, no branch); fix them (nox -s "
            "lint shows the same), nox -s refresh, and run nox -s pr again"
        )
        return None
    state = "new (series, cover or stack changed)" if p.is_new else "unchanged since recorded"
    progress(f"revision {p.rev.label}: {state}")
    return lint, ruff_version


def review_ranges(ws: Workspace, p: Plan) -> list[tuple[str, str, list[str]]]:
    """Each PR's review commits on the pristine, in the checkout (objects only): (base, tip, commits).
    Held patches are left out, so each PR's tree is exactly the pristine plus the PRs up to it."""
    ws.work.mkdir(parents=True, exist_ok=True)
    made = rangediff.upstream_commits(
        ws.checkout, p.stack.sent(), p.signer, ws.work / ".pr-review-tree", "this revision"
    )
    out, at, base = [], 0, PRISTINE_TAG
    for pr in p.stack.prs:
        commits = made[at : at + len(pr.patches)]
        out.append((base, commits[-1], commits))
        at, base = at + len(pr.patches), commits[-1]
    return out


def stack_problems(
    ws: Workspace, p: Plan, ranges: Sequence[tuple[str, str, list[str]]]
) -> list[str]:
    """The stack's invariants that need no test run: each PR's size, and tests that need a later PR."""
    tips = [tip for _, tip, _ in ranges]
    return [
        *stack.size_problems(p.stack),
        *stack.dependency_problems(
            p.stack, tips, lambda commit, path: gitcmd.show_file(ws.checkout, commit, path)
        ),
    ]


def make_branches(
    ws: Workspace,
    args: argparse.Namespace,
    tools: Tools,
    p: Plan,
    lint: SeriesLint,
    ranges: Sequence[tuple[str, str, list[str]]],
) -> Branches | None:
    """The signed-off commits of each PR: on the pristine for review and, with --onto, on upstream's
    REF; None (after saying so) when REF's gates find something on the series' lines. Objects only:
    the branches are set when the run records."""
    if not args.onto:
        prs = [
            PrBranch(pr, list(pr.patches), commits, base, (base, tip), [])
            for pr, (base, tip, commits) in zip(p.stack.prs, ranges, strict=True)
        ]
        where = f"in .work/{ws.checkout.name} on the pristine commit (for review)"
        return Branches(prs, [], ws.checkout, where, "", None, p.pin_label.split(" (")[0])
    checkout_commits = dict(
        zip(
            (x.name for x in p.patches),
            gitcmd.rev_list(ws.checkout, f"{PRISTINE_TAG}..HEAD"),
            strict=True,
        )
    )
    sent = p.stack.sent()
    put = prepare.put_onto(
        ws,
        args,
        sent,
        [checkout_commits[x.name] for x in sent],
        p.signer,
        "the stack's branches",
        tools,
        lint.off_npu,
    )
    if put.gates.findings:
        progress(
            f"precheck on {put.base}: {len(put.gates.findings)} finding(s) of its gates on the "
            "series' lines: nothing recorded or made (no branch, no .work/pr); fix them (nox -s "
            "refresh) and run nox -s pr again"
        )
        return None
    made = dict(zip((x.name for x in put.kept), put.made, strict=True))
    shown = {v.name: v.shown for v in put.found}
    prs, empty, base = [], [], put.base_commit
    for pr, (rbase, rtip, _) in zip(p.stack.prs, ranges, strict=True):
        kept = [x for x in pr.patches if x.name in made]
        dropped = [(x, shown[x.name]) for x in pr.patches if x.name not in made]
        one = PrBranch(pr, kept, [made[x.name] for x in kept], base, (rbase, rtip), dropped)
        (prs if kept else empty).append(one)
        base = one.tip
    onto_report = (
        f"\nEach patch on {put.base}:\n{put.verdicts}\n\n{onto.gate_report(put.gates)}\n"
        f"PR template: {put.rules.template_from}. DCO rule: {put.rules.dco_from}.\n"
    )
    clone = ws.upstream_clone
    where = f"in .work/{clone.name} on {put.base}"
    target = f"{trial.git_url(args.onto[0])} {args.onto[1]} ({put.base_commit[:12]})"
    return Branches(prs, empty, clone, where, onto_report, put.rules, target)


@dataclass(frozen=True)
class Composed:
    """The files of .work/pr/vN and what the summary quotes of them."""

    files: dict[str, str]
    sizes: dict[str, int]  # PR name -> changed lines it carries
    rdiffs: dict[str, str]  # PR name -> its range-diff against the previous revision
    ruff: tuple[str, str]  # (the precheck's version, upstream's pin)


def own_tests_result(ws: Workspace, p: Plan, name: str) -> str | None:
    """What the stack check recorded of a PR's own tests on its base, when it ran on this stack."""
    r = records.read(ws.records, stack.CHECK_RECORD)
    if not r or (r.get("series_digest"), r.get("stack_digest")) != (p.digest, p.stack.digest):
        return None
    one = (r.get("prs") or {}).get(name)
    if not isinstance(one, dict) or not one.get("tests"):
        return None
    verdict = "passed" if one.get("passed") else "FAILED"
    return f"{verdict}: {one.get('summary', '?')} ({', '.join(one['tests'])})"


def link(b: PrBranch, label: str, args: argparse.Namespace) -> str:
    """How a later PR's body names this one: its title and branch, and the GitHub compare view of
    the pushed branch when both repositories are on GitHub."""
    branch = b.pr.branch(label)
    upstream = onto.github_repo(trial.git_url(args.onto[0])) if args.onto else None
    fork = onto.github_repo(args.push_to) if getattr(args, "push_to", None) else None
    where = (
        f"https://github.com/{upstream}/compare/{args.onto[1]}...{fork.replace('/', ':')}:{branch}"
        if upstream and fork
        else f"branch `{branch}`"
    )
    return f"{b.pr.title} ({where}); merge it first"


def pr_notes(p: Plan, b: PrBranch, texts: str, measured: str | None) -> list[str]:
    notes = list(b.pr.notes)
    n = stack.size(b.pr)
    if b.pr.over_limit:
        notes.append(
            f"Size: {n} changed lines, over the {scope.RFC_THRESHOLD}-line guideline: "
            f"{b.pr.over_limit}"
        )
    sent = p.stack.sent()
    for patch, why in p.stack.held:
        # a held patch is noted where a reviewer would look for it: the PR of the next sent patch
        after = [x for x in p.patches[p.patches.index(patch) :] if x in sent]
        here = after[0] in b.pr.patches if after else b.pr is p.stack.prs[-1]
        if here:
            notes.append(f"Not part of this PR: {patch.subject}: {why}")
    for patch in b.kept:
        notes += [evidence_note(patch.subject, e) for e in header_trailers(patch.text, EVIDENCE)]
    perf = performance_note(texts, measured)
    return [*notes, *([perf] if perf else [])]


def cover_notes(text: str) -> list[str]:
    """The cover's notes for reviewers as items (a "- " line starts one, other lines continue it)."""
    items: list[str] = []
    for line in text.splitlines():
        if line.startswith("- ") or not items:
            items.append(line.removeprefix("- ").strip())
        elif line.strip():
            items[-1] += " " + line.strip()
    return [i for i in items if i]


def compose_pr(
    ws: Workspace,
    args: argparse.Namespace,
    p: Plan,
    bs: Branches,
    b: PrBranch,
    lint: SeriesLint,
    results: list[tuple[str, str, str]],
) -> dict[str, str]:
    files = {}
    parts = [message_parts(bs.repo, c) for c in b.commits]
    for patch, commit in zip(b.kept, b.commits, strict=True):
        files[f"{b.pr.folder}/{patch.name}"] = gitcmd.format_patch(bs.repo, commit)
    scopes = [scope.of_patch(x.name, x.text) for x in b.kept]
    changed = list(dict.fromkeys(f for s in scopes for f in s.files))
    whole = len(p.stack.prs) == 1 and not p.stack.held
    # the whole series as one PR: the series' cover is its text; in a stack each PR speaks of what
    # it carries, in its commits' words
    purpose = (
        p.cover.purpose
        if whole
        else parts[0][1]
        if len(parts) == 1
        else "\n\n".join(f"**{subject}**\n\n{text}" for subject, text in parts)
    )
    declared = [(d.file, d.unit, d.why) for d in lint.off_npu.declared]
    purpose += f"\n\n{off_npu_text(declared, changed)}"
    earlier = bs.prs[: bs.prs.index(b)]
    depends = [link(o, p.rev.label, args) for o in earlier]
    tests = [f for s in scopes for f in s.new_files if stack.is_test_file(f)]
    last = b is bs.prs[-1]
    run_tests = f"pytest -v {' '.join(tests)}" if tests else "pytest -v tests/"
    commands = {
        "own": f"{run_tests}  # on a checkout of the branch this PR is based on, plus this PR",
        "lint": f"pre-commit run --files {' '.join(changed)}",
        "test-stock": f"{run_tests}  # stock torch, torch_npu not installed",
        "test-npu": f"{run_tests}  # with torch_npu installed",
        **({"e2e": "the serve and benchmark commands of the Test Plan"} if last else {}),
    }
    own = own_tests_result(ws, p, b.pr.name)
    notes = [*(cover_notes(p.cover.notes) if whole else []), *pr_notes(p, b, purpose, None)]
    text = pr_body(
        purpose,
        depends,
        [s for s, _ in parts],
        notes,
        pr_plan(tests, last, gitcmd.show_file(bs.repo, b.tip, DEPLOY_CONFIG) is not None),
        result_lines(results, commands, own),
        scopes,
        bs.target if not earlier else f"{bs.target} with the PRs it depends on",
    )
    if bs.rules is not None and bs.rules.template is not None:
        text = in_template(bs.rules.template, text)
    files[f"{b.pr.folder}/pr-body.md"] = text
    return files


def range_diffs(ws: Workspace, p: Plan, bs: Branches) -> dict[str, str]:
    """Each PR's range-diff against the previous revision (or why there is none)."""
    if p.prev is None:
        return {b.pr.name: "first revision: no range-diff" for b in bs.prs}
    prev = p.prev
    out = {}
    with tempfile.TemporaryDirectory(dir=ws.work, prefix=".pr-range-diff-") as tmp:
        found = revisions.find_series(prev, ws.pr_dir / prev.label / "series", ws.root, Path(tmp))
        if found is None:
            why = (
                f"not available (the patches of {prev.label} are neither in "
                f".work/pr/{prev.label}/series nor in the kit's git history)"
            )
            return {b.pr.name: why for b in bs.prs}
        old, where = found
        signer = Signer(p.identity, prev.prepared)
        before: set[str] = set()
        for b in bs.prs:
            own = {x.slug for x in b.pr.patches}
            try:
                text = rangediff.pr_range_diff(
                    ws.checkout, old, before, own, b.review, signer, Path(tmp) / "tree", prev.label
                )
                out[b.pr.name] = f"against {prev.label} (from {where}):\n\n{text}"
            except rangediff.RangeDiffUnavailableError as exc:
                out[b.pr.name] = f"against {prev.label}: not available ({exc.what})"
            before |= own
    return out


def compose(
    ws: Workspace,
    args: argparse.Namespace,
    tools: Tools,
    p: Plan,
    bs: Branches,
    lint: SeriesLint,
    ruff_version: str,
) -> Composed:
    found = {name: records.read(ws.records, name) for name, _, _ in PLAN}
    results = evidence(found, p.digest, REVIEWER)
    progress(f"range-diff per PR against {p.prev.label if p.prev else 'nothing (first revision)'}")
    rdiffs = range_diffs(ws, p, bs)
    ruff = (ruff_version, tools.ruff_pin)
    files: dict[str, str] = {}
    for b in bs.prs:
        files.update(compose_pr(ws, args, p, bs, b, lint, results))
    sizes = {
        b.pr.name: scope.total([scope.of_patch(x.name, x.text) for x in b.kept]).changed
        for b in bs.prs
    }
    files["cover.txt"] = prepare.stack_cover(
        p.cover.title, p.rev, p.pin_label, bs, sizes, rdiffs, lint, ruff, p.stack.held, p.identity,
        prepare.previous_cover(ws, p.prev, p.cover.source),
    )  # fmt: skip
    files["series/series"] = (ws.patches / "series").read_text(encoding="utf-8")
    files["series/" + NAME] = p.cover.source
    if p.stack.source:
        files["series/" + stack.NAME] = p.stack.source
    files.update({f"series/{patch.name}": patch.text for patch in p.patches})
    return Composed(files, sizes, rdiffs, ruff)


def record(ws: Workspace, args: argparse.Namespace, p: Plan, bs: Branches, c: Composed) -> None:
    """Push first (a refused or failed push records nothing), then the output, the branches and the
    revision (last: it is what the next run compares with)."""
    prepare.refuse_overwrite(p.out, c.files, args.force)
    label = p.rev.label
    if args.onto and args.push_to:
        onto.push(ws.upstream_clone, args.push_to, {b.pr.branch(label): b.tip for b in bs.prs})
        progress(f"pushed {', '.join(b.pr.branch(label) for b in bs.prs)} to {args.push_to}")
    prepare.write_output(p.out, c.files)
    for b in bs.prs if not args.onto else []:
        gitcmd.set_branch(ws.checkout, b.pr.branch(label), b.review[1])
    if args.onto:
        clone = ws.upstream_clone
        gitcmd.detach(clone, bs.prs[0].base if bs.prs else "HEAD", force=True)
        for b in bs.prs:
            gitcmd.set_branch(clone, b.pr.branch(label), b.tip)
        if bs.prs:
            gitcmd.switch(clone, bs.prs[-1].pr.branch(label), force=True)  # what would be pushed
    progress(
        f"{len(bs.prs)} branch(es) pr/<name>/{label} {bs.where}, each commit signed off by "
        f"{p.identity}, kit trailers stripped"
    )
    if p.is_new:
        revisions.record(ws.revisions_file, p.rev)
        progress(f"recorded {label} in patches/revisions.toml (commit it with patches/)")


def summary(p: Plan, bs: Branches, c: Composed) -> str:
    rows = [
        (
            b.pr.index,
            b.pr.branch(p.rev.label),
            ", ".join(x.name.removesuffix(".patch") for x in b.kept),
            c.sizes[b.pr.name],
            c.rdiffs[b.pr.name].splitlines()[0],
        )
        for b in bs.prs
    ]
    rows += [(b.pr.index, "(not sent: the target has it)", "", 0, "") for b in bs.empty]
    return table(["#", "branch", "patches", "changed lines", "range-diff"], rows)


def prepare_revision(ws: Workspace, args: argparse.Namespace, identity: str, tools: Tools) -> int:
    p = plan(ws, args, identity)
    before = onto.ref_state(ws.upstream_clone)
    try:
        code = prepare_checked(ws, args, identity, tools, p)
    except BaseException:
        onto.restore(ws.upstream_clone, before)
        raise
    if code != 0:
        onto.restore(ws.upstream_clone, before)
    return code


def prepare_checked(
    ws: Workspace, args: argparse.Namespace, identity: str, tools: Tools, p: Plan
) -> int:
    checked = precheck(ws, tools, p)
    if checked is None:
        return 1
    lint, ruff_version = checked
    ranges = review_ranges(ws, p)
    problems = stack_problems(ws, p, ranges)
    if problems:
        for line in problems:
            print(line)
        progress(
            f"stack: {len(problems)} problem(s): nothing recorded or made; fix "
            f"{stack.WHERE} or the series, then run nox -s pr again"
        )
        return 1
    bs = make_branches(ws, args, tools, p, lint, ranges)
    if bs is None:
        return 1
    c = compose(ws, args, tools, p, bs, lint, ruff_version)
    if args.onto and args.push_to:
        prepare.refuse_overwrite(p.out, c.files, args.force)  # before minutes of test runs
        tips = [tip for _, tip, _ in ranges]
        failed = stackcheck.before_push(ws, p.stack, p.digest, tips)
        if failed:
            for line in failed:
                print(line)
            progress("stack: nothing pushed or recorded; fix the PRs named, then run it again")
            return 1
    record(ws, args, p, bs, c)
    print(summary(p, bs, c))
    prepare.deliver(ws, args, p.rev.label, bs, load_pin(ws.pin_file).git_url)
    progress(f"ready: .work/pr/{p.rev.label}/<n>-<name>/pr-body.md, and cover.txt")
    return 0


def check_stack(
    ws: Workspace,
    args: argparse.Namespace,
    identity: str,
    legs: Sequence[str] = stackcheck.LEGS,
    runner: stackcheck.Runner = stackcheck.leg_runner,
) -> int:
    """`pr --check-stack`: every invariant of the stack, alone; makes nothing but its record.
    0: every invariant holds; 1: a PR breaks one (each named); 2 (KitError): bad input."""
    p = plan(ws, args, identity)
    ranges = review_ranges(ws, p)
    problems = stack_problems(ws, p, ranges)
    tips = [tip for _, tip, _ in ranges]
    rows, failed = stackcheck.own_tests(ws, p.stack, p.digest, tips, legs, runner)
    return stackcheck.report(rows, [*problems, *failed], len(p.stack.prs))
