"""The kit's digests of one text or one file: sha256, hex, as `sha256sum` prints it.

Digests over several things (the series, an env's pins, the suite's files) are built from these
where they live, each with its own framing, so that a change to any part changes the whole.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_text(text: str) -> str:
    """The digest of text's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_file(path: Path) -> str:
    """The digest of a file's bytes, read in chunks (wheels are large)."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
