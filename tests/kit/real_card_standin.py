"""Stand-in for an Ascend card, only to collect the npu leg in mode real on a CPU host
(test_real_mode.py).

Loaded with ``-p real_card_standin`` before the regression suite's conftest, it installs the
simulated NPU (tests/regression/npu_standin) so that ``torch.npu.is_available()`` holds: nothing
collected is a claim about a card.
"""

from __future__ import annotations

import sys
from pathlib import Path

# run from the kit's root, like the leg
sys.path.insert(0, str(Path.cwd() / "tests" / "regression"))

from npu_standin import simulated_npu  # noqa: E402

simulated_npu.install()
