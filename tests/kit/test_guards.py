"""The one table of checkout refusals (scripts/checkout/guards.py GUARDS): every command's guard reads
it."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from scripts.checkout import IncompleteCheckout, LocalEdits, StaleCheckout
from scripts.checkout.guards import GUARDS, Condition, Inspection, guard


class Given(Inspection):
    """An inspection where the given conditions hold (no git): the table's logic alone."""

    def __init__(self, given: tuple[Condition, ...]) -> None:
        super().__init__(Path("/nowhere/.work/vllm-omni"), None)
        self.given = {condition: {} if condition in BARE else FACTS for condition in given}
        self.asked: list[Condition] = []

    def holds(self, condition: Condition) -> dict[str, str] | None:
        self.asked.append(condition)
        return self.given.get(condition)


Ins = Inspection
# conditions whose messages name no fact but the checkout's place
BARE = (Ins.no_repository, Ins.absent)
FACTS = {
    "patch": "0002-x.patch",
    "op": "git rebase",
    "on": "branch mine",
    "dirty": "a.py",
    "built": "0.28.0",
    "now": "0.30.0",
    "differs": "0003-y.patch",
    "key": "format.signoff",
    "more": "",
    "lock": ".git/index.lock",
    "file": "attributes",
    "commit": "0" * 40,
}


@pytest.mark.parametrize("purpose", sorted(GUARDS))
def test_every_row_holds_a_condition_the_inspection_reads_and_formats(purpose: str) -> None:
    for condition, error, what, fix in GUARDS[purpose]:
        assert vars(Inspection).get(condition.__name__) is condition, condition
        if error is not None:  # every field a message names is a fact the kit has
            what.format(where="w", **FACTS), fix.format(where="w", **FACTS)


def test_a_row_whose_condition_is_not_the_inspections_fails_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(GUARDS, "use", ((lambda seen: None, StaleCheckout, "x", "y"),))
    with pytest.raises(AssertionError):
        test_every_row_holds_a_condition_the_inspection_reads_and_formats("use")


@pytest.mark.parametrize(
    ("purpose", "holds", "error", "message"),
    [
        # built from other inputs and dirty: a run of it says the inputs first, refresh the edits
        # first
        (
            "use",
            (Ins.other_pin, Ins.dirty),
            StaleCheckout,
            "was built from 0.28.0, the pin is now 0.30.0",
        ),
        ("export", (Ins.other_pin, Ins.dirty), LocalEdits, "has uncommitted edits"),
        # the kit's own unfinished apply: apply rebuilds it, every other purpose refuses it
        ("replace", (Ins.applying, Ins.dirty), None, ""),
        ("use", (Ins.applying, Ins.dirty), StaleCheckout, "an apply was interrupted"),
        ("export", (Ins.applying,), IncompleteCheckout, "does not hold the whole series"),
        # commits not exported: what refresh is for, what apply must not discard
        ("export", (Ins.unexported,), None, ""),
        ("replace", (Ins.unexported,), LocalEdits, "not exported to patches/"),
        ("replace", (Ins.elsewhere,), LocalEdits, "is on branch mine, not on series"),
        ("replace", (Ins.no_repository, Ins.dirty), None, ""),
        ("use", (Ins.absent,), StaleCheckout, "no checkout at"),
        # the user's own settings and gits come before everything the kit would do (invariant 9)
        ("export", (Ins.configured, Ins.dirty), LocalEdits, "sets format.signoff"),
        ("foreign", (Ins.git_busy,), LocalEdits, "another git is working"),
        ("use", (Ins.git_busy, Ins.applying), LocalEdits, "another git is working"),
        ("replace", (Ins.pristine_moved, Ins.applying), StaleCheckout, "tag is gone or moved"),
        ("use", (Ins.refresh_killed, Ins.dirty), StaleCheckout, "a refresh was killed"),
        pytest.param(
            "export",
            (Ins.paused, Ins.dirty),
            LocalEdits,
            "in the middle of a git rebase",
            id="paused",
        ),
    ],
)
def test_the_first_row_that_holds_decides(
    purpose: str, holds: tuple, error: type | None, message: str
) -> None:
    seen = Given(holds)
    with pytest.raises(error, match=message) if error else contextlib.nullcontext() as raised:
        guard(purpose, seen)
    assert raised is None or "{" not in str(raised.value)  # every field filled in
    # nothing is asked after the row that holds (a paused checkout's tree, say), if one does
    assert [c for c in seen.asked if c in holds] in ([], seen.asked[-1:]), seen.asked
