"""`nox -s pr`: prepare the upstream PR from the applied series.

Writes .work/pr/vN/ (N = the series revision, see scripts/revisions.py):
  NNNN-<slug>.patch  format-patch files as upstream gets them (no kit trailers, signed off)
  cover.txt          title, branch, scope, precheck, range-diff against the previous revision
  pr-body.md         upstream's template filled from the patch messages and the recorded runs
  series/            the kit's patches of this revision (for later range-diffs)
and the branch pr/vN in the checkout. A new revision is recorded in
patches/revisions.toml only when the series changed since the last one.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from scripts import checkout as co
from scripts import lint as lintmod
from scripts import paths, prbody, records, revisions, scope, upstream
from scripts.errors import KitError
from scripts.gitcmd import git
from scripts.pin import load_pin
from scripts.report import progress, table
from scripts.series import Patch, load_series

PR_DIR = paths.WORK / "pr"
REVISIONS_FILE = paths.PATCHES / "revisions.toml"
KIT_TOOLS = paths.CI_DIR / "kit-tools.txt"


class PrError(KitError):
    """The PR cannot be prepared as asked."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ruff", default="ruff", help="the ruff executable for the precheck (upstream pins v0.14.10)")
    p.add_argument("--force", action="store_true", help="replace .work/pr/vN when preparing the same revision again")


def upstream_ruff() -> str:
    """The ruff version upstream's pre-commit pins (mirrored in ci/kit-tools.txt)."""
    m = re.search(r"(?m)^ruff==(\S+)", KIT_TOOLS.read_text(encoding="utf-8"))
    return m[1] if m else "?"


def precheck(ruff: str) -> tuple[lintmod.SeriesLint, str]:
    config = paths.CI_DIR / "ruff-upstream.toml"
    version = lintmod.ruff_version(ruff)
    found = lintmod.lint_series(ruff, config, paths.CHECKOUT, paths.PRISTINE_TREE, co.combined_diff(paths.CHECKOUT))
    return found, version


def previous_range_diff(prev: revisions.Revision | None, new_tip: str, identity: str) -> str:
    if prev is None:
        return "First revision: no range-diff."
    paths.WORK.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=paths.WORK, prefix=".pr-range-diff-") as tmp:
        found = revisions.find_series(prev, PR_DIR / prev.label / "series", paths.ROOT, Path(tmp))
        if found is None:
            return (f"Range-diff against {prev.label}: not available (its patches are neither in "
                    f".work/pr/{prev.label}/series nor in the kit's git history).")  # fmt: skip
        old, where = found
        try:
            text = revisions.range_diff(paths.CHECKOUT, new_tip, old, identity, Path(tmp))
        except revisions.RangeDiffUnavailableError as exc:
            return f"Range-diff against {prev.label}: not available ({exc.what})."
    return f"Range-diff against {prev.label} (from {where}):\n\n{text.rstrip()}"


def cover_text(title: str, rev: revisions.Revision, pin: str, branch: str, identity: str, patches: list[Patch],
               scopes: list[scope.Scope], lint: lintmod.SeriesLint, ruff: tuple[str, str],
               rdiff: str) -> str:  # fmt: skip
    warning = scope.rfc_warning(scope.total(scopes))
    ruff_note = "" if ruff[0] == ruff[1] else f"  (not upstream's pinned {ruff[1]}: results may differ)"
    findings = "\n".join(str(f) for f in lint.findings) or "no findings"
    listing = "\n".join(f"  {p.name}  {p.subject}" for p in patches)
    return f"""{title}

Revision {rev.label} of the series against {pin} (series digest {rev.series_digest[:12]}).
Branch {branch} in .work/{paths.CHECKOUT.name}: {len(patches)} commit(s), each Signed-off-by: {identity}.
Apply elsewhere with: git am -k {rev.label}/*.patch   (-k keeps upstream's [Prefix] subjects)

{listing}

Scope
{table(scope.HEADERS, scope.rows(scopes))}
{f"WARNING: {warning}" if warning else f"Under upstream's {scope.RFC_THRESHOLD}-line RFC threshold."}

Precheck: ruff {ruff[0]}{ruff_note} with upstream's settings, SPDX headers, test markers, forbidden imports, .is_npu
{table(["check", "findings"], lint.rows())}
{findings}

{rdiff}
"""


