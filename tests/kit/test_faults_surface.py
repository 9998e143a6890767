"""The fault table of the kit's surface: e2e, pr, lint and the front door.

faulttable's contract (exit code, one line, no traceback, patches/ byte-identical), and nothing made
(no .work/pr, no pr/ branch, no evidence folder). The signal rows end a real e2e whose server is a
real process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import AUTHOR, Kit, free_port, live_pids
from faulttable import (
    Row,
    finished,
    inject,
    interrupted_apply,
    moved,
    one_line_error,
    popen,
    put,
    replaced,
    run_row,
    snapshot,
)

from scripts import signals
from scripts.gitcmd import git
from scripts.pr import onto

# The user's git identity for pr (it signs off with it), given as git's own environment
# configuration.
IDENTITY = {
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "user.name",
    "GIT_CONFIG_VALUE_0": "Ada Lovelace",
}
IDENTITY |= {"GIT_CONFIG_KEY_1": "user.email", "GIT_CONFIG_VALUE_1": "ada@example.org"}


# patches/ changed after the last apply: the checkout is no longer built from the series.
PATCH_EDITED = replaced(
    "patches/0003-double-attn.patch", b"Why this change.", b"Why this change, said better."
)
# another release than the one the checkout was built from
PIN_MOVED = moved({19: "line 19 upstream"})
COVER = "[NPU] Attend on Ascend\n\nWhy the series.\n\n## Notes for reviewers\n\n- none\n"


def for_pr(setup: Callable[[Kit, Path], None]) -> Callable[[Kit, Path], None]:
    """setup, on a series that has the cover pr needs (so that the row's fault is what pr meets)."""

    def both(kit: Kit, tmp_path: Path) -> None:
        (kit.patches / "cover.md").write_text(COVER)
        setup(kit, tmp_path)

    return both


PR = ("pr",)
V1 = """[v1]
series_digest = "9e0a24eda3d178654b45113cbac589a3008fd4589db7556f5e0ec0789e5962e4"
pin = "vllm-omni 0.1.0 (wheel)"
kit_commit = ""
prepared = "2026-11-30T15:56:35+00:00"
"""


def revisions(text: str) -> Callable[[Kit, Path], None]:
    return put("patches/revisions.toml", text.encode())


def user(name: str, address: str) -> Callable[[Kit, Path], dict[str, str]]:
    """The user's global git config with this identity (what pr signs off with)."""

    def setup(kit: Kit, tmp_path: Path) -> dict[str, str]:
        for_pr(lambda *_: None)(kit, tmp_path)
        (tmp_path / "gitconfig").write_text(f"[user]\n\tname = {name}\n\temail = {address}\n")
        return {"GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig"), "GIT_CONFIG_NOSYSTEM": "1"}

    return setup


E2E = "e2e --standin"


