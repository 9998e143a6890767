"""Fork server for ``nox -s mutate`` (started by scripts/mutation/mutate.py with a leg's interpreter and env).

It imports torch, vllm and (simulated mode) the simulated NPU once, never vllm_omni (each run imports the
mutated tree): a mutant costs seconds instead of a minute. Per stdin line ``{"args": [...], "timeout": s}`` it
forks a ``pytest.main(args)`` with its output in a file and replies ``{"rc": int | null, "output": tail}``
(rc null: killed at the timeout).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from typing import Any

_running: list[int] = []  # the forked pytest run in progress, killed with the server on SIGTERM


def stop(signum: int, frame: object) -> None:
    """SIGTERM from the kit (interrupted, or done with a run still going): no orphaned pytest child."""
    for pid in _running:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    os._exit(128 + signum)


def warm(mode: str) -> None:
    if mode == "simulated":
        from npu_standin import simulated_npu

        simulated_npu.install()
    import torch  # noqa: F401
    import vllm  # noqa: F401


def run_job(args: list[str], timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryFile() as log:
        pid = os.fork()
        # the child: pytest with stdout/stderr in the log, never back into the server's loop
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            import pytest

            code = pytest.main(args)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(int(code))
        _running.append(pid)
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc: int | None = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                rc = None
                break
            time.sleep(0.05)
        _running.remove(pid)
        log.seek(0)
        return {"rc": rc, "output": log.read().decode(errors="replace")[-6000:]}


def main() -> int:
    signal.signal(signal.SIGTERM, stop)
    warm(os.environ.get("KIT_NPU_MODE", "none"))
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        try:
            print(json.dumps(run_job(job["args"], float(job["timeout"]))), flush=True)
        except BrokenPipeError:  # the kit went away mid-run: nobody to answer
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
