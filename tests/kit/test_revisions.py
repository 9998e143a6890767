"""patches/revisions.toml against its schema: each fault one RevisionsError naming the file, the
revision and the key, the advice made from what the user wrote."""

from __future__ import annotations

import pytest

from scripts.revisions import RevisionsError, parse

GOOD = (
    "# revisions of mine\n"
    '[v1]\nseries_digest = "' + "a" * 64 + '"\npin = "vllm-omni 0.30.0 (wheel)"\n'
    'kit_commit = ""\nprepared = "2026-01-02T03:04:05+00:00"\nnote = "a key of mine is kept"\n'
)
# (what is wrong, (old, new) in the good file, what the one line says)
FAULTS = [
    ("missing-digest", ('series_digest = "' + "a" * 64 + '"\n', ""), "[v1] has no series_digest"),
    ("missing-prepared", ('prepared = "2026-01-02T03:04:05+00:00"\n', ""), "has no prepared"),
    ("type-float", ('pin = "vllm-omni 0.30.0 (wheel)"', "pin = 0.30"), 'quote it: pin = "0.30"'),
    ("type-int", ('kit_commit = ""', "kit_commit = 1234"), 'quote it: kit_commit = "1234"'),
    (
        "type-date",
        ('prepared = "2026-01-02T03:04:05+00:00"', "prepared = 2026-01-02T03:04:05+00:00"),
        'quote it: prepared = "2026-01-02T03:04:05+00:00"',
    ),
    ("type-not-a-table", ("[v1]\n", "v1 = 3\n[v2]\n"), "'v1' is not a revision table"),
    ("duplicate-key", ('kit_commit = ""', 'kit_commit = ""\nkit_commit = ""'), "kit_commit"),
    ("duplicate-table", ("# revisions of mine\n", "[v1]\n"), "[v1]"),
    ("extra-table", ("[v1]\n", "[notes]\nx = 1\n[v1]\n"), "'notes' is not a revision table"),
    ("range-label", ("[v1]\n", "[v01]\n"), "'v01' is not a revision table"),
    ("range-digest", ('"' + "a" * 64 + '"', '"abc"'), "not 64 hex digits"),
    ("range-prepared", ("2026-01-02T03:04:05+00:00", "yesterday"), "not an ISO 8601 date"),
]


@pytest.mark.parametrize(("edit", "needle"), [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
def test_revisions_file_against_its_schema(edit: tuple[str, str], needle: str) -> None:
    assert [r.label for r in parse(GOOD)] == ["v1"]  # a key of the user's is allowed
    text = GOOD.replace(*edit, 1)
    assert text != GOOD
    with pytest.raises(RevisionsError) as caught:
        parse(text)
    message = str(caught.value)
    assert message.startswith("patches/revisions.toml") and " -- " in message, message
    assert needle in message, message
