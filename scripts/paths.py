"""Where things live in a kit checkout (all of .work/ is ignored by git)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATCHES = ROOT / "patches"
PIN_FILE = PATCHES / "upstream.toml"
SERIES_FILE = PATCHES / "series"
CI_DIR = ROOT / "ci"
WORK = ROOT / ".work"
CHECKOUT = WORK / "vllm-omni"
PRISTINE_TREE = WORK / "pristine"
DOWNLOADS = WORK / "downloads"
RECORDS = WORK / "records"
EVIDENCE = WORK / "evidence"
ENVS = WORK / "envs"
