# shellcheck shell=bash
# Sourced by ci/ascend/job.sh: the pool's package index, from its environment, for every installer the job
# runs. pip reads PIP_INDEX_URL, PIP_EXTRA_INDEX_URL and PIP_TRUSTED_HOST (or pip.conf); uv (nox's session
# venvs) reads UV_DEFAULT_INDEX / UV_INDEX_URL, UV_INDEX / UV_EXTRA_INDEX_URL and UV_INSECURE_HOST. A pool sets
# one family (vllm-ascend's jobs: UV_INDEX_URL; its images: pip.conf); each unset one is filled from the
# other. Nothing here names an index: with none set, both installers keep their own defaults.
if [ -z "${PIP_INDEX_URL:-}" ]; then
  kit_index="${UV_DEFAULT_INDEX:-${UV_INDEX_URL:-}}"
  [ -n "$kit_index" ] || kit_index="$(python3 -m pip config get global.index-url 2>/dev/null || true)"
  if [ -n "$kit_index" ]; then export PIP_INDEX_URL="$kit_index"; fi
fi
if [ -z "${PIP_EXTRA_INDEX_URL:-}" ] && [ -n "${UV_INDEX:-${UV_EXTRA_INDEX_URL:-}}" ]; then
  export PIP_EXTRA_INDEX_URL="${UV_INDEX:-$UV_EXTRA_INDEX_URL}"
fi
if [ -z "${PIP_TRUSTED_HOST:-}" ] && [ -n "${UV_INSECURE_HOST:-}" ]; then export PIP_TRUSTED_HOST="$UV_INSECURE_HOST"; fi
if [ -z "${UV_DEFAULT_INDEX:-}${UV_INDEX_URL:-}" ] && [ -n "${PIP_INDEX_URL:-}" ]; then
  export UV_DEFAULT_INDEX="$PIP_INDEX_URL"
fi
if [ -z "${UV_INDEX:-}${UV_EXTRA_INDEX_URL:-}" ] && [ -n "${PIP_EXTRA_INDEX_URL:-}" ]; then
  export UV_INDEX="$PIP_EXTRA_INDEX_URL"
fi
if [ -z "${UV_INSECURE_HOST:-}" ] && [ -n "${PIP_TRUSTED_HOST:-}" ]; then export UV_INSECURE_HOST="$PIP_TRUSTED_HOST"; fi
unset kit_index
