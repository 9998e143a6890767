#!/usr/bin/env bash
# The Ascend job, one stage per argument, in the order given. The GitHub workflow
# (.github/workflows/ascend-e2e.yml) and the Buildkite step (.buildkite/ascend-e2e-step.yml)
# both run it, so both run the same commands:
#   tools  the kit's pinned tools in their own venv (the image's python3 stays as it is)
#   apply  the pinned release + the series -> .work/vllm-omni
#   leg    the npu leg in the image's python3, mode real required (CANN and ATB sourced first)
#   e2e    two independent servers on the cards, the band of this chip (ci/ascend/bands.toml)
# No `set -u` before ci/ascend/env.sh: it sources CANN's scripts, which read unset variables.
set -eo pipefail
cd "$(dirname "$0")/../.."
tools="${KIT_TOOLS_VENV:-${RUNNER_TEMP:-${TMPDIR:-/tmp}}/kit-tools}"
for stage in "$@"; do
  echo "--- kit: ascend job stage $stage"
  case "$stage" in
    tools)
      python3 -m venv "$tools"
      "$tools/bin/pip" install --quiet -r ci/kit-tools.txt
      ;;
    apply)
      "$tools/bin/nox" -s apply
      ;;
    leg)
      source ci/ascend/env.sh
      set -u
      "$tools/bin/nox" -s "test(leg='npu')" -- --python "$(command -v python3)" --require real
      ;;
    e2e)
      source ci/ascend/env.sh
      set -u
      model="$(python3 -m scripts ascendci model)"
      band="$(python3 -m scripts ascendci band --cards "${KIT_E2E_CARDS:-0,1,2,3}")"
      KIT_E2E_BAND="$band" "$tools/bin/nox" -s e2e -- "$model"
      ;;
    *)
      echo "kit: error: unknown stage $stage -- use tools, apply, leg or e2e" >&2
      exit 2
      ;;
  esac
done
