"""What several of the kit's test modules share: the leg-copy helpers, the `test` command's parse,
npu-smi tables. Test modules import from here (or take conftest fixtures), never from each other."""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from conftest import KIT_ROOT, Kit, copy_kit

from scripts import __main__ as cli
from scripts.commands import test as test_command
from scripts.legs import suite

NPU_SMI = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.0                   Version: 24.1.0                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B1               | OK            | 93.5        36                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3392 / 65536         |
+===========================+===============+====================================================+
| 1     910B1               | OK            | 90.1        35                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          3390 / 65536         |
+===========================+===============+====================================================+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| No running processes found in NPU 0                                                            |
| 1       0                 | 424242        | python3                  | 51234                   |
+===========================+===============+====================================================+
"""
# What a pod given two of a host's cards sees: npu-smi lists the host's ids 4 and 5.
POD_NPU_SMI = NPU_SMI.replace("| 0     910B1", "| 4     910B1").replace(
    "| 1     910B1", "| 5     910B1"
)
POD_NPU_SMI = POD_NPU_SMI.replace(
    "| 1       0                 | 424242", "| 5       0                 | 424242"
)
NPUSMI_SAMPLES = Path(__file__).parent / "npusmi_samples"


def npusmi_sample(name: str) -> str:
    """An `npu-smi info` output written from the public documentation (npusmi_samples/README.md)."""
    return (NPUSMI_SAMPLES / f"{name}.written-from-docs.txt").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Mutation:
    name: str
    leg: str
    patch: str
    old: str  # inside exactly one added line of the patch
    new: str
    caught_by: str  # part of the failing test's name
    select: str  # pytest -k expression: keeps the leg run short


MUTATIONS = [
    Mutation(
        "guard_uses_tensor_is_npu",
        "stock",
        "0005-lingbot-npu-paged-replay.patch",
        'if (query.is_cuda or query.device.type == "npu") and',
        "if (query.is_cuda or query.is_npu) and",
        "test_direct_replay_with_2d_rope_tables",
        "test_direct_replay_with_2d_rope_tables",
    ),
    Mutation(
        "per_sequence_kv_lengths",
        "npu",
        "0003-paged-attention-npu.patch",
        "actual_seq_kvlen=list(itertools.accumulate(kv_lens)),",
        "actual_seq_kvlen=list(kv_lens),",
        "two_sequences",
        "test_npu_paged_attention and two_sequences",
    ),
]


def parse_test_args(argv: list[str]) -> suite.TestArgs:
    """`python -m scripts test ARGV` as its run() reads it."""
    return test_command.choices(cli.parse(["test", *argv]))


def leg_kit(dest: Path) -> Kit:
    kit = copy_kit(dest, with_patches=True)
    shutil.copytree(
        KIT_ROOT / "tests" / "regression",
        dest / "tests" / "regression",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy2(KIT_ROOT / "pytest.ini", dest / "pytest.ini")
    envs = KIT_ROOT / ".work" / "envs"
    # the leg runner builds the envs here if they are missing
    envs.mkdir(parents=True, exist_ok=True)
    (dest / ".work").mkdir(exist_ok=True)
    (dest / ".work" / "envs").symlink_to(envs, target_is_directory=True)
    for wheel in (KIT_ROOT / ".work" / "downloads").glob("vllm_omni-*.whl"):
        kit.seed_wheel(wheel)  # spares the registry; the pin's sha256 is still checked
    return kit


def junit_cases(kit: Kit, leg: str) -> list[ET.Element]:
    return list(
        ET.parse(kit.root / ".work" / "records" / f"test-{leg}" / "junit.xml")
        .getroot()
        .iter("testcase")
    )


def failed_tests(kit: Kit, leg: str) -> list[str]:
    failed = [
        c
        for c in junit_cases(kit, leg)
        if c.find("failure") is not None or c.find("error") is not None
    ]
    return [f"{case.get('classname')}::{case.get('name')}" for case in failed]


def shared_env_ready(kit: Kit, leg: str) -> None:
    # A copy that did not see it ready would rebuild the env through the link, deleting this
    # checkout's.
    subprocess.run([sys.executable, "-m", "scripts", "legenv", leg], cwd=KIT_ROOT, check=True)
    probe = f"import scripts.legs.legenv as e, scripts.workspace as w; print(e.is_ready(w.Workspace('.'), {leg!r}))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=kit.root, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "True", (
        f"the copy would rebuild the shared {leg} env: {done.stdout}{done.stderr}"
    )


def assert_control_passed(kit: Kit, leg: str) -> None:
    """Control: on the shipped series the tests that catch this leg's mutations ran and passed, so a
    failure of a broken series is the mutation's doing (also test_loop.py's, for the stock leg)."""
    assert failed_tests(kit, leg) == []
    passed = [c.get("name", "") for c in junit_cases(kit, leg) if c.find("skipped") is None]
    for m in MUTATIONS:
        if m.leg == leg:
            assert any(m.caught_by in name for name in passed), (m.name, passed)
