"""The Ascend jobs as written (workflow, Buildkite files, ci/ascend/), read as data; each check has
broken copies it must refuse. The shell pieces run in bash, over a stand-in CANN tree and a stand-in
`gh`."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import KIT_ROOT
from faulttable import one_line_error
from kithelpers import npusmi_sample

from scripts import ascendci, records
from scripts.checkout.guards import verify_current
from scripts.e2e import preflight
from scripts.errors import KitError
from scripts.pin import fetch_wheel, load_pin
from scripts.series import load_series
from scripts.workspace import Workspace

WORKFLOW = KIT_ROOT / ".github" / "workflows" / "ascend-e2e.yml"
PIPELINE = KIT_ROOT / ".buildkite" / "ascend-e2e.yml"
STEP = KIT_ROOT / ".buildkite" / "ascend-e2e-step.yml"
JOB = KIT_ROOT / "ci" / "ascend" / "job.sh"
ENV_SH = KIT_ROOT / "ci" / "ascend" / "env.sh"
TARGETS = ascendci.load(KIT_ROOT / "ci", ascendci.TARGETS)
RUNTIME_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
# a stand-in CANN tree: where each set_env.sh is, the unset variable it appends to, the variable it
# sets
CANN = {
    "ascend-toolkit": ("PYTHONPATH", "ASCEND_HOME_PATH"),
    "nnal/atb": ("LD_LIBRARY_PATH", "ATB_HOME_PATH"),
}
DIGEST = "registry.example/kit/ascend-ci@sha256:" + "a" * 64
APPROVED = "1" * 40
GITHUB_HOSTED = {"ubuntu-24.04", "ubuntu-24.04-arm"}


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=yaml.BaseLoader)  # strings only: "on" stays a key, "1" stays "1"


def stages(command: str) -> list[str]:
    """The ci/ascend/job.sh stages a run line or command names, in order."""
    return [
        w
        for line in command.splitlines()
        if "ci/ascend/job.sh" in line
        for w in line.split("ci/ascend/job.sh", 1)[1].split()
    ]


def stage_problems(names: list[str]) -> list[str]:
    if names[:1] != ["commit"]:
        return ["the approved commit is not checked first (job.sh commit)"]
    if "leg" not in names:
        return ["no step runs the npu leg in mode real (job.sh leg)"]
    if "e2e" not in names or names.index("leg") > names.index("e2e"):
        return ["the real npu leg does not run before the e2e"]
    return []


TRUSTED_UPLOAD = "git show FETCH_HEAD:ci/ascend/buildkite-upload.sh | bash -s --"


def workflow_problems(text: str) -> list[str]:
    """What keeps ascend-e2e.yml from running only approved commits, on the pool, the way Ascend CI
    runs."""
    doc, problems = load_yaml(text), []
    if list(doc["on"]) != ["workflow_dispatch"]:
        problems.append(f"triggers other than workflow_dispatch: {list(doc['on'])}")
    inputs = doc["on"]["workflow_dispatch"]["inputs"]
    free = sorted(
        name
        for name, spec in inputs.items()
        if spec.get("type") != "choice" and name not in ("pr", "sha")
    )
    if free:
        problems.append(f"free-text inputs besides pr and sha: {free}")
    label = inputs.get("runner_label", {})
    if label.get("type") != "choice" or sorted(label.get("options", [])) != sorted(
        TARGETS["github"]
    ):
        problems.append("runner_label is not a choice of exactly ci/ascend/targets.toml's labels")
    if doc.get("permissions") != {}:
        problems.append("the workflow's default permissions are not empty")
    gate = doc["jobs"]["gate"]["steps"][-1]["run"]
    for needle, what in (
        ('"refs/heads/$DEFAULT_BRANCH"', "the dispatched branch"),
        ('"$DISPATCHED_SHA" == "$SHA"', "the commit with pr=0"),
        ("pulls/$PR", "the PR head"),
        ("ascendci image github", "the image list"),
    ):
        if needle not in gate:
            problems.append(f"the gate does not check {what}")
    job = doc["jobs"]["e2e"]
    if job.get("runs-on") != "${{ inputs.runner_label }}":
        problems.append(f"runs-on is not the one chosen pool label: {job.get('runs-on')}")
    container = job.get("container", {})
    if set(container) - {"credentials"} != {"image"} or container["image"] != (
        "${{ needs.gate.outputs.image }}"
    ):
        problems.append("the container has options or volumes, or an image the gate did not check")
    credentials = container.get("credentials", {})
    if set(credentials) != {"username", "password"} or not all(
        v.startswith("${{ secrets.") for v in credentials.values()
    ):
        problems.append("the container has no pull credentials from the repository's secrets")
    if {k: job.get("env", {}).get(k) for k in RUNTIME_ENV} != RUNTIME_ENV:
        problems.append(
            "the job's env lacks HF_HUB_OFFLINE=1 or VLLM_WORKER_MULTIPROC_METHOD=spawn"
        )
    runs = [step.get("run", "") for step in job["steps"]]
    if any("set_env.sh" in run or "set -u" in run for run in runs):
        problems.append(
            "a step sources CANN or sets -u itself (job.sh does, through ci/ascend/env.sh)"
        )
    problems += stage_problems([s for run in runs for s in stages(run)])
    return problems


def pipeline_problems(pipeline: str, step: str) -> list[str]:
    """What keeps the Buildkite files from running approved commits on vllm-omni's NPU queues."""
    steps, problems = load_yaml(pipeline)["steps"], []
    block = next((s for s in steps if "block" in s), None)
    field = next((f for f in (block or {}).get("fields", []) if f.get("key") == "ascend-queue"), {})
    if sorted(o["value"] for o in field.get("options", [])) != sorted(TARGETS["buildkite"]):
        problems.append("no block step offers exactly ci/ascend/targets.toml's queues")
    upload = next((s for s in steps if "ci/ascend/buildkite-upload.sh" in s.get("command", "")), {})
    if not block or upload.get("depends_on") != block.get("key"):
        problems.append("the upload does not wait for the block step (the approval)")
    if not (block or {}).get("allowed_teams"):
        problems.append(
            "the block step has no allowed_teams: anyone with build access could approve"
        )
    if TRUSTED_UPLOAD + " step" not in upload.get(
        "command", ""
    ) or "$$BUILDKITE_PIPELINE_DEFAULT_BRANCH" not in upload.get("command", ""):
        problems.append(
            "the upload step does not run the default branch's ci/ascend/buildkite-upload.sh step"
        )
    (job,) = load_yaml(step)["steps"]
    secrets = [
        p.get("kubernetes", {}).get("podSpecPatch", {}).get("imagePullSecrets")
        for p in job.get("plugins", [])
    ]
    if not any(secrets):
        problems.append(
            "the NPU step has no kubernetes plugin with imagePullSecrets (the cluster's pull "
            "secret)"
        )
    if 'KIT_ASCEND_COMMIT="$$BUILDKITE_COMMIT"' not in job.get("command", ""):
        problems.append("the NPU step does not check its commit against BUILDKITE_COMMIT")
    if job.get("agents") != {"queue": "${KIT_ASCEND_QUEUE}", "resource_class": "npu-4"}:
        problems.append(
            f"agents are not the chosen queue with resource_class npu-4: {job.get('agents')}"
        )
    if job.get("image") != "${KIT_ASCEND_IMAGE}":
        problems.append("the step's image is not the one the upload checked")
    if {k: job.get("env", {}).get(k) for k in RUNTIME_ENV} != RUNTIME_ENV:
        problems.append(
            "the step's env lacks HF_HUB_OFFLINE=1 or VLLM_WORKER_MULTIPROC_METHOD=spawn"
        )
    return problems + stage_problems(stages(job.get("command", "")))


def job_script_problems(text: str) -> list[str]:
    """What breaks job.sh on a CANN image: nounset before CANN is sourced; a card stage without
    CANN/ATB."""
    problems = []
    before = text.split("source ci/ascend/env.sh", 1)[0]
    if any(
        line.strip().startswith("set -") and "u" in line.split()[1] for line in before.splitlines()
    ):
        problems.append("set -u before ci/ascend/env.sh: CANN's set_env.sh reads unset variables")
    for stage in ("leg", "e2e"):
        body = text.split(f"\n    {stage})\n", 1)[-1].split(";;", 1)[0]
        if "source ci/ascend/env.sh" not in body:
            problems.append(f"stage {stage} runs without ci/ascend/env.sh (CANN and ATB)")
    if '--python "$(command -v python3)" --require real' not in text:
        problems.append("the leg does not require mode real in the image's python3")
    return problems


