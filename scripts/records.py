"""What the kit ran, kept as JSON under .work/records/ so later reports (the PR
body) quote real runs with their inputs, never a figure typed by hand."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def write(records: Path, name: str, data: dict[str, Any]) -> Path:
    records.mkdir(parents=True, exist_ok=True)
    path = records / f"{name}.json"
    body = {
        "name": name,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **data,
    }
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read(records: Path, name: str) -> dict[str, Any] | None:
    path = records / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
