#!/usr/bin/env bash
# The Ascend job, one stage per argument, in the order given. The GitHub workflow
# (.github/workflows/ascend-e2e.yml) and the Buildkite step (.buildkite/ascend-e2e-step.yml)
# both run it, so both run the same commands:
#   commit  the checkout is the approved commit, KIT_ASCEND_COMMIT (git told to trust the workspace first)
#   tools   the kit's pinned tools in their own venv (the image's python3 stays as it is)
#   apply   the pinned release + the series -> .work/vllm-omni
#   leg     the npu leg in the image's python3, mode real required (CANN and ATB sourced first)
#   e2e     the model from the pool's cache, this chip's band (ci/ascend/bands.toml, else a recorded baseline,
#           else this run records one), two servers on the cards
# Every installer takes the pool's package index from the environment (ci/ascend/index.sh).
# No `set -u` before ci/ascend/env.sh: it sources CANN's scripts, which read unset variables.
set -eo pipefail
cd "$(dirname "$0")/../.."
STAGES="commit tools apply leg e2e"
kit_fail() {
  echo "kit: error: $1 -- $2" >&2
  exit 2
}
[ "$#" -gt 0 ] || kit_fail "no stage given" "run ci/ascend/job.sh STAGE..., stages: $STAGES"
for stage in "$@"; do # a typo in the list is refused before any stage runs
  [[ " $STAGES " == *" $stage "* ]] || kit_fail "unknown stage $stage" "use stages from: $STAGES"
done
source ci/ascend/index.sh
tools="${KIT_TOOLS_VENV:-${RUNNER_TEMP:-${TMPDIR:-/tmp}}/kit-tools}"
need_tools() {
  [ -x "$tools/bin/nox" ] || kit_fail "the kit's tools are not in $tools (no bin/nox)" \
    "run the tools stage first (ci/ascend/job.sh tools $1), or set KIT_TOOLS_VENV to where it put them"
}
for stage in "$@"; do
  echo "--- kit: ascend job stage $stage"
  case "$stage" in
    commit)
      approved="${KIT_ASCEND_COMMIT:-}"
      [[ "$approved" =~ ^[0-9a-f]{40}$ ]] || kit_fail "KIT_ASCEND_COMMIT='$approved' is not a full 40-hex commit id" \
        "set it to the approved commit (GitHub: the gate's sha; Buildkite: BUILDKITE_COMMIT)"
      workspace="$(pwd -P)"
      # The pool's container runs as another uid than the checkout's owner: git then reads nothing from it
      # ("dubious ownership") unless safe.directory names it. vllm-ascend's container jobs add it the same way.
      if ! git config --global --get-all safe.directory 2>/dev/null | grep -qxF "$workspace"; then
        git config --global --add safe.directory "$workspace" 2>/dev/null || true # checked below, by its effect
      fi
      head="$(git rev-parse --verify HEAD 2>&1)" || true
      [[ "$head" =~ ^[0-9a-f]{40}$ ]] || kit_fail "git reads no commit in $workspace: ${head%%$'\n'*}" \
        "check it out there; if git says dubious ownership, give the job a writable HOME (HOME=${HOME:-unset})"
      [ "$head" = "$approved" ] || kit_fail "the checkout is at $head, not the approved $approved" \
        "check out the approved commit only"
      echo "kit: the checkout is the approved commit $head"
      ;;
    tools)
      python3 -m venv "$tools"
      "$tools/bin/pip" install --quiet -r ci/kit-tools.txt
      ;;
    apply)
      need_tools apply
      "$tools/bin/nox" -s apply
      ;;
    leg)
      need_tools leg
      source ci/ascend/env.sh
      set -u
      "$tools/bin/nox" -s "test(leg='npu')" -- --python "$(command -v python3)" --require real
      ;;
    e2e)
      source ci/ascend/env.sh
      set -u
      model="$(python3 -m scripts ascendci model)"
      echo "kit: the model: $model"
      cards="${KIT_E2E_CARDS:-0,1,2,3}"
      band="$(python3 -m scripts ascendci band --cards "$cards")"
      echo "kit: the band: $band"
      need_tools e2e
      KIT_E2E_BAND="$band" "$tools/bin/nox" -s e2e -- "$model"
      # a chip model with no band: this passed run is its baseline, the next run is judged by it
      python3 -m scripts ascendci baseline --cards "$cards"
      ;;
  esac
done
