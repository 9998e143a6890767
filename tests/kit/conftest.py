"""Fixtures of the kit's own tests: small upstreams, and copies of the kit driven through its front
door."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import e2e_prereq
import pytest

from scripts import kittools, signals
from scripts.__main__ import main
from scripts.gitcmd import KIT_IDENTITY, git
from scripts.workspace import Workspace

KIT_ROOT = Path(__file__).resolve().parents[2]
# A pytest started as a background job ignores SIGINT and SIGQUIT, and the kit rightly keeps an
# ignored signal ignored (signals.takeable): the fault tests' signals need every test process to
# start from the defaults.
for _ending in signals.ENDING:
    if signal.getsignal(_ending) is signal.SIG_IGN:
        signal.signal(
            _ending, signal.default_int_handler if _ending == signal.SIGINT else signal.SIG_DFL
        )
# A spawned program that runs the front door as its shell does (signal handlers included), on its
# own kit.
FRONT_DOOR = (
    "import scripts.__main__ as front\nfront.install_run_handlers()\n"
    "sys.exit(front.main(sys.argv[1:], front.Workspace.of_kit()))"
)
_WHO = {"NAME": "Test Author", "EMAIL": "author@example.org", "DATE": "2026-01-02T03:04:05+00:00"}
AUTHOR = {
    f"GIT_{role}_{key}": value for role in ("AUTHOR", "COMMITTER") for key, value in _WHO.items()
}
# A patch as the kit's own series carries it: by the kit's identity (the submitter becomes its
# author upstream).
KIT_AUTHOR = {**AUTHOR, **{k: v for k, v in KIT_IDENTITY.items() if k.startswith("GIT_AUTHOR_")}}
SMALL_UPSTREAM = {
    "vllm_omni/__init__.py": "",
    "vllm_omni/layers/rope.py": "".join(f"line {i}\n" for i in range(1, 41)),
    "vllm_omni/attn.py": "def attend(q):\n    return q\n",
}


# One pre-commit store for every test's kit copy (pre-commit locks it), kept with the test venv: each
# hook env is made once.
os.environ.setdefault("PRE_COMMIT_HOME", str(Path(sys.prefix) / "kit-tests-pre-commit"))


def pytest_configure(config: pytest.Config) -> None:
    """One message, not a failure per test, when the tests run without the tools `nox -s kit` installs."""
    ws = Workspace.of_kit()
    wanted = kittools.pin_lines(ws.kit_tools)
    if lacking := kittools.missing(wanted):
        raise pytest.UsageError(
            f"kit: error: this interpreter lacks the kit's test tools {', '.join(lacking)} -- run: "
            "nox -s kit "
            "(it installs ci/kit-dev-tools.txt; `nox -s kit -- "
            "tests/kit/test_x.py` runs one)"
        )


def build_wheel(dest: Path, files: dict[str, str], version: str = "0.1.0") -> tuple[Path, str]:
    """A minimal wheel of vllm-omni holding `files`; returns (path, sha256)."""
    wheel = dest / f"vllm_omni-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in sorted(files.items()):
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), text)
        zf.writestr(
            zipfile.ZipInfo(f"vllm_omni-{version}.dist-info/METADATA", (2026, 1, 1, 0, 0, 0)),
            "Name: x\n",
        )
    return wheel, hashlib.sha256(wheel.read_bytes()).hexdigest()


def pin_toml(
    version: str,
    filename: str,
    sha256: str,
    url: str = "https://example.invalid/x",
    commit: str = "",
) -> str:
    return (
        f'project = "vllm-omni"\nversion = "{version}"\nsource = "wheel"\n\n'
        f'[wheel]\nfilename = "{filename}"\nsha256 = "{sha256}"\n\n'
        f'[git]\nurl = "{url}"\ntag = "v{version}"\ncommit = "{commit}"\n'
    )


def commit_patch(
    repo: Path,
    edits: dict[str, str],
    subject: str,
    slug: str,
    status: str = "Pending",
    author: dict[str, str] = AUTHOR,
) -> None:
    for name, text in edits.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    git("add", "-A", cwd=repo)
    message = f"{subject}\n\nWhy this change.\n\nUpstream-Status: {status}\nKit-Patch: {slug}\n"
    git("commit", "-q", "-m", message, cwd=repo, env=author)


@contextlib.contextmanager
def captured_fds() -> Iterator[SimpleNamespace]:
    """Capture fds 1 and 2 (and sys.stdout/sys.stderr on them) into `.stdout`/`.stderr`; restored
    after, exactly."""
    out = SimpleNamespace(stdout="", stderr="")
    sys.stdout.flush()
    sys.stderr.flush()
    saved, streams = (os.dup(1), os.dup(2)), (sys.stdout, sys.stderr)
    with tempfile.TemporaryFile() as fd1, tempfile.TemporaryFile() as fd2:
        for fd, handle in ((1, fd1), (2, fd2)):
            os.dup2(handle.fileno(), fd)
        sys.stdout, sys.stderr = (
            open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
            for fd in (1, 2)
        )
        try:
            yield out
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.stdout, sys.stderr = streams
            for fd, handle, field in ((1, fd1, "stdout"), (2, fd2, "stderr")):
                os.dup2(saved[fd - 1], fd)
                os.close(saved[fd - 1])
                handle.seek(0)
                setattr(out, field, handle.read().decode("utf-8", errors="replace"))


Proc = subprocess.CompletedProcess[str]


@dataclass(frozen=True)
class Kit(Workspace):
    """A copy of the kit (scripts/, ci/, patches/) like a fresh clone: a Workspace with the means to
    drive it."""

    def run(self, *args: str, check: bool = False, env: dict[str, str] | None = None) -> Proc:
        """`main(args, self)` in this process, from the copy's root, as a subprocess would show it: fds
        1 and 2 captured, `env` for the call only, an escaping exception as its traceback and exit
        1."""
        overrides = {"CI": "", **(env or {})}
        with (
            captured_fds() as out,
            mock.patch.dict(os.environ, overrides),
            contextlib.chdir(self.root),
        ):
            try:
                code = main(list(args), self)
            # what sys.exit() in a command would have ended the process with
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
                if not isinstance(stop.code, int | None):
                    print(stop.code, file=sys.stderr)
            except BaseException:  # noqa: BLE001 -- the interpreter's own last word: a traceback, exit 1
                traceback.print_exc()
                code = 1
        return self.checked(
            subprocess.CompletedProcess(["main", *args], code, out.stdout, out.stderr), args, check
        )

    def spawn(self, *args: str, check: bool = False, env: dict[str, str] | None = None) -> Proc:
        """`python -m scripts ARGS` as a process of its own (real signals, an edited scripts/, a fresh
        interpreter)."""
        env = {**os.environ, "CI": "", **(env or {})}
        argv = [sys.executable, "-m", "scripts", *args]
        return self.checked(
            subprocess.run(argv, cwd=self.root, capture_output=True, text=True, env=env),
            args,
            check,
        )

    @staticmethod
    def checked(proc: Proc, args: tuple[str, ...], check: bool) -> Proc:
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kit {args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def git(self, *args: str) -> str:
        return git(*args, cwd=self.checkout, env=AUTHOR)

    def write_pin(self, text: str) -> None:
        (self.patches / "upstream.toml").write_text(text, encoding="utf-8")

    def seed_wheel(self, wheel: Path) -> None:
        (self.root / ".work" / "downloads").mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, self.root / ".work" / "downloads" / wheel.name)


def copy_kit(dest: Path, with_patches: bool) -> Kit:
    for part in ("scripts", "ci"):
        shutil.copytree(KIT_ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    if with_patches:
        shutil.copytree(KIT_ROOT / "patches", dest / "patches")
    else:
        (dest / "patches").mkdir()
        (dest / "patches" / "series").write_text("# test series\n", encoding="utf-8")
    return Kit(dest)


def clone(template: Kit, dest: Path) -> Kit:
    """A copy of a prepared kit, .work included (nothing in it names its own path): the fault tables
    start about 300 cases from a few states, each built once per worker."""
    shutil.copytree(template.root, dest, symlinks=True)
    # where build_wheel left it, as a test's tmp_path holds it
    for wheel in template.root.parent.glob("*.whl"):
        shutil.copy2(wheel, dest.parent / wheel.name)
    return Kit(dest)


def pinned_kit(where: Path, upstream: dict[str, str]) -> Kit:
    """A kit with an empty series, pinned to a wheel 0.1.0 of upstream's files (seeded: no download)."""
    kit = copy_kit(where / "kit", with_patches=False)
    wheel, digest = build_wheel(where, upstream)
    kit.write_pin(pin_toml("0.1.0", wheel.name, digest))
    kit.seed_wheel(wheel)
    return kit


