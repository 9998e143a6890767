"""The leg pin files resolve on x86_64 and aarch64 (the Ascend runners) and are what their command
makes. The network tests ask the package registry (no install) and skip, saying why, only when it
cannot be reached at all."""

import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import KIT_ROOT

from scripts import pipindex
from scripts.errors import KitError
from scripts.legs import legenv, legpins

CI_DIR = KIT_ROOT / "ci"


def index_args() -> list[str]:
    return pipindex.uv_index_args(pipindex.read(os.environ), os.environ, extras=False)


def stock_pins() -> str:
    return (CI_DIR / "leg-stock.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def uv() -> str:
    found = legenv.uv_executable()
    if found is None:
        pytest.fail("uv is missing: pip install -r ci/kit-tools.txt")
    args = index_args()
    url = (
        args[args.index("--index-url") + 1] if "--index-url" in args else "https://pypi.org/simple/"
    )
    try:
        urllib.request.urlopen(url.rstrip("/") + "/pip/", timeout=15).close()
    except (urllib.error.URLError, OSError) as exc:
        pytest.skip(f"package registry unreachable ({url}: {exc}); these checks need it")
    return found[0]


@pytest.mark.network  # uv resolves against the package registry
def test_the_resolve_and_staleness_checks_bite_and_the_recorded_time_matters(
    uv: str, tmp_path: Path
) -> None:
    # The resolve check bites on a pin without an aarch64 wheel.
    text = stock_pins()
    unmarked = text.replace(
        "intel-openmp==2024.2.1 ; platform_machine == 'x86_64'", "intel-openmp==2024.2.1"
    )
    assert unmarked != text
    (tmp_path / "leg-stock.txt").write_text(unmarked, encoding="utf-8")
    legpins.check_resolves(
        CI_DIR, uv, tmp_path / "leg-stock.txt", legpins.PLATFORMS["x86_64"], index_args()
    )
    with pytest.raises(KitError, match="aarch64.*intel-openmp"):
        legpins.check_resolves(
            CI_DIR, uv, tmp_path / "leg-stock.txt", legpins.PLATFORMS["aarch64"], index_args()
        )
    # Same recorded time, one more top-level requirement: the closure gains its dependencies, so the
    # file is stale.
    top, closure = legpins.split_pin_file(stock_pins())
    edited = f"{top}requests==2.32.3\n\n{legpins.CLOSURE_MARKER}{closure}"
    (tmp_path / "leg-stock.txt").write_text(edited, encoding="utf-8")
    for other in ("leg-overrides.txt", "leg-npu.txt"):
        (tmp_path / other).write_text(
            (CI_DIR / other).read_text(encoding="utf-8"), encoding="utf-8"
        )
    as_of = legpins.recorded_as_of(tmp_path, "leg-stock.txt")
    assert (
        legpins.regenerate(tmp_path, "leg-stock.txt", uv, index_args(), as_of, keep=True) != edited
    )
    # --exclude-newer really moves the answer: the recorded time is what makes the check
    # reproducible.
    then = legpins.regenerate(CI_DIR, "leg-stock.txt", uv, index_args(), "2026-11-20T00:00:00Z")
    assert legpins.changed_pins(stock_pins(), then), (
        "a resolve ten days earlier pinned the same closure"
    )


def test_pin_file_sections_time_newer_releases_and_platform_markers(tmp_path: Path) -> None:
    untimed = f"# head\ntorch==1\n\n{legpins.CLOSURE_MARKER}\na==1\n"
    timed = untimed.replace("\na==1", f"\n{legpins.AS_OF_PREFIX}2026-11-30T14:43:33Z\na==1")
    assert (
        legpins.resolved_as_of(timed) == "2026-11-30T14:43:33Z"
        and legpins.resolved_as_of(untimed) is None
    )
    (tmp_path / "leg-x.txt").write_text(untimed, encoding="utf-8")
    with pytest.raises(KitError, match="records no resolution time.*python -m scripts legpins"):
        legpins.recorded_as_of(tmp_path, "leg-x.txt")
    top, closure = legpins.split_pin_file(untimed)
    assert top == "# head\ntorch==1\n" and closure == "\na==1\n"
    generated = legpins.generated_file(top, ["a==1"], "2026-11-30T14:43:33Z")
    assert (
        generated
        == f"{top}\n{legpins.CLOSURE_MARKER}\n{legpins.AS_OF_PREFIX}2026-11-30T14:43:33Z\na==1\n"
    )
    old = f"top\n\n{legpins.CLOSURE_MARKER}\n{legpins.AS_OF_PREFIX}t\na==1\nb==2\n"
    new = f"top\n\n{legpins.CLOSURE_MARKER}\n{legpins.AS_OF_PREFIX}u\na==1\nb==3\nc==1\n"
    assert legpins.changed_pins(old, new) == ["b 2 -> 3", "c - -> 1"]
    # only the time differs: nothing newer
    assert legpins.changed_pins(old, old.replace("\nt\n", "\nu\n")) == []
    # platforms merge with markers only where wheels differ
    resolved = {
        "x86_64": {"torch": "2.13.0", "intel-openmp": "2024.2.1", "numpy": "2.3.5"},
        "aarch64": {"torch": "2.13.0", "numpy": "2.3.4"},
    }
    assert legpins.merge_platforms(resolved, {"torch"}) == [
        "intel-openmp==2024.2.1 ; platform_machine == 'x86_64'",
        "numpy==2.3.4 ; platform_machine == 'aarch64'",
        "numpy==2.3.5 ; platform_machine == 'x86_64'",
    ]


@pytest.mark.network  # uv resolves against the package registry
def test_each_pin_file_resolves_on_both_architectures_and_is_what_its_header_command_makes(
    uv: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `legpins --check` as the weekly job runs it: resolved for both architectures (the aarch64 test
    # bites), then regenerated as of leg-stock.txt's recorded time (the edited-top test bites):
    # later releases cannot fail it.
    for name in legpins.PIN_FILES:
        header = (CI_DIR / name).read_text(encoding="utf-8").split("\n\n", 1)[0]
        assert "python -m scripts legpins" in header  # the header records the command
    assert legpins.pins_main(CI_DIR, "check") == 0, (
        "ci/leg-*.txt are stale: python -m scripts legpins"
    )
    out = capsys.readouterr().out
    for name in legpins.PIN_FILES:
        assert (
            f"ci/{name}: same as a resolve as of {legpins.recorded_as_of(CI_DIR, 'leg-stock.txt')}"
            in out
        )
