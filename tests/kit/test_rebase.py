"""nox -s rebase: the series tried on other upstreams without touching the checkout; --move."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import zipfile
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from conftest import FRONT_DOOR, KIT_ROOT, SMALL_UPSTREAM, Kit, copy_kit, make_series, rope_with

from scripts.pin import load_pin, parse_pin
from scripts.rebase import equivalence
from scripts.rebase.verdicts import SHOWN
from scripts.series import parse_series

TWO_PATCHES = [
    (
        {"vllm_omni/layers/rope.py": rope_with({10: "line 10 fixed"})},
        "[Bugfix] Fix line ten",
        "fix-ten",
    ),
    (
        {"vllm_omni/attn.py": "def attend(q):\n    return q * 2\n"},
        "[NPU] Double attention",
        "double-attn",
    ),
]
# 0001 applies at an offset
SHIFTED = {**SMALL_UPSTREAM, "vllm_omni/layers/rope.py": "extra\n" + rope_with({})}
# 0001 conflicts
AROUND_TEN = {
    **SMALL_UPSTREAM,
    "vllm_omni/layers/rope.py": rope_with({9: "u9", 10: "u10", 11: "u11"}),
}
ALREADY = {
    **SMALL_UPSTREAM,
    "vllm_omni/attn.py": "def attend(q):\n    return q * 2\n",
    "vllm_omni/layers/rope.py": rope_with({7: "line 7 moved upstream"}),
}
WHEEL_020 = "vllm_omni-0.2.0-py3-none-any.whl"
FIX_TEN, DOUBLE = "0001-fix-ten.patch", "0002-double-attn.patch"
OUTCOMES = {  # the target's files -> per patch: its outcome, and a pattern its detail starts with
    "offset": (SHIFTED, {FIX_TEN: ("offset", ".*offset 1"), DOUBLE: ("clean", "")}),
    "conflict": (
        AROUND_TEN,
        {FIX_TEN: ("conflict", "vllm_omni/layers/rope.py hunk #1"), DOUBLE: ("clean", "")},
    ),
    "upstream-and-fuzz": (ALREADY, {FIX_TEN: ("fuzz", ""), DOUBLE: ("upstream-verbatim", "")}),
}


@pytest.fixture
def kit2(small_kit: Kit) -> Kit:
    make_series(small_kit, TWO_PATCHES)
    return small_kit


def offer(tmp_path: Path, files: dict[str, str], version: str = "0.2.0") -> str:
    """A wheel pip accepts published on a local package index; returns its sha256."""
    project = tmp_path / "index" / "vllm-omni"
    project.mkdir(parents=True, exist_ok=True)
    info = f"vllm_omni-{version}.dist-info"
    meta = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: vllm-omni\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(project / f"vllm_omni-{version}-py3-none-any.whl", "w") as zf:
        for name, text in sorted({**files, **meta}.items()):
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), text)
    digests = {
        w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in sorted(project.glob("*.whl"))
    }
    links = [f'<a href="{name}#sha256={digest}">{name}</a>' for name, digest in digests.items()]
    (project / "index.html").write_text("<html><body>" + "\n".join(links) + "</body></html>\n")
    return digests[f"vllm_omni-{version}-py3-none-any.whl"]


def rebase(kit: Kit, tmp_path: Path, *args: str, check: bool = False) -> CompletedProcess[str]:
    """`rebase ARGS` with pip (and the kit's digest look-up) pointed at the local index only."""
    index = {
        "PIP_INDEX_URL": (tmp_path / "index").as_uri(),
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": "",
    }
    return kit.run("rebase", *args, env=index, check=check)


def outcomes(kit: Kit, target: str) -> dict[str, dict[str, str]]:
    data = json.loads((kit.root / ".work/rebase" / f"{target}.json").read_text())
    return {p["name"]: p for p in data["patches"]}


def pin_text(kit: Kit) -> str:
    return (kit.patches / "upstream.toml").read_text()


@pytest.mark.parametrize("case", OUTCOMES)
def test_each_patch_is_tried_and_the_checkout_untouched(kit2: Kit, tmp_path, case: str) -> None:
    """Each patch named with its outcome (a conflict stops none); the checkout, its state and the pin
    untouched."""
    files, want = OUTCOMES[case]
    offer(tmp_path, files)
    state, head = (
        (kit2.checkout / ".git/kit-state.json").read_bytes(),
        kit2.git("rev-parse", "HEAD"),
    )
    proc = rebase(kit2, tmp_path, "0.2.0")
    assert proc.returncode == (case == "conflict"), proc.stdout + proc.stderr
    # number, name, verdict
    rows = [line.split(None, 2) for line in proc.stdout.splitlines() if line[:1].isdigit()]
    assert [row[:2] for row in rows] == [[str(i), name] for i, name in enumerate(want, 1)]
    assert all(
        row[2].startswith(SHOWN.get(o, o)) for row, (o, _) in zip(rows, want.values(), strict=True)
    ), rows
    got = outcomes(kit2, "0.2.0")
    assert {name: p["outcome"] for name, p in got.items()} == {
        name: o for name, (o, _) in want.items()
    }
    for name, (_, detail) in want.items():
        assert re.match(detail, got[name]["detail"]), got[name]
    assert (kit2.checkout / ".git/kit-state.json").read_bytes() == state and kit2.git(
        "rev-parse", "HEAD"
    ) == head
    assert "0.1.0" in pin_text(kit2)  # no --move: the pin stays
    if case == "conflict":
        moved = rebase(kit2, tmp_path, "0.2.0", "--move")
        assert moved.returncode == 2 and "not moving the pin: 0001-fix-ten.patch" in moved.stderr
        assert "0.1.0" in pin_text(kit2)


@pytest.mark.parametrize("cache", ["empty", "truncated-wheel"])
def test_move_pin_then_series_is_byte_stable(kit2: Kit, tmp_path, cache: str) -> None:
    """--move pins the registry's digest (a truncated download in the cache set aside, named, fetched
    again)."""
    digest = offer(tmp_path, SHIFTED)
    good = (tmp_path / "index/vllm-omni" / WHEEL_020).read_bytes()
    cached = kit2.root / ".work/downloads" / WHEEL_020
    bad = [good[: len(good) // 2]] if cache == "truncated-wheel" else []
    for data in bad:
        cached.write_bytes(data)
    proc = rebase(kit2, tmp_path, "0.2.0", "--move", check=True)
    assert (f".work/downloads/{WHEEL_020} fails its sha256: set aside as" in proc.stdout) == bool(
        bad
    ), proc.stdout
    assert "Traceback" not in proc.stderr
    assert cached.read_bytes() == good
    assert [p.read_bytes() for p in cached.parent.glob("*.bad-*")] == bad  # kept, named
    pin = parse_pin(pin_text(kit2))
    assert (pin.version, pin.wheel_sha256, pin.git_tag, pin.git_commit) == (
        "0.2.0",
        digest,
        "v0.2.0",
        "",
    )
    # refreshed context
    assert "@@ -8,7 +8,7 @@ line 6" in (kit2.patches / "0001-fix-ten.patch").read_text()
    kit2.run("apply", env={"CI": "true"}, check=True)  # strict: no offsets left
    before = {p.name: p.read_bytes() for p in kit2.patches.iterdir()}
    assert "patches/ unchanged" in kit2.run("refresh", check=True).stdout
    assert {p.name: p.read_bytes() for p in kit2.patches.iterdir()} == before


def test_index_without_a_digest_is_refused_and_nothing_moves(kit2: Kit, tmp_path) -> None:
    offer(tmp_path, SMALL_UPSTREAM)
    page = tmp_path / "index/vllm-omni/index.html"
    page.write_text(re.sub(r"#sha256=[0-9a-f]+", "", page.read_text()))
    before = pin_text(kit2)
    proc = rebase(kit2, tmp_path, "0.2.0", "--move")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"no package index publishes a sha256 for {WHEEL_020}" in proc.stderr
    assert pin_text(kit2) == before


def test_baseline_fails_only_on_new_conflicts(kit2: Kit, tmp_path) -> None:
    offer(tmp_path, AROUND_TEN)
    watch = ["0.2.0", "--report-name", "drift", "--baseline"]
    # a first run has no baseline: every conflict fails it
    first = rebase(kit2, tmp_path, *watch[:-1])
    assert first.returncode == 1 and "conflict" in first.stdout
    baseline = tmp_path / "last-week.json"
    baseline.write_bytes((kit2.root / ".work/rebase/drift.json").read_bytes())
    # the same conflict as last week: reported, not failed
    again = rebase(kit2, tmp_path, *watch, str(baseline), check=True)
    assert "conflict" in again.stdout and "newly conflicting" not in again.stdout


def test_latest_is_the_newest_release_on_the_index(kit2: Kit, tmp_path) -> None:
    offer(tmp_path, SMALL_UPSTREAM, version="0.2.0")
    offer(tmp_path, SMALL_UPSTREAM, version="0.10.0")
    proc = rebase(kit2, tmp_path, "latest", check=True)
    assert "latest release of vllm-omni on the package index: 0.10.0" in proc.stdout
    assert (
        json.loads((kit2.root / ".work/rebase/latest.json").read_text())["target"]["version"]
        == "0.10.0"
    )


@pytest.mark.network
def test_real_release_0_28_0_from_the_registry(tmp_path) -> None:
    """The shipped series and pin, tried on vllm-omni 0.28.0 (a real wheel from the package registry)."""
    kit = copy_kit(tmp_path / "kit", with_patches=True)
    cached = KIT_ROOT / ".work/downloads" / load_pin(kit.patches / "upstream.toml").wheel_filename
    if cached.is_file():
        kit.seed_wheel(cached)
    proc = kit.run("rebase", "0.28.0")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert (
        "#  patch" in proc.stdout
        and "verdict" in proc.stdout
        and "vllm-omni 0.28.0 (wheel)" in proc.stdout
    )
    data = json.loads((kit.root / ".work/rebase/0.28.0.json").read_text())
    assert data["to"] == "vllm-omni 0.28.0 (wheel)" and len(data["target"]["wheel_sha256"]) == 64
    assert [p["name"] for p in data["patches"]] == parse_series(
        (kit.patches / "series").read_text()
    )
    print(proc.stdout)


def test_a_change_already_upstream_in_other_words_is_found_as_data_or_line_by_line() -> None:
    # Python and config files: line by line, comments and whitespace aside
    assert equivalence.file_equivalent("m.py", ("x = 1  # why",), None, "x=1\n")
    # does not tokenize: compared as it is
    assert equivalence.python_code("def f(:\n") == "def f(:\n"
    assert not equivalence.file_equivalent("m.py", ("x = 2",), None, "x = 1\n")
    # no such file in the target
    assert not equivalence.file_equivalent("m.py", ("x = 1",), None, None)
    # nothing meaningful added
    assert not equivalence.file_equivalent("m.py", (")",), None, "x = 1\n")
    assert equivalence.file_equivalent("setup.cfg", ("k = 1  # why",), None, "k = 1\n")
    assert equivalence.file_equivalent("NOTICE", ("same words",), None, "same words\n")
    # YAML and TOML: as data (layout, quoting, key order and comments aside); what does not parse
    # equals nothing
    assert equivalence.file_equivalent("c.yaml", (), "a: 1\nb: [x]\n", "b:\n  - 'x'\na: 1  # c\n")
    assert equivalence.file_equivalent(
        "p.toml", (), "a = 1\n[t]\nb = 'x'\n", 'a = 1  # c\n\n[t]\nb = "x"\n'
    )
    assert not equivalence.file_equivalent("p.toml", (), "a = [\n", "a = [\n")
    assert not equivalence.file_equivalent("c.yml", (), "a: [\n", "a: [\n")
    assert not equivalence.file_equivalent("c.yml", (), "a: 1\n", None)


# ---- --move is one transaction: all of it or none, whatever ends it
# ------------------------------------

# 0001 merged
FIX_TEN_UPSTREAM = {**SMALL_UPSTREAM, "vllm_omni/layers/rope.py": rope_with({10: "line 10 fixed"})}
STEPS = """import atexit, os, signal, subprocess, sys
STOP, SIG, seen = int(os.environ["KIT_TEST_STOP_AT"]), int(os.environ["KIT_TEST_SIGNAL"]), []
def step(kind):
    seen.append(kind)
    if len(seen) == STOP:
        os.kill(os.getpid(), SIG)
popen, replace = subprocess.Popen.__init__, os.replace
def counted_popen(self, *a, **k):
    step("P")
    popen(self, *a, **k)
def counted_replace(a, b, **k):
    step("R")
    replace(a, b, **k)
subprocess.Popen.__init__, os.replace = counted_popen, counted_replace
atexit.register(lambda: sys.stderr.write("steps " + "".join(seen) + chr(10)))
"""


def move_stopped_at(
    kit: Kit, tmp_path: Path, stop: int, sig: int = signal.SIGTERM
) -> CompletedProcess[str]:
    """rebase 0.2.0 --move in a kit process that sends itself sig at its stop-th step (a process started or a
    file renamed into place); stop 0: never."""
    env = {**os.environ, "CI": "", "KIT_TEST_STOP_AT": str(stop), "KIT_TEST_SIGNAL": str(int(sig))}
    env |= {
        "PIP_INDEX_URL": (tmp_path / "index").as_uri(),
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": "",
    }
    argv = [sys.executable, "-c", STEPS + FRONT_DOOR, "rebase", "0.2.0", "--move"]
    return subprocess.run(argv, cwd=kit.root, capture_output=True, text=True, env=env)


def patches_now(kit: Kit) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(kit.patches.iterdir()) if p.is_file()}


def restore(kit: Kit, files: dict[str, bytes]) -> None:
    for p in kit.patches.iterdir():
        p.unlink()
    for name, data in files.items():
        (kit.patches / name).write_bytes(data)


def whole_move(kit: Kit, tmp_path: Path) -> tuple[dict[str, bytes], dict[str, bytes], str]:
    """(patches/ before, after an uninterrupted move, its steps once the wheel is cached); patches/ put
    back."""
    offer(tmp_path, FIX_TEN_UPSTREAM)
    before = patches_now(kit)
    # the first run downloads the wheel: count the steps of a run that finds it cached
    for _ in range(2):
        restore(kit, before)
        whole = move_stopped_at(kit, tmp_path, 0)
        assert whole.returncode == 0, whole.stderr
    after = patches_now(kit)
    assert list(after) == ["0001-double-attn.patch", "series", "upstream.toml"], list(after)
    restore(kit, before)
    return before, after, whole.stderr.rsplit("steps ", 1)[1].strip()


def test_a_move_interrupted_at_any_step_is_all_or_nothing(kit2: Kit, tmp_path: Path) -> None:
    """Measured: interrupted after the series was swapped, patches/ was renumbered (0001 gone) while
    the pin named the old release, and apply then passed without the fix. Now every step (each
    process the move starts, each rename) ends in the old series and pin, or the new ones: never a
    mix."""
    before, after, kinds = whole_move(kit2, tmp_path)
    renames = [i for i, kind in enumerate(kinds, 1) if kind == "R"]
    stops = sorted({*renames, *range(1, len(kinds) + 1, max(1, len(kinds) // 12))})
    for stop in stops:
        restore(kit2, before)
        proc = move_stopped_at(kit2, tmp_path, stop)
        now = patches_now(kit2)
        assert now in (before, after), (stop, proc.stderr)
        assert proc.returncode == 130 or now == after, (stop, proc.stderr)
        said = [line for line in proc.stderr.splitlines() if line.startswith("kit: error:")]
        assert "Traceback" not in proc.stderr and len(said) == (proc.returncode != 0), (
            stop,
            proc.stderr,
        )
        assert (
            now == after or "nothing is half-written" in said[0] or "are as they were" in said[0]
        ), said


def test_a_move_killed_mid_swap_is_finished_by_the_next_command(kit2: Kit, tmp_path: Path) -> None:
    _, after, kinds = whole_move(kit2, tmp_path)
    # the journal, then the three files
    swap = [i for i, kind in enumerate(kinds, 1) if kind == "R"][-4:]
    killed = move_stopped_at(kit2, tmp_path, swap[1], signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL and (kit2.patches / ".kit-swap.json").is_file()
    proc = kit2.run("apply", check=True)
    assert "finished the swap a stopped rebase --move had begun" in proc.stdout
    assert (
        patches_now(kit2) == after
        and "line 10 fixed" not in (kit2.patches / "0001-double-attn.patch").read_text()
    )


def test_the_conflict_hint_of_move_can_be_followed_as_written(kit2: Kit, tmp_path: Path) -> None:
    """Measured: "apply --3way on the new pin" could not be followed (the pin had not moved). The hint
    now names the pin's fields and the steps; done as written, they end in a series refreshed on the
    new release."""
    offer(tmp_path, AROUND_TEN)
    before = patches_now(kit2)
    proc = rebase(kit2, tmp_path, "0.2.0", "--move")
    assert (
        proc.returncode == 2
        and patches_now(kit2) == before
        and "nothing was changed" in proc.stderr
    )
    fields = dict(
        re.findall(r'(\w+) = "([^"]*)"', proc.stderr.split("set in patches/upstream.toml ", 1)[1])
    )
    assert set(fields) == {"version", "filename", "sha256", "tag", "commit"}
    text = pin_text(kit2)
    for key, value in fields.items():
        text = re.sub(rf'(?m)^{key} = ".*"$', f'{key} = "{value}"', text)
    (kit2.patches / "upstream.toml").write_text(text)
    index = {
        "PIP_INDEX_URL": (tmp_path / "index").as_uri(),
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": "",
    }
    stopped = kit2.run("apply", "--3way", env=index)
    assert stopped.returncode == 1 and FIX_TEN in stopped.stderr, stopped.stdout + stopped.stderr
    rope = kit2.checkout / "vllm_omni/layers/rope.py"
    rope.write_text(rope_with({9: "u9", 10: "line 10 fixed", 11: "u11"}))
    kit2.git("add", "vllm_omni/layers/rope.py")
    kit2.run("apply", "--continue", check=True)
    kit2.run("refresh", check=True)
    assert "+line 10 fixed" in (kit2.patches / FIX_TEN).read_text()
    kit2.run("apply", check=True)


def test_after_a_move_refresh_says_apply_and_apply_works(kit2: Kit, tmp_path: Path) -> None:
    """Measured: after --move, refresh's advice (git stash, refresh, git stash pop) failed on the moved
    files, which git does not track. The move leaves nothing to export, and refresh says so: run
    apply."""
    offer(tmp_path, FIX_TEN_UPSTREAM)
    rebase(kit2, tmp_path, "0.2.0", "--move", check=True)
    proc = kit2.run("refresh")
    assert proc.returncode == 2 and "nothing to export: run nox -s apply" in proc.stderr, (
        proc.stderr
    )
    kit2.run("apply", check=True)
    assert "patches/ unchanged" in kit2.run("refresh", check=True).stdout


def test_a_mistyped_pin_digest_leaves_the_good_cached_wheel(kit2: Kit, tmp_path: Path) -> None:
    """The unclear outcome, decided: a cached wheel whose fresh download has the same digest is not
    what is wrong; the pin's digest is. Refused with both digests, the cache left as it was (no
    .bad-* file)."""
    # the registry serves the cached wheel's bytes
    actual = offer(tmp_path, SMALL_UPSTREAM, version="0.1.0")
    cached = kit2.root / ".work/downloads/vllm_omni-0.1.0-py3-none-any.whl"
    good = (tmp_path / "index/vllm-omni" / cached.name).read_bytes()
    cached.write_bytes(good)
    typo = actual[:10] + ("0" if actual[10] != "0" else "1") + actual[11:]
    pinned = pin_text(kit2)
    (kit2.patches / "upstream.toml").write_text(
        pinned.replace(pinned.split('sha256 = "')[1][:64], typo)
    )
    index = {
        "PIP_INDEX_URL": (tmp_path / "index").as_uri(),
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": "",
    }
    proc = kit2.run("apply", "--force", env=index)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert (
        f"has sha256 {actual} (the cached copy and a fresh download agree), not the expected {typo}"
        in proc.stderr
    )
    assert "check wheel.sha256 in patches/upstream.toml" in proc.stderr
    assert cached.read_bytes() == good and not list(cached.parent.glob("*.bad-*"))
