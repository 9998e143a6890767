"""pip's index settings carried over to uv: uv reads neither pip.conf nor PIP_*, and Ascend users keep
their mirror there. Used wherever the kit runs uv (leg envs, pin resolution)."""

from __future__ import annotations

from scripts.kittools import pip_config_list
from scripts.pipindex import pip_settings

# pip option -> uv option.
_PIP_TO_UV = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "trusted-host": "--allow-insecure-host",
}
# Set by a user who configured uv itself: then uv's own settings win and nothing is carried.
UV_INDEX_VARS = (
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
)


def uv_index_args(
    settings: dict[str, str], environ: dict[str, str], extras: bool = True
) -> list[str]:
    """uv options equivalent to pip's index settings (empty when uv is configured itself).

    With `extras=False` only the main index is carried: resolving new pins must not depend
    on a machine's local extra indexes or wheel folders.
    """
    if any(environ.get(name) for name in UV_INDEX_VARS):
        return []
    keys = _PIP_TO_UV if extras else {"index-url": _PIP_TO_UV["index-url"]}
    args = [
        arg
        for key, flag in keys.items()
        for value in settings.get(key, "").split()
        for arg in (flag, value)
    ]
    if any(flag in args for flag in ("--extra-index-url", "--find-links")):
        # pip takes the best version across all indexes; uv's default stops at the first index that
        # has the name.
        args += ["--index-strategy", "unsafe-best-match"]
    return args


def uv_environ(settings: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
    """The environment for uv: pip's `cert` becomes SSL_CERT_FILE unless one is set already."""
    env = dict(environ)
    if settings.get("cert") and not env.get("SSL_CERT_FILE"):
        env["SSL_CERT_FILE"] = settings["cert"]
    return env


def read_pip_settings() -> dict[str, str]:
    return pip_settings(pip_config_list())
