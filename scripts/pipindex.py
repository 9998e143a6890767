"""The user's package index, handed to every installer the kit starts (a thin stand-in, read from
`pip config list`, until the one reader with pip's own precedence replaces it)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from scripts.kittools import pip_config_list

# pip's setting -> (pip's variable, uv's variable)
VARIABLES = {
    "index-url": ("PIP_INDEX_URL", "UV_INDEX_URL"),
    "extra-index-url": ("PIP_EXTRA_INDEX_URL", "UV_EXTRA_INDEX_URL"),
    "find-links": ("PIP_FIND_LINKS", "UV_FIND_LINKS"),
    "trusted-host": ("PIP_TRUSTED_HOST", "UV_INSECURE_HOST"),
    "cert": ("PIP_CERT", "SSL_CERT_FILE"),
}


_SCOPE_RANK = {
    "global": 0,
    "install": 1,
    ":env:": 2,
}  # pip: environment beats [install] beats [global]


def pip_settings(config_list: str) -> dict[str, str]:
    """The effective pip settings from `pip config list` output (files already merged by pip)."""
    best: dict[str, tuple[int, str]] = {}
    for line in config_list.splitlines():
        match = re.fullmatch(r"(:env:|global|install)\.([\w-]+)='(.*)'", line.strip())
        if match:
            rank, key, value = _SCOPE_RANK[match[1]], match[2], match[3]
            if key not in best or rank >= best[key][0]:
                best[key] = (rank, value)
    return {key: value for key, (_, value) in best.items()}


def installer_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The index settings pip would use here, as the variables pip and uv read: what a child installer
    (pre-commit's hook envs, uv) needs when it runs with another HOME or another interpreter's pip."""
    settings = pip_settings(pip_config_list())
    out: dict[str, str] = {}
    for key, names in VARIABLES.items():
        value = environ.get(names[0]) or settings.get(key)
        if value:
            out.update(dict.fromkeys(names, value))
    return out