W, P, S, J = "workflow", "pipeline", "step", "job"
BROKEN = [
    (
        W,
        ("          - linux-aarch64-a3-4\n", "          - linux-aarch64-a2-4\n"),
        "runner_label is not a choice",
    ),
    (W, ("        type: choice\n", "        type: string\n"), "free-text inputs"),
    (
        W,
        (
            "    runs-on: ${{ inputs.runner_label }}",
            '    runs-on: [self-hosted, "${{ inputs.runner_label }}"]',
        ),
        "runs-on is not the one chosen pool label",
    ),
    (
        W,
        (
            "      image: ${{ needs.gate.outputs.image }} # zizmor: ignore[unpinned-images]\n",
            "      image: ${{ needs.gate.outputs.image }} # zizmor: ignore[unpinned-images]\n"
            "      options: --device /dev/davinci0\n",
        ),
        "the container has options",
    ),
    (W, ('      HF_HUB_OFFLINE: "1"', '      HF_HUB_OFFLINE: "0"'), "lacks HF_HUB_OFFLINE=1"),
    (
        W,
        ('            [[ "$DISPATCHED_SHA" == "$SHA" ]]', "            true"),
        "the commit with pr=0",
    ),
    (W, ('[[ "$REF" == "refs/heads/$DEFAULT_BRANCH" ]] ||', "true ||"), "the dispatched branch"),
    (
        W,
        (
            "run: ci/ascend/job.sh leg\n",
            "run: set -u; source /usr/local/Ascend/ascend-toolkit/set_env.sh\n",
        ),
        "sources CANN or sets -u",
    ),
    (
        W,
        ("run: ci/ascend/job.sh leg\n", "run: ci/ascend/job.sh apply\n"),
        "no step runs the npu leg",
    ),
    (
        W,
        ("  workflow_dispatch:\n", "  pull_request_target:\n  workflow_dispatch:\n"),
        "triggers other than",
    ),
    (
        P,
        ("            value: ascend-a3\n", "            value: ascend-any\n"),
        "no block step offers",
    ),
    (P, ("    depends_on: approve\n", ""), "does not wait for the block step"),
    (S, ('      resource_class: "npu-4"', '      resource_class: "npu-1"'), "resource_class npu-4"),
    (
        S,
        ("      VLLM_WORKER_MULTIPROC_METHOD: spawn", "      VLLM_WORKER_MULTIPROC_METHOD: fork"),
        "spawn",
    ),
    (
        S,
        ("job.sh commit tools apply leg e2e", "job.sh commit tools apply e2e leg"),
        "does not run before the e2e",
    ),
    (S, ("job.sh commit tools", "job.sh tools"), "the approved commit is not checked first"),
    (S, ("              - name: swr-secret\n", ""), "no kubernetes plugin with imagePullSecrets"),
    (
        S,
        ('KIT_ASCEND_COMMIT="$$BUILDKITE_COMMIT" ', ""),
        "does not check its commit against BUILDKITE_COMMIT",
    ),
    (P, ("    allowed_teams:\n      - ascend-ci-approvers\n", ""), "no allowed_teams"),
    (
        P,
        ('"$$BUILDKITE_PIPELINE_DEFAULT_BRANCH"', '"$$BUILDKITE_BRANCH"'),
        "does not run the default branch's",
    ),
    (
        W,
        (
            "run: ci/ascend/job.sh commit\n",
            'run: test "$(git rev-parse HEAD)" = "$KIT_ASCEND_COMMIT"\n',
        ),
        "the approved commit is not checked first",
    ),
    (
        W,
        ("        password: ${{ secrets.ASCEND_CI_REGISTRY_PASSWORD }}\n", ""),
        "no pull credentials",
    ),
    (J, ("set -eo pipefail\n", "set -euo pipefail\n"), "set -u before ci/ascend/env.sh"),
    (
        J,
        (
            '      source ci/ascend/env.sh\n      set -u\n      "$tools/bin/nox" -s "test',
            '      "$tools/bin/nox" -s "test',
        ),
        "stage leg runs without ci/ascend/env.sh",
    ),
    (J, (" --require real", ""), "does not require mode real"),
]


CHECKS: dict[str, tuple[Path, Callable[[str], list[str]]]] = {
    W: (WORKFLOW, workflow_problems),
    P: (PIPELINE, lambda text: pipeline_problems(text, STEP.read_text())),
    S: (STEP, lambda text: pipeline_problems(PIPELINE.read_text(), text)),
    J: (JOB, job_script_problems),
}


# each file as it is, then its broken copies
ROWS = [(kind, ("", ""), "") for kind in CHECKS] + BROKEN


@pytest.mark.parametrize(
    ("kind", "change", "problem"), ROWS, ids=[f"{k}-{p or 'as-is'}" for k, _, p in ROWS]
)
def test_the_ascend_files_state_the_facts_and_a_broken_copy_is_refused(
    kind: str, change: tuple[str, str], problem: str
) -> None:
    path, check = CHECKS[kind]
    broken = path.read_text().replace(*change, 1)
    assert (broken != path.read_text()) == bool(problem), change
    assert any(problem in p for p in check(broken)) if problem else check(broken) == [], check(
        broken
    )


def source(
    tmp_path: Path, env_sh: Path = ENV_SH, atb: bool = True
) -> subprocess.CompletedProcess[str]:
    """Strict bash sourcing env.sh over a stand-in CANN tree at tmp_path/Ascend whose set_env.sh files
    append to variables the job never set, as CANN's do; it prints what the job's next commands see.
    """
    root = tmp_path / "Ascend"
    for where, (appended, home) in list(CANN.items())[: 2 if atb else 1]:
        (root / where).mkdir(parents=True)
        (root / where / "set_env.sh").write_text(
            f"export {appended}=${appended}:x\nexport {home}={root}/{where}\n"
        )
    script = (
        f'set -euo pipefail\nsource "{env_sh}"\n'
        'echo "$ASCEND_HOME_PATH $ATB_HOME_PATH $VLLM_WORKER_MULTIPROC_METHOD $HF_HUB_OFFLINE $-"\n'
    )
    env = {"PATH": "/usr/bin:/bin", "ASCEND_ROOT": str(root)}
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, check=False
    )


def test_env_sh_sources_cann_and_atb_under_nounset(tmp_path: Path) -> None:
    done, root = source(tmp_path), tmp_path / "Ascend"
    assert done.returncode == 0, done.stderr
    home, atb, method, offline, flags = done.stdout.split()
    assert (home, atb, method, offline) == (
        f"{root}/ascend-toolkit",
        f"{root}/nnal/atb",
        "spawn",
        "1",
    )
    assert "u" in flags and "e" in flags  # the caller's strictness is back on after CANN's scripts


def test_env_sh_check_bites_without_set_plus_u(tmp_path: Path) -> None:
    broken = tmp_path / "env.sh"
    broken.write_text(ENV_SH.read_text().replace("set +u\n", ""))
    done = source(tmp_path, broken)
    assert done.returncode != 0 and "unbound variable" in done.stderr


