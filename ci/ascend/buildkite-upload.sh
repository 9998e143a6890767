#!/usr/bin/env bash
# Buildkite: upload the e2e step for the queue picked in the block step of .buildkite/ascend-e2e.yml.
# The queue must be one of ci/ascend/targets.toml's; its hardware's CI image must be recorded there
# by digest. Either refusal is one line and a failed step: nothing is uploaded.
set -euo pipefail
cd "$(dirname "$0")/../.."
queue="$(buildkite-agent meta-data get ascend-queue)"
image="$(python3 -m scripts ascendci image buildkite "$queue")"
KIT_ASCEND_QUEUE="$queue" KIT_ASCEND_IMAGE="$image" buildkite-agent pipeline upload .buildkite/ascend-e2e-step.yml
