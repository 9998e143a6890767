# shellcheck shell=bash
# Sourced (never run) by ci/ascend/job.sh before any step that needs a card: CANN's toolkit and
# its NNAL/ATB set_env.sh, then how Ascend CI runs vllm (spawned workers, the model from the
# local cache only). CANN's scripts append to variables that may be unset (PYTHONPATH,
# LD_LIBRARY_PATH, ...); under `set -u` the first such append ends the shell. So nounset is off
# while they run and back on after, if it was on.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then # run, not sourced: its settings would end with its own shell
  echo "kit: error: ci/ascend/env.sh was run, not sourced -- source it: source ci/ascend/env.sh" >&2
  exit 2
fi
kit_ascend_nounset=${-//[^u]/}
set +u
for kit_ascend_env in "${ASCEND_ROOT:-/usr/local/Ascend}/ascend-toolkit/set_env.sh" \
  "${ASCEND_ROOT:-/usr/local/Ascend}/nnal/atb/set_env.sh"; do
  if [ ! -f "$kit_ascend_env" ]; then
    echo "kit: error: $kit_ascend_env not found -- run in the CI image (ci/ascend/Dockerfile: CANN and NNAL/ATB)" >&2
    return 2
  fi
  # shellcheck disable=SC1090
  source "$kit_ascend_env"
done
export VLLM_WORKER_MULTIPROC_METHOD=spawn HF_HUB_OFFLINE=1
if [ -n "$kit_ascend_nounset" ]; then set -u; fi
unset kit_ascend_env kit_ascend_nounset
