#!/usr/bin/env bash
# Buildkite's two uploads, each made from the default branch's copy of the kit, never from the build's
# commit: a PR that edits its own .buildkite/ascend-e2e.yml could otherwise drop the block step (the
# approval), and one that edits ci/ascend/targets.toml could pick its own image.
#   pipeline  upload .buildkite/ascend-e2e.yml: the block step, then the step that runs `step` below
#   step      after the block: refuse a queue not in ci/ascend/targets.toml or a hardware without a recorded
#             image, and upload .buildkite/ascend-e2e-step.yml for the chosen queue
# This file itself runs as the default branch holds it: the pipeline's settings step (which only a
# Buildkite admin can edit) and the upload step both run
#   git fetch --quiet origin "$BUILDKITE_PIPELINE_DEFAULT_BRANCH" \
#     && git show FETCH_HEAD:ci/ascend/buildkite-upload.sh | bash -s -- MODE
# Every refusal is one line and a failed step: nothing is uploaded.
set -euo pipefail
kit_fail() {
  echo "kit: error: $1 -- $2" >&2
  exit 2
}
mode="${1:-}"
[[ "$mode" == pipeline || "$mode" == step ]] || kit_fail "unknown mode '$mode'" "pass pipeline or step"
branch="${BUILDKITE_PIPELINE_DEFAULT_BRANCH:-}"
[ -n "$branch" ] || kit_fail "BUILDKITE_PIPELINE_DEFAULT_BRANCH is not set" "run this in a Buildkite step"
git fetch --quiet origin "refs/heads/$branch" \
  || kit_fail "cannot fetch $branch from origin" "check the agent's access to the repository"
trusted="$(mktemp -d)"
trap 'rm -rf "$trusted"' EXIT
git archive FETCH_HEAD .buildkite ci scripts | tar -x -C "$trusted"
cd "$trusted"
if [ "$mode" = pipeline ]; then
  buildkite-agent pipeline upload .buildkite/ascend-e2e.yml
  exit 0
fi
# The kit reads ci/ascend/targets.toml with tomllib (Python 3.11+): the first python on the agent that has it.
python=""
for candidate in python3 python3.13 python3.12 python3.11; do
  if command -v "$candidate" >/dev/null 2>&1 &&
    "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    python="$candidate"
    break
  fi
done
[ -n "$python" ] || kit_fail "the upload step needs Python 3.11 or newer (tomllib) and this agent has $(python3 -V 2>&1 || echo 'no python3')" \
  "run it on a CPU queue whose agents have python3.11+ (.buildkite/ascend-e2e.yml agents), or install one there"
queue="$(buildkite-agent meta-data get ascend-queue)"
image="$("$python" -m scripts ascendci image buildkite "$queue")"
KIT_ASCEND_QUEUE="$queue" KIT_ASCEND_IMAGE="$image" buildkite-agent pipeline upload .buildkite/ascend-e2e-step.yml
