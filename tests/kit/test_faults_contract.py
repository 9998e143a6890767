"""The fault table of the kit's contract (issue: no figure without its evidence; every command keeps
the exit codes): a figure exists only when the work behind it ran, a child tool's exit is the
README's code with one line why, every message survives the round trip or is refused before a
write, a refusal leaves nothing made, and a fix names what the user gave.

faulttable's contract (exit code, one line, no traceback, patches/ byte-identical) on the
three-patch kit, plus each row's own checks: the record it must not replace, the folder it must
not make.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Kit
from faulttable import Row, commit, fixup, inject, one_line_error, run_row, steps
from kithelpers import leg_kit, shared_env_ready

from scripts import records
from scripts.checkout.pristine import combined_diff
from scripts.errors import failed_where, os_fix, pytest_exit
from scripts.mutation import mutate

Setup = Callable[[Kit, Path], object]

# ---- 1: a figure exists only when the work behind it ran ----

# A real earlier record: a run over nothing must leave it byte for byte.
REAL = {"series_digest": "d" * 64, "complete": True, "mutants": 12, "score": 0.9, "passed": False}
NPU_CODE = 'def scale(x):\n    if x.device.type == "npu":\n        return x * 2 + 1\n    return x\n'
# A patch with an NPU branch, so that --series-tests has mutants to choose from.
npu_patch = commit(
    {"vllm_omni/npu_scale.py": NPU_CODE}, "[NPU] Scale on Ascend", "npu-scale", "refresh"
)
# The small upstream's rope.py is not Python (lines "line N"): a patch makes it some, so that the
# series can be mutated at all.
python_rope = commit(
    {"vllm_omni/layers/rope.py": "TEN = 10\n"}, "[NPU] Rope as Python", "py-rope", "refresh"
)


def real_records(*names: str) -> Setup:
    def setup(kit: Kit, _tmp: Path) -> None:
        for name in names:
            records.write(kit.records, name, REAL)

    return setup


def records_kept(*names: str) -> Callable[[Kit, subprocess.CompletedProcess[str]], None]:
    """The real records stand as they were, nothing was written beside them, and no mutation
    workspace was made."""

    def then(kit: Kit, _proc: subprocess.CompletedProcess[str]) -> None:
        for name in names:
            data = records.read(kit.records, name)
            assert data is not None and {k: data[k] for k in REAL} == REAL, data
        made = {p.stem for p in kit.records.glob("mutate*.json")} - set(names)
        assert not made, made
        assert not (kit.mutate_dir / "workspace").exists()

    return then


def all_equivalent(kit: Kit, _tmp: Path) -> None:
    """Every mutant of the NPU patch listed as equivalent, each with a reason."""
    every = mutate.series_mutants(combined_diff(kit.checkout), kit.checkout)
    chosen = [m for m in every if m.path == "vllm_omni/npu_scale.py"]
    entries = "".join(
        f"[[equivalent]]\nfile = {json.dumps(m.path)}\nline = {json.dumps(m.source)}\n"
        f'mutation = {json.dumps(m.description)}\nreason = "listed for the row"\n'
        for m in chosen
    )
    kit.equivalent_mutants.parent.mkdir(parents=True, exist_ok=True)
    kit.equivalent_mutants.write_text(entries, encoding="utf-8")


SERIES_KEPT = records_kept("mutate-series")
BOTH_KEPT = records_kept("mutate", "mutate-series")

# ---- 3: every message survives the round trip byte for byte, or refresh refuses first ----


def raw_commits(edit: Callable[[bytes, bytes], tuple[bytes, bytes]], index: int = 0) -> Setup:
    """The checkout's patch commits written again as raw objects (git hash-object: no git command
    that would convert their bytes), edit applied to the header and message of the index-th."""

    def setup(kit: Kit, _tmp: Path) -> None:
        revs = kit.git("rev-list", "--reverse", "pristine..HEAD").split()
        parent = kit.git("rev-parse", "pristine").strip()
        for i, rev in enumerate(revs):
            raw = subprocess.run(
                ["git", "cat-file", "commit", rev],
                cwd=kit.checkout,
                capture_output=True,
                check=True,
            ).stdout
            header, _, message = raw.partition(b"\n\n")
            lines = [
                b"parent " + parent.encode() if line.startswith(b"parent ") else line
                for line in header.split(b"\n")
            ]
            header = b"\n".join(lines)
            if i == index:
                header, message = edit(header, message)
            parent = (
                subprocess.run(
                    ["git", "hash-object", "-t", "commit", "-w", "--stdin"],
                    cwd=kit.checkout,
                    input=header + b"\n\n" + message,
                    capture_output=True,
                    check=True,
                )
                .stdout.decode()
                .strip()
            )
        kit.git("reset", "-q", "--hard", parent)

    return setup


CAFE = "Caf\xe9 change.".encode("latin-1")


def latin1_message(header: bool) -> Callable[[bytes, bytes], tuple[bytes, bytes]]:
    def edit(head: bytes, message: bytes) -> tuple[bytes, bytes]:
        head += b"\nencoding ISO-8859-1" if header else b""
        return head, message.replace(b"Why this change.", CAFE)

    return edit


def latin1_author(head: bytes, message: bytes) -> tuple[bytes, bytes]:
    return head.replace(b"author Test Author", "author T\xe9st Author".encode("latin-1")), message


def latin1_email(head: bytes, message: bytes) -> tuple[bytes, bytes]:
    return head.replace(b"author@example.org", "auth\xf6r@example.org".encode("latin-1")), message


def head_kept(kit: Kit, _proc: subprocess.CompletedProcess[str]) -> None:
    """The refusal changed nothing in the checkout either: HEAD still holds the user's bytes."""
    raw = b"".join(
        subprocess.run(
            ["git", "cat-file", "commit", rev], cwd=kit.checkout, capture_output=True, check=True
        ).stdout
        for rev in kit.git("rev-list", "pristine..HEAD").split()
    )
    assert b"\xe9" in raw or b"\xf6" in raw, raw
    assert not (kit.checkout / ".git" / "rebase-merge").exists()


