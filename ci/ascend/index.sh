# shellcheck shell=bash
# Sourced by ci/ascend/job.sh: the pool's package index, from the job's environment, for every installer the
# job runs. pip reads PIP_INDEX_URL, PIP_EXTRA_INDEX_URL and PIP_TRUSTED_HOST, else its config files; uv (nox's
# session venvs) reads UV_DEFAULT_INDEX / UV_INDEX_URL, UV_INDEX / UV_EXTRA_INDEX_URL and UV_INSECURE_HOST. A pool
# sets one family (vllm-ascend's workflows: UV_INDEX_URL and UV_INSECURE_HOST; vllm-omni's Buildkite steps: pip's
# index and trusted host), and its image keeps a mirror in root's pip.conf; each unset variable is filled from
# the other family, in pip's order: a variable, then the config files. Nothing here names an index: with none
# set, both installers keep their own defaults.
#
# The image's pip.conf is root's (/root/.config/pip/pip.conf) while a GitHub container job runs with
# HOME=/github/home, where pip never looks. When the job's HOME holds no pip config of its own and no
# PIP_CONFIG_FILE is set, pip is pointed at root's: it then stands where the user's file would, below the
# environment, as pip orders them. KIT_POOL_HOME moves root's home (tests).
kit_pool_conf="${KIT_POOL_HOME:-/root}/.config/pip/pip.conf"
if [ -z "${PIP_CONFIG_FILE:-}" ] && [ -f "$kit_pool_conf" ] &&
  [ ! -f "${XDG_CONFIG_HOME:-${HOME:-/nonexistent}/.config}/pip/pip.conf" ] &&
  [ ! -f "${HOME:-/nonexistent}/.pip/pip.conf" ]; then
  export PIP_CONFIG_FILE="$kit_pool_conf"
fi
# What pip's config files say, for uv (which reads no pip.conf; a list there is one per line, uv's takes
# spaces); the environment wins, as in pip.
kit_pip_conf() { python3 -m pip config get "$1" 2>/dev/null | tr -s '[:space:]' ' ' | sed 's/^ //; s/ $//' || true; }
if [ -z "${PIP_INDEX_URL:-}" ]; then
  kit_index="${UV_DEFAULT_INDEX:-${UV_INDEX_URL:-}}"
  if [ -n "$kit_index" ]; then export PIP_INDEX_URL="$kit_index"; fi
fi
if [ -z "${PIP_EXTRA_INDEX_URL:-}" ] && [ -n "${UV_INDEX:-${UV_EXTRA_INDEX_URL:-}}" ]; then
  export PIP_EXTRA_INDEX_URL="${UV_INDEX:-$UV_EXTRA_INDEX_URL}"
fi
if [ -z "${PIP_TRUSTED_HOST:-}" ] && [ -n "${UV_INSECURE_HOST:-}" ]; then export PIP_TRUSTED_HOST="$UV_INSECURE_HOST"; fi
if [ -z "${UV_DEFAULT_INDEX:-}${UV_INDEX_URL:-}" ]; then
  kit_index="${PIP_INDEX_URL:-$(kit_pip_conf global.index-url)}"
  if [ -n "$kit_index" ]; then export UV_DEFAULT_INDEX="$kit_index"; fi
fi
if [ -z "${UV_INDEX:-}${UV_EXTRA_INDEX_URL:-}" ]; then
  kit_index="${PIP_EXTRA_INDEX_URL:-$(kit_pip_conf global.extra-index-url)}"
  if [ -n "$kit_index" ]; then export UV_INDEX="$kit_index"; fi
fi
if [ -z "${UV_INSECURE_HOST:-}" ]; then
  kit_index="${PIP_TRUSTED_HOST:-$(kit_pip_conf global.trusted-host)}"
  if [ -n "$kit_index" ]; then export UV_INSECURE_HOST="$kit_index"; fi
fi
unset kit_index kit_pool_conf
unset -f kit_pip_conf