def test_env_sh_refuses_an_image_without_atb_in_one_line(tmp_path: Path) -> None:
    done = source(tmp_path, atb=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("kit: error: ") and "nnal/atb/set_env.sh not found" in done.stderr


def test_every_target_names_known_hardware_and_the_bands_are_sane_per_chip() -> None:
    for system in ascendci.SYSTEMS:
        assert {t["hardware"] for t in TARGETS[system].values()} <= set(TARGETS["image"])
    bands = ascendci.load(KIT_ROOT / "ci", ascendci.BANDS)
    for chip, entry in bands.items():
        lo, hi = entry["band_ms"]
        assert 0 < lo < hi, chip
    assert ascendci.band_for(bands, "910B1") == "2865:3167"
    # no run there yet: its first green run is the baseline
    assert ascendci.band_for(bands, "910B3") is None
    assert ascendci.chip_of({0: "910B3 OK", 1: "910B3 OK"}, (0, 1)) == "910B3"
    for chips in ({0: "910B3 OK", 1: "910B1 OK"}, {0: "910B3 OK"}):
        with pytest.raises(KitError, match="not one visible chip model"):
            ascendci.chip_of(chips, (0, 1))


@pytest.mark.parametrize(
    ("system", "name", "image", "error"),
    [
        (
            "github",
            "linux-aarch64-a2-4",
            DIGEST,
            "is not in ci/ascend/targets.toml",
        ),  # the label vllm-ascend retired
        ("buildkite", "ascend-a2b3; rm -rf /", DIGEST, "is not in ci/ascend/targets.toml"),
        ("github", "linux-aarch64-a2b3-4", "", "no CI image recorded"),
        (
            "github",
            "linux-aarch64-a2b3-4",
            "registry.example/kit/ascend-ci:latest",
            "no CI image recorded",
        ),
        ("gitlab", "x", DIGEST, "unknown CI system"),
    ],
)
def test_image_lookup_refuses(system: str, name: str, image: str, error: str) -> None:
    with pytest.raises(KitError, match=error):
        ascendci.image_for({**TARGETS, "image": {"a2": image, "a3": image}}, system, name)


def test_image_lookup_gives_the_recorded_digest() -> None:
    data = {**TARGETS, "image": {"a2": DIGEST, "a3": ""}}
    assert ascendci.image_for(data, "github", "linux-aarch64-a2b3-4") == DIGEST
    assert ascendci.image_for(data, "buildkite", "ascend-a2b3") == DIGEST


def test_the_dockerfile_builds_on_a_digest_and_sources_cann_and_atb() -> None:
    text = (KIT_ROOT / "ci" / "ascend" / "Dockerfile").read_text()
    assert "ARG BASE\nFROM ${BASE}" in text and "@sha256:[0-9a-f]{64}$" in text
    assert "ascend-toolkit/set_env.sh" in text and "nnal/atb/set_env.sh" in text
    assert "ENV VLLM_WORKER_MULTIPROC_METHOD=spawn" in text and "-c /tmp/kit/held.txt" in text
    assert (
        "python3 -m scripts ascendci held > /tmp/kit/held.txt" in text and "pip freeze" not in text
    )
    assert "quay.io/atlas-ci/vllm-ascend:v0.30.0@sha256:" in text and "quay.io/ascend/" not in text
    # both pools' hosts are aarch64: built for linux/arm64, and refused on another machine
    assert "docker build --platform linux/arm64 " in text and '"$(uname -m)" = aarch64' in text
    # the pool's index comes from the environment
    assert "--index-url" not in text and "pypi.org" not in text


# The wheel's CUDA builds and what the NPU image takes instead (None: nothing), as upstream's setup
# picks.
FOR_NPU = {"fa3-fwd": None, "onnxruntime": "onnxruntime-cann"}


def runtime_requirements(metadata: str) -> list[str]:
    """A wheel's Requires-Dist lines without extras, for NPU, as ci/ascend/omni-requirements.txt lists
    them."""
    lines = [
        line.split(": ", 1)[1]
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ")
    ]
    out = []
    for req in (line for line in lines if "extra ==" not in line):
        name = re.match(r"[A-Za-z0-9._-]+", req)[0]  # type: ignore[index]
        swapped = FOR_NPU.get(name, name)
        if swapped:
            out.append(swapped + req[len(name) :])
    return out


@pytest.mark.network  # the pinned wheel: from .work/downloads when cached, else the registry
def test_the_images_requirements_are_the_pinned_wheels() -> None:
    ws = Workspace(KIT_ROOT)
    with zipfile.ZipFile(fetch_wheel(load_pin(ws.pin_file), ws.downloads)) as whl:
        metadata = whl.read(
            next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        ).decode()
    listed = [
        line
        for line in (KIT_ROOT / "ci" / "ascend" / "omni-requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert listed == runtime_requirements(metadata)
    # CUDA-only, left out
    assert runtime_requirements(metadata + "Requires-Dist: fa3-fwd==0.0.3\n") == listed
    assert "onnxruntime-cann>=1.23.2" in listed and not any(
        r.startswith("onnxruntime>") for r in listed
    )


def stub(path: Path, script: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{script}")
    path.chmod(0o755)


def run_gate(
    tmp_path: Path,
    *,
    ref: str = "refs/heads/main",
    dispatched: str = APPROVED,
    pr: str = "0",
    head: str = APPROVED,
    image: str = "",
) -> subprocess.CompletedProcess[str]:
    """The gate step of ascend-e2e.yml in a copy of the kit whose targets.toml records ``image`` for
    a2; a stand-in `gh` answers the PR's head."""
    kit = tmp_path / "kit"
    for part in ("scripts", "ci"):
        shutil.copytree(KIT_ROOT / part, kit / part, ignore=shutil.ignore_patterns("__pycache__"))
    targets = kit / "ci" / "ascend" / "targets.toml"
    targets.write_text(targets.read_text().replace('a2 = ""', f'a2 = "{image}"'))
    stub(tmp_path / "bin" / "gh", f"echo {head}\n")
    script = load_yaml(WORKFLOW.read_text())["jobs"]["gate"]["steps"][-1]["run"]
    output = tmp_path / "github_output"
    env = {
        "PATH": f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "REPO": "o/kit",
        "REF": ref,
        "DEFAULT_BRANCH": "main",
        "DISPATCHED_SHA": dispatched,
        "PR": pr,
        "SHA": APPROVED,
        "LABEL": "linux-aarch64-a2b3-4",
        "GITHUB_OUTPUT": str(output),
        "PYTHONPATH": str(kit),
    }
    done = subprocess.run(
        ["bash", "-c", script], cwd=kit, env=env, capture_output=True, text=True, check=False
    )
    done.stdout += output.read_text() if output.exists() else ""
    return done


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ({"ref": "refs/heads/feature"}, "dispatch from main, not refs/heads/feature"),
        ({"dispatched": "2" * 40}, f"is at {'2' * 40}, not the approved"),
        ({"pr": "7", "head": "3" * 40}, f"PR #7 head is {'3' * 40}, not the approved"),
        ({}, "no CI image recorded for hardware a2"),
        ({"image": "registry.example/kit:latest"}, "no CI image recorded for hardware a2"),
    ],
    ids=["other-branch", "pr0-moved", "pr-moved", "no-image", "tag-not-digest"],
)
def test_the_gate_refuses(tmp_path: Path, case: dict[str, str], error: str) -> None:
    done = run_gate(tmp_path, **case)
    assert done.returncode != 0 and error in done.stdout + done.stderr, done.stdout + done.stderr
    assert "image=" not in done.stdout


@pytest.mark.parametrize("case", [{}, {"pr": "7"}], ids=["pr0", "pr"])
def test_the_gate_passes_the_approved_commit_and_its_image(
    tmp_path: Path, case: dict[str, str]
) -> None:
    done = run_gate(tmp_path, image=DIGEST, **case)
    assert done.returncode == 0, done.stderr
    assert f"sha={APPROVED}\nimage={DIGEST}\n" in done.stdout


def where_jobs_run(files: dict[str, str]) -> list[str]:
    """Each runs-on / agents.queue that is neither GitHub-hosted, a CPU queue, nor the checked Ascend
    choice."""
    odd = []
    for name, text in files.items():
        doc = load_yaml(text)
        for job_id, job in doc.get("jobs", {}).items():
            runs_on = job["runs-on"]
            matrix = job.get("strategy", {}).get("matrix", {})
            labels = (
                set(matrix.get("runner", [])) if runs_on == "${{ matrix.runner }}" else {runs_on}
            )
            if not (
                labels <= GITHUB_HOSTED or (name == "ascend-e2e.yml.github" and job_id == "e2e")
            ):
                odd.append(f"{name} job {job_id}: {runs_on}")
        for step in doc.get("steps", []):
            queue = step.get("agents", {}).get("queue")
            if queue not in (None, "cpu_queue_premerge", "${KIT_ASCEND_QUEUE}"):
                odd.append(f"{name} step {step.get('label', step.get('key'))}: queue {queue}")
    return odd


def test_only_the_checked_ascend_files_reach_a_card() -> None:
    files = {
        f"{p.name}.github": p.read_text()
        for p in (KIT_ROOT / ".github" / "workflows").glob("*.yml")
    }
    files |= {f"{p.name}.buildkite": p.read_text() for p in (KIT_ROOT / ".buildkite").glob("*.yml")}
    assert {
        "ascend-e2e.yml.buildkite",
        "ascend-e2e-step.yml.buildkite",
        "ascend-e2e.yml.github",
    } <= set(files)
    assert where_jobs_run(files) == []
    bad = {
        **files,
        "weekly.yml.github": files["weekly.yml.github"].replace(
            "ubuntu-24.04-arm", "linux-aarch64-a2-4"
        ),
    }
    assert where_jobs_run(bad) == ["weekly.yml.github job legs: ${{ matrix.runner }}"]
    bad = {
        **files,
        "ascend-e2e.yml.buildkite": files["ascend-e2e.yml.buildkite"].replace(
            "cpu_queue_premerge", "ascend-a3"
        ),
    }
    assert where_jobs_run(bad) == [
        "ascend-e2e.yml.buildkite step :pipeline: Upload the e2e step for the chosen queue: queue "
        "ascend-a3"
    ]


# (sample, cards) -> the band printed, the note on stderr ("" for none)
BAND_ROWS = [
    ("910B1-host-8-chips", "0,1,2,3", "2865:3167", ""),
    ("910B2-pod-4-chips", "0,1,2,3", ascendci.BASELINE_BAND, "no band for 910B2"),
    ("910B3-pod-4-chips", "0,1,2,3", ascendci.BASELINE_BAND, "no band for 910B3"),
    ("910B4-pod-4-chips-one-busy", "0,2,3", ascendci.BASELINE_BAND, "no band for 910B4"),
    ("A3-pod-4-chips-on-2-npu-ids", "0,1,2,3", ascendci.BASELINE_BAND, "no band for Ascend910"),
    ("A3-host-8-chips-on-4-npu-ids-one-busy", "4,5,6,7", ascendci.BASELINE_BAND, "Ascend910"),
]


def npu_smi_stub(bin_dir: Path, sample: str) -> Path:
    stub(bin_dir / "npu-smi", f"cat <<'EOF'\n{npusmi_sample(sample)}EOF\n")
    return bin_dir


def ascendci_cli(
    root: Path, *args: str, bin_dir: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scripts", "ascendci", *args],
        cwd=root,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("sample", "cards", "band", "note"), BAND_ROWS, ids=[row[0] for row in BAND_ROWS]
)
def test_the_band_command_reads_the_chip_model_of_every_pool(
    tmp_path: Path, sample: str, cards: str, band: str, note: str
) -> None:
    bin_dir = npu_smi_stub(tmp_path / "bin", sample)
    done = ascendci_cli(
        KIT_ROOT, "band", "--cards", cards, "--baselines", str(tmp_path / "b"), bin_dir=bin_dir
    )
    assert done.returncode == 0, done.stderr
    # stdout is the band alone: the job reads it into KIT_E2E_BAND
    assert done.stdout == f"{band}\n"
    assert note in done.stderr and "kit: cards " in done.stderr
    if band == ascendci.BASELINE_BAND:
        assert "this run is its baseline" in done.stderr


def test_chips_are_counted_as_the_pools_allocate_them() -> None:
    a3 = npusmi_sample("A3-pod-4-chips-on-2-npu-ids")
    # A3: 4 logical devices on 2 NPU ids, two chips under each
    assert [(c.npu, c.chip, c.phy, c.name) for c in preflight.parse_chips(a3)] == [
        (2, 0, 4, "Ascend910"),
        (2, 1, 5, "Ascend910"),
        (3, 0, 6, "Ascend910"),
        (3, 1, 7, "Ascend910"),
    ]
    assert preflight.logical_cards(a3) == {0: 2, 1: 2, 2: 3, 3: 3}
    check = preflight.check_cards((0, 1, 2, 3), a3, {})
    assert check.detail.startswith(
        "Ascend910: 0: npu-smi id 2 chip 0 Ascend910 OK, 1: npu-smi id 2 chip 1"
    )
    # a busy chip is found by (NPU id, chip): NPU 1 chip 1 is logical 3, not NPU 1's first chip
    host = npusmi_sample("A3-host-8-chips-on-4-npu-ids-one-busy")
    assert preflight.busy_cards(host, range(8)) == {3: [4242]}
    with pytest.raises(KitError, match=r"cards already in use: \{3: \[4242\]\}"):
        preflight.check_cards((0, 1, 2, 3), host, {})
    assert preflight.check_cards((4, 5, 6, 7), host, {}).status == "ok"
    # A2: one chip per id, host ids in a pod
    b2 = npusmi_sample("910B2-pod-4-chips")
    assert preflight.logical_cards(b2) == {0: 4, 1: 5, 2: 6, 3: 7}
    with pytest.raises(
        KitError, match=r"cards \[4\] not visible: this job sees 4 NPU chip\(s\) on 4"
    ):
        preflight.check_cards((4,), b2, {})
    with pytest.raises(KitError, match=r"sees 4 NPU chip\(s\) on 2 NPU id\(s\)"):
        preflight.check_cards((0, 1, 2, 3, 4), a3, {})
    # the check bites: counting NPU ids (as before) sees 2 devices on the A3 pod
    assert len(preflight.parse_npu_ids(a3)) == 2
    mixed = npusmi_sample("910B3-pod-4-chips").replace("| 3     910B3", "| 3     910B4")
    with pytest.raises(KitError, match="not one visible chip model"):
        preflight.check_cards((0, 1, 2, 3), mixed, {})


@pytest.mark.parametrize(
    ("preset", "cards", "error"),
    [
        ("0,1,2,3", (0, 1, 2, 3), ""),
        ("3, 2,1,0", (0, 1, 2, 3), ""),
        (
            "2,3",
            (0, 1),
            "ASCEND_RT_VISIBLE_DEVICES=2,3 is already set and names other cards than --cards 0,1",
        ),
        ("0,1,2", (0, 1, 2, 3), "names other cards than --cards 0,1,2,3"),
        ("0,0,1,2", (0, 1, 2), "names other cards"),
        ("npu0", (0,), "names other cards"),
    ],
)
def test_a_preset_visible_devices_is_accepted_when_it_names_the_cards(
    preset: str, cards: tuple[int, ...], error: str
) -> None:
    a3 = npusmi_sample("A3-pod-4-chips-on-2-npu-ids")
    env = {"ASCEND_RT_VISIBLE_DEVICES": preset}
    if not error:
        assert "ASCEND_RT_VISIBLE_DEVICES" in preflight.check_cards(cards, a3, env).detail
        return
    with pytest.raises(KitError) as refused:
        preflight.check_cards(cards, a3, env)
    assert error in str(refused.value) and "\n" not in str(refused.value)
    assert "pass --cards" in str(refused.value)


def kit_copy(dest: Path) -> Path:
    for part in ("scripts", "ci", "patches"):
        shutil.copytree(KIT_ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def e2e_record(root: Path, verdict: str, band: list[float], medians: list[float]) -> None:
    runs = [{"index": i, "steady_median_ms": m} for i, m in enumerate(medians, 1)]
    summary = {"verdict": verdict, "mode": "ascend", "band_ms": band, "runs": runs}
    records.write(root / ".work" / "records", "e2e", summary)


def test_a_chip_without_a_band_records_its_baseline_and_the_next_run_is_judged(
    tmp_path: Path,
) -> None:
    kit = kit_copy(tmp_path / "kit")
    bin_dir = npu_smi_stub(tmp_path / "bin", "A3-pod-4-chips-on-2-npu-ids")
    first = ascendci_cli(kit, "band", bin_dir=bin_dir)
    assert first.returncode == 0 and first.stdout == f"{ascendci.BASELINE_BAND}\n", first.stderr
    assert "no band for Ascend910" in first.stderr and "this run is its baseline" in first.stderr
    # the run passed with no band: recorded as the baseline
    e2e_record(kit, "pass", ascendci.baseline_band(), [3101.0, 3102.0])
    recorded = ascendci_cli(kit, "baseline", bin_dir=bin_dir)
    assert recorded.returncode == 0, recorded.stderr
    path = kit / ".work/records/ascend-baselines/Ascend910.json"
    assert f"recorded in {path}" in recorded.stdout
    lo, hi = ascendci.band_around(3101.5)
    # the lines it prints are a bands.toml entry the schema takes
    bands = kit / "ci/ascend/bands.toml"
    bands.write_text(bands.read_text() + recorded.stdout.split("ci/ascend/bands.toml:\n", 1)[1])
    assert (
        ascendci.band_for(ascendci.load(kit / "ci", ascendci.BANDS), "Ascend910")
        == f"{lo:g}:{hi:g}"
    )
    bands.write_text((KIT_ROOT / "ci/ascend/bands.toml").read_text())
    # the next run is judged against it, and says so
    second = ascendci_cli(kit, "band", bin_dir=bin_dir)
    assert second.returncode == 0 and second.stdout == f"{lo:g}:{hi:g}\n", second.stderr
    assert "judged against the baseline" in second.stderr
    # a run judged by a band records nothing
    e2e_record(kit, "pass", [lo, hi], [3000.0, 3001.0])
    again = ascendci_cli(kit, "baseline", bin_dir=bin_dir)
    assert again.returncode == 0 and "no baseline to record" in again.stdout
    assert json.loads(path.read_text())["median_ms"] == 3101.5


@pytest.mark.parametrize(
    ("record", "baseline", "error"),
    [
        (("fail", "baseline", [3100.0]), None, "no passed Ascend e2e to record"),
        (None, None, "no passed Ascend e2e to record"),
        (("pass", "baseline", []), None, "the last e2e has no steady median"),
        (None, '{"chip": "Ascend910", "median_ms": "fast"}', "is not a baseline the kit wrote"),
        (None, "not json", "is not a baseline the kit wrote"),
    ],
    ids=["failed-run", "no-run", "no-median", "tampered-baseline", "not-json"],
)
def test_the_baseline_refuses_in_one_line(
    tmp_path: Path, record: tuple[str, str, list[float]] | None, baseline: str | None, error: str
) -> None:
    kit = kit_copy(tmp_path / "kit")
    bin_dir = npu_smi_stub(tmp_path / "bin", "A3-pod-4-chips-on-2-npu-ids")
    if record:
        e2e_record(kit, record[0], ascendci.baseline_band(), record[2])
    path = kit / ".work/records/ascend-baselines/Ascend910.json"
    if baseline:
        path.parent.mkdir(parents=True)
        path.write_text(baseline)
    done = ascendci_cli(kit, "band" if baseline else "baseline", bin_dir=bin_dir)
    one_line_error(done, 2, error)
    assert path.read_text() == baseline if baseline else not path.exists()


# --- ci/ascend/targets.toml and bands.toml, hand-edited: read against their schema -------------

T, B = "ascend/targets.toml", "ascend/bands.toml"
A3_RUNNER = '[github.linux-aarch64-a3-4]\nhardware = "a3"\n'
SCHEMA_ROWS = [
    # (file, text -> broken text, the line's words): missing, wrong type, duplicate, extra, range
    (
        "runner-without-hardware",
        T,
        (A3_RUNNER, "[github.linux-aarch64-a3-4]\n"),
        "'linux-aarch64-a3-4' has no hardware",
    ),
    (
        "image-not-a-string",
        T,
        ('a2 = ""', "a2 = 123"),
        'line 13: a2 = 123: [image] a2 is not a string -- write it quoted: a2 = "name@sha256:<digest>"',
    ),
    (
        "model-without-repo",
        T,
        ('repo = "robbyant/', 'revision = "robbyant/'),
        "[model] has no key 'revision'",
    ),
    (
        "model-repo-missing",
        T,
        ('repo = "robbyant/lingbot-world-v2-14b-causal-fast-diffusers"\n', ""),
        "[model]: repo is missing",
    ),
    (
        "model-repo-outside-the-caches",
        T,
        ("robbyant/lingbot-world-v2-14b-causal-fast-diffusers", "../../etc"),
        "repo '../../etc' is not a hub id",
    ),
    (
        "model-repo-dot-dot-name",
        T,
        ("robbyant/lingbot-world-v2-14b-causal-fast-diffusers", "org/.."),
        "repo 'org/..' is not a hub id",
    ),
    (
        "model-repo-absolute",
        T,
        ("robbyant/lingbot-world-v2-14b-causal-fast-diffusers", "/etc/passwd"),
        "is not a hub id",
    ),
    (
        "model-repo-not-a-string",
        T,
        ('repo = "robbyant/lingbot-world-v2-14b-causal-fast-diffusers"', "repo = 7"),
        "repo is not a string",
    ),
    (
        "model-not-a-table",
        T,
        (
            '[model]\nrepo = "robbyant/lingbot-world-v2-14b-causal-fast-diffusers"\n',
            'model = "x"\n',
        ),
        "model is not a table",
    ),
    ("no-image-table", T, ('[image]\na2 = ""\na3 = ""\n', ""), "[image]: missing"),
    ("duplicate-image", T, ('a3 = ""\n', 'a3 = ""\na3 = ""\n'), "Cannot overwrite a value"),
    ("duplicate-runner", T, (A3_RUNNER, A3_RUNNER + A3_RUNNER), "Cannot declare"),
    (
        "extra-table",
        T,
        ("[image]", '[gitlab.x]\nhardware = "a2"\n\n[image]'),
        "the file has no key 'gitlab'",
    ),
    (
        "extra-runner-key",
        T,
        (A3_RUNNER, A3_RUNNER + "cards = 4\n"),
        "[github.linux-aarch64-a3-4] has no key 'cards'",
    ),
    (
        "hardware-out-of-range",
        T,
        ('[buildkite.ascend-a3]\nhardware = "a3"', '[buildkite.ascend-a3]\nhardware = "a5"'),
        "hardware 'a5', not in [image]",
    ),
    (
        "hardware-not-a-string",
        T,
        ('hardware = "a3"', "hardware = 3"),
        "has hardware 3, not in [image]",
    ),
    (
        "band-reversed",
        B,
        ("[2865.0, 3167.0]", "[3167.0, 2865.0]"),
        "[910B1] band_ms is not [LO, HI]",
    ),
    ("band-one-number", B, ("[2865.0, 3167.0]", "3016"), "band_ms is not [LO, HI]"),
    ("band-missing", B, ("band_ms = [2865.0, 3167.0]\n", ""), "[910B1] band_ms is missing"),
    ("band-extra-key", B, ("band_ms =", "spread = 5\nband_ms ="), "[910B1] has no key 'spread'"),
    (
        "band-duplicate",
        B,
        ("band_ms = [2865.0, 3167.0]\n", "band_ms = [2865.0, 3167.0]\nband_ms = [1.0, 2.0]\n"),
        "Cannot overwrite a value",
    ),
    ("band-bom", B, ("# Steady", "\ufeff# Steady"), "byte order mark"),
]


@pytest.mark.parametrize(
    ("case", "name", "change", "error"), SCHEMA_ROWS, ids=[row[0] for row in SCHEMA_ROWS]
)
def test_a_hand_edited_ci_file_is_read_against_its_schema(
    tmp_path: Path, case: str, name: str, change: tuple[str, str], error: str
) -> None:
    """Each row: one line, naming the file and quoting what it says, exit 2, the file kept."""
    kit = kit_copy(tmp_path / "kit")
    path = kit / "ci" / name
    text = path.read_text(encoding="utf-8")
    broken = text.replace(*change, 1)
    assert broken != text, change
    path.write_text(broken, encoding="utf-8")
    if name == T:
        done = ascendci_cli(kit, "image", "github", "linux-aarch64-a2b3-4", bin_dir=tmp_path)
    else:
        bin_dir = npu_smi_stub(tmp_path / "bin", "910B1-host-8-chips")
        done = ascendci_cli(kit, "band", bin_dir=bin_dir)
    one_line_error(done, 2, error)
    assert f"ci/{name}" in done.stderr
    assert path.read_text(encoding="utf-8") == broken  # what the user wrote is kept


# --- the model, as each pool lays it out ---------------------------------------------------------

REPO = "org/model.v2"  # a dot: ModelScope writes it "___" on disk


def model_at(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "model_index.json").write_text("{}")
    return path


def hub_cache(hub: Path, refs: bool = True) -> Path:
    repo = hub / "models--org--model.v2"
    snapshot = model_at(repo / "snapshots" / ("c" * 40))
    if refs:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("c" * 40 + "\n")
    return snapshot


# (layout, environment given, how the pool wrote the model) -> where it must be found
LAYOUTS: list[tuple[str, dict[str, str], Callable[[Path], Path]]] = [
    ("hub-cache via HF_HUB_CACHE", {"HF_HUB_CACHE": "{t}/hub"}, lambda t: hub_cache(t / "hub")),
    ("hub-cache via HF_HOME", {"HF_HOME": "{t}/hf"}, lambda t: hub_cache(t / "hf" / "hub")),
    (
        "hub-cache in HOME, no refs/main",
        {},
        lambda t: hub_cache(t / "home/.cache/huggingface/hub", refs=False),
    ),
    ("hub-cache in the pool's home", {}, lambda t: hub_cache(t / "pool/.cache/huggingface/hub")),
    ("local_dir under HF_HOME", {"HF_HOME": "{t}/hf"}, lambda t: model_at(t / "hf/org/model.v2")),
    (
        "local_dir in the pool's home",
        {},
        lambda t: model_at(t / "pool/.cache/huggingface/org/model.v2"),
    ),
    (
        "modelscope via its variable",
        {"MODELSCOPE_CACHE": "{t}/ms"},
        lambda t: model_at(t / "ms/models/org/model___v2"),
    ),
    (
        "modelscope default",
        {},
        lambda t: model_at(t / "pool/.cache/modelscope/hub/models/org/model___v2"),
    ),
    (
        "modelscope, older release",
        {},
        lambda t: model_at(t / "home/.cache/modelscope/hub/org/model___v2"),
    ),
]


def places(
    tmp_path: Path, env: dict[str, str], explicit: str | None = None
) -> list[ascendci.ModelPlace]:
    env = {k: v.format(t=tmp_path) for k, v in env.items()}
    return ascendci.model_places(REPO, env, [tmp_path / "home", tmp_path / "pool"], explicit)


@pytest.mark.parametrize(("layout", "env", "lay_out"), LAYOUTS, ids=[row[0] for row in LAYOUTS])
def test_the_model_is_found_in_each_layout_the_pools_use(
    tmp_path: Path, layout: str, env: dict[str, str], lay_out: Callable[[Path], Path]
) -> None:
    where = lay_out(tmp_path)
    assert ascendci.find_model(REPO, places(tmp_path, env)) == where
    # the same tree with the model's files gone: refused, and the line names the place it was in
    (where / "model_index.json").unlink()
    with pytest.raises(KitError) as refused:
        ascendci.find_model(REPO, places(tmp_path, env))
    assert str(where) in str(refused.value) and "\n" not in str(refused.value)


def test_the_refusal_names_every_place_and_an_explicit_path_is_the_only_one(tmp_path: Path) -> None:
    everywhere = places(
        tmp_path, {"HF_HUB_CACHE": "{t}/hub", "HF_HOME": "{t}/hf", "MODELSCOPE_CACHE": "{t}/ms"}
    )
    with pytest.raises(KitError) as refused:
        ascendci.find_model(REPO, everywhere)
    message = str(refused.value)
    assert len(everywhere) == 13 and all(str(p.path.parent) in message for p in everywhere)
    assert message.endswith(ascendci.MODEL_LIST_FIX)
    hub_cache(tmp_path / "hub")  # in the cache, but an explicit path is the only place looked at
    explicit = places(tmp_path, {"HF_HUB_CACHE": "{t}/hub"}, str(tmp_path / "mine"))
    with pytest.raises(KitError, match=f"no model_index.json or config.json in: {tmp_path}/mine"):
        ascendci.find_model(REPO, explicit)
    assert ascendci.find_model(
        REPO, explicit[:0] + [ascendci.ModelPlace("explicit", model_at(tmp_path / "mine"))]
    )


# --- the version hold, from the distributions' metadata ----------------------------------------


def dist(site: Path, name: str, version: str, editable: str | None = None) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if editable:  # what pip writes for `pip install -e`: pip freeze prints `-e <path>` for it
        (info / "direct_url.json").write_text(
            f'{{"url": "file://{editable}", "dir_info": {{"editable": true}}}}'
        )


def image_site(tmp_path: Path, vllm: str = "0.30.0+empty") -> Path:
    """A stand-in for a vllm-ascend image's site-packages: vllm and vllm-ascend editable, as they are
    there."""
    site = tmp_path / "site"
    dist(site, "torch", "2.13.0")
    dist(site, "torch_npu", "2.13.0")
    dist(site, "vllm", vllm, editable="/vllm-workspace/vllm")
    dist(site, "vllm_ascend", "0.30.0", editable="/vllm-workspace/vllm-ascend")
    dist(site, "transformers", "5.13.1")
    return site


def held(site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scripts", "ascendci", "held", "--path", str(site)],
        cwd=KIT_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_hold_keeps_editable_vllm_and_vllm_ascend_and_refuses_vanilla_onnxruntime(
    tmp_path: Path,
) -> None:
    done = held(image_site(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "torch==2.13.0",
        "torch-npu==2.13.0",
        "vllm==0.30.0+empty",
        "vllm-ascend==0.30.0",
        "onnxruntime<0",
    ]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ("vllm 0.28", "vLLM 0.28.2 is not the 0.30 release vllm-omni 0.30.0 is made for"),
        (
            "no vllm-ascend",
            "the base image has no vllm-ascend installed: not a vllm-ascend release image",
        ),
    ],
)
def test_the_hold_refuses_an_image_that_is_not_the_matching_release(
    tmp_path: Path, change: str, error: str
) -> None:
    site = image_site(tmp_path, vllm="0.28.2" if change == "vllm 0.28" else "0.30.0")
    if change == "no vllm-ascend":
        shutil.rmtree(next(site.glob("vllm_ascend-*")))
    done = held(site)
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr.startswith("kit: error: ")
        and error in done.stderr
        and done.stderr.count("\n") == 1
    )


# --- the pool's package index ------------------------------------------------------------------

INDEX_VARS = (
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "UV_DEFAULT_INDEX",
    "UV_INDEX_URL",
    "UV_INDEX",
    "UV_INSECURE_HOST",
)
MIRROR = "http://cache.pool.local/pypi/simple"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"UV_INDEX_URL": MIRROR}, {"PIP_INDEX_URL": MIRROR, "UV_INDEX_URL": MIRROR}),
        (
            {"PIP_INDEX_URL": MIRROR, "PIP_TRUSTED_HOST": "cache.pool.local"},
            {
                "PIP_INDEX_URL": MIRROR,
                "UV_DEFAULT_INDEX": MIRROR,
                "PIP_TRUSTED_HOST": "cache.pool.local",
                "UV_INSECURE_HOST": "cache.pool.local",
            },
        ),
        (
            {"PIP_EXTRA_INDEX_URL": "http://a/simple http://b/simple"},
            {
                "PIP_EXTRA_INDEX_URL": "http://a/simple http://b/simple",
                "UV_INDEX": "http://a/simple http://b/simple",
            },
        ),
        ({}, {}),  # nothing set: nothing named, each installer keeps its own default
        # the image's pip.conf in root's home, the job's HOME elsewhere: pip is pointed at it, uv told
        (
            {"PIP_CONFIG_FILE": "", "root": f"{MIRROR}\n"},
            {"PIP_CONFIG_FILE": "{t}/root/.config/pip/pip.conf", "UV_DEFAULT_INDEX": MIRROR},
        ),
        # the job's HOME has a pip.conf of its own: pip's order keeps it above root's
        (
            {"PIP_CONFIG_FILE": "", "root": f"{MIRROR}\n", "home": "http://mine/simple\n"},
            {"UV_DEFAULT_INDEX": "http://mine/simple"},
        ),
        # a variable beats the config files, as in pip
        (
            {"PIP_CONFIG_FILE": "", "root": f"{MIRROR}\n", "UV_INDEX_URL": "http://var/simple"},
            {
                "PIP_CONFIG_FILE": "{t}/root/.config/pip/pip.conf",
                "PIP_INDEX_URL": "http://var/simple",
                "UV_INDEX_URL": "http://var/simple",
            },
        ),
    ],
    ids=[
        "uv-only",
        "pip-only",
        "extra-indexes",
        "none",
        "image-pip-conf",
        "home-pip-conf",
        "variable-first",
    ],
)
def test_the_job_takes_the_pools_index_from_its_environment(
    tmp_path: Path, given: dict[str, str], expected: dict[str, str]
) -> None:
    given = dict(given)
    for who, where in (("root", "root"), ("home", "home")):
        if who in given:
            conf = tmp_path / where / ".config/pip/pip.conf"
            conf.parent.mkdir(parents=True)
            conf.write_text(f"[global]\nindex-url = {given.pop(who)}")
    expected = {k: v.format(t=tmp_path) for k, v in expected.items()}
    script = f'source "{KIT_ROOT}/ci/ascend/index.sh"\n' + "".join(
        f'echo "{v}=${{{v}:-}}"\n' for v in (*INDEX_VARS, "PIP_CONFIG_FILE")
    )
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "KIT_POOL_HOME": str(tmp_path / "root"),
        "PIP_CONFIG_FILE": os.devnull,
        **given,
    }
    env = {k: v for k, v in env.items() if v}
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = dict(line.split("=", 1) for line in done.stdout.splitlines())
    assert {k: v for k, v in seen.items() if v and v != os.devnull} == expected
    for path in (
        JOB,
        KIT_ROOT / "ci/ascend/buildkite-upload.sh",
        KIT_ROOT / "ci/ascend/Dockerfile",
    ):
        assert "pypi.org" not in path.read_text() and "--index-url" not in path.read_text()


