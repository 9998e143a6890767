"""The pinned upstream: read patches/upstream.toml, fetch the source, verify it.

Two sources of the same release:
- wheel (default): `pip download --no-deps` from the package registry, sha256 verified
  before anything is extracted;
- git: the pinned commit fetched from the git URL, verified by commit id.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from scripts import gitcmd, handfile, worklock
from scripts.digests import sha256_file
from scripts.errors import KitError
from scripts.gitcmd import GitFailed
from scripts.kittools import dist_name, pip_argv
from scripts.report import progress

SOURCES = ("wheel", "git")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# Generated at build time (setuptools-scm): present in the wheel, absent from git.
GENERATED_IN_WHEEL = ("vllm_omni/_version.py",)


class PinError(KitError):
    """The pin file is malformed or the pinned source cannot be had or verified."""


class DigestMismatch(PinError):
    """A downloaded file is not the pinned one."""

    def __init__(self, what: str, fix: str, actual: str) -> None:
        super().__init__(what, fix)
        self.actual = actual


@dataclass(frozen=True)
class Pin:
    project: str
    version: str
    source: str
    wheel_filename: str
    wheel_sha256: str
    git_url: str
    git_tag: str
    git_commit: str

    @property
    def label(self) -> str:
        return f"{self.project} {self.version} ({self.source})"

    def with_source(self, source: str | None) -> Pin:
        if source is None:
            return self
        if source not in SOURCES:
            raise PinError(f"unknown source {source!r}", f"use one of {', '.join(SOURCES)}")
        return replace(self, source=source)


WHEEL_NAME = re.compile(r"^(?P<dist>[A-Za-z0-9_.]+)-(?P<version>[^-]+)-[^-]+-[^-]+-[^-]+\.whl$")


SHOWN = "patches/upstream.toml"
PROJECT = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")  # a distribution's name


def out_of(pattern: re.Pattern[str], what: str) -> Callable[[str], str | None]:
    return lambda value: None if pattern.fullmatch(value) else f"is not {what}"


SCHEMA: dict[str, tuple[handfile.Field, ...]] = {  # table -> its fields, as check_table reads them
    "": (
        handfile.Field("project", check=out_of(PROJECT, "a project name"), example="vllm-omni"),
        handfile.Field(
            "version", check=out_of(re.compile(r"[0-9][^\s/]*"), "a version"), example="0.30.0"
        ),
        handfile.Field(
            "source",
            required=False,
            check=lambda v: None if v in SOURCES else f"is not one of {', '.join(SOURCES)}",
            example="wheel",
        ),
        handfile.Field("wheel", kind=dict),
        handfile.Field("git", kind=dict),
    ),
    "wheel": (
        handfile.Field("filename", check=out_of(WHEEL_NAME, "a wheel's file name")),
        handfile.Field(
            "sha256",
            check=out_of(re.compile(r"[0-9a-fA-F]{64}"), "a sha256 hex digest (64 hex digits)"),
        ),
    ),
    "git": (
        handfile.Field("url", check=lambda v: None if v.strip() else "is empty"),
        handfile.Field("tag", check=lambda v: None if v.strip() else "is empty", example="v0.30.0"),
        handfile.Field(
            "commit",
            required=False,
            check=lambda v: None
            if not v or COMMIT.match(v)
            else "is not a full commit id (all 40 hex digits)",
        ),
    ),
}


def parse_pin(text: str) -> Pin:
    """A Pin from the text of upstream.toml: every field's presence, type and range checked (one line
    naming the field) before any is used."""
    data = handfile.load_toml(text, SHOWN, PinError)
    tables = {
        name: handfile.check_table(
            data[name] if name else data, name, fields, text, SHOWN, of="the pin", error=PinError
        )
        for name, fields in SCHEMA.items()
    }
    wheel, git = tables["wheel"], tables["git"]
    pin = Pin(
        project=data["project"],
        version=data["version"],
        source=data.get("source", "wheel"),
        wheel_filename=wheel["filename"],
        wheel_sha256=wheel["sha256"].lower(),
        git_url=git["url"],
        git_tag=git["tag"],
        git_commit=git.get("commit", ""),
    )
    name = WHEEL_NAME.match(pin.wheel_filename)
    assert name is not None  # its Field checked it
    if dist_name(name["dist"]) != dist_name(pin.project):
        raise PinError(
            f"{SHOWN}: wheel.filename {pin.wheel_filename!r} is not a wheel of {pin.project}",
            "write the release wheel's file name, e.g. "
            f"{dist_name(pin.project)}-{pin.version}-py3-none-any.whl",
        )
    if name["version"] != pin.version:
        raise PinError(
            f"{SHOWN}: version {pin.version!r} but wheel.filename is version {name['version']}",
            "make them name the same release (and update wheel.sha256 with it)",
        )
    return pin


def load_pin(path: Path) -> Pin:
    if not path.is_file():
        raise PinError(
            "patches/upstream.toml (the pin) is missing",
            "restore it: git checkout -- patches/upstream.toml",
        )
    return parse_pin(handfile.read(path, "patches/upstream.toml"))


def verify_digest(path: Path, expected: str) -> None:
    actual = sha256_file(path)
    if actual != expected:
        raise DigestMismatch(
            f"{path.name}: sha256 {actual} does not match the pin's {expected}",
            "refusing to use it; check the pin (patches/upstream.toml) and the registry you "
            "download from",
            actual,
        )


def pip_download(project: str, version: str, dest: Path) -> None:
    """The release wheel of project==version from the package registry into dest (no dependencies)."""
    spec = f"{project}=={version}"
    proc = subprocess.run(
        [
            *pip_argv(),
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--quiet",
            "-d",
            str(dest),
            spec,
        ],
        capture_output=True,
        encoding="utf-8",
        errors="replace",
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise PinError(
            f"could not download {spec} from the package registry ({last})",
            "check the version (patches/upstream.toml, or the one asked for) and that the registry "
            "is reachable",
        )


def fetch_wheel(pin: Pin, downloads: Path) -> Path:
    """The pinned wheel, from the cache or the registry, digest verified before every use."""
    return fetch_verified(
        pin.project, pin.version, downloads, pin.wheel_filename, lambda _name: pin.wheel_sha256
    )[0]


def fetch_verified(
    project: str,
    version: str,
    downloads: Path,
    filename: str | None,
    sha256_of: Callable[[str], str],
) -> tuple[Path, str]:
    """(a release wheel, its sha256), from the cache or the registry, the digest checked before every
    use.

    The one wheel fetch of the kit. filename: the wheel's name, or None for the release's one
    wheel, whatever its name; sha256_of(name) is the digest it must have (the pin's, or the
    registry's). A cached file that fails its digest is replaced only by a download that passes it
    (then set aside as *.bad-<time>, never deleted: it may be evidence); when the download has the
    cached file's digest too, the expected digest is what is wrong (a typo in the pin): refused, the
    cache left as it is.
    """
    downloads.mkdir(parents=True, exist_ok=True)
    with worklock.hold(downloads / ".lock", ".work/downloads", say=progress):
        # what a download killed outright (kill -9) left: a wheel's worth of bytes, for good
        worklock.sweep_scratch(downloads, DOWNLOAD_PREFIX, only_files, progress)
        found = (
            [downloads / filename]
            if filename
            else sorted(downloads.glob(f"{dist_name(project)}-{version}-*.whl"))
        )
        cached = next((p for p in found if p.is_file()), None)
        if cached is None:
            return download_verified(project, version, downloads, filename, sha256_of)
        expected, actual = sha256_of(cached.name), sha256_file(cached)
        if actual == expected:
            return cached, expected
        try:
            return download_verified(project, version, downloads, filename, sha256_of, cached)
        except DigestMismatch as exc:
            if exc.actual != actual:
                raise
            raise DigestMismatch(
                f"{cached.name} has sha256 {actual} (the cached copy and a fresh download agree), "
                "not the "
                f"expected {expected}",
                "check wheel.sha256 in patches/upstream.toml (a typo?) against the registry's; the "
                "cached wheel "
                "was left as it is",
                actual,
            ) from None
        except PinError as exc:
            raise PinError(
                f"the cached {cached.name} has sha256 {actual}, not the expected {expected}, and "
                f"fetching it again failed: {exc.what}",
                exc.fix,
            ) from None


DOWNLOAD_PREFIX = ".download-"  # .work/downloads/.download-XXXXXXXX: one download, before its check


def only_files(folder: Path) -> bool:
    """A download's folder made before downloads were locked: pip's files only, no folder, no link."""
    return all(p.is_file() and not p.is_symlink() for p in folder.iterdir())


def download_verified(
    project: str,
    version: str,
    downloads: Path,
    filename: str | None,
    sha256_of: Callable[[str], str],
    bad: Path | None = None,
) -> tuple[Path, str]:
    """Download the wheel into downloads/ (through a temporary folder: no partial file is ever cached);
    a cached file it replaces (bad) is set aside first, once the download passed its digest."""
    with worklock.scratch(downloads, DOWNLOAD_PREFIX) as tmp:
        pip_download(project, version, Path(tmp))
        wheels = sorted(Path(tmp).glob("*.whl"))
        if filename is not None and not (Path(tmp) / filename).is_file():
            names = ", ".join(p.name for p in Path(tmp).iterdir() if not p.name.startswith("."))
            raise PinError(
                f"the registry served {names}, not {filename}", "fix wheel.filename in the pin"
            )
        if filename is None and len(wheels) != 1:
            raise PinError(
                f"the registry served {len(wheels)} wheels for {project}=={version}",
                "name one release",
            )
        got = Path(tmp) / (filename or wheels[0].name)
        digest = sha256_of(got.name)
        verify_digest(got, digest)
        if bad is not None and bad.name == got.name:
            set_aside(bad)
        os.replace(got, downloads / got.name)
        return downloads / got.name, digest


def set_aside(cached: Path) -> Path:
    """Rename a cached file that failed its digest (never deleted: it may be evidence); its new path."""
    aside = cached.with_name(f"{cached.name}.bad-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    os.replace(cached, aside)
    progress(
        f".work/downloads/{cached.name} fails its sha256: set aside as {aside.name}, replaced by a "
        "fresh download"
    )
    return aside


def package_entries(zf: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    """The wheel's files that make the repository tree: its importable package(s), no metadata."""
    return [
        i
        for i in zf.infolist()
        if not i.is_dir() and not i.filename.split("/", 1)[0].endswith((".dist-info", ".data"))
    ]


def git_blob_id(data: bytes) -> str:
    """The id git gives a file's bytes: what the pristine commit must hold for each wheel entry."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def wheel_blobs(wheel: Path) -> dict[str, str]:
    """Repository path -> git blob id of every file the wheel's package holds."""
    with zipfile.ZipFile(wheel) as zf:
        return {info.filename: git_blob_id(zf.read(info)) for info in package_entries(zf)}


def extract_wheel(wheel: Path, dest: Path) -> None:
    """Unpack the importable package(s) of a wheel, repository-relative, keeping exec bits.

    A write that fails (a full disk) names the file: write(2) errors carry no file name of their
    own.
    """
    with zipfile.ZipFile(wheel) as zf:
        for info in package_entries(zf):
            target = dest / info.filename
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(info))
                if (info.external_attr >> 16) & stat.S_IXUSR:
                    target.chmod(0o755)
            except OSError as exc:
                raise PinError(
                    f"cannot write {dest.parent.name}/{dest.name}/{info.filename} "
                    f"({exc.strerror or exc})",
                    f"free disk space on {dest.parent.name}/ (df -h {dest.parent.name}), then run "
                    "the command again",
                ) from None


