"""nox -s rebase: the series tried on other upstreams without touching the checkout; --move."""

from __future__ import annotations

import json

from conftest import KIT_ROOT, SMALL_UPSTREAM, Kit, build_wheel, copy_kit, make_series, rope_with

from scripts import pin as pinmod
from scripts.series import parse_series

TWO_PATCHES = [
    ({"vllm_omni/layers/rope.py": rope_with({10: "line 10 fixed"})}, "[Bugfix] Fix line ten", "fix-ten"),
    ({"vllm_omni/attn.py": "def attend(q):\n    return q * 2\n"}, "[NPU] Double attention", "double-attn"),
]


def offer(kit: Kit, tmp_path, files: dict[str, str], version: str = "0.2.0") -> str:
    """A release the kit can fetch (seeded in its download cache); returns its sha256."""
    where = tmp_path / f"release-{version}"
    where.mkdir()
    wheel, digest = build_wheel(where, files, version=version)
    kit.seed_wheel(wheel)
    return digest


def outcomes(kit: Kit, target: str) -> dict[str, dict[str, str]]:
    data = json.loads((kit.root / ".work/rebase" / f"{target}.json").read_text())
    return {p["name"]: p for p in data["patches"]}


def test_all_apply_and_checkout_untouched(small_kit: Kit, tmp_path) -> None:
    make_series(small_kit, TWO_PATCHES)
    state = (small_kit.checkout / ".git/kit-state.json").read_bytes()
    head = small_kit.git("rev-parse", "HEAD")
    offer(small_kit, tmp_path, {**SMALL_UPSTREAM, "vllm_omni/layers/rope.py": "extra\n" + rope_with({})})
    proc = small_kit.run("rebase", "0.2.0")
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
    offer(
        small_kit, tmp_path, {**SMALL_UPSTREAM, "vllm_omni/layers/rope.py": rope_with({9: "u9", 10: "u10", 11: "u11"})}
    )
    proc = small_kit.run("rebase", "0.2.0")
    assert proc.returncode == 1
    got = outcomes(small_kit, "0.2.0")
    assert got["0001-fix-ten.patch"]["outcome"] == "conflict"
    assert got["0001-fix-ten.patch"]["detail"].startswith("vllm_omni/layers/rope.py hunk #1")
    assert got["0002-double-attn.patch"]["outcome"] == "clean"
    moved = small_kit.run("rebase", "0.2.0", "--move")
    assert moved.returncode == 2 and "not moving the pin: 0001-fix-ten.patch" in moved.stderr
    assert "0.1.0" in (small_kit.patches / "upstream.toml").read_text()


def test_already_upstream_and_fuzz(small_kit: Kit, tmp_path) -> None:
    make_series(small_kit, TWO_PATCHES)
    files = {**SMALL_UPSTREAM, "vllm_omni/attn.py": "def attend(q):\n    return q * 2\n",
             "vllm_omni/layers/rope.py": rope_with({7: "line 7 moved upstream"})}  # fmt: skip
    offer(small_kit, tmp_path, files)
    proc = small_kit.run("rebase", "0.2.0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = outcomes(small_kit, "0.2.0")
    assert got["0002-double-attn.patch"]["outcome"] == "already-upstream"
    assert got["0001-fix-ten.patch"]["outcome"] == "fuzz"


def test_move_pin_then_series_is_byte_stable(small_kit: Kit, tmp_path) -> None:
    make_series(small_kit, TWO_PATCHES)
    digest = offer(small_kit, tmp_path, {**SMALL_UPSTREAM, "vllm_omni/layers/rope.py": "extra\n" + rope_with({})})
    proc = small_kit.run("rebase", "0.2.0", "--move")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pin = pinmod.parse_pin((small_kit.patches / "upstream.toml").read_text())
    assert (pin.version, pin.wheel_sha256, pin.git_tag, pin.git_commit) == ("0.2.0", digest, "v0.2.0", "")
    assert "@@ -8,7 +8,7 @@ line 6" in (small_kit.patches / "0001-fix-ten.patch").read_text()  # refreshed context
    applied = small_kit.run("apply", env={"CI": "true"})  # strict: no offsets left
    assert applied.returncode == 0, applied.stdout + applied.stderr
    before = {p.name: p.read_bytes() for p in small_kit.patches.iterdir()}
    assert "patches/ unchanged" in small_kit.run("refresh", check=True).stdout
    assert {p.name: p.read_bytes() for p in small_kit.patches.iterdir()} == before


def test_real_release_0_28_0_from_the_registry(tmp_path) -> None:
    """The shipped series and pin, tried on vllm-omni 0.28.0 (a real wheel from the package registry)."""
    kit = copy_kit(tmp_path / "kit", with_patches=True)
    cached = KIT_ROOT / ".work/downloads" / pinmod.load_pin(kit.patches / "upstream.toml").wheel_filename
    if cached.is_file():
        kit.seed_wheel(cached)
    proc = kit.run("rebase", "0.28.0")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "#  patch" in proc.stdout and "outcome" in proc.stdout and "vllm-omni 0.28.0 (wheel)" in proc.stdout
    data = json.loads((kit.root / ".work/rebase/0.28.0.json").read_text())
    assert data["to"] == "vllm-omni 0.28.0 (wheel)" and len(data["target"]["wheel_sha256"]) == 64
    assert [p["name"] for p in data["patches"]] == parse_series((kit.patches / "series").read_text())
    print(proc.stdout)
