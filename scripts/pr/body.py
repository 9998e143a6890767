"""The PR text in upstream's template (## Purpose / ## Test Plan / ## Test Result),
filled only from the patch messages and the records of runs the kit made.

A record missing says "not run"; a record made on another series digest says
"not run on this revision": no figure is ever quoted for a series it was not
measured on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from scripts.checks.rules import RULES
from scripts.checks.scope import HEADERS, Scope, rows
from scripts.report import markdown_table

Record = Mapping[str, Any]
NOT_RUN = "not run"
# (record name, what it is, what was run): the contributor's evidence, in order; {ruff} is the
# pinned version.
PLAN = (
    (
        "lint",
        "lint",
        "upstream's pre-commit hooks at its pins (ruff v{ruff} with upstream's settings, typos "
        "with "
        "upstream's configuration, pre-commit-hooks' YAML, whitespace, end-of-file and "
        "debug-statement "
        "checks) on the lines the series adds, plus the contributor kit's checks: "
        f"{'; '.join(rule.requires for rule in RULES)}",
    ),
    (
        "test-stock",
        "CPU regression, leg `stock`",
        "a CPU regression suite on the patched tree with stock torch, no torch_npu installed",
    ),
    (
        "test-npu",
        "CPU regression, leg `npu`",
        "the same suite with the pinned torch_npu (real with CANN, else a "
        "simulated NPU on CPU, said so in the result)",
    ),
    (
        "e2e",
        "e2e realtime benchmark",
        "the serve and benchmark commands above, twice with independent servers on 4 "
        "Ascend cards (SP-4): steady chunk-interval median and video md5 compared",
    ),
    (
        "mutate-series",
        "NPU contract of the added tests",
        "every NPU-branch line the series adds mutated, one edit at "
        "a time, against the added tests alone, with stock torch",
    ),
)
DEPLOY_CONFIG = "benchmarks/lingbot_world/configs/npu_usp4_eager.yaml"
MODEL = "/path/to/lingbot-world-v2-14b-causal-fast-diffusers"  # the reviewer's copy of the model
BENCHMARK = "benchmarks/lingbot_world/benchmark_lingbot_world_realtime.py"


def freshness(record: Record | None, digest: str) -> str | None:
    """Why a record cannot be quoted (None when it can)."""
    if record is None:
        return NOT_RUN
    if record.get("series_digest") != digest:
        was = str(record.get("series_digest") or "unknown")[:12]
        return f"not run on this revision (last run was on series {was}, {record.get('finished_at', 'date unknown')})"
    return None


def lint_result(r: Record) -> str:
    findings = len(r.get("findings", []))
    verdict = "passed" if r.get("passed") else f"FAILED, {findings} finding(s)"
    return (
        f"{verdict}: upstream's hooks, ruff {r.get('ruff', '?')} and the kit's checks on "
        f"{len(r.get('files', []))} Python file(s); "
        f"{r.get('pre_existing', 0)} pre-existing upstream finding(s) not counted"
    )


def test_result(r: Record) -> str:
    mode = r.get("mode", "?")
    mode_text = {
        "none": "no torch_npu",
        "simulated": "simulated NPU on CPU, not real Ascend hardware",
        "real": "real torch_npu on Ascend",
    }.get(mode, mode)
    counts = ", ".join(f"{r.get(k, 0)} {k}" for k in ("passed", "failed", "errors", "skipped"))
    versions = ", ".join(
        f"{k} {v}"
        for k, v in sorted(dict(r.get("versions", {})).items())
        if k != "torch_npu_import"
    )
    verdict = "passed" if r.get("passed_all", r.get("passed") is True) else "FAILED"
    return f"{verdict}: {counts} (mode {mode}: {mode_text}; {versions})"


def e2e_result(r: Record) -> str:
    """From the e2e record (its summary.json plus series_digest): verdict, runs, determinism, evidence
    folder."""
    medians = [run.get("steady_median_ms") for run in r.get("runs", [])]
    shown = ", ".join("-" if m is None else f"{m:.1f} ms" for m in medians) or "no run finished"
    md5 = {True: "equal", False: "DIFFERENT"}.get(
        (r.get("determinism") or {}).get("md5_equal"), "not compared"
    )
    where = (
        "stand-in server, no Ascend cards: not a hardware result"
        if r.get("stand_in")
        else "Ascend cards"
    )
    return (
        f"{r.get('verdict', '?')}: steady chunk-interval median per run {shown}; video md5 {md5}; "
        f"{where}; "
        f"evidence {r.get('evidence', 'not recorded')}"
    )


def mutation_result(r: Record) -> str:
    """The figure of `nox -s mutate -- --series-tests`: NPU-branch lines shown run, mutants killed."""
    outcomes = r.get("outcomes", [])
    counted = [o for o in outcomes if o.get("status") != "equivalent"]
    killed = sum(o.get("status") in ("killed", "timeout") for o in counted)
    equivalent = len(outcomes) - len(counted)
    text = (
        f"the series' own tests run {r.get('lines_run', 0)}/{r.get('lines', 0)} NPU-branch lines "
        "and kill "
        f"{killed}/{len(counted)} mutants of them"
    )
    if equivalent:
        text += f" ({equivalent} more listed as equivalent, each with its reason)"
    if not r.get("complete"):
        text += " (an incomplete run)"
    survivors = r.get("survivors", [])
    return text + (f"; {len(survivors)} survive: {'; '.join(survivors)}" if survivors else "")


FORMATTERS = {
    "lint": lint_result,
    "test-stock": test_result,
    "test-npu": test_result,
    "e2e": e2e_result,
    "mutate-series": mutation_result,
}


def reviewer_lint(r: Record) -> str:
    """The lint record in a reviewer's words (the contributor's checks named by what they check)."""
    findings = len(r.get("findings", []))
    verdict = "passed" if r.get("passed") else f"FAILED, {findings} finding(s)"
    return (
        f"{verdict}: upstream's hooks (ruff {r.get('ruff', '?')} with upstream's settings) and "
        f"checks of the NPU device guards on {len(r.get('files', []))} Python file(s); "
        f"{r.get('pre_existing', 0)} pre-existing finding(s) in upstream's own lines not counted"
    )


REVIEWER = {**FORMATTERS, "lint": reviewer_lint}


def evidence(
    records: Mapping[str, Record | None], digest: str, formatters: Mapping[str, Any] = FORMATTERS
) -> list[tuple[str, str, str]]:
    """(record name, label, result text) for each planned check."""
    out = []
    for name, label, _ in PLAN:
        record = records.get(name)
        why_not = freshness(record, digest)
        out.append((name, label, why_not if why_not else formatters[name](record)))
    return out


def plan_lines(ruff: str) -> list[str]:
    """What the contributor's kit ran, with the ruff version ci/kit-tools.txt pins (read by the
    caller)."""
    return [how.replace("{ruff}", ruff) for _, _, how in PLAN]


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, text) of each `## ` section of a markdown text; the part before the first has heading
    ""."""
    parts = re.split(r"(?m)^## +(.+?)\s*$", text)
    return [("", parts[0]), *zip(parts[1::2], parts[2::2], strict=True)]