POOL_HOST = "cache-service.nginx-pypi-cache.svc.cluster.local"


class Mirror:
    """A PEP 503 index on 127.0.0.1 that lists no files and records each page asked for: an install
    that reaches it fails "no matching distribution", and the record shows where it looked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        asked = self.asked

        class Pages(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                asked.append(self.path)
                body = b"<!DOCTYPE html><html><body></body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def pool(self, value: str) -> str:
        """A pool variable's value, pointed at this mirror."""
        return value.replace(POOL_HOST, f"127.0.0.1:{self.port}" if "/" in value else "127.0.0.1")

    def projects(self) -> set[str]:
        return {path.strip("/").split("/")[-1] for path in self.asked}


def pool_variables(kind: str) -> dict[str, str]:
    """The package-index variables the job sets, as the workflow / the Buildkite step write them."""
    if kind == "github":
        env = load_yaml(WORKFLOW.read_text())["jobs"]["e2e"]["env"]
    else:
        env = load_yaml(STEP.read_text())["steps"][0]["env"]
    return {k: v for k, v in env.items() if k.startswith(("PIP_", "UV_"))}


@pytest.fixture
def mirror() -> Any:
    served = Mirror()
    yield served
    served.server.shutdown()


@pytest.mark.parametrize("pool", ["github", "buildkite", "image-pip-conf"])
def test_each_jobs_installs_see_the_pools_index(tmp_path: Path, mirror: Mirror, pool: str) -> None:
    """The tools stage (pip) and uv, run as the job runs them, in an environment holding only the
    pool's variables (or only the image's pip.conf in root's home, HOME elsewhere): every
    requirement is asked of the pool's mirror."""
    home, root = tmp_path / "github-home", tmp_path / "root"
    home.mkdir()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "KIT_POOL_HOME": str(root),
        "KIT_TOOLS_VENV": str(tmp_path / "tools"),
    }
    if pool == "image-pip-conf":
        (root / ".config/pip").mkdir(parents=True)
        (root / ".config/pip/pip.conf").write_text(
            f"[global]\nindex-url = http://127.0.0.1:{mirror.port}/pypi/simple\n"
            "trusted-host = 127.0.0.1\n"
        )
    else:
        variables = pool_variables(pool)
        assert any(POOL_HOST in v for v in variables.values()), variables
        env |= {k: mirror.pool(v) for k, v in variables.items()}
    kit_repo(tmp_path / "checkout")
    done = subprocess.run(
        ["bash", str(tmp_path / "checkout/ci/ascend/job.sh"), "tools"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    # pip asked the mirror for the first of the kit's tools, found nothing there, and stopped
    assert done.returncode != 0 and "from versions: none" in done.stderr, done.stderr
    first = next(
        line.split("==")[0]
        for line in (KIT_ROOT / "ci/kit-tools.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert first in mirror.projects(), mirror.asked
    # uv, as nox runs it for the session venvs, in the environment job.sh gives every stage
    mirror.asked.clear()
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv, "uv is one of the kit's tools (ci/kit-tools.txt)"
    script = (
        f'source "{tmp_path}/checkout/ci/ascend/index.sh"\n'
        f'"{uv}" pip install --dry-run --no-cache --python "{sys.executable}" --target "{tmp_path}/t" '
        "websockets\n"
    )
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode != 0 and mirror.projects() == {"websockets"}, (done.stderr, mirror.asked)


def test_every_install_in_the_job_comes_after_the_pools_index() -> None:
    """job.sh: index.sh is sourced before any stage runs, and no install names an index itself."""

    def problems(text: str) -> list[str]:
        if "source ci/ascend/index.sh\n" not in text:
            return ["ci/ascend/index.sh is never sourced"]
        before = text.split("source ci/ascend/index.sh\n", 1)[0]
        found = [
            f"installs before index.sh: {w}"
            for w, pattern in (("pip install", r'/bin/pip"? install'), ("nox", r'/bin/nox"? '))
            if re.search(pattern, before)
        ]
        return found + [
            f"names an index: {w}" for w in ("--index-url", "-i ", "pypi.org") if w in text
        ]

    text = JOB.read_text()
    assert problems(text) == []
    late = text.replace("source ci/ascend/index.sh\n", "") + "source ci/ascend/index.sh\n"
    assert problems(late) == [
        "installs before index.sh: pip install",
        "installs before index.sh: nox",
    ]
    assert problems(text.replace("source ci/ascend/index.sh\n", "")) == [
        "ci/ascend/index.sh is never sourced"
    ]
    assert problems(text.replace("install --quiet", "install --index-url http://x --quiet")) == [
        "names an index: --index-url"
    ]


# --- Buildkite: what is uploaded comes from the default branch ---------------------------------

GIT_ID = [
    "-c",
    "user.name=Kit Test",
    "-c",
    "user.email=kit@example.com",
    "-c",
    "init.defaultBranch=main",
]
GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
KIT_PARTS = (".buildkite", "ci", "scripts", "patches/upstream.toml")


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *GIT_ID, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **GIT_ENV},
    )
    return done.stdout.strip()


def kit_repo(dest: Path, image: str = DIGEST) -> str:
    """A git repository of the kit's CI files with ``image`` recorded for a2; returns its commit."""
    for part in KIT_PARTS:
        src, to = KIT_ROOT / part, dest / part
        if src.is_dir():
            shutil.copytree(src, to, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, to)
    targets = dest / "ci" / "ascend" / "targets.toml"
    targets.write_text(targets.read_text().replace('a2 = ""', f'a2 = "{image}"'))
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "kit")
    return git(dest, "rev-parse", "HEAD")


SETTINGS_STEP = next(
    line.strip()
    for line in (KIT_ROOT / "docs" / "ascend-ci.md").read_text().splitlines()
    if line.strip().startswith("git fetch") and line.strip().endswith("bash -s -- pipeline")
)


def agent_run(
    agent: Path, bin_dir: Path, command: str, path: str = ""
) -> tuple[subprocess.CompletedProcess[str], list[tuple[str, str]]]:
    """``command`` as a Buildkite agent runs it in its checkout (``$$`` is Buildkite's escaped ``$``),
    with a stand-in buildkite-agent that records each upload (the file, and the queue and image it
    is filled with) and answers the block step's field."""
    records = bin_dir / "uploads"
    shutil.rmtree(records, ignore_errors=True)
    records.mkdir(parents=True)
    stub(
        bin_dir / "buildkite-agent",
        'case "$1 $2" in\n'
        '  "pipeline upload") n=$(ls "$RECORDS" | wc -l); cp "$3" "$RECORDS/$n.yml"\n'
        '    echo "queue=$KIT_ASCEND_QUEUE image=$KIT_ASCEND_IMAGE" > "$RECORDS/$n.env";;\n'
        '  "meta-data get") echo ascend-a2b3;;\n  *) exit 9;;\nesac\n',
    )
    env = {
        **GIT_ENV,
        "PATH": path or f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(agent.parent),
        "RECORDS": str(records),
        "BUILDKITE_PIPELINE_DEFAULT_BRANCH": "main",
    }
    done = subprocess.run(
        ["bash", "-c", command.replace("$$", "$")],
        cwd=agent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    uploads = sorted(records.glob("*.yml"))
    return done, [(u.read_text(), u.with_suffix(".env").read_text().strip()) for u in uploads]


def test_a_pr_that_edits_the_pipeline_cannot_skip_the_approval(tmp_path: Path) -> None:
    main = tmp_path / "src"
    kit_repo(main)
    git(main, "checkout", "-qb", "pr")
    pipeline = main / ".buildkite" / "ascend-e2e.yml"
    edited = load_yaml(pipeline.read_text())
    # no approval: straight to the cards
    edited["steps"] = [s for s in edited["steps"] if "block" not in s]
    edited["steps"][0].pop("depends_on")
    pipeline.write_text(yaml.safe_dump(edited))
    upload_sh = main / "ci" / "ascend" / "buildkite-upload.sh"
    upload_sh.write_text(upload_sh.read_text().replace("refs/heads/$branch", "HEAD"))
    targets = main / "ci" / "ascend" / "targets.toml"
    targets.write_text(targets.read_text().replace(DIGEST, DIGEST[:-64] + "b" * 64))
    git(main, "commit", "-qam", "skip the block, pick my image")
    git(tmp_path, "clone", "-q", "--bare", str(main), "origin.git")
    git(tmp_path, "clone", "-q", "origin.git", "agent")
    agent = tmp_path / "agent"
    git(agent, "checkout", "-q", "--detach", "origin/pr")  # the build's commit: the PR's
    bin_dir = tmp_path / "bin"

    # the pipeline's settings step: the default branch's pipeline, block step included
    done, uploads = agent_run(agent, bin_dir, SETTINGS_STEP)
    assert done.returncode == 0, done.stderr
    main_pipeline = git(main, "show", "main:.buildkite/ascend-e2e.yml") + "\n"
    assert [text for text, _ in uploads] == [main_pipeline]
    assert pipeline_problems(main_pipeline, STEP.read_text()) == []
    # after the block: the step and the image are the default branch's too
    upload_step = next(
        s for s in load_yaml(main_pipeline)["steps"] if s.get("key") == "upload-ascend-e2e"
    )
    done, uploads = agent_run(agent, bin_dir, upload_step["command"])
    assert done.returncode == 0, done.stderr
    main_step = git(main, "show", "main:.buildkite/ascend-e2e-step.yml") + "\n"
    assert uploads == [(main_step, f"queue=ascend-a2b3 image={DIGEST}")]

    # the check bites: the old settings step uploads the PR's own file, which has no approval
    done, uploads = agent_run(
        agent, bin_dir, "buildkite-agent pipeline upload .buildkite/ascend-e2e.yml"
    )
    assert done.returncode == 0 and "block" not in uploads[0][0]
    problems = pipeline_problems(uploads[0][0], STEP.read_text())
    assert "no block step offers exactly ci/ascend/targets.toml's queues" in problems


def test_the_upload_step_refuses_an_agent_without_python_3_11_in_one_line(tmp_path: Path) -> None:
    main = tmp_path / "src"
    kit_repo(main)
    git(tmp_path, "clone", "-q", "--bare", str(main), "origin.git")
    git(tmp_path, "clone", "-q", "origin.git", "agent")
    # a CPU agent whose only python is 3.10: a stand-in (no such interpreter here) beside the tools
    # the step needs
    bin_dir = tmp_path / "bin"
    for tool in ("git", "tar", "mktemp", "rm", "cat", "ls", "wc", "cp", "bash", "env"):
        found = shutil.which(tool, path="/usr/bin:/bin")
        assert found, tool
        (bin_dir / tool).parent.mkdir(parents=True, exist_ok=True)
        (bin_dir / tool).symlink_to(found)
    stub(bin_dir / "python3", '[ "$1" = -V ] && echo "Python 3.10.12" && exit 0\nexit 1\n')
    upload = next(
        s for s in load_yaml(PIPELINE.read_text())["steps"] if s.get("key") == "upload-ascend-e2e"
    )["command"]
    done, uploads = agent_run(tmp_path / "agent", bin_dir, upload, path=str(bin_dir))
    assert uploads == [] and done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "kit: error: the upload step needs Python 3.11 or newer (tomllib) and this agent has "
        "Python 3.10.12 -- run it on a CPU queue whose agents have python3.11+ "
        "(.buildkite/ascend-e2e.yml agents), or install one there"
    ]
    # the same agent with a python3.11 beside it: that one is taken
    stub(bin_dir / "python3.11", f'exec "{sys.executable}" "$@"\n')
    done, uploads = agent_run(tmp_path / "agent", bin_dir, upload, path=str(bin_dir))
    assert done.returncode == 0 and uploads and f"image={DIGEST}" in uploads[0][1], done.stderr


# --- dry runs in a pool's container: another uid owns the checkout, HOME is empty ----------------

MODEL = TARGETS["model"]["repo"]
NO_CARD = (
    "kit: error: no Ascend cards visible: npu-smi not found -- run on an Ascend runner with the "
    "driver "
    "mounted (npu-smi on PATH)"
)
POOL_LAYOUTS: list[tuple[str, Callable[[Path], tuple[dict[str, str], Path]]]] = [
    (
        "hub-cache",
        lambda c: (
            {"HF_HUB_CACHE": f"{c}/hub"},
            model_at(c / f"hub/models--{MODEL.replace('/', '--')}/snapshots/{'d' * 40}"),
        ),
    ),
    ("local_dir", lambda c: ({"HF_HOME": f"{c}/huggingface"}, model_at(c / "huggingface" / MODEL))),
    (
        "modelscope",
        lambda c: (
            {"MODELSCOPE_CACHE": f"{c}/modelscope/hub", "VLLM_USE_MODELSCOPE": "True"},
            model_at(c / "modelscope/hub/models" / MODEL),
        ),
    ),
    ("explicit", lambda c: ({"KIT_ASCEND_MODEL_DIR": f"{c}/mine"}, model_at(c / "mine"))),
]


def cann_tree(root: Path) -> Path:
    """A stand-in CANN install: each set_env.sh appends to a variable the job never set, as CANN's do."""
    for where, (appended, home) in CANN.items():
        (root / where).mkdir(parents=True)
        (root / where / "set_env.sh").write_text(
            f"export {appended}=${appended}:x\nexport {home}={root}/{where}\n"
        )
    return root


def pool_job(tmp_path: Path, *stages: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(tmp_path / "checkout/ci/ascend/job.sh"), *stages],
        capture_output=True,
        text=True,
        check=False,
        env={
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "ASCEND_ROOT": str(cann_tree(tmp_path / "Ascend")),
            "KIT_POOL_HOME": str(tmp_path / "pool-root"),
            **env,
        },
    )


