"""One revision of the PR, in order: check, compose, record.

Compute first, record last: every check (provenance, output folder, gh, precheck, --onto) passes
before the branch, .work/pr/vN or patches/revisions.toml is written, so a refused run leaves no
revision behind.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from scripts import gitcmd, records, revisions
from scripts.checkout import PRISTINE_TAG
from scripts.checkout.guards import verify_current
from scripts.checks import scope
from scripts.checks.lint import SeriesLint, Tools, lint_checkout
from scripts.pin import load_pin
from scripts.pr import onto, prepare
from scripts.pr.body import PLAN, body, evidence, in_template
from scripts.pr.branch import Signer, message_parts, rewrite
from scripts.pr.cover import NAME, Cover, load, purpose_section
from scripts.report import progress, table
from scripts.series import Patch, load_series
from scripts.workspace import Workspace


@dataclass(frozen=True)
class Plan:
    """What this run would make, before anything is checked beyond the series' provenance."""

    pin_label: str
    patches: list[Patch]
    cover: Cover
    digest: str
    rev: revisions.Revision
    is_new: bool
    prev: revisions.Revision | None
    signer: Signer
    identity: str
    out: Path
    branch: str


@dataclass(frozen=True)
class Branch:
    """The signed-off commits made (objects only) and where the PR's branch will sit."""

    commits: list[str]  # the checkout's commits of the series
    review_tip: str  # the review branch's tip, in the checkout
    repo: Path  # where the PR's commits are
    kept: list[Patch]  # the patches on the PR's branch
    made: list[str]  # their commits
    where: str
    onto_report: str
    rules: onto.TargetRules | None


def plan(ws: Workspace, args: argparse.Namespace, identity: str) -> Plan:
    pin = load_pin(ws.pin_file)
    patches = load_series(ws.patches)
    if not patches:
        raise prepare.PrError(
            "the series is empty: nothing to send upstream",
            "add patches (commit in the checkout, nox -s refresh)",
        )
    cover = load(ws.patches)
    digest = verify_current(ws.checkout, pin, patches).series_digest
    revs = revisions.load(ws.revisions_file)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    kit_commit = revisions.head_commit_holding(ws.root, digest)
    rev, is_new = revisions.current(revs, digest, pin.label, kit_commit, now, cover.digest)
    signer = Signer(
        identity, rev.prepared
    )  # the revision's date: the same revision gives the same commit ids
    prev = next((r for r in reversed(revs) if r.number < rev.number), None)
    out = ws.pr_dir / rev.label
    branch = f"pr/{rev.label}"
    prepare.refuse_overwrite(out, args.force)
    prepare.refuse_open_without_gh(args, branch, cover.title, out / "pr-body.md")
    return Plan(pin.label, patches, cover, digest, rev, is_new, prev, signer, identity, out, branch)


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
            f"{p.rev.label} in "
            "patches/revisions.toml, no .work/pr, no branch); fix them (nox -s lint shows the "
            "same), "
            "nox -s refresh, and run nox -s pr again"
        )
        return None
    state = "new (series or cover changed)" if p.is_new else "unchanged since it was recorded"
    progress(f"revision {p.rev.label}: {state}")
    return lint, ruff_version


def make_branch(
    ws: Workspace, args: argparse.Namespace, tools: Tools, p: Plan, lint: SeriesLint
) -> Branch | None:
    """The signed-off commits: on the pristine commit for review and, with --onto, on upstream's REF;
    None (after saying so) when REF's gates find something on the series' lines."""
    commits = gitcmd.rev_list(ws.checkout, f"{PRISTINE_TAG}..HEAD")
    made = rewrite(ws.checkout, PRISTINE_TAG, commits, p.signer)  # objects only: no branch yet
    where = f"Branch {p.branch} in .work/{ws.checkout.name} (for review)"
    if not args.onto:
        return Branch(commits, made[-1], ws.checkout, p.patches, made, where, "", None)
    sendable = [
        (patch, c)
        for patch, c in zip(p.patches, commits, strict=True)
        if not patch.already_upstream
    ]
    put = prepare.put_onto(
        ws,
        args,
        [s for s, _ in sendable],
        [c for _, c in sendable],
        p.signer,
        p.branch,
        tools,
        lint.off_npu,
    )
    if put.gates.findings:
        progress(
            f"precheck on {put.base}: {len(put.gates.findings)} finding(s) of its gates on the "
            "series' "
            "lines: nothing recorded; fix them (nox -s refresh) and run nox -s pr again"
        )
        return None
    onto_report = (
        f"\nEach patch on {put.base}:\n{put.verdicts}\n\n{onto.gate_report(put.gates)}\n"
        f"PR template: {put.rules.template_from}. DCO rule: {put.rules.dco_from}.\n"
    )
    clone = ws.upstream_clone
    where = f"Branch {p.branch} in .work/{clone.name} on {put.base}: {len(put.made)} commit(s)"
    progress(
        f"branch {p.branch} in .work/{clone.name} on {put.base}: {len(put.made)} signed-off "
        "commit(s)"
    )
    return Branch(commits, made[-1], clone, put.kept, put.made, where, onto_report, put.rules)