def heading_key(heading: str) -> str:
    return re.sub(r"[^a-z]+", " ", heading.lower()).strip()


def in_template(template: str, filled: str) -> str:
    """filled (the kit's body) in the target's own PR template: each template section the kit fills
    (same heading, case and punctuation aside) takes the kit's text; the others keep the template's
    for the submitter to fill; a section of the kit's the template lacks follows at the end. An HTML
    comment of the template is dropped."""
    key = heading_key
    ours = {key(h): (h, t) for h, t in sections(filled) if h}
    out, used = [], set()
    for heading, text in sections(re.sub(r"(?s)<!--.*?-->", "", template)):
        if heading and key(heading) in ours:
            used.add(key(heading))
            out.append(f"## {heading}\n{ours[key(heading)][1]}")
        elif heading:
            out.append(f"## {heading}\n{text}")
        elif text.strip():
            out.append(text)
    out += [f"## {h}\n{t}" for k, (h, t) in ours.items() if k not in used]
    return "".join(part if part.endswith("\n") else part + "\n" for part in out)


# ---- one PR of the stack, for reviewers ------------------------------------------------------
# A reviewer reads what the PR carries and what was run on it, in upstream's words: no name of the
# contributor's tooling, no figure measured on anything but what the line says.

EVIDENCE_SHA = re.compile(r"/(?:commit|blob|tree)/([0-9a-f]{7,40})\b")
PERF_WORDS = re.compile(
    r"\b(faster|speed-?up|latency|throughput|stall|slow|ms\b|GB\b|memory|per layer|materiali[sz]es)",
    re.I,
)


def off_npu_text(declared: Sequence[tuple[str, str, str]], files: Sequence[str]) -> str:
    """What the PR changes on every device but NPU, from the off-NPU check of its files: (file, unit,
    why) of each declared difference."""
    how = (
        "each touched `vllm_omni/` module with every NPU device test taken as false equals "
        "upstream's, function by function (checked statically)"
    )
    mine = [d for d in declared if d[0] in files]
    if not any(f.startswith("vllm_omni/") for f in files):
        return "Off NPU: this PR changes no `vllm_omni/` module."
    if not mine:
        return f"Off NPU (CPU, CUDA, ROCm, XPU) nothing changes: {how}."
    changed = "; ".join(f"`{unit}` ({file}): {why}" for file, unit, why in mine)
    return f"Off NPU nothing changes except, on purpose: {changed}. Otherwise {how}."


