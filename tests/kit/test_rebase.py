"""nox -s rebase: the series tried on other upstreams without touching the checkout; --move."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile

import pytest
from conftest import KIT_ROOT, SMALL_UPSTREAM, Kit, copy_kit, make_series, rope_with

from scripts.pin import load_pin, parse_pin
from scripts.rebase import equivalence
from scripts.series import parse_series

TWO_PATCHES = [
    ({"vllm_omni/layers/rope.py": rope_with({10: "line 10 fixed"})}, "[Bugfix] Fix line ten", "fix-ten"),
    ({"vllm_omni/attn.py": "def attend(q):\n    return q * 2\n"}, "[NPU] Double attention", "double-attn"),
]


def wheel_bytes(files: dict[str, str], version: str) -> bytes:
    """A wheel pip accepts (METADATA and WHEEL), holding files."""
    info = f"vllm_omni-{version}.dist-info"
    meta = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: vllm-omni\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, text in sorted({**files, **meta}.items()):
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), text)
    return buf.getvalue()


def offer(tmp_path, files: dict[str, str], version: str = "0.2.0") -> str:
    """Publish a release on a local package index (see index_env); returns its sha256."""
    project = tmp_path / "index" / "vllm-omni"
    project.mkdir(parents=True, exist_ok=True)
    name = f"vllm_omni-{version}-py3-none-any.whl"
    data = wheel_bytes(files, version)
    (project / name).write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    links = [f'<a href="{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a>'
             for w in sorted(project.glob("*.whl"))]  # fmt: skip
    (project / "index.html").write_text("<html><body>" + "\n".join(links) + "</body></html>\n")
    return digest


def index_env(tmp_path) -> dict[str, str]:
    """pip (and the kit's digest look-up) pointed at the local index only."""
    return {"PIP_INDEX_URL": (tmp_path / "index").as_uri(), "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": ""}


def outcomes(kit: Kit, target: str) -> dict[str, dict[str, str]]:
    data = json.loads((kit.root / ".work/rebase" / f"{target}.json").read_text())
    return {p["name"]: p for p in data["patches"]}


def test_all_apply_and_checkout_untouched(small_kit: Kit, tmp_path) -> None:
    make_series(small_kit, TWO_PATCHES)
    state = (small_kit.checkout / ".git/kit-state.json").read_bytes()
    head = small_kit.git("rev-parse", "HEAD")
    offer(tmp_path, {**SMALL_UPSTREAM, "vllm_omni/layers/rope.py": "extra\n" + rope_with({})})
    proc = small_kit.run("rebase", "0.2.0", env=index_env(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split()[:3] for line in proc.stdout.splitlines() if line[:1].isdigit()]
    assert rows == [["1", "0001-fix-ten.patch", "offset"], ["2", "0002-double-attn.patch", "clean"]]
    got = outcomes(small_kit, "0.2.0")
    assert got["0001-fix-ten.patch"]["outcome"] == "offset" and "offset 1" in got["0001-fix-ten.patch"]["detail"]
    assert (small_kit.checkout / ".git/kit-state.json").read_bytes() == state
    assert small_kit.git("rev-parse", "HEAD") == head
    assert "0.1.0" in (small_kit.patches / "upstream.toml").read_text()  # no --move: the pin stays


def test_conflict_named_with_file_and_hunk_rest_still_tried(small_kit: Kit, tmp_path) -> None:
    make_series(small_kit, TWO_PATCHES)
    offer(tmp_path, {**SMALL_UPSTREAM, "vllm_omni/layers/rope.py": rope_with({9: "u9", 10: "u10", 11: "u11"})})
    proc = small_kit.run("rebase", "0.2.0", env=index_env(tmp_path))
    assert proc.returncode == 1
    got = outcomes(small_kit, "0.2.0")
    assert got["0001-fix-ten.patch"]["outcome"] == "conflict"
    assert got["0001-fix-ten.patch"]["detail"].startswith("vllm_omni/layers/rope.py hunk #1")
    assert got["0002-double-attn.patch"]["outcome"] == "clean"
    moved = small_kit.run("rebase", "0.2.0", "--move", env=index_env(tmp_path))
    assert moved.returncode == 2 and "not moving the pin: 0001-fix-ten.patch" in moved.stderr
    assert "0.1.0" in (small_kit.patches / "upstream.toml").read_text()


def test_already_upstream_and_fuzz(small_kit: Kit, tmp_path) -> None:
    make_series(small_kit, TWO_PATCHES)
    files = {**SMALL_UPSTREAM, "vllm_omni/attn.py": "def attend(q):\n    return q * 2\n",
             "vllm_omni/layers/rope.py": rope_with({7: "line 7 moved upstream"})}  # fmt: skip
    offer(tmp_path, files)
    proc = small_kit.run("rebase", "0.2.0", env=index_env(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = outcomes(small_kit, "0.2.0")
    assert got["0002-double-attn.patch"]["outcome"] == "upstream-verbatim"
    assert got["0001-fix-ten.patch"]["outcome"] == "fuzz"


def test_move_pin_then_series_is_byte_stable(small_kit: Kit, tmp_path) -> None:
    make_series(small_kit, TWO_PATCHES)
    digest = offer(tmp_path, {**SMALL_UPSTREAM, "vllm_omni/layers/rope.py": "extra\n" + rope_with({})})
    proc = small_kit.run("rebase", "0.2.0", "--move", env=index_env(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pin = parse_pin((small_kit.patches / "upstream.toml").read_text())
    assert (pin.version, pin.wheel_sha256, pin.git_tag, pin.git_commit) == ("0.2.0", digest, "v0.2.0", "")
    assert "@@ -8,7 +8,7 @@ line 6" in (small_kit.patches / "0001-fix-ten.patch").read_text()  # refreshed context
    applied = small_kit.run("apply", env={"CI": "true"})  # strict: no offsets left
    assert applied.returncode == 0, applied.stdout + applied.stderr
    before = {p.name: p.read_bytes() for p in small_kit.patches.iterdir()}
    assert "patches/ unchanged" in small_kit.run("refresh", check=True).stdout
    assert {p.name: p.read_bytes() for p in small_kit.patches.iterdir()} == before


def test_cached_target_wheel_is_checked_and_pin_takes_the_registry_digest(small_kit: Kit, tmp_path) -> None:
    make_series(small_kit, TWO_PATCHES)
    digest = offer(tmp_path, {**SMALL_UPSTREAM, "vllm_omni/layers/rope.py": "extra\n" + rope_with({})})
    good = (tmp_path / "index/vllm-omni/vllm_omni-0.2.0-py3-none-any.whl").read_bytes()
    cached = small_kit.root / ".work/downloads/vllm_omni-0.2.0-py3-none-any.whl"
    cached.write_bytes(good[: len(good) // 2])  # a truncated download left in the cache
    proc = small_kit.run("rebase", "0.2.0", "--move", env=index_env(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ".work/downloads/vllm_omni-0.2.0-py3-none-any.whl fails its sha256: set aside as" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert cached.read_bytes() == good  # fetched again
    assert [p.read_bytes() for p in cached.parent.glob("*.bad-*")] == [good[: len(good) // 2]]  # kept, named
    assert parse_pin((small_kit.patches / "upstream.toml").read_text()).wheel_sha256 == digest


def test_index_without_a_digest_is_refused_and_nothing_moves(small_kit: Kit, tmp_path) -> None:
    make_series(small_kit, TWO_PATCHES)
    offer(tmp_path, {**SMALL_UPSTREAM})
    page = tmp_path / "index/vllm-omni/index.html"
    page.write_text(re.sub(r"#sha256=[0-9a-f]+", "", page.read_text()))
    before = (small_kit.patches / "upstream.toml").read_text()
    proc = small_kit.run("rebase", "0.2.0", "--move", env=index_env(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no package index publishes a sha256 for vllm_omni-0.2.0-py3-none-any.whl" in proc.stderr
    assert (small_kit.patches / "upstream.toml").read_text() == before


def test_baseline_fails_only_on_new_conflicts(small_kit: Kit, tmp_path) -> None:
    make_series(small_kit, TWO_PATCHES)
    offer(tmp_path, {**SMALL_UPSTREAM, "vllm_omni/layers/rope.py": rope_with({9: "u9", 10: "u10", 11: "u11"})})
    watch = ["rebase", "0.2.0", "--report-name", "drift", "--baseline"]
    first = small_kit.run(*watch, str(tmp_path / "no-earlier-run.json"), env=index_env(tmp_path))
    assert first.returncode == 1 and "newly conflicting since no-earlier-run.json: 0001-fix-ten.patch" in first.stdout
    baseline = tmp_path / "last-week.json"
    baseline.write_bytes((small_kit.root / ".work/rebase/drift.json").read_bytes())
    again = small_kit.run(*watch, str(baseline), env=index_env(tmp_path))
    assert again.returncode == 0, again.stdout + again.stderr  # the same conflict as last week: reported, not failed
    assert "conflict" in again.stdout and "newly conflicting" not in again.stdout


def test_latest_is_the_newest_release_on_the_index(small_kit: Kit, tmp_path) -> None:
    make_series(small_kit, TWO_PATCHES)
    offer(tmp_path, SMALL_UPSTREAM, version="0.2.0")
    offer(tmp_path, SMALL_UPSTREAM, version="0.10.0")
    proc = small_kit.run("rebase", "latest", env=index_env(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "latest release of vllm-omni on the package index: 0.10.0" in proc.stdout
    assert json.loads((small_kit.root / ".work/rebase/latest.json").read_text())["target"]["version"] == "0.10.0"


@pytest.mark.network
def test_real_release_0_28_0_from_the_registry(tmp_path) -> None:
    """The shipped series and pin, tried on vllm-omni 0.28.0 (a real wheel from the package registry)."""
    kit = copy_kit(tmp_path / "kit", with_patches=True)
    cached = KIT_ROOT / ".work/downloads" / load_pin(kit.patches / "upstream.toml").wheel_filename
    if cached.is_file():
        kit.seed_wheel(cached)
    proc = kit.run("rebase", "0.28.0")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "#  patch" in proc.stdout and "verdict" in proc.stdout and "vllm-omni 0.28.0 (wheel)" in proc.stdout
    data = json.loads((kit.root / ".work/rebase/0.28.0.json").read_text())
    assert data["to"] == "vllm-omni 0.28.0 (wheel)" and len(data["target"]["wheel_sha256"]) == 64
    assert [p["name"] for p in data["patches"]] == parse_series((kit.patches / "series").read_text())
    print(proc.stdout)


def test_a_change_already_upstream_in_other_words_is_found_as_data_or_line_by_line() -> None:
    # Python and config files: line by line, comments and whitespace aside
    assert equivalence.file_equivalent("m.py", ("x = 1  # why",), None, "x=1\n")
    assert equivalence.python_code("def f(:\n") == "def f(:\n"  # does not tokenize: compared as it is
    assert not equivalence.file_equivalent("m.py", ("x = 2",), None, "x = 1\n")
    assert not equivalence.file_equivalent("m.py", ("x = 1",), None, None)  # no such file in the target
    assert not equivalence.file_equivalent("m.py", (")",), None, "x = 1\n")  # nothing meaningful added
    assert equivalence.file_equivalent("setup.cfg", ("k = 1  # why",), None, "k = 1\n")
    assert equivalence.file_equivalent("NOTICE", ("same words",), None, "same words\n")
    # YAML and TOML: as data (layout, quoting, key order and comments aside); what does not parse equals nothing
    assert equivalence.file_equivalent("c.yaml", (), "a: 1\nb: [x]\n", "b:\n  - 'x'\na: 1  # c\n")
    assert equivalence.file_equivalent("p.toml", (), "a = 1\n[t]\nb = 'x'\n", 'a = 1  # c\n\n[t]\nb = "x"\n')
    assert not equivalence.file_equivalent("p.toml", (), "a = [\n", "a = [\n")
    assert not equivalence.file_equivalent("c.yml", (), "a: [\n", "a: [\n")
    assert not equivalence.file_equivalent("c.yml", (), "a: 1\n", None)
