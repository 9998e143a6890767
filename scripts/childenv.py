"""The environment of every tool whose output the kit writes or judges (git, upstream's hooks, ruff).

Invariant 12 (docs/recovery.md): what the kit writes and finds is a function of its inputs (the
series, the pin, the checkout's commits). A child gets an allow-list of the user's environment,
never the rest: only what grants access (where programs are, the network's proxies and certificates,
ssh), then fixed values for what would change output (locale, time zone, Python's text encoding). A
variable a tool starts to read tomorrow (GIT_*, RUFF_*, PYTHON*, LC_*) is left out by construction,
not by a list.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

# The user's variables a child may see: each only says where things are or grants access to them.
# (git reads more than access under HOME and XDG_CONFIG_HOME: scripts/gitcmd.py turns each of those
# files off.)
ACCESS = (
    "PATH",
    "HOME",
    "XDG_CONFIG_HOME",
    "USER",
    "LOGNAME",
    "TMPDIR",
    "SYSTEMROOT",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "SSH_AUTH_SOCK",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
)

# What every child gets whatever the user set: English messages (the kit reads git's), UTF-8 text,
# UTC dates, no user site-packages in a hook's Python.
FIXED = {
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "PYTHONUTF8": "1",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONNOUSERSITE": "1",
}


def child_env(
    base: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """base (the process environment) cut to ACCESS, then FIXED, then extra (the caller's own
    settings)."""
    env = os.environ if base is None else base
    return {**{k: env[k] for k in ACCESS if k in env}, **FIXED, **(extra or {})}


def encoded_env(env: Mapping[str, str]) -> dict[bytes, bytes]:
    """env as the bytes a child gets: UTF-8, whatever the locale (a non-ASCII user.name under LC_ALL=C
    would not encode as the file system's ASCII); what came in as other bytes goes back as those
    (surrogateescape)."""
    return {
        k.encode("utf-8", "surrogateescape"): v.encode("utf-8", "surrogateescape")
        for k, v in env.items()
    }


def encoded_argv(argv: Sequence[str]) -> list[bytes]:
    """argv as the bytes a child gets: UTF-8, whatever the locale (as encoded_env)."""
    return [arg.encode("utf-8", "surrogateescape") for arg in argv]


def tool_env(home: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """child_env for a linter (ruff, typos, pre-commit-hooks): home, an empty folder, is its HOME and
    config home, so no user-level config file (~/.config/ruff/ruff.toml, ...) is found."""
    return child_env(base, {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")})