@pytest.fixture(scope="session")
def small_kit_template(tmp_path_factory: pytest.TempPathFactory) -> Kit:
    return pinned_kit(tmp_path_factory.mktemp("small-kit"), SMALL_UPSTREAM)


@pytest.fixture
def small_kit(small_kit_template: Kit, tmp_path: Path) -> Kit:
    """A kit pinned to a small upstream wheel, with an empty series."""
    return clone(small_kit_template, tmp_path / "kit")


def make_series(
    kit: Kit, patches: list[tuple[dict[str, str], str, str]], author: dict[str, str] = AUTHOR
) -> None:
    """Apply the empty series, commit each (edits, subject, slug) as author, and refresh into patches/."""
    kit.run("apply", check=True)
    for edits, subject, slug in patches:
        commit_patch(kit.checkout, edits, subject, slug, author=author)
    kit.run("refresh", check=True)


def rope_with(changed: dict[int, str]) -> str:
    return "".join(f"{changed.get(i, f'line {i}')}\n" for i in range(1, 41))


# ---- what the lint and pr tests share: the kit's ruff, upstream's SPDX header, a submitter ----

SPDX = (
    "# SPDX-License-Identifier: Apache-2.0\n"
    "# SPDX-FileCopyrightText: Copyright contributors to the vLLM-Omni project\n"
)
# A CPU test as upstream marks one.
MARKED_TEST = (
    SPDX
    + "import pytest\n\npytestmark = [pytest.mark.core_model, pytest.mark.cpu]\n\n\ndef test_x():\n    assert True\n"
)
ME = "Ada Lovelace <ada@example.org>"