@pytest.mark.skipif(
    os.geteuid() != 0, reason="handing the checkout to another uid (chown) needs root"
)
@pytest.mark.parametrize(("layout", "lay_out"), POOL_LAYOUTS, ids=[row[0] for row in POOL_LAYOUTS])
def test_dry_run_in_a_pool_container_gets_to_the_first_step_that_needs_a_card(
    tmp_path: Path, layout: str, lay_out: Callable[[Path], tuple[dict[str, str], Path]]
) -> None:
    checkout, home = tmp_path / "checkout", tmp_path / "home"
    head = kit_repo(checkout)
    subprocess.run(["chown", "-R", "nobody", str(checkout)], check=True)
    home.mkdir()
    model_env, where = lay_out(tmp_path / "cache")
    env = {"HOME": str(home), "KIT_ASCEND_COMMIT": head, **model_env}
    # what the old step did there: git reads nothing from a checkout another uid owns
    old = subprocess.run(
        ["bash", "-c", 'test "$(git rev-parse HEAD)" = "$KIT_ASCEND_COMMIT"'],
        cwd=checkout,
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert old.returncode == 1 and "dubious ownership" in old.stderr

    done = pool_job(tmp_path, "commit", "e2e", env=env)
    assert done.returncode == 2 and done.stderr.splitlines() == [NO_CARD], done.stderr
    assert f"kit: the checkout is the approved commit {head}\n" in done.stdout
    assert f"kit: the model: {where}\n" in done.stdout
    # the workspace, once
    assert (home / ".gitconfig").read_text() == f"[safe]\n\tdirectory = {checkout}\n"


# The pools as they are: an A3 pod of 4 chips on 2 NPU ids, a 910B3 pod (the a2b3 pools), a pool that
# sets ASCEND_RT_VISIBLE_DEVICES itself. (name, npu-smi sample, environment, the cards line, the note)
POOL_DRY_RUNS = [
    (
        "A3-4-chips-on-2-npu-ids",
        "A3-pod-4-chips-on-2-npu-ids",
        {},
        "kit: cards Ascend910: 0: npu-smi id 2 chip 0 Ascend910 OK, 1: npu-smi id 2 chip 1 "
        "Ascend910 OK, 2: npu-smi id 3 chip 0 Ascend910 OK, 3: npu-smi id 3 chip 1 Ascend910 OK",
        "no band for Ascend910",
    ),
    (
        "910B3",
        "910B3-pod-4-chips",
        {},
        "kit: cards 910B3: 0: npu-smi id 0 910B3 OK, 1: npu-smi id 1 910B3 OK, 2: npu-smi id 2 "
        "910B3 OK, 3: npu-smi id 3 910B3 OK",
        "no band for 910B3",
    ),
    (
        "preset-visible-devices",
        "910B1-host-8-chips",
        {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"},
        "; ASCEND_RT_VISIBLE_DEVICES=0,1,2,3 preset, the cards asked for",
        "",
    ),
]


@pytest.mark.parametrize(
    ("case", "sample", "given", "cards", "note"), POOL_DRY_RUNS, ids=[r[0] for r in POOL_DRY_RUNS]
)
def test_dry_run_on_each_pools_chips_gets_past_the_cards_and_the_band(
    tmp_path: Path, case: str, sample: str, given: dict[str, str], cards: str, note: str
) -> None:
    """job.sh commit e2e with the pool's npu-smi table: the commit, the model, the chips (counted,
    selected, the preset ASCEND_RT_VISIBLE_DEVICES) and their band pass; it stops where the e2e
    needs the kit's tools (nox), before anything runs on a card."""
    head = kit_repo(tmp_path / "checkout")
    (tmp_path / "home").mkdir()
    bin_dir = npu_smi_stub(tmp_path / "bin", sample)
    env = {
        "HOME": str(tmp_path / "home"),
        "KIT_ASCEND_COMMIT": head,
        "KIT_TOOLS_VENV": str(tmp_path / "none"),
        "KIT_ASCEND_MODEL_DIR": str(model_at(tmp_path / "model")),
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        **given,
    }
    done = pool_job(tmp_path, "commit", "e2e", env=env)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and lines[-1].startswith(
        f"kit: error: the kit's tools are not in {tmp_path}/none"
    ), done.stderr
    assert cards in lines[0] and len(lines) == 2 + bool(note), lines
    assert note in done.stderr
    band = "2865:3167" if sample.startswith("910B1") else ascendci.BASELINE_BAND
    assert f"kit: the model: {tmp_path}/model\n" in done.stdout and "Traceback" not in done.stderr
    # the band the e2e would be judged by: 910B1's, else the open band of a baseline run
    assert f"kit: the band: {band}\n" in done.stdout


@pytest.mark.e2e  # the series applied in a copy of the kit (e2e_kit)
@pytest.mark.parametrize(
    ("case", "sample", "given", "cards", "note"), POOL_DRY_RUNS, ids=[r[0] for r in POOL_DRY_RUNS]
)
def test_the_e2e_preflight_on_each_pools_chips_stops_at_the_first_card_call(
    e2e_kit: Workspace,
    tmp_path: Path,
    case: str,
    sample: str,
    given: dict[str, str],
    cards: str,
    note: str,
) -> None:
    """`python -m scripts e2e MODEL` as the job's e2e stage runs it, with the pool's npu-smi table and
    a stand-in CANN environment: the model, the checkout, the inputs, the chips and CANN pass; the
    first failure is the first call on a card, importing torch_npu in the base python."""
    try:
        verify_current(e2e_kit.checkout, load_pin(e2e_kit.pin_file), load_series(e2e_kit.patches))
    except KitError:
        applied = subprocess.run(
            [sys.executable, "-m", "scripts", "apply"],
            cwd=e2e_kit.root,
            capture_output=True,
            text=True,
        )
        assert applied.returncode == 0, applied.stdout + applied.stderr
    bin_dir = npu_smi_stub(tmp_path / "bin", sample)
    cann = cann_tree(tmp_path / "Ascend")
    env = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ASCEND_HOME_PATH": str(cann / "ascend-toolkit"),
        "ATB_HOME_PATH": str(cann / "nnal/atb"),
        "KIT_E2E_CARDS": "0,1,2,3",
        **given,
    }
    model = model_at(tmp_path / "model")
    done = subprocess.run(
        [sys.executable, "-m", "scripts", "e2e", str(model), "--python", sys.executable],
        cwd=e2e_kit.root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    one_line_error(done, 2, f"real torch_npu not importable with {sys.executable}")
    # the check bites: the same run with a chip the pod lacks stops at the cards, before CANN
    short = {**env, "KIT_E2E_CARDS": "0,1,2,3,4,5,6,7,8"}
    done = subprocess.run(
        [sys.executable, "-m", "scripts", "e2e", str(model), "--python", sys.executable],
        cwd=e2e_kit.root,
        env=short,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    one_line_error(done, 2, "not visible: this job sees")


# --- the job's refusals: one line each, nothing run ----------------------------------------------

JOB_ROWS = [
    (
        "no-stage",
        (),
        {},
        "no stage given -- run ci/ascend/job.sh STAGE..., stages: commit tools apply leg e2e",
    ),
    (
        "typo-stage",
        ("tools", "aply"),
        {},
        "unknown stage aply -- use stages from: commit tools apply leg e2e",
    ),
    (
        "apply-without-tools",
        ("apply",),
        {},
        "the kit's tools are not in {t}/none (no bin/nox) -- run the tools stage",
    ),
    ("leg-without-tools", ("leg",), {}, "the kit's tools are not in {t}/none (no bin/nox)"),
    (
        "commit-not-a-sha",
        ("commit",),
        {"KIT_ASCEND_COMMIT": "HEAD"},
        "KIT_ASCEND_COMMIT='HEAD' is not a full 40-hex",
    ),
    (
        "commit-unset",
        ("commit",),
        {"KIT_ASCEND_COMMIT": ""},
        "KIT_ASCEND_COMMIT='' is not a full 40-hex commit id",
    ),
    (
        "commit-other",
        ("commit",),
        {"KIT_ASCEND_COMMIT": "1" * 40},
        f"not the approved {'1' * 40} -- check out the",
    ),
    (
        "e2e-no-model",
        ("e2e",),
        {},
        "model robbyant/lingbot-world-v2-14b-causal-fast-diffusers is not in any place",
    ),
]


@pytest.mark.parametrize(
    ("case", "stages", "given", "error"), JOB_ROWS, ids=[row[0] for row in JOB_ROWS]
)
def test_the_job_refuses_in_one_line(
    tmp_path: Path, case: str, stages: tuple[str, ...], given: dict[str, str], error: str
) -> None:
    kit_repo(tmp_path / "checkout")
    (tmp_path / "home").mkdir()
    env = {"HOME": str(tmp_path / "home"), "KIT_TOOLS_VENV": str(tmp_path / "none"), **given}
    done = pool_job(tmp_path, *stages, env=env)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("kit: error: ") and error.format(t=tmp_path) in done.stderr
    assert "Traceback" not in done.stdout + done.stderr and not (tmp_path / "none").exists()


def test_env_sh_run_instead_of_sourced_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(ENV_SH)],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "ASCEND_ROOT": str(cann_tree(tmp_path / "Ascend"))},
    )
    assert done.returncode == 2 and done.stderr == (
        "kit: error: ci/ascend/env.sh was run, not sourced -- source it: source ci/ascend/env.sh\n"
    )


def test_the_band_command_without_npu_smi_names_no_option_it_lacks() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scripts", "ascendci", "band"],
        cwd=KIT_ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    )
    assert done.returncode == 2 and done.stderr == NO_CARD + "\n"
    assert "--standin" not in done.stderr  # an e2e option: ascendci band has none
