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
    return outside + [path for path in OWN_PATH.findall(text) if not (root / path).exists()]


def test_every_citation_resolves_inside_the_repository() -> None:
    names = git("ls-files", cwd=KIT_ROOT).splitlines()
    texts = [n for n in names if n.endswith((".md", ".py", ".yml", ".toml", ".txt")) or n == ".ci/run"]
    here = Path(__file__).resolve()  # this file cites bad paths on purpose
    found = {n: dangling((KIT_ROOT / n).read_text(encoding="utf-8"), KIT_ROOT) for n in texts if KIT_ROOT / n != here}
    assert {path: cited for path, cited in found.items() if cited} == {}
    text = "see " + OUTSIDE[0] + " and docs/e2e-runbook.md, but docs/results.md and `scripts/checks/lint.py` exist"
    assert dangling(text, KIT_ROOT) == [OUTSIDE[0], "docs/e2e-runbook.md"]
