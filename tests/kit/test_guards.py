"""The one table of checkout refusals (scripts/checkout/guards.py GUARDS): every command's guard reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.checkout import IncompleteCheckout, LocalEdits, StaleCheckout
from scripts.checkout.guards import GUARDS, Condition, Inspection, guard


class Given(Inspection):
    """An inspection whose conditions are given (no git): the table's logic alone."""

    def __init__(self, given: dict[Condition, dict[str, str]]) -> None:
        super().__init__(Path("/nowhere/.work/vllm-omni"), None)
        self.given = given
        self.asked: list[Condition] = []

    def holds(self, condition: Condition) -> dict[str, str] | None:
        self.asked.append(condition)
        return self.given.get(condition)


FACTS = {"patch": "0002-x.patch", "op": "git rebase", "on": "branch mine", "dirty": "a.py", "built": "0.28.0",
         "now": "0.30.0", "differs": "0003-y.patch", "key": "format.signoff", "more": "", "lock": ".git/index.lock",
         "commit": "0" * 40}  # fmt: skip


@pytest.mark.parametrize("purpose", sorted(GUARDS))
def test_every_row_holds_a_condition_the_inspection_reads_and_formats(purpose: str) -> None:
    for condition, error, what, fix in GUARDS[purpose]:
        assert vars(Inspection).get(condition.__name__) is condition, condition
        if error is not None:  # every field a message names is a fact the kit has
            what.format(where="w", **FACTS), fix.format(where="w", **FACTS)


def test_a_row_whose_condition_is_not_the_inspections_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    def stray(seen: Inspection) -> dict[str, str] | None:
        return None

    monkeypatch.setitem(GUARDS, "use", ((stray, StaleCheckout, "x", "y"),))
    with pytest.raises(AssertionError):
        test_every_row_holds_a_condition_the_inspection_reads_and_formats("use")


@pytest.mark.parametrize(
    ("purpose", "holds", "error", "message"),
    [
        # built from other inputs and dirty: a run of it says the inputs first, refresh the edits first
        (
            "use",
            {Inspection.other_pin: FACTS, Inspection.dirty: FACTS},
            StaleCheckout,
            "was built from 0.28.0, the pin is now 0.30.0",
        ),
        ("export", {Inspection.other_pin: FACTS, Inspection.dirty: FACTS}, LocalEdits, "has uncommitted edits"),
        # the kit's own unfinished apply: apply rebuilds it, every other purpose refuses it
        ("replace", {Inspection.applying: FACTS, Inspection.dirty: FACTS}, None, ""),
        ("use", {Inspection.applying: FACTS, Inspection.dirty: FACTS}, StaleCheckout, "an apply was interrupted"),
        ("export", {Inspection.applying: FACTS}, IncompleteCheckout, "does not hold the whole series"),
        # commits not exported: what refresh is for, what apply must not discard
        ("export", {Inspection.unexported: FACTS}, None, ""),
        ("replace", {Inspection.unexported: FACTS}, LocalEdits, "not exported to patches/"),
        ("replace", {Inspection.elsewhere: FACTS}, LocalEdits, "is on branch mine, not on series"),
        ("replace", {Inspection.no_repository: {}, Inspection.dirty: FACTS}, None, ""),
        ("use", {Inspection.absent: {}}, StaleCheckout, "no checkout at"),
        # the user's own settings and gits come before everything the kit would do (invariant 9)
        ("export", {Inspection.configured: FACTS, Inspection.dirty: FACTS}, LocalEdits, "sets format.signoff"),
        ("foreign", {Inspection.git_busy: FACTS}, LocalEdits, "another git is working"),
        ("use", {Inspection.git_busy: FACTS, Inspection.applying: FACTS}, LocalEdits, "another git is working"),
        (
            "replace",
            {Inspection.pristine_moved: FACTS, Inspection.applying: FACTS},
            StaleCheckout,
            "tag is gone or moved",
        ),
        ("use", {Inspection.refresh_killed: FACTS, Inspection.dirty: FACTS}, StaleCheckout, "a refresh was killed"),
    ],
)
def test_the_first_row_that_holds_decides(purpose: str, holds: dict, error: type | None, message: str) -> None:
    if error is None:
        guard(purpose, Given(holds))
        return
    with pytest.raises(error, match=message) as raised:
        guard(purpose, Given(holds))
    assert "{" not in str(raised.value)  # every field filled in


def test_a_paused_checkout_is_refused_before_git_is_asked_about_its_tree() -> None:
    seen = Given({Inspection.paused: FACTS, Inspection.dirty: FACTS})
    with pytest.raises(LocalEdits, match="in the middle of a git rebase"):
        guard("export", seen)
    assert Inspection.dirty not in seen.asked and seen.asked[-1] is Inspection.paused