def lint(kit: Kit, *args: str) -> tuple[int, str]:
    proc = kit.run("lint", *args)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture
def identity(tmp_path: Path) -> dict[str, str]:
    cfg = tmp_path / "gitconfig"
    cfg.write_text("[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n")
    return {"GIT_CONFIG_GLOBAL": str(cfg), "GIT_CONFIG_NOSYSTEM": "1"}


def ephemeral_ports(range_file: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> range:
    """The ports the kernel hands out to bind(0) and outgoing connections (Linux's default if
    unreadable)."""
    try:
        low, high = (int(n) for n in range_file.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def free_port(ephemeral: range | None = None) -> int:
    """A free loopback port below the ephemeral range: a stand-in binds its port seconds after the case
    picks it, and a port from bind(0) could be handed out again in that time."""
    ephemeral = ephemeral or ephemeral_ports()
    low = max(1024, ephemeral.start - 20000)
    if ephemeral.start - low < 1000:  # a range that starts low: nothing below it to choose from
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        port = rng.randrange(low, ephemeral.start)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {low}-{ephemeral.start - 1}")


def live_processes() -> Iterator[tuple[int, list[str], list[bytes]]]:
    """(pid, /proc stat fields after the name: state ppid pgrp ..., argv) of each live (not zombie)
    process."""
    for entry in (e for e in Path("/proc").iterdir() if e.name.isdigit()):
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            args = (entry / "cmdline").read_bytes().split(b"\0")
            if fields[0] != "Z":
                yield int(entry.name), fields, args


def live_pids(wanted: Callable[[list[bytes]], bool]) -> list[int]:
    """Pids of live (not zombie) processes other than this one whose argv `wanted` accepts."""
    return [pid for pid, _, args in live_processes() if pid != os.getpid() and wanted(args)]


THREE_PATCHES = [
    (
        {"vllm_omni/layers/rope.py": rope_with({10: "line 10 fixed"})},
        "[Bugfix] Fix line ten",
        "fix-ten",
    ),
    (
        {"vllm_omni/layers/rope.py": rope_with({10: "line 10 fixed", 20: "line 20 fixed"})},
        "[NPU] Twenty",
        "twenty",
    ),
    (
        {"vllm_omni/attn.py": "def attend(q):\n    return q * 2\n"},
        "[NPU] Double attention",
        "double-attn",
    ),
]


@pytest.fixture(scope="session")
def kit3_template(small_kit_template: Kit, tmp_path_factory: pytest.TempPathFactory) -> Kit:
    kit = clone(small_kit_template, tmp_path_factory.mktemp("kit3") / "kit")
    make_series(kit, THREE_PATCHES)
    return kit


@pytest.fixture
def kit3(kit3_template: Kit, tmp_path: Path) -> Kit:
    """A kit with three patches: fix-ten, twenty (both in rope.py), double-attn (attn.py)."""
    return clone(kit3_template, tmp_path / "kit")


@pytest.fixture(scope="session")
def e2e_kit(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A copy of the kit for the e2e tests (e2e_prereq.py): the developer's .work is never written."""
    return e2e_prereq.e2e_copy(tmp_path_factory.mktemp("e2e-kit"))


# Caches shared with the developer's commands (leg envs keyed by pins, downloads verified by
# sha256), test reports.
SHARED_UNDER_WORK = ("envs", "downloads", "records/kit", "records/kit-heavy")


def work_snapshot(work: Path) -> dict[str, tuple[int, int]]:
    if not work.is_dir():
        return {}
    found = {}
    for folder, dirs, files in os.walk(work):
        rel = Path(folder).relative_to(work).as_posix()
        dirs[:] = [d for d in dirs if f"{rel}/{d}".removeprefix("./") not in SHARED_UNDER_WORK]
        for name in files:
            stat = (Path(folder) / name).lstat()
            found[f"{rel}/{name}"] = (stat.st_size, stat.st_mtime_ns)
    return found


@pytest.fixture(scope="session", autouse=True)
def developers_work_untouched() -> Iterator[None]:
    """No test writes into the developer's .work (fails the session naming the files if one did)."""
    before = work_snapshot(KIT_ROOT / ".work")
    yield
    changed = sorted(
        {name for name, _ in set(before.items()) ^ set(work_snapshot(KIT_ROOT / ".work").items())}
    )
    assert not changed, f"a test wrote into the developer's .work: {', '.join(changed[:5])}"
