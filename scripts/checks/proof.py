"""KIT007 judged patch by patch: each patch's off-NPU differences (the projection:
scripts/checks/offnpu.py) against the `Kit-Off-NPU:` declarations of its message; what the PR then
claims for every device but NPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scripts import gitcmd
from scripts.checkout import PRISTINE_TAG
from scripts.checks import offnpu
from scripts.checks.rules import OFF_NPU, Finding
from scripts.errors import KitError
from scripts.series import Patch, trailer_values

OFF_NPU_TRAILER = "Kit-Off-NPU"


@dataclass(frozen=True)
class Declared:
    """A difference off NPU that a patch declares (and the PR states)."""

    patch: str
    file: str
    unit: str
    why: str


class BadDeclaration(KitError):
    """A `Kit-Off-NPU:` trailer that does not say which unit, or why, or says it twice."""


DECLARATION_FORM = (
    "'Kit-Off-NPU: <file>::<unit>: <why>' (unit: Class.method, function, Class or <module>)"
)


def declarations(patch: str, message: str) -> dict[tuple[str, str], str]:
    """(file, unit) -> why of each `Kit-Off-NPU: <file>::<unit>: <why>` trailer of a patch's message; a
    trailer without a file and unit, without a reason, or naming a unit twice is refused."""
    out: dict[tuple[str, str], str] = {}
    for value in trailer_values(message, OFF_NPU_TRAILER):
        target, _, why = value.partition(": ")
        file, scoped, unit = target.strip().partition("::")
        if not (scoped and file.strip() and unit.strip()):
            raise BadDeclaration(
                f"{patch}: the trailer 'Kit-Off-NPU: {target.strip()}: ...' does not name the file "
                "and unit it covers",
                f"write {DECLARATION_FORM} in {patch}'s message",
            )
        if not why.strip():
            raise BadDeclaration(
                f"{patch}: 'Kit-Off-NPU: {target.strip()}' gives no reason",
                "say why after ': ' (the PR states it to reviewers)",
            )
        key = (file.strip(), unit.strip())
        if key in out:
            raise BadDeclaration(
                f"{patch}: 'Kit-Off-NPU: {target.strip()}' is declared twice",
                "keep one trailer per unit, with the reasons joined",
            )
        out[key] = why.strip()
    return out


def check_declared_units(
    patch: str, declared: dict[tuple[str, str], str], units: dict[str, set[str]]
) -> None:
    """Refuse a declaration naming a file the patch does not change, or a unit that file does not have;
    units: each changed file -> the units of its two versions."""
    for file, unit in declared:
        if file not in units:
            raise BadDeclaration(
                f"{patch}: 'Kit-Off-NPU: {file}::{unit}' names a file {patch} does not change",
                f"name a file it changes ({', '.join(sorted(units)) or 'none'}) or drop the "
                "trailer",
            )
        if unit not in units[file]:
            raise BadDeclaration(
                f"{patch}: 'Kit-Off-NPU: {file}::{unit}': {file} has no unit {unit}",
                "name a function as Class.method or function, a class, or <module>",
            )


def judge_off_npu(
    patch: str, changes: list[offnpu.OffNpuChange], declared: dict[tuple[str, str], str]
) -> tuple[list[Finding], list[Declared]]:
    """(findings, declared differences) of one patch: an undeclared difference, and a declaration
    naming no difference (its claim would be false), are findings."""
    findings = [
        Finding(
            c.file,
            c.line,
            OFF_NPU.id,
            f"off NPU, {c.unit} differs from upstream (`{c.statement}`"
            + (f": {c.reason}" if c.reason else "")
            + f") and {patch} does not declare it",
            'guard it by `.device.type == "npu"` on a tensor the function already uses, leaving '
            "CPU/CUDA code "
            f"as upstream wrote it, or declare it: 'Kit-Off-NPU: {c.file}::{c.unit}: <why>' in "
            f"{patch}'s message",
        )
        for c in changes
        if (c.file, c.unit) not in declared
    ]
    changed = {(c.file, c.unit) for c in changes}
    findings += [
        Finding(
            f"patches/{patch}",
            1,
            OFF_NPU.id,
            f"declares Kit-Off-NPU: {file}::{unit}, but off NPU {unit} is unchanged by this patch",
            "drop that trailer (or name the unit the patch changes)",
        )
        for file, unit in declared
        if (file, unit) not in changed
    ]
    return findings, [
        Declared(patch, f, u, why) for (f, u), why in declared.items() if (f, u) in changed
    ]


@dataclass(frozen=True)
class OffNpuProof:
    findings: list[Finding]
    declared: list[Declared]

    def claim(self) -> str:
        """What the PR says about every device but NPU: made from this proof, never written by hand."""
        how = (
            "checked by the kit: each touched `vllm_omni/` module with every NPU device test taken "
            "as false "
            "equals upstream's, function by function"
        )
        if self.findings:
            return f"Off NPU: NOT proven ({len(self.findings)} undeclared difference(s); {how})."
        if not self.declared:
            return f"Off NPU (CPU, CUDA, ROCm, XPU) nothing changes: {how}."
        changed = "; ".join(f"`{d.unit}` ({d.file}): {d.why}" for d in self.declared)
        return f"Off NPU nothing changes except, on purpose: {changed}. The rest is {how.replace('checked', 'proven')}."


def off_npu_proof(repo: Path, patches: list[Patch]) -> OffNpuProof:
    """KIT007 over the checkout's commits pristine..HEAD, one per patch in series order: each commit's
    own off-NPU differences against its parent, judged against its own declarations."""
    findings: list[Finding] = []
    declared: list[Declared] = []
    commits = gitcmd.messages(repo, f"{PRISTINE_TAG}..HEAD")
    for patch, (commit, message) in zip(patches, commits, strict=True):
        claims = declarations(patch.name, message)
        renamed = gitcmd.renamed_in(repo, commit)
        changes: list[offnpu.OffNpuChange] = []
        unit_names: dict[str, set[str]] = {}
        for path in gitcmd.changed_in(repo, commit):
            if not (path.startswith("vllm_omni/") and path.endswith(".py")):
                continue
            source = renamed.get(path, path)
            before, after = (
                gitcmd.show_file(repo, f"{commit}^", source),
                gitcmd.show_file(repo, commit, path),
            )
            changes += offnpu.off_npu_changes(
                path, before, after, renamed_from=renamed.get(path, "")
            )
            unit_names[path] = offnpu.unit_names(before) | offnpu.unit_names(after)
        check_declared_units(patch.name, claims, unit_names)
        mine, theirs = judge_off_npu(patch.name, changes, claims)
        findings += mine
        declared += theirs
    return OffNpuProof(findings, declared)
