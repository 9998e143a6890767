"""The user's package index, handed to every installer the kit starts (a thin stand-in over
scripts/legs/pipconfig.py until the one reader with pip's own precedence replaces it)."""

from __future__ import annotations

from collections.abc import Mapping

from scripts.legs.pipconfig import read_pip_settings

# pip's setting -> (pip's variable, uv's variable)
VARIABLES = {
    "index-url": ("PIP_INDEX_URL", "UV_INDEX_URL"),
    "extra-index-url": ("PIP_EXTRA_INDEX_URL", "UV_EXTRA_INDEX_URL"),
    "find-links": ("PIP_FIND_LINKS", "UV_FIND_LINKS"),
    "trusted-host": ("PIP_TRUSTED_HOST", "UV_INSECURE_HOST"),
    "cert": ("PIP_CERT", "SSL_CERT_FILE"),
}


def installer_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The index settings pip would use here, as the variables pip and uv read: what a child installer
    (pre-commit's hook envs, uv) needs when it runs with another HOME or another interpreter's pip."""
    settings = read_pip_settings()
    out: dict[str, str] = {}
    for key, names in VARIABLES.items():
        value = environ.get(names[0]) or settings.get(key)
        if value:
            out.update(dict.fromkeys(names, value))
    return out
