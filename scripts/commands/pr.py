"""Prepare the upstream PR: signed-off branch, format-patch files, cover, PR body, precheck, range-diff."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

from scripts import gitcmd, records, revisions
from scripts.checkout import PRISTINE_TAG
from scripts.checkout.guards import verify_current
from scripts.checks import scope
from scripts.checks.hooks import hook_version
from scripts.checks.lint import Tools, lint_checkout, tools_for
from scripts.commands.common import checkout_lock
from scripts.commands.lint import add_tool_arguments
from scripts.legs import gateenv
from scripts.pin import load_pin
from scripts.pr import onto, prepare
from scripts.pr.body import PLAN, body, evidence, in_template
from scripts.pr.branch import Signer, message_parts, rewrite, user_identity
from scripts.pr.cover import NAME, load, purpose_section
from scripts.report import progress, table
from scripts.series import load_series
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_tool_arguments(p)  # the precheck is `lint`
    p.add_argument(
        "--force",
        action="store_true",
        help="replace .work/pr/vN when preparing the same revision again (a push never replaces others' commits)",
    )
    p.add_argument(
        "--onto",
        nargs=2,
        metavar=("URL", "REF"),
        help="make pr/vN on upstream's REF (branch, tag or sha) fetched from URL into .work/upstream",
    )
    p.add_argument("--3way", dest="threeway", action="store_true", help="with --onto: accept patches that need a merge")
    p.add_argument("--push-to", metavar="FORK", help="with --onto: push pr/vN to your fork (a URL or a path)")
    p.add_argument("--open", action="store_true", help="with --push-to: open the PR with gh (installed, logged in)")


def run(args: argparse.Namespace, ws: Workspace) -> int:
    prepare.check_flags(args)
    identity = user_identity(ws.root)
    tools = tools_for(ws, args.ruff, args.hooks_bin, gateenv.maker(ws))  # from the caller's folder, once
    with checkout_lock(ws):  # pr/vN is written into the checkout
        return prepare_revision(ws, args, identity, tools)


def prepare_revision(ws: Workspace, args: argparse.Namespace, identity: str, tools: Tools) -> int:
    """Compute first, record last: every check (provenance, output folder, gh, precheck, --onto) passes before
    the branch, .work/pr/vN or patches/revisions.toml is written, so a refused run leaves no revision behind."""
    pin = load_pin(ws.pin_file)
    patches = load_series(ws.patches)
    if not patches:
        raise prepare.PrError(
            "the series is empty: nothing to send upstream", "add patches (commit in the checkout, nox -s refresh)"
        )
    cover = load(ws.patches)
    cover_source = cover.source
    state = verify_current(ws.checkout, pin, patches)
    digest = state.series_digest
    revs = revisions.load(ws.revisions_file)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    kit_commit = revisions.head_commit_holding(ws.root, digest)
    rev, is_new = revisions.current(revs, digest, pin.label, kit_commit, now, cover.digest)
    signer = Signer(identity, rev.prepared)  # the revision's date: the same revision gives the same commit ids
    prev = next((r for r in reversed(revs) if r.number < rev.number), None)
    out = ws.pr_dir / rev.label
    branch = f"pr/{rev.label}"
    prepare.refuse_overwrite(out, args.force)
    prepare.refuse_open_without_gh(args, branch, cover.title, out / "pr-body.md")

    progress("precheck: upstream's pre-commit hooks, ruff with upstream's settings, kit checks, off-NPU proof")
    lint, ruff_version = lint_checkout(ws, tools, patches)
    if lint.findings:
        for finding in lint.findings:
            print(finding)
        progress(f"precheck: {len(lint.findings)} finding(s): nothing recorded or made (no {rev.label} in "
                 "patches/revisions.toml, no .work/pr, no branch); fix them (nox -s lint shows the same), "
                 "nox -s refresh, and run nox -s pr again")  # fmt: skip
        return 1
    progress(
        f"revision {rev.label}: {'new (series or cover changed)' if is_new else 'unchanged since it was recorded'}"
    )

    commits = gitcmd.rev_list(ws.checkout, f"{PRISTINE_TAG}..HEAD")
    made = rewrite(ws.checkout, PRISTINE_TAG, commits, signer)  # objects only: no branch yet
    repo, kept, where = ws.checkout, patches, f"Branch {branch} in .work/{ws.checkout.name} (for review)"
    review_tip = made[-1]
    onto_report = ""
    rules = None
    if args.onto:
        sendable = [(p, c) for p, c in zip(patches, commits, strict=True) if not p.already_upstream]
        put = prepare.put_onto(
            ws, args, [p for p, _ in sendable], [c for _, c in sendable], signer, branch, tools, lint.off_npu
        )
        if put.gates.findings:
            progress(
                f"precheck on {put.base}: {len(put.gates.findings)} finding(s) of its gates on the series' "
                "lines: nothing recorded; fix them (nox -s refresh) and run nox -s pr again"
            )
            return 1
        kept, made, rules = put.kept, put.made, put.rules
        onto_report = (
            f"\nEach patch on {put.base}:\n{put.verdicts}\n\n{onto.gate_report(put.gates)}\n"
            f"PR template: {rules.template_from}. DCO rule: {rules.dco_from}.\n"
        )
        repo, where = (
            ws.upstream_clone,
            f"Branch {branch} in .work/{ws.upstream_clone.name} on {put.base}: {len(made)} commit(s)",
        )
        progress(f"branch {branch} in .work/{ws.upstream_clone.name} on {put.base}: {len(made)} signed-off commit(s)")
    # A Backport patch is already upstream: the review branch keeps it (later trees hold its file), the PR does not.
    sent = [(p, c) for p, c in zip(kept, made, strict=True) if not p.already_upstream]
    subjects = [message_parts(repo, c)[0] for _, c in sent]
    title = cover.title
    scopes = [scope.of_patch(p.name, p.text) for p, _ in sent]
    results = evidence({name: records.read(ws.records, name) for name, _, _ in PLAN}, digest)
    progress(f"range-diff against {prev.label if prev else 'nothing (first revision)'}")
    rdiff = prepare.previous_range_diff(ws, prev, review_tip, identity)

    files = {p.name: gitcmd.format_patch(repo, c) for p, c in sent}
    ruff = (ruff_version, hook_version(tools.hooks, "ruff-check"))  # (the precheck's, upstream's pin)
    left_out = [(p.name, p.upstream_status) for p in patches if p.already_upstream]
    purpose = purpose_section(cover, subjects, lint.off_npu.claim())
    files["pr-body.md"] = body(purpose, results, scopes, pin.label, digest, ruff[1], left_out)
    if rules is not None and rules.template is not None:
        files["pr-body.md"] = in_template(rules.template, files["pr-body.md"])
    cover_diff = prepare.previous_cover(ws, prev, cover_source)
    files["cover.txt"] = prepare.cover_text(
        title, rev, pin.label, where, identity, kept, scopes, lint, ruff, rdiff, cover_diff, onto_report
    )
    files["series/series"] = (ws.patches / "series").read_text(encoding="utf-8")
    files["series/" + NAME] = cover_source
    files.update({f"series/{p.name}": p.text for p in patches})

    prepare.push(ws, args, branch)  # first: a refused or failed push records nothing
    # Record: the output, the review branch, then the revision (last: it is what the next run compares with).
    prepare.write_output(out, files)
    gitcmd.set_branch(ws.checkout, branch, review_tip)
    progress(f"branch {branch} in .work/{ws.checkout.name}: {len(commits)} commit(s) signed off by {identity}, "
             "kit trailers stripped; it sits on the kit's pristine commit: for review, not for upstream")  # fmt: skip
    if is_new:
        revisions.record(ws.revisions_file, rev)
        progress(f"recorded {rev.label} in patches/revisions.toml (commit it with patches/)")

    print(table(scope.HEADERS, scope.rows(scopes)))
    whole = scope.total(scopes)
    summary = [
        ("title", title),
        ("branch", where),
        ("output", f".work/pr/{rev.label}/ ({len(sent)} patch file(s), cover.txt, pr-body.md)"),
        ("scope", f"{len(whole.files)} file(s), +{whole.added} -{whole.removed}, {len(whole.new_files)} new"),
        ("RFC threshold", scope.rfc_warning(whole) or f"under {scope.RFC_THRESHOLD} lines"),
        ("precheck", f"{len(lint.findings)} finding(s) (ruff {ruff_version})"),
        *[(label, text.split(" (")[0].split(":")[0]) for _, label, text in results],
        ("range-diff", rdiff.splitlines()[0]),
    ]
    print(table(["item", "value"], summary))
    prepare.deliver(ws, args, branch, title, out / "pr-body.md")
    progress(f"ready: .work/pr/{rev.label}/pr-body.md and cover.txt")
    return 0
