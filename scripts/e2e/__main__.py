"""``python -m scripts.e2e``: see scripts/e2e/run.py."""

from __future__ import annotations

import sys

from scripts.e2e.run import main

sys.exit(main(sys.argv[1:]))
