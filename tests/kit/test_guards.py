"""The one table of checkout refusals (scripts/checkout.py GUARDS): every command's guard reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.checkout import GUARDS, IncompleteCheckout, Inspection, LocalEdits, StaleCheckout, guard


class Given(Inspection):
    """An inspection whose conditions are given (no git): the table's logic alone."""

    def __init__(self, holds: dict[str, dict[str, str]]) -> None:
        super().__init__(Path("/nowhere/.work/vllm-omni"), None)
        self.holds = holds
        self.asked: list[str] = []

    def condition(self, name: str) -> dict[str, str] | None:
        self.asked.append(name)
        return self.holds.get(name)


FACTS = {"patch": "0002-x.patch", "op": "git rebase", "on": "branch mine", "dirty": "a.py", "built": "0.28.0",
         "now": "0.30.0", "differs": "0003-y.patch", "key": "format.signoff", "more": "", "lock": ".git/index.lock",
         "commit": "0" * 40}  # fmt: skip


@pytest.mark.parametrize("purpose", sorted(GUARDS))
def test_every_row_names_a_condition_the_inspection_reads_and_formats(purpose: str) -> None:
    for condition, error, what, fix in GUARDS[purpose]:
        assert callable(getattr(Inspection, "_" + condition.replace("-", "_"), None)), condition
        if error is not None:  # every field a message names is a fact the kit has
            what.format(where="w", **FACTS), fix.format(where="w", **FACTS)


def test_a_row_with_an_unknown_condition_fails_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(GUARDS, "use", (("misspelt", StaleCheckout, "x", "y"),))
    with pytest.raises(AttributeError):
        guard("use", Inspection(Path("/nowhere/x"), None))


@pytest.mark.parametrize(
    ("purpose", "holds", "error", "message"),
    [
        # built from other inputs and dirty: a run of it says the inputs first, refresh the edits first
        ("use", {"other-pin": FACTS, "dirty": FACTS}, StaleCheckout, "was built from 0.28.0, the pin is now 0.30.0"),
        ("export", {"other-pin": FACTS, "dirty": FACTS}, LocalEdits, "has uncommitted edits"),
        # the kit's own unfinished apply: apply rebuilds it, every other purpose refuses it
        ("replace", {"applying": FACTS, "dirty": FACTS}, None, ""),
        ("use", {"applying": FACTS, "dirty": FACTS}, StaleCheckout, "an apply was interrupted"),
        ("export", {"applying": FACTS}, IncompleteCheckout, "does not hold the whole series"),
        # commits not exported: what refresh is for, what apply must not discard
        ("export", {"unexported": FACTS}, None, ""),
        ("replace", {"unexported": FACTS}, LocalEdits, "not exported to patches/"),
        ("replace", {"elsewhere": FACTS}, LocalEdits, "is on branch mine, not on series"),
        ("replace", {"no-repository": {}, "dirty": FACTS}, None, ""),
        ("use", {"absent": {}}, StaleCheckout, "no checkout at"),
        # the user's own settings and gits come before everything the kit would do (invariant 9)
        ("export", {"configured": FACTS, "dirty": FACTS}, LocalEdits, "sets format.signoff"),
        ("foreign", {"git-busy": FACTS}, LocalEdits, "another git is working"),
        ("use", {"git-busy": FACTS, "applying": FACTS}, LocalEdits, "another git is working"),
        ("replace", {"pristine-moved": FACTS, "applying": FACTS}, StaleCheckout, "tag is gone or moved"),
        ("use", {"refresh-killed": FACTS, "dirty": FACTS}, StaleCheckout, "a refresh was killed"),
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
    seen = Given({"paused": FACTS, "dirty": FACTS})
    with pytest.raises(LocalEdits, match="in the middle of a git rebase"):
        guard("export", seen)
    assert "dirty" not in seen.asked and seen.asked[-1] == "paused"