def evidence_note(subject: str, evidence: str) -> str:
    """An Upstream-Evidence trailer as a note: what a stored upstream commit shows, and the check
    that says whether it is on main (the contributor's copy cannot tell)."""
    sha = EVIDENCE_SHA.search(evidence)
    check = (
        f" Whether it is on main: `git merge-base --is-ancestor {sha[1][:12]} origin/main` in a clone "
        "of this repository (exit 0: on main)."
        if sha
        else ""
    )
    return f'Related upstream history for "{subject}": {evidence}.{check}'


def performance_note(text: str, measured: str | None) -> str | None:
    """The review bot asks of each performance claim the bottleneck, the value measured, one A/B per
    item. Without a recorded A/B the PR claims no speed-up; it says so where its text names a cost."""
    if not PERF_WORDS.search(text):
        return None
    if measured:
        return f"Performance: {measured}"
    return (
        "Performance: the text above names the cost this PR removes (the bottleneck); no A/B of "
        "this PR was run, so it claims no measured speed-up."
    )


def result_lines(
    results: Sequence[tuple[str, str, str]], commands: Mapping[str, str], own: str | None
) -> list[str]:
    """Test Result: what ran (and on what) and what did not, with the command that would run it."""
    labels = {
        "lint": "upstream's pre-commit hooks",
        "test-stock": "CPU tests, stock torch (no torch_npu)",
        "test-npu": "CPU tests with torch_npu",
        "e2e": "realtime benchmark on 4 Ascend cards, two independent servers",
    }
    out = [
        f"- **this PR's own tests on its base (only the PRs it depends on)**: {own}"
        if own
        else f"- **this PR's own tests on its base (only the PRs it depends on)**: not run; run: "
        f"`{commands['own']}`"
    ]
    for name, _, text in results:
        if name == "mutate-series":
            # a figure with no command a reviewer can run: quoted only when mutants ran
            if not text.startswith(NOT_RUN) and "kill 0/0" not in text:
                out.append(
                    f"- **NPU branches mutated, one edit at a time, against the added tests**: {text}"
                )
            continue
        if name not in labels or (name == "e2e" and "e2e" not in commands):
            continue
        if text.startswith(NOT_RUN):
            earlier = " (the last run was on an earlier version)" if text != NOT_RUN else ""
            how = commands[name]
            how = how if how.startswith("the ") else f"`{how}`"
            out.append(f"- **{labels[name]}**: not run{earlier}; run: {how}")
        else:
            out.append(f"- **{labels[name]}**, with the whole stack applied: {text}")
    return out


def pr_body(
    purpose: str,
    depends: Sequence[str],
    commits: Sequence[str],
    notes: Sequence[str],
    plan: str,
    results: Sequence[str],
    scopes: Sequence[Scope],
    base: str,
) -> str:
    """The body of one PR of the stack in upstream's sections."""
    dep = "".join(f"Depends on: {d}\n" for d in depends)
    dep = f"{dep}\n" if dep else ""
    listed = "\n".join(f"- {s}" for s in commits)
    noted = "".join(f"- {n}\n" for n in notes)
    noted = f"\n### Notes for reviewers\n\n{noted}" if noted else ""
    return f"""## Purpose

{dep}{purpose}

Commits:

{listed}
{noted}
## Test Plan

{plan}

## Test Result

On {base}:

{chr(10).join(results)}

Scope of the change:

{markdown_table(HEADERS, rows(scopes))}
"""


def pr_plan(tests: Sequence[str], with_e2e: bool, has_config: bool = True) -> str:
    pytest_line = f"pytest -v {' '.join(tests)}" if tests else "# this PR adds no test file"
    where = (
        ""
        if has_config
        else f" (`{DEPLOY_CONFIG}` is not in this branch's tree: upstream's, where it has it)"
    )
    e2e = (
        f"""

On four Ascend cards (64 GB each), the realtime stack with the 4-card deploy config{where}:

```sh
MODEL={MODEL}
vllm-omni serve "$MODEL" --omni --deploy-config {DEPLOY_CONFIG} --port 8000
python {BENCHMARK} --host 127.0.0.1 --port 8000 --model "$MODEL" --image first-frame.png \\
    --num-chunks 32 --seed 0 --output-json run1.json --save-video run1.mp4
```

Twice, each with its own server (run1, run2): the two videos' md5 are equal, and
`metrics.interval_steady.median_ms` (the steady chunk interval) stays in the reference band."""
        if with_e2e
        else ""
    )
    return f"""In an upstream checkout with this PR applied, on CPU (stock torch; no torch_npu, no Ascend card):

```sh
{pytest_line}
```{e2e}"""