@dataclass(frozen=True)
class Composed:
    """The files of .work/pr/vN and what the summary quotes of them."""

    files: dict[str, str]
    sent: int  # patch files
    scopes: list[scope.Scope]
    results: list[tuple[str, str, str]]
    rdiff: str
    ruff: tuple[str, str]  # (the precheck's version, upstream's pin)


def compose(
    ws: Workspace, tools: Tools, p: Plan, b: Branch, lint: SeriesLint, ruff_version: str
) -> Composed:
    # A Backport patch is already upstream: the review branch keeps it (later trees hold its file),
    # the PR does not.
    sent = [
        (patch, c) for patch, c in zip(b.kept, b.made, strict=True) if not patch.already_upstream
    ]
    subjects = [message_parts(b.repo, c)[0] for _, c in sent]
    scopes = [scope.of_patch(patch.name, patch.text) for patch, _ in sent]
    results = evidence({name: records.read(ws.records, name) for name, _, _ in PLAN}, p.digest)
    progress(f"range-diff against {p.prev.label if p.prev else 'nothing (first revision)'}")
    rdiff = prepare.previous_range_diff(ws, p.prev, b.review_tip, p.identity)

    files = {patch.name: gitcmd.format_patch(b.repo, c) for patch, c in sent}
    ruff = (
        ruff_version,
        tools.ruff_pin,
    )  # (the precheck's, upstream's pin)
    left_out = [
        (patch.name, patch.upstream_status) for patch in p.patches if patch.already_upstream
    ]
    purpose = purpose_section(p.cover, subjects, lint.off_npu.claim())
    files["pr-body.md"] = body(purpose, results, scopes, p.pin_label, p.digest, ruff[1], left_out)
    if b.rules is not None and b.rules.template is not None:
        files["pr-body.md"] = in_template(b.rules.template, files["pr-body.md"])
    cover_diff = prepare.previous_cover(ws, p.prev, p.cover.source)
    files["cover.txt"] = prepare.cover_text(
        p.cover.title,
        p.rev,
        p.pin_label,
        b.where,
        p.identity,
        b.kept,
        scopes,
        lint,
        ruff,
        rdiff,
        cover_diff,
        b.onto_report,
    )
    files["series/series"] = (ws.patches / "series").read_text(encoding="utf-8")
    files["series/" + NAME] = p.cover.source
    files.update({f"series/{patch.name}": patch.text for patch in p.patches})
    return Composed(files, len(sent), scopes, results, rdiff, ruff)


def record(ws: Workspace, args: argparse.Namespace, p: Plan, b: Branch, c: Composed) -> None:
    """Push first (a refused or failed push records nothing), then the output, the review branch and
    the revision (last: it is what the next run compares with)."""
    prepare.push(ws, args, p.branch)
    prepare.write_output(p.out, c.files)
    gitcmd.set_branch(ws.checkout, p.branch, b.review_tip)
    progress(
        f"branch {p.branch} in .work/{ws.checkout.name}: {len(b.commits)} commit(s) signed off by "
        f"{p.identity}, "
        "kit trailers stripped; it sits on the kit's pristine commit: for review, not for upstream"
    )
    if p.is_new:
        revisions.record(ws.revisions_file, p.rev)
        progress(f"recorded {p.rev.label} in patches/revisions.toml (commit it with patches/)")


def summary(p: Plan, b: Branch, c: Composed, lint: SeriesLint) -> str:
    whole = scope.total(c.scopes)
    rows = [
        ("title", p.cover.title),
        ("branch", b.where),
        ("output", f".work/pr/{p.rev.label}/ ({c.sent} patch file(s), cover.txt, pr-body.md)"),
        (
            "scope",
            f"{len(whole.files)} file(s), +{whole.added} -{whole.removed}, {len(whole.new_files)} "
            "new",
        ),
        ("RFC threshold", scope.rfc_warning(whole) or f"under {scope.RFC_THRESHOLD} lines"),
        ("precheck", f"{len(lint.findings)} finding(s) (ruff {c.ruff[0]})"),
        *[(label, text.split(" (")[0].split(":")[0]) for _, label, text in c.results],
        ("range-diff", c.rdiff.splitlines()[0]),
    ]
    return table(["item", "value"], rows)


def prepare_revision(ws: Workspace, args: argparse.Namespace, identity: str, tools: Tools) -> int:
    p = plan(ws, args, identity)
    checked = precheck(ws, tools, p)
    if checked is None:
        return 1
    lint, ruff_version = checked
    b = make_branch(ws, args, tools, p, lint)
    if b is None:
        return 1
    c = compose(ws, tools, p, b, lint, ruff_version)
    record(ws, args, p, b, c)
    print(table(scope.HEADERS, scope.rows(c.scopes)))
    print(summary(p, b, c, lint))
    prepare.deliver(ws, args, p.branch, p.cover.title, p.out / "pr-body.md")
    progress(f"ready: .work/pr/{p.rev.label}/pr-body.md and cover.txt")
    return 0