ROWS = [
    # measured: option values that crashed or started a server first; every one stops before
    # anything starts
    Row("e2e-port-out-of-range", f"{E2E} --port 70000", "--port '70000' is not an integer from 1"),
    Row("e2e-port-not-a-number", f"{E2E} --port abc", "--port 'abc' is not an integer"),
    Row("e2e-chunks-fraction", f"{E2E} --chunks 8.5", "--chunks '8.5' is not an integer >= 1"),
    Row(
        "e2e-width-negative", f"{E2E} --width -64", "--width '-64' is not an integer multiple of 16"
    ),
    Row("e2e-width-zero", f"{E2E} --width 0", "pass --width an integer multiple of 16"),
    Row("e2e-fps-zero", f"{E2E} --fps 0", "--fps '0' is not an integer from 1"),
    # the kit's own, from the same rules
    Row("e2e-height-not-a-multiple", f"{E2E} --height 100", "the model works on 16-pixel patches"),
    Row(
        "e2e-timeout-nan",
        f"{E2E} --health-timeout-s nan",
        "--health-timeout-s 'nan' is not a number",
    ),
    Row("e2e-lock-wait-infinite", f"{E2E} --lock-wait-s 1e309", "--lock-wait-s '1e309'"),
    Row(
        "e2e-band-env-inverted",
        E2E,
        "KIT_E2E_BAND: band '3167:2865' is not LO:HI",
        env={"KIT_E2E_BAND": "3167:2865"},
    ),
    Row(
        "e2e-cards-env-unclear",
        "e2e",
        "KIT_E2E_CARDS: card list 'maybe' is not a comma-separated",
        env={"KIT_E2E_CARDS": "maybe"},
    ),
    Row(
        "e2e-client-unknown",
        f"{E2E} --client mine",
        "--client 'mine' is not one of auto, upstream, kit",
    ),
    Row("e2e-abbreviated-flag", f"{E2E} --chunk 4", "unrecognized arguments: --chunk"),
    Row(
        "e2e-no-steady-chunk",
        f"{E2E} --chunks 4 --warmup-chunks 6",
        "--chunks 4 leaves no steady chunk after --warmup-chunks 6",
    ),
    Row(
        "e2e-server-url-not-ws",
        "e2e --server-url http://h:1",
        "--server-url: server URL 'http://h:1' is not ws://HOST:PORT",
    ),
    Row(
        "e2e-ab-unknown-base",
        f"{E2E} --deploy-config patches/series --ab no-such-revision",
        "kit: error: --ab 'no-such-revision' is not a revision in patches/revisions.toml, a git "
        "ref, or pristine "
        "-- pass e.g. --ab v1, --ab main~3 or --ab pristine",
    ),
    # the run's own inputs, found before any server starts (the stand-in needs no model, but one
    # given must be there; the deploy config an Ascend run would read must exist)
    Row(
        "e2e-cards-twice",
        f"{E2E} --cards 0,0,1,2",
        "card list '0,0,1,2' names card 0 more than once",
    ),
    Row(
        "e2e-cards-env-twice",
        E2E,
        "KIT_E2E_CARDS: card list '1,1' names card 1",
        env={"KIT_E2E_CARDS": "1,1"},
    ),
    Row(
        "e2e-standin-no-deploy-config",
        E2E,
        "npu_usp4_eager.yaml not found -- run nox -s apply, or pass --deploy",
    ),
    Row(
        "e2e-standin-deploy-config-typo",
        f"{E2E} --deploy-config nosuch.yaml",
        "deploy_config nosuch.yaml not found",
    ),
    Row(
        "e2e-standin-model-typo",
        f"{E2E} /no/such/model",
        "model path /no/such/model is not a model directory",
    ),
    Row(
        "e2e-server-cmd-unknown-placeholder",
        (
            *E2E.split(),
            "--deploy-config",
            "patches/series",
            "--server-cmd",
            "{nosuch} --port {port}",
        ),
        "--server-cmd names unknown placeholder(s) {nosuch} -- use only {host}, {port}",
    ),
    Row(
        "e2e-server-cmd-no-program",
        (
            *E2E.split(),
            "--deploy-config",
            "patches/series",
            "--server-cmd",
            "no-such-server --port {port}",
        ),
        "--server-cmd program 'no-such-server' is not an executable on PATH",
    ),
    Row(
        "e2e-image-missing",
        f"{E2E} --deploy-config patches/series --image no/such.png",
        "--image no/such.png is neither a readable file nor a URL",
    ),
    Row(
        "e2e-external-image-missing",
        "e2e --server-url ws://127.0.0.1:9 --image no/such.png",
        "--image no/such.png is neither a readable file nor a URL",
    ),
    # provenance: the checkout must be exactly the pin plus the series
    Row(
        "e2e-patches-edited",
        E2E,
        "does not match patches/ (differs in 0003-double-attn.patch)",
        PATCH_EDITED,
    ),
    Row("e2e-pin-moved", E2E, "the pin is now vllm-omni 0.2.0", PIN_MOVED),
    Row("e2e-interrupted-apply", E2E, "an apply was interrupted", interrupted_apply),
    Row("pr-patches-edited", PR, "does not match patches/", for_pr(PATCH_EDITED), env=IDENTITY),
    Row("pr-pin-moved", PR, "the pin is now vllm-omni 0.2.0", for_pr(PIN_MOVED), env=IDENTITY),
    Row(
        "pr-interrupted-apply",
        PR,
        "an apply was interrupted",
        for_pr(interrupted_apply),
        env=IDENTITY,
    ),
    # hand-edited inputs of pr (invariant 12): one line naming the file, the entry and the fix;
    # nothing recorded
    Row(
        "pr-revisions-date-unquoted",
        PR,
        'quote it: prepared = "2026-11-30T15:56:35+00:00"',
        for_pr(revisions(V1.replace('"2026-11-30T15:56:35+00:00"', "2026-11-30T15:56:35+00:00"))),
        env=IDENTITY,
    ),
    Row(
        "pr-revisions-leading-zero",
        PR,
        "'v01' is not a revision table [vN]",
        for_pr(revisions(V1 + "\n" + V1.replace("[v1]", "[v01]"))),
        env=IDENTITY,
    ),
    Row(
        "pr-revisions-not-a-table",
        PR,
        "'note' is not a revision table",
        for_pr(revisions('note = "x"\n' + V1)),
        env=IDENTITY,
    ),
    Row(
        "pr-revisions-no-digest",
        PR,
        "[v1] has no series_digest = line",
        for_pr(revisions(V1.replace("series_digest", "digest"))),
        env=IDENTITY,
    ),
    Row(
        "pr-revisions-date-not-iso",
        PR,
        "prepared = 'yesterday' is not an ISO 8601",
        for_pr(revisions(V1.replace("2026-11-30T15:56:35+00:00", "yesterday"))),
        env=IDENTITY,
    ),
    Row(
        "pr-revisions-not-toml",
        PR,
        "revisions.toml is not valid TOML",
        for_pr(revisions("[v1\n")),
        env=IDENTITY,
    ),
    Row(
        "pr-revisions-bom",
        PR,
        "revisions.toml starts with a UTF-8 byte order mark",
        for_pr(revisions("\ufeff" + V1)),
        env=IDENTITY,
    ),
    Row(
        "pr-revisions-duplicate",
        PR,
        "revisions.toml is not valid TOML",
        for_pr(revisions(V1 + V1)),
        env=IDENTITY,
    ),
    Row(
        "pr-cover-bom",
        PR,
        "patches/cover.md starts with a UTF-8 byte order mark",
        put("patches/cover.md", b"\xef\xbb\xbf" + COVER.encode()),
        env=IDENTITY,
    ),
    Row(
        "pr-cover-not-utf8",
        PR,
        "patches/cover.md is not valid UTF-8 (line 3",
        put("patches/cover.md", COVER.encode().replace(b"Why", b"Wh\xff")),
        env=IDENTITY,
    ),
    Row(
        "pr-email-localhost",
        PR,
        "user.email 'root@localhost' is not an address upstream's DCO check accepts",
        user("Ada", "root@localhost"),
    ),
    Row("pr-email-no-at", PR, "user.email 'ada' is not an address", user("Ada", "ada")),
    Row(
        "pr-email-dot-at-end",
        PR,
        "user.email 'ada@example.' is not an address",
        user("Ada", "ada@example."),
    ),
    Row(
        "pr-name-with-brackets",
        PR,
        "user.name 'Ada <x>' cannot be a Signed-off-by: name",
        user("Ada <x>", "ada@example.org"),
    ),
    # the front door: usage errors are the kit's one line too
    Row("no-command", "", "the following arguments are required: COMMAND"),
    Row("unknown-command", "lnit", "invalid choice: 'lnit'"),
    Row("unknown-flag", "lint --fast", "unrecognized arguments: --fast"),
    Row("flag-without-value", "pr --push-to", "argument --push-to: expected one argument"),
    # --open without gh: refused before anything is made or pushed, with the command to run later
    Row(
        "pr-open-without-gh",
        (
            *PR,
            *"--onto https://example.invalid/vllm-omni main --push-to https://example.invalid/fork --open".split(),
        ),
        "after the push, run: gh pr create --repo ",
        put("patches/cover.md", COVER.encode()),
        env={**IDENTITY, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_surface_fault_row(row: Row, kit3: Kit, tmp_path: Path) -> None:
    # patches/ byte-identical: nothing recorded (revisions.toml included)
    run_row(kit3, row, tmp_path)
    # No .work/evidence: an e2e was refused before any server started (a server's log is written in
    # there).
    assert not (kit3.root / ".work/pr").exists() and not (kit3.root / ".work/evidence").exists()
    if (kit3.checkout / ".git").is_dir():
        assert kit3.git("branch", "--list", "pr/*").strip() == ""


# ---- git's real reason for a failed push ---------------------------------------------


def failed_push(
    tmp_path: Path, target: str, refspec: str = "main:refs/heads/main"
) -> subprocess.CompletedProcess[str]:
    repo = tmp_path / "repo"
    if not repo.exists():
        repo.mkdir()
        git("init", "-q", "-b", "main", cwd=repo)
        git("commit", "-q", "--allow-empty", "-m", "one", cwd=repo, env=AUTHOR)
    return subprocess.run(
        ["git", "push", "--porcelain", target, refspec], cwd=repo, capture_output=True, text=True
    )


def test_push_failure_quotes_gits_reason_not_its_advice(tmp_path: Path) -> None:
    proc = failed_push(tmp_path, str(tmp_path / "no-such-fork"))
    # git's advice is there...
    assert proc.returncode != 0 and "the repository exists" in proc.stderr
    reason = onto.push_reason(proc.stdout, proc.stderr)
    # ...the reason wins
    assert reason.startswith("fatal: ") and "does not appear to be a git repository" in reason
    with pytest.raises(onto.OntoError) as caught:  # in the kit's line too
        onto.push(tmp_path / "repo", str(tmp_path / "no-such-fork"), "main")
    assert "does not appear to be a git repository" in caught.value.what
    assert "repository exists" not in caught.value.what
    fork = tmp_path / "fork.git"  # a refused ref is named
    git("init", "-q", "--bare", str(fork), cwd=tmp_path)
    assert failed_push(tmp_path, str(fork)).returncode == 0
    git(
        "commit",
        "-q",
        "--amend",
        "--allow-empty",
        "-m",
        "rewritten",
        cwd=tmp_path / "repo",
        env=AUTHOR,
    )
    proc = failed_push(tmp_path, str(fork))
    assert proc.returncode != 0
    assert onto.push_reason(proc.stdout, proc.stderr) == "[rejected] (non-fast-forward)"


# ---- the front door from any folder of the kit ----------------------------------------


def test_the_kit_runs_from_a_subfolder_by_its_path(kit3: Kit) -> None:
    """`python -m scripts` resolves the package from the working folder (Python's rule, exit 1
    elsewhere); `python <kit>/scripts` works from any folder and means the same kit."""
    for folder, path in (
        (kit3.patches, "../scripts"),
        (kit3.checkout / "vllm_omni", "../../../scripts"),
    ):
        argv = [sys.executable, path, "e2e", "--port", "0"]
        proc = subprocess.run(
            argv, cwd=folder, capture_output=True, text=True, env={**os.environ, "CI": ""}
        )
        one_line_error(proc, 2, "--port '0' is not an integer from 1 to 65535")
    proc = subprocess.run(
        [sys.executable, "../scripts", "apply"], cwd=kit3.patches, capture_output=True, text=True
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


# ---- endings: every signal that ends an e2e leaves no server and says what happened ----


def processes_with(marker: str) -> list[int]:
    return live_pids(lambda args: marker.encode() in args)


def start_e2e(
    kit: Kit, tmp_path: Path, marker: str, ignore_term: bool = False
) -> subprocess.Popen[str]:
    # Its server never answers /health (so the e2e waits on it), recognisable by marker.
    code = "import signal, time\n" + (
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else ""
    )
    server = f"{sys.executable} -c '{code}time.sleep(600)' {marker}"
    options = f"{E2E} --port {free_port()} --health-timeout-s 300 --stop-timeout-s 3"
    options += f" --deploy-config {kit.patches}/series"
    options += " --evidence-root"
    cmd = [
        sys.executable,
        "-m",
        "scripts",
        *options.split(),
        str(tmp_path / "evidence"),
        "--server-cmd",
        server,
    ]
    proc = popen(cmd, kit.root)
    deadline = time.monotonic() + 60
    # Ready once it exists and, for ignore_term, has set SIGTERM aside: its python starts before
    # that line runs, and a SIGTERM in between ends it at once (the stop then takes no time to land
    # a second signal in).
    while not (pids := processes_with(marker)) or (
        ignore_term and not all(map(ignores_sigterm, pids))
    ):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    return proc


def ignores_sigterm(pid: int) -> bool:
    """Whether process `pid` ignores SIGTERM now (the SigIgn mask of /proc/PID/status; bit n-1 is
    signal n)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(re.search(r"^SigIgn:\s*([0-9a-f]+)$", status, re.M)[1], 16)
    return bool(mask >> (signal.SIGTERM - 1) & 1)


def summary_of(tmp_path: Path) -> dict[str, object]:
    (folder,) = (tmp_path / "evidence").iterdir()
    return dict(json.loads((folder / "summary.json").read_text()))


SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT]


@pytest.mark.parametrize(
    ("sig", "then"),
    [(sig, None) for sig in SIGNALS] + [(signal.SIGTERM, signal.SIGINT)],
    ids=[sig.name for sig in SIGNALS] + ["a-second-signal-does-not-cut-the-server-stop-short"],
)
def test_a_signal_during_the_e2e_leaves_no_server(
    kit3: Kit, tmp_path: Path, sig: signal.Signals, then: signal.Signals | None
) -> None:
    # then: the server ignores SIGTERM, so stopping it takes --stop-timeout-s then SIGKILL; a Ctrl-C
    # meanwhile waits.
    marker = f"kit-e2e-sleeper-{uuid.uuid4().hex}"
    before = snapshot(kit3.patches)
    proc = start_e2e(kit3, tmp_path, marker, ignore_term=then is not None)
    proc.send_signal(sig)
    if then:
        time.sleep(1)  # inside the stop's wait
        proc.send_signal(then)
    last = then or sig  # the one the run names
    one_line_error(finished(proc), 130, f"e2e interrupted by {last.name}")
    assert processes_with(marker) == []
    summary = summary_of(tmp_path)
    assert summary["verdict"] == "interrupted"
    assert f"stopped by {last.name} during run 1 of 2" in str(summary["reason"])
    assert snapshot(kit3.patches) == before


def test_a_signal_in_a_held_block_is_raised_when_it_ends_and_not_masked() -> None:
    # Held by a handler, not by the mask: a child inherits a mask, and a server deaf to SIGTERM
    # outlives stops.
    def named(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    probe = "import signal; print(sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])))"
    before = signal.signal(signal.SIGTERM, named)
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            with signals.held():
                out = subprocess.run(
                    [sys.executable, "-c", probe], capture_output=True, text=True, check=True
                ).stdout
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # delivered, recorded, not raised: the block finishes its work
                finished = True
        assert finished and out.strip() == "[]"
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_signal_while_the_commands_load_is_one_line(kit3: Kit, sig: signal.Signals) -> None:
    # The edit-loop model found it: a Ctrl-C in the first second (imports) printed a
    # KeyboardInterrupt traceback.
    before = snapshot(kit3.patches)
    code = f"""import scripts.__main__ as front
loaded = front.command_modules
def loading():
    os.kill(os.getpid(), {int(sig)})
    return loaded()
front.command_modules = loading"""
    one_line_error(
        inject(kit3, code, "refresh"), 130, f"interrupted by {sig.name} before any command started"
    )
    assert snapshot(kit3.patches) == before