def refuse_overwrite(out: Path, force: bool) -> None:
    if out.exists() and not force:
        raise PrError(f".work/pr/{out.name} already holds this revision",
                      "pass --force to replace it (nox -s pr -- --force), or move it away first")  # fmt: skip


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


def command(args: argparse.Namespace) -> int:
    identity = upstream.user_identity(paths.ROOT)
    pin = load_pin(paths.PIN_FILE)
    patches = load_series(paths.PATCHES)
    if not patches:
        raise PrError(
            "the series is empty: nothing to send upstream", "add patches (commit in the checkout, nox -s refresh)"
        )
    state = co.verify_current(paths.CHECKOUT, pin, patches)
    digest = state.series_digest
    revs = revisions.load(REVISIONS_FILE)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rev, is_new = revisions.current(revs, digest, pin.label, revisions.head_commit_holding(paths.ROOT, digest), now)
    prev = next((r for r in reversed(revs) if r.number < rev.number), None)
    out = PR_DIR / rev.label
    refuse_overwrite(out, args.force)
    progress(f"revision {rev.label}: {'new (series changed)' if is_new else 'series unchanged since it was recorded'}")

    branch = f"pr/{rev.label}"
    commits = git("rev-list", "--reverse", f"{co.PRISTINE_TAG}..HEAD", cwd=paths.CHECKOUT).split()
    made = upstream.build_branch(paths.CHECKOUT, co.PRISTINE_TAG, commits, identity, branch)
    progress(f"branch {branch}: {len(made)} commit(s) signed off by {identity}, kit trailers stripped")
    messages = [upstream.message_parts(paths.CHECKOUT, c) for c in made]
    title = prbody.title([subject for subject, _ in messages])

    scopes = [scope.of_patch(p.name, p.text) for p in patches]
    progress("precheck: ruff with upstream's settings + kit checks")
    lint, ruff_version = precheck(args.ruff)
    results = prbody.evidence({name: records.read(paths.RECORDS, name) for name, _, _ in prbody.PLAN}, digest)
    progress(f"range-diff against {prev.label if prev else 'nothing (first revision)'}")
    rdiff = previous_range_diff(prev, made[-1], identity)

    files = {p.name: upstream.format_patch(paths.CHECKOUT, c) for p, c in zip(patches, made, strict=True)}
    files["pr-body.md"] = prbody.body(messages, results, scopes, pin.label, digest)
    files["cover.txt"] = cover_text(title, rev, pin.label, branch, identity, patches, scopes, lint,
                                    (ruff_version, upstream_ruff()), rdiff)  # fmt: skip
    files["series/series"] = (paths.PATCHES / "series").read_text(encoding="utf-8")
    files.update({f"series/{p.name}": p.text for p in patches})
    write_output(out, files)
    if is_new:
        REVISIONS_FILE.write_text(revisions.render([*revs, rev]), encoding="utf-8")
        progress(f"recorded {rev.label} in patches/revisions.toml (commit it with patches/)")

    for finding in lint.findings:
        print(finding)
    print(table(scope.HEADERS, scope.rows(scopes)))
    whole = scope.total(scopes)
    summary = [
        ("title", title),
        ("branch", f"{branch} ({len(made)} signed-off commit(s))"),
        ("output", f".work/pr/{rev.label}/ ({len(patches)} patch file(s), cover.txt, pr-body.md)"),
        ("scope", f"{len(whole.files)} file(s), +{whole.added} -{whole.removed}, {len(whole.new_files)} new"),
        ("RFC threshold", scope.rfc_warning(whole) or f"under {scope.RFC_THRESHOLD} lines"),
        ("precheck", f"{len(lint.findings)} finding(s) (ruff {ruff_version})"),
        *[(label, text.split(" (")[0].split(":")[0]) for _, label, text in results],
        ("range-diff", rdiff.splitlines()[0]),
    ]
    print(table(["item", "value"], summary))
    if lint.findings:
        progress(f"precheck: {len(lint.findings)} finding(s): fix them before sending (nox -s lint shows the same)")
        return 1
    progress(f"ready: .work/pr/{rev.label}/pr-body.md and cover.txt")
    return 0
