"""Every e2e option, from its flag and its KIT_E2E_* variable, is checked against its rule before
anything starts. Bad values come from the rule table (scripts/e2e/config.py OPTIONS); only
self-parsed options list examples."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from conftest import KIT_ROOT
from e2e_prereq import PARSING as WS

from scripts.e2e import config, lock, run
from scripts.e2e.config import OPTIONS, Option, number_text
from scripts.errors import KitError

# Options of kind "parsed" check themselves; each needs bad examples here (bad_values fails
# without).
PARSED_BAD = {
    "band": ["3167:2865", "x", "1:", "nan:nan", "-1:2"],
    "cards": ["a,b", "-1", ","],
    "server-url": ["http://h:1", "ws://h", "ws://h:1/other", "ws://h:x"],
}


def bad_values(o: Option) -> list[str]:
    """Values the rule must refuse: wrong type, each side of each bound, a non-multiple, a non-choice."""
    if o.kind == "parsed":
        return PARSED_BAD[o.name]
    if o.kind == "choice":
        return ["nope", o.choices[0].upper() + "x"]
    if o.kind in ("flag", "text"):  # a switch is given or not; free text is the user's
        return []
    bad = ["abc", "1e3x"] + (["8.5"] if o.kind == "int" else ["nan", "inf", "-inf"])
    if o.lo is not None:
        bad.append(number_text(o.lo if o.lo_open else o.lo - 1))
    if o.hi is not None:
        bad.append(number_text(o.hi if o.hi_open else o.hi + 1))
    if o.multiple_of > 1:
        bad.append(str(int(o.lo or 0) + o.multiple_of + 1))
    return bad


def good_values(o: Option) -> list[str]:
    """The bounds themselves when they are allowed, and the default."""
    good = [o.default] if o.default is not None else []
    good += [number_text(o.lo)] if o.lo is not None and not o.lo_open else []
    good += [number_text(o.hi)] if o.hi is not None and not o.hi_open else []
    return good


def refusal(option: Option, value: str, source: str) -> str:
    """What is wrong with the refusal of one bad value ("" when it names its source, the value and a
    fix)."""
    # --opt=VALUE: how a value that starts with "-" (-1:2, -inf) is written on a command line
    argv, env = ([f"{option.flag}={value}"], {}) if source == "flag" else ([], {option.env: value})
    try:
        config.parse_args(WS, argv, env)
    except KitError as refused:
        named = option.flag if source == "flag" else option.env
        said = (
            refused.what.startswith((f"{named} ", f"{named}: "))
            and repr(value) in refused.what
            and refused.fix
        )
        return "" if said and "\n" not in str(refused) else str(refused)
    return "accepted"


def test_every_bad_value_is_refused_naming_its_source_and_the_rule() -> None:
    # A value comes from the flag, or from the variable of an option that reads one; a switch
    # carries none.
    sources = {
        o.name: ("flag", "env") if o.from_env else ("flag",) for o in OPTIONS if o.kind != "flag"
    }
    cases = [(o, v, s) for o in OPTIONS for v in bad_values(o) for s in sources.get(o.name, ())]
    wrong = {f"{s} {o.name}={v}": refusal(o, v, s) for o, v, s in cases}
    assert {case: why for case, why in wrong.items() if why} == {}


def test_the_default_and_the_allowed_bounds_pass_into_the_options_field() -> None:
    fields = {f.name for f in config.dataclasses.fields(config.E2EConfig)}
    options = {o.field for o in OPTIONS}
    # band -> band_ms
    assert options - fields == {"band"} and fields - options == {"checkout", "band_ms"}
    for option in (o for o in OPTIONS if o.kind != "flag"):
        for value in good_values(option):
            # chunks must stay above warmup-chunks
            extra = {"warmup-chunks": ["--chunks", "1000"], "chunks": ["--warmup-chunks", "0"]}.get(
                option.name, []
            )
            parsed = getattr(
                config.parse_args(WS, [f"{option.flag}={value}", *extra], {}), option.field
            )
            assert parsed == option.value(value, option.flag), (option.name, value, parsed)


def test_a_flag_wins_over_its_variable_an_empty_variable_is_unset_and_only_named_variables_are_read() -> (
    None
):
    # the flag counts
    assert config.parse_args(WS, ["--cards", "4,5"], {"KIT_E2E_CARDS": "a,b"}).cards == (4, 5)
    assert config.parse_args(WS, [], {"KIT_E2E_CARDS": ""}).cards == (0, 1, 2, 3)
    lock_dir = config.parse_args(
        WS, [], {"KIT_E2E_LOCK_DIR": "/var/lock/k", "KIT_E2E_MODEL": "/m"}
    ).lock_dir
    assert lock_dir == Path("/var/lock/k")
    # no job sets it: not read
    assert config.parse_args(WS, [], {"KIT_E2E_MODEL": "/m"}).model is None
    # not read
    assert config.parse_args(WS, [], {"KIT_E2E_PORT": "abc", "KIT_E2E_STANDIN": "1"}).port == 8091
    # a variable only where an Ascend job sets one: the workflows, the Buildkite steps, job.sh, the
    # docker-host form
    jobs = [
        *(KIT_ROOT / ".github" / "workflows").glob("*.yml"),
        *(KIT_ROOT / ".buildkite").glob("*.yml"),
        *(KIT_ROOT / "ci" / "ascend").glob("*.sh"),
        KIT_ROOT / "docs" / "ascend-ci.md",
    ]
    workflows = " ".join(p.read_text(encoding="utf-8") for p in jobs)
    assert {o.env for o in OPTIONS if o.from_env} == set(
        re.findall(r"\bKIT_E2E_[A-Z_]+\b", workflows)
    )


def test_help_says_each_default_as_the_run_computes_it_and_each_name_once() -> None:
    p = argparse.ArgumentParser(prog="e2e")
    config.add_options(p)
    text = " ".join(p.format_help().split())
    assert "None" not in text and text.count("KIT_E2E_BAND") == 1
    lo, hi = map(number_text, config.ASCEND_BAND_MS)
    s_lo, s_hi = map(number_text, config.STANDIN_BAND_MS)
    assert f"default: {lo}:{hi} on Ascend, {s_lo}:{s_hi} with --standin" in text
    assert f"default: $TMPDIR/{config.LOCK_DIR_NAME}" in text
    deploy = next(o for o in OPTIONS if o.name == "deploy-config")
    assert (
        config.help_text(deploy) == f"deploy YAML; default: <checkout>/{config.DEPLOY_CONFIG_REL}"
    )


def test_rules_read_as_words() -> None:
    by_name = {o.name: o for o in OPTIONS}
    assert by_name["port"].rule() == "an integer from 1 to 65535"
    assert by_name["width"].rule() == "an integer multiple of 16 from 16 to 8192"
    assert by_name["ab-confidence"].rule() == "a number >= 0.5 and < 1"
    assert by_name["health-timeout-s"].rule() == "a number > 0 and <= 604800"
    assert by_name["warmup-chunks"].rule() == "an integer >= 0"


def test_only_a_run_on_real_cards_takes_card_locks_and_a_held_card_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    assert run.locked_cards(config.parse_args(WS, ["--cards", "2,3"], {})) == (2, 3)
    assert run.locked_cards(config.parse_args(WS, ["--standin", "--cards", "2,3"], {})) == ()
    assert run.locked_cards(config.parse_args(WS, ["--server-url", "ws://h:1"], {})) == ()
    with lock.hold_cards([2], tmp_path / "locks", 0):
        with pytest.raises(lock.CardsBusyError, match="npu2 is held by another e2e job"):
            with lock.hold_cards([2, 3], tmp_path / "locks", 0):
                pass
        with lock.hold_cards([], tmp_path / "other", 0):  # a stand-in's (no cards): never waits
            pass
    assert not (tmp_path / "other").exists()
