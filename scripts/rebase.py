"""`nox -s rebase -- <version | git ref>`: try the series on another upstream.

The target's pristine tree is built in a scratch folder (the checkout is not
touched), with the current pristine's objects fetched beside it so that 3-way
merges have their base. Each patch, in order, is then:
  already-upstream  it reverse-applies: the change is in the target already (skipped)
  clean / offset    it applies as is, or with line offsets
  fuzz              it applies only with reduced context (-C1)
  3-way             it needs a 3-way merge against the current pristine
  conflict          it does not apply (file and hunk named); skipped, the rest still tried
A table, and a JSON report in .work/rebase/. With --move, when nothing conflicts,
the pin moves to the target release (sha256 verified) and the series is
refreshed from the scratch commits (already-upstream patches dropped).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

from scripts import checkout as co
from scripts import paths
from scripts import pin as pinmod
from scripts.errors import KitError
from scripts.gitcmd import KIT_IDENTITY, git
from scripts.gitcmd import run as git_run
from scripts.pin import Pin
from scripts.report import progress, table
from scripts.series import Patch, load_series

VERSION = re.compile(r"^\d+(\.\d+)+([.+-]?[A-Za-z0-9.]+)?$")  # a release version; anything else is a git ref
REBASE_DIR = paths.WORK / "rebase"
FUZZ_CONTEXT = 1  # lines of context that must still match for "fuzz"
APPLIES = ("clean", "offset", "fuzz", "3-way")


class RebaseError(KitError):
    """The series cannot be tried or moved as asked."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target", help="a release on the package registry (e.g. 0.28.0), or a git tag/commit at the pin's git URL"
    )
    p.add_argument("--move", action="store_true",
                   help="when no patch conflicts: move the pin to the release and refresh the series")  # fmt: skip


# ---- the target ------------------------------------------------------------------


def dist_name(project: str) -> str:
    return re.sub(r"[-_.]+", "_", project).lower()