def more_rope(kit: Kit, tmp: Path) -> None:
    rope = kit.checkout / "vllm_omni/layers/rope.py"
    fixup("fix-ten", {"vllm_omni/layers/rope.py": rope.read_text() + "# more\n"})(kit, tmp)


LATIN1_NAME = os.fsdecode(b"vllm_omni/caf\xe9.txt")


def name_comes_back(kit: Kit, _proc: subprocess.CompletedProcess[str]) -> None:
    """A file name in other bytes travels quoted in the patch and comes back byte for byte."""
    kit.run("apply", "--force", check=True)
    assert os.fsencode(LATIN1_NAME).split(b"/")[-1] in os.listdir(
        os.fsencode(kit.checkout / "vllm_omni")
    )


# ---- 5: a fix names what the user gave ----

READ_ONLY = """
import pathlib
_mkdir = pathlib.Path.mkdir
def _refused(self, *args, **kwargs):
    if str(self).startswith(os.environ["KIT_ROW_READ_ONLY"]) and str(self) != os.environ["KIT_ROW_READ_ONLY"]:
        raise OSError(errno.EROFS, "Read-only file system", str(self))
    return _mkdir(self, *args, **kwargs)
pathlib.Path.mkdir = _refused
"""


ROWS = [
    # 1: zero mutants is a refusal, never "100 % (0 mutants)"; the real record stays
    Row(
        "mutate-series-only-typo",
        "mutate --series-tests --only zzz-typo",
        "--only zzz-typo matches none of the",
        steps(python_rope, npu_patch, real_records("mutate-series")),
        then=SERIES_KEPT,
    ),
    Row(
        "mutate-only-typo",
        "mutate --only zzz",
        "--only zzz matches none of the",
        steps(python_rope, real_records("mutate", "mutate-series")),
        then=BOTH_KEPT,
    ),
    Row(
        "mutate-operator-matches-nothing",
        "mutate --series-tests --operator slice --operator swap",
        "--operator slice --operator swap matches none of the",
        steps(python_rope, npu_patch, real_records("mutate-series")),
        then=SERIES_KEPT,
    ),
    Row(
        "mutate-series-no-npu-branch",
        "mutate --series-tests",
        "the series adds no NPU-branch line",
        steps(python_rope, real_records("mutate-series")),
        then=SERIES_KEPT,
    ),
    Row(
        "mutate-all-equivalent",
        "mutate --series-tests --only npu_scale",
        "chosen mutants are listed as equivalent",
        steps(python_rope, npu_patch, all_equivalent, real_records("mutate-series")),
        then=SERIES_KEPT,
    ),
    Row(
        "mutate-series-not-python",
        "mutate",
        "vllm_omni/layers/rope.py is not valid Python (line 1",
        real_records("mutate"),
        then=records_kept("mutate"),
    ),
    # 3: a message or author in other bytes: refused before anything is written, the same way with
    # an `encoding` header or without one, folded or not
    Row(
        "refresh-latin1-message-encoding-header",
        "refresh",
        "its message is stored as ISO-8859-1",
        steps(raw_commits(latin1_message(True))),
        then=head_kept,
    ),
    Row(
        "refresh-latin1-message-no-header",
        "refresh",
        "its message is not UTF-8 (byte 0xe9 at line 3)",
        steps(raw_commits(latin1_message(False))),
        then=head_kept,
    ),
    Row(
        "refresh-latin1-message-folded",
        "refresh",
        "its message is not UTF-8 (byte 0xe9 at line 3)",
        steps(raw_commits(latin1_message(False)), more_rope),
        then=head_kept,
    ),
    Row(
        "refresh-latin1-author",
        "refresh",
        "its author name is not UTF-8 (byte 0xe9",
        steps(raw_commits(latin1_author)),
        then=head_kept,
    ),
    Row(
        "refresh-latin1-email-folded",
        "refresh",
        "its e-mail is not UTF-8 (byte 0xf6",
        steps(raw_commits(latin1_email), more_rope),
        then=head_kept,
    ),
    Row(
        "refresh-latin1-file-name-round-trips",
        "refresh",
        "0001-fix-ten.patch: updated",
        steps({LATIN1_NAME: b"x\n"}, fixup("fix-ten", {}, add=True)),
        code=0,
        patches_kept=False,
        then=name_comes_back,
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_contract_faults(kit3: Kit, tmp_path: Path, row: Row) -> None:
    run_row(kit3, row, tmp_path)


def test_evidence_root_read_only_names_the_root(kit3: Kit, tmp_path: Path) -> None:
    """`e2e --evidence-root <read-only folder>`: the fix names that folder, not .work; no evidence
    folder and no record made."""
    root = tmp_path / "their-evidence"
    root.mkdir()
    args = f"e2e --standin --deploy-config {kit3.patches}/series --evidence-root {root}"
    proc = inject(kit3, READ_ONLY, *args.split(), env={"KIT_ROW_READ_ONLY": str(root)})
    one_line_error(proc, 2, f"make {root} writable")
    assert "cannot make an evidence folder under" in proc.stderr and ".work" not in proc.stderr
    assert not list(root.iterdir()) and not list(tmp_path.glob("records"))


def test_fix_names_the_path_the_os_gave() -> None:
    """failed_where: the nearest existing part of the failed path (what the user can act on), the
    default only where the error names none."""
    import errno

    given = OSError(errno.EROFS, "Read-only file system", "/no-such-root/e2e-1")
    assert failed_where(given, ".work") == "/"
    assert failed_where(OSError(errno.EROFS, "x"), ".work") == ".work"
    assert os_fix(given, failed_where(given, ".work")).startswith("make / writable")


# ---- 2: every command keeps the README's exit codes, whatever pytest under it returns ----

# Real pytest runs, one per outcome a command can meet: (test file, pytest arguments, the kit's code).
OUTCOMES = {
    "passed": ("def test_ok():\n    pass\n", [], 0),
    "failed": ("def test_no():\n    assert False\n", [], 1),
    "collection-error": ("import no_such_module_anywhere\n", [], 1),
    "usage-error": ("def test_ok():\n    pass\n", ["--bogus-pytest-flag"], 2),
    "nothing-collected": ("def test_ok():\n    pass\n", ["-k", "zzz_nothing"], 1),
    "internal-error": ("", ["-p", "no_such_plugin_module"], 2),
    "ended-by-sigterm": ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n", [], 130),
    "killed-by-sigkill": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", [], 2),
}
# Every runner of pytest in the kit reports through errors.pytest_exit, under its own name.
RUNNERS = ("bench's pytest", "leg stock's pytest", "leg npu's pytest", "pytest")


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_each_pytest_outcome_is_one_readme_code_and_one_line(outcome: str, tmp_path: Path) -> None:
    source, extra, code = OUTCOMES[outcome]
    (tmp_path / "test_case.py").write_text(source, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, "test_case.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTEST_ADDOPTS": "", "PYTEST_PLUGINS": ""},
    )
    for runner in RUNNERS:
        said = pytest_exit(runner, done.returncode)
        assert (0 if said is None else said.exit_code) == code, (outcome, done.returncode, said)
        assert code in (0, 1, 2, 130)
        if said is not None:  # one line: what, then the fix, naming the runner
            assert "\n" not in str(said) and " -- " in str(said) and str(said).startswith(runner)


def test_an_exit_outside_pytests_codes_is_a_setup_error_not_a_pass() -> None:
    for rc in (6, 77, 255):
        said = pytest_exit("bench's pytest", rc)
        assert said is not None and said.exit_code == 2 and f"exited {rc}" in said.what


# The commands themselves on the real leg env: bench and test give the same code for the same
# pytest outcome, with one kit line, and leave the real record as it was.
COMMANDS = [
    ("bench -k zzz_nothing", 1, "collected no test (exit 5)", "bench-npu-gather"),
    ("bench --bogus-pytest-flag", 2, "refused its command line (exit 4", "bench-npu-gather"),
    # pytest passes (the report test skips), but no benchmark ran: no figure
    ("bench -k zz_report", 1, "bench measured nothing", "bench-npu-gather"),
    ("test stock -k zzz_nothing", 1, "collected no test (exit 5)", "test-stock"),
    ("test stock --bogus-pytest-flag", 2, "refused its command line (exit 4", "test-stock"),
]


@pytest.mark.legs
def test_commands_map_pytests_exit_the_same_way(tmp_path: Path) -> None:
    kit = leg_kit(tmp_path / "kit")
    for leg in ("stock", "npu"):
        shared_env_ready(kit, leg)
    kit.run("apply", check=True)
    for args, code, needle, record in COMMANDS:
        records.write(kit.records, record, REAL)
        before = (kit.records / f"{record}.json").read_bytes()
        proc = kit.run(*args.split())
        # pytest's own output (torch's warnings, its usage text) comes first; the kit's one line last
        out = proc.stdout + proc.stderr
        kit_lines = [line for line in out.splitlines() if line.startswith("kit: error: ")]
        assert proc.returncode == code and "Traceback" not in out, out[-3000:]
        assert len(kit_lines) == 1 and needle in kit_lines[0], out[-3000:]
        assert proc.stderr.rstrip().splitlines()[-1] == kit_lines[0]
        assert (kit.records / f"{record}.json").read_bytes() == before, args
        assert not list(kit.records.glob(f"{record}-narrowed.json")), args


def test_a_narrowed_run_is_recorded_beside_the_full_record() -> None:
    """test, bench and mutate: the full record's name only for the whole work."""
    from argparse import Namespace

    from scripts.commands import bench
    from scripts.commands import mutate as mutate_command
    from scripts.legs import legrun

    assert legrun.record_name("npu", "") == "test-npu"
    assert legrun.record_name("npu", "--changed") == "test-npu-changed"
    assert legrun.record_name("npu", "pytest arguments") == "test-npu-narrowed"
    assert bench.record_name([]) == "bench-npu-gather"
    assert bench.record_name(["-k", "gather"]) == "bench-npu-gather-narrowed"

    def args(series: bool, only: list[str], operator: list[str]) -> Namespace:
        return Namespace(series_tests=series, only=only, operator=operator)

    assert mutate_command.record_name(args(True, [], [])) == "mutate-series"
    assert mutate_command.record_name(args(True, ["k"], [])) == "mutate-series-narrowed"
    assert mutate_command.record_name(args(False, [], ["guard"])) == "mutate-narrowed"
    assert mutate.partial_name("mutate-series") == "mutate-series-partial"


# ---- issue 57, item 4: plain fixups folded by git's own autosquash ----


def fold_then_refresh(
    kit: Kit, tmp: Path, by_git: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, dict[str, bytes]]:
    """A fixup of 0001 committed on top (so it must move under its patch), then refresh; the HEAD it
    leaves and patches/."""
    from scripts.checkout import refresh

    more_rope(kit, tmp)
    fixup("double-attn", {"vllm_omni/attn.py": "def attend(q):\n    return q * 3\n"})(kit, tmp)
    if not by_git:  # the kit's hand-written fold, for the comparison only
        monkeypatch.setattr(refresh, "autosquash", lambda *_args: None)
    proc = kit.run("refresh")
    assert proc.returncode == 0, proc.stderr
    assert "folded fixup!/squash!/amend! commits" in proc.stdout
    return kit.git("rev-parse", "HEAD").strip(), {
        p.name: p.read_bytes() for p in kit.patches.iterdir()
    }


def test_git_autosquash_folds_plain_fixups_as_the_kit_did(
    kit3: Kit, kit3_template: Kit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git's fold and the kit's own give the same commits (ids) and patches/ byte for byte; git's
    actually ran (the reflog holds its rebase)."""
    from conftest import clone

    other = clone(kit3_template, tmp_path / "hand")
    by_git = fold_then_refresh(kit3, tmp_path, True, monkeypatch)
    reflog = kit3.git("reflog", "-n", "20")
    assert "rebase (fixup)" in reflog, reflog
    by_hand = fold_then_refresh(other, tmp_path, False, monkeypatch)
    assert by_git == by_hand
    assert len(kit3.git("rev-list", "pristine..HEAD").split()) == 3


def test_a_fixup_git_would_aim_elsewhere_is_folded_by_commit(kit3: Kit, tmp_path: Path) -> None:
    """`fixup! <commit>` of a fold, and a later fixup of the patch: git's autosquash would order them
    otherwise than the kit (its chains); its todo is refused unstarted and the kit folds by hand, by
    commit."""
    more_rope(kit3, tmp_path)
    first_fold = kit3.git("rev-parse", "HEAD").strip()
    rope = kit3.checkout / "vllm_omni/layers/rope.py"
    rope.write_text(rope.read_text() + "# again\n")
    kit3.git("commit", "-qam", f"fixup! {first_fold}")
    more_rope(kit3, tmp_path)
    proc = kit3.run("refresh")
    assert proc.returncode == 0, proc.stderr
    assert len(kit3.git("rev-list", "pristine..HEAD").split()) == 3
    assert "rebase (fixup)" not in kit3.git("reflog", "-n", "20")  # git's todo was refused
    text = (kit3.patches / "0001-fix-ten.patch").read_text()
    assert "+# more\n+# again\n+# more\n" in text, text