def fetch_git(pin: Pin, dest: Path) -> str:
    """Fetch the pinned commit from the git URL into a new repository at dest; returns the commit."""
    if not COMMIT.match(pin.git_commit):
        raise PinError(
            f"the pin has no git commit for {pin.git_tag}",
            "record it where the URL is reachable: python -m scripts pin --record-git",
        )
    try:
        gitcmd.fetch_commit(dest, pin.git_url, pin.git_commit, "--depth=1")
    except GitFailed as exc:
        raise PinError(
            f"could not fetch {pin.git_commit[:12]} from {pin.git_url} ({exc.what})",
            "check the network and the git URL/commit in patches/upstream.toml, "
            "or use the default wheel source",
        ) from exc
    gitcmd.detach(dest, pin.git_commit)
    return pin.git_commit


def resolve_tag(url: str, tag: str, cwd: Path) -> str:
    """The commit a tag names at a git URL (peeled, for annotated tags)."""
    commit = gitcmd.remote_commit(url, tag, branches=False, cwd=cwd)
    if not commit:
        raise PinError(f"{url} has no tag {tag}", "check git.tag in patches/upstream.toml")
    return commit


def set_key(text: str, key: str, value: str) -> tuple[str, int]:
    """The pin's text with each `key = "..."` line (either quotes, any spaces, a comment after it, as a
    user may write it) set to value, the rest of the line and the file kept; and how many there
    were."""
    pattern = (
        rf"""(?m)^([ \t]*{re.escape(key)}[ \t]*=[ \t]*)(?:"[^"\n]*"|'[^'\n]*')([ \t]*(?:#.*)?)$"""
    )
    return re.subn(pattern, lambda m: f'{m[1]}"{value}"{m[2]}', text)


def record_git_commit(pin_file: Path, commit: str) -> None:
    """Write the resolved commit into the pin file, touching nothing else in it."""
    text = pin_file.read_text(encoding="utf-8")
    new, n = set_key(text, "commit", commit)
    if n != 1:
        raise PinError(
            "patches/upstream.toml has no single 'commit = ' line under [git]", "add one"
        )
    pin_file.write_text(new, encoding="utf-8")


def wheel_matches_tree(wheel: Path, tree: Path) -> list[str]:
    """Files whose bytes differ between the wheel's package and a git tree (generated files aside)."""
    diffs = []
    with zipfile.ZipFile(wheel) as zf:
        for info in package_entries(zf):
            if info.filename in GENERATED_IN_WHEEL:
                continue
            path = tree / info.filename
            if not path.is_file() or path.read_bytes() != zf.read(info):
                diffs.append(info.filename)
    return diffs