def fetch_release(project: str, version: str, downloads: Path) -> Path:
    """A release wheel from the download cache or the registry (pip checks the registry's hash)."""
    cached = sorted(downloads.glob(f"{dist_name(project)}-{version}-*.whl"))
    if cached:
        return cached[0]
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=downloads, prefix=".download-") as tmp:
        pinmod.pip_download(project, version, Path(tmp))
        wheels = sorted(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise RebaseError(f"the registry served {len(wheels)} wheels for {project}=={version}", "name one release")
        os.replace(wheels[0], downloads / wheels[0].name)
        return downloads / wheels[0].name


def target_pin(pin: Pin, target: str, downloads: Path) -> Pin:
    """The pin the target would be: a registry release (wheel, digest of what was fetched) or a git tag/commit."""
    if VERSION.match(target):
        wheel = fetch_release(pin.project, target, downloads)
        return replace(pin, version=target, source="wheel", wheel_filename=wheel.name,
                       wheel_sha256=pinmod.sha256_file(wheel), git_tag=f"v{target}", git_commit="")  # fmt: skip
    commit = target if pinmod.COMMIT.match(target) else pinmod.resolve_tag(pin.git_url, target, paths.ROOT)
    return replace(pin, version=target, source="git", git_tag=target, git_commit=commit)


# ---- trying the series -------------------------------------------------------------


def try_patch(repo: Path, patch: Patch) -> co.PatchResult:
    """Apply one patch in repo as well as it goes; a conflict leaves repo as it was."""
    path = str(patch.path)
    if git_run("apply", "--check", "-R", path, cwd=repo).returncode == 0:
        return co.PatchResult(patch.name, "already-upstream", "the change is in the target: the patch reverse-applies")
    exact = git_run("apply", "--check", path, cwd=repo).returncode == 0
    if not exact and git_run("apply", "--check", f"-C{FUZZ_CONTEXT}", path, cwd=repo).returncode == 0:
        git("am", "-q", "-k", "--committer-date-is-author-date", f"-C{FUZZ_CONTEXT}", path, cwd=repo, env=KIT_IDENTITY)
        return co.PatchResult(patch.name, "fuzz", f"applies only with {FUZZ_CONTEXT} line(s) of context matching")
    result = co.apply_one(repo, patch, threeway=True)
    if result.outcome == "conflict":
        git("am", "--abort", cwd=repo, env=KIT_IDENTITY)
    return result


def try_series(pin: Pin, target: Pin, patches: list[Patch], scratch: Path) -> tuple[Path, list[co.PatchResult]]:
    """The target pristine in scratch with every patch tried on it, in order; (its repo, results)."""
    current = scratch / "current"
    co.build_pristine(pin, current, paths.DOWNLOADS, progress)
    repo = scratch / "target"
    co.build_pristine(target, repo, paths.DOWNLOADS, progress)
    # The current pristine's blobs: the base 3-way merges need (patches carry full blob ids).
    git("fetch", "-q", "--no-tags", str(current), f"+refs/tags/{co.PRISTINE_TAG}:refs/kit/current-pristine", cwd=repo)
    results = []
    for i, patch in enumerate(patches, 1):
        result = try_patch(repo, patch)
        progress(f"[{i}/{len(patches)}] {patch.name}: {result.outcome}{f' ({result.detail})' if result.detail else ''}")
        results.append(result)
    return repo, results


def report(pin: Pin, target: Pin, results: list[co.PatchResult], moved: bool) -> dict[str, object]:
    return {
        "from": pin.label,
        "to": target.label,
        "target": {
            "version": target.version,
            "source": target.source,
            "wheel": target.wheel_filename,
            "wheel_sha256": target.wheel_sha256 if target.source == "wheel" else "",
            "git_commit": target.git_commit,
        },  # fmt: skip
        "patches": [asdict(r) for r in results],
        "counts": {o: sum(r.outcome == o for r in results) for o in (*APPLIES, "already-upstream", "conflict")},
        "applies": all(r.outcome != "conflict" for r in results),
        "moved": moved,
    }


# ---- moving the pin ----------------------------------------------------------------


def moved_pin_text(text: str, target: Pin) -> str:
    """upstream.toml with the release fields set to target (comments and layout kept); the git commit cleared."""
    fields = {"version": target.version, "filename": target.wheel_filename, "sha256": target.wheel_sha256,
              "tag": target.git_tag, "commit": ""}  # fmt: skip
    for key, value in fields.items():
        text, n = re.subn(rf'(?m)^{key} = ".*"$', f'{key} = "{value}"', text)
        if n != 1:
            raise RebaseError(f"patches/upstream.toml has no single '{key} = ' line", "restore it from git")
    return text


def move(pin: Pin, target: Pin, patches: list[Patch], repo: Path, results: list[co.PatchResult]) -> None:
    conflicts = [r.name for r in results if r.outcome == "conflict"]
    if conflicts:
        raise RebaseError(f"not moving the pin: {', '.join(conflicts)} conflict(s) on {target.label}",
                          "resolve them first (nox -s apply -- --3way on the new pin), or keep the pin")  # fmt: skip
    if target.source != "wheel":
        raise RebaseError(
            "--move needs a release version (the pin is a registry wheel)", "name the release, e.g. 0.28.0"
        )
    text = moved_pin_text(paths.PIN_FILE.read_text(encoding="utf-8"), target)
    new_pin = pinmod.parse_pin(text)
    pinmod.verify_digest(paths.DOWNLOADS / new_pin.wheel_filename, new_pin.wheel_sha256)
    progress(f"{new_pin.wheel_filename}: sha256 {new_pin.wheel_sha256[:16]}... verified")
    for r in results:
        if r.outcome == "already-upstream":
            progress(f"{r.name}: dropped from the series (already upstream)")
    pristine = git("rev-parse", co.PRISTINE_TAG, cwd=repo).strip()
    co.write_state(repo, co.State(pin=new_pin.label, pin_digest=co.pin_digest(new_pin), pristine_commit=pristine,
                                  series_digest="", patches={}, head=co.head(repo), status="applied"))  # fmt: skip
    co.refresh(repo, paths.PATCHES, patches, progress=progress)
    paths.PIN_FILE.write_text(text, encoding="utf-8")
    progress(f"pin moved: {pin.label} -> {new_pin.label}; next: nox -s apply lint test "
             "(and python -m scripts pin --record-git where the git URL is reachable)")  # fmt: skip


def command(args: argparse.Namespace) -> int:
    pin = pinmod.load_pin(paths.PIN_FILE)
    patches = load_series(paths.PATCHES)
    target = target_pin(pin, args.target, paths.DOWNLOADS)
    progress(f"trying {len(patches)} patch(es) from {pin.label} on {target.label} (the checkout is not touched)")
    paths.WORK.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=paths.WORK, prefix=".rebase-") as tmp:
        repo, results = try_series(pin, target, patches, Path(tmp))
        print(
            table(
                ["#", "patch", "outcome", "detail"],
                [(i, r.name, r.outcome, r.detail) for i, r in enumerate(results, 1)],
            )
        )
        data = report(pin, target, results, moved=False)
        out = write_report(args.target, data)
        counts = ", ".join(f"{n} {o}" for o, n in data["counts"].items() if n)  # type: ignore[attr-defined]
        progress(f"{target.label}: {counts or 'empty series'}; report .work/rebase/{out.name}")
        if args.move:
            move(pin, target, patches, repo, results)
            write_report(args.target, report(pin, target, results, moved=True))
    return 0 if data["applies"] else 1


def write_report(target: str, data: dict[str, object]) -> Path:
    REBASE_DIR.mkdir(parents=True, exist_ok=True)
    out = REBASE_DIR / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', target)}.json"
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return out
