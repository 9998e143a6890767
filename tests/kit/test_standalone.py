"""The repository stands alone: what it cites exists inside it."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import KIT_ROOT

from scripts.gitcmd import git

# The kit's docs and modules as comments cite them (docs/y.md, `scripts/x.py`); tests/ and the rest
# also name upstream's paths (tests/diffusion/...), so they are left out.
OWN_PATH = re.compile(r"(?<![\w/.-])((?:scripts|docs)/[\w./-]*\w)")
# Notes that lived beside the repository while it was written, never in it.
OUTSIDE = ("UPSTREAM" + ".md", "DESIGN" + ".md", "STYLE" + ".md", "../" + "shared")


def dangling(text: str, root: Path) -> list[str]:
    """Citations in text of files outside the repository, or of repository paths that do not exist."""
    outside = [name for name in OUTSIDE if name in text]
    missing = [path for path in OWN_PATH.findall(text) if not (root / path).exists()]
    return outside + missing


def tracked_text_files() -> list[Path]:
    names = git("ls-files", cwd=KIT_ROOT).splitlines()
    texts = [n for n in names if n.endswith((".md", ".py", ".yml", ".toml", ".txt")) or n == ".ci/run"]
    # This file cites bad paths on purpose.
    return [KIT_ROOT / n for n in texts if KIT_ROOT / n != Path(__file__).resolve()]


def test_every_citation_resolves_inside_the_repository() -> None:
    found = {
        str(p.relative_to(KIT_ROOT)): dangling(p.read_text(encoding="utf-8"), KIT_ROOT) for p in tracked_text_files()
    }
    assert {path: cited for path, cited in found.items() if cited} == {}


def test_a_dangling_citation_is_caught() -> None:
    text = "see " + OUTSIDE[0] + " and docs/e2e-runbook.md, but docs/results.md and `scripts/checks/lint.py` exist"
    assert dangling(text, KIT_ROOT) == [OUTSIDE[0], "docs/e2e-runbook.md"]
