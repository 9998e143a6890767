"""Where things live in one kit workspace (a kit checkout; all of .work/ is ignored by git).

A `Workspace` is passed in to every command and stage that reads or writes the kit's files; only the
CLI shell (scripts/__main__.py) derives it from where the kit's code lies (`Workspace.of_kit()`), so
a test can run a command on a copy of the kit in-process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Workspace:
    root: Path

    # resolved once: messages and records show paths relative to it
    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).resolve())

    @classmethod
    def of_kit(cls) -> Workspace:
        """The kit this code is part of: the one place that finds the kit from `__file__`."""
        return cls(Path(__file__).resolve().parent.parent)

    # Committed: the series, its pin, the kit's pins and tests.
    @property
    def patches(self) -> Path:
        return self.root / "patches"

    @property
    def pin_file(self) -> Path:
        return self.patches / "upstream.toml"

    @property
    def series_file(self) -> Path:
        return self.patches / "series"

    @property
    def revisions_file(self) -> Path:
        return self.patches / "revisions.toml"

    @property
    def ci_dir(self) -> Path:
        return self.root / "ci"

    @property
    def kit_tools(self) -> Path:
        """Every pin of the kit's tools (it includes ci/kit-tools.txt, what the README installs)."""
        return self.ci_dir / "kit-dev-tools.txt"

    @property
    def hook_packages(self) -> Path:
        """The remote hook repositories lint runs from the package registry (precommit.py)."""
        return self.ci_dir / "hook-packages.toml"

    @property
    def regression(self) -> Path:
        return self.root / "tests" / "regression"

    @property
    def equivalent_mutants(self) -> Path:
        return self.regression / "equivalent_mutants.toml"

    @property
    def standin_script(self) -> Path:
        return self.root / "tests" / "standins" / "omni_realtime_server.py"

    # Made by the kit, under .work/.
    @property
    def work(self) -> Path:
        return self.root / ".work"

    @property
    def checkout(self) -> Path:
        return self.work / "vllm-omni"

    @property
    def pristine_tree(self) -> Path:
        return self.work / "pristine"

    @property
    def downloads(self) -> Path:
        return self.work / "downloads"

    @property
    def records(self) -> Path:
        return self.work / "records"

    @property
    def evidence(self) -> Path:
        return self.work / "evidence"

    @property
    def envs(self) -> Path:
        return self.work / "envs"

    @property
    def locks(self) -> Path:
        return self.work / "locks"

    @property
    def cache(self) -> Path:
        return self.work / "cache"

    @property
    def rebase_dir(self) -> Path:
        return self.work / "rebase"

    @property
    def pr_dir(self) -> Path:
        return self.work / "pr"

    @property
    def upstream_clone(self) -> Path:
        return self.work / "upstream"

    @property
    def mutate_dir(self) -> Path:
        return self.work / "mutate"

    @property
    def e2e_venv(self) -> Path:
        return self.work / "e2e-venv"

    @property
    def ab_dir(self) -> Path:
        return self.work / "ab"
