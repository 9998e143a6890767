"""The regression suite's pristine oracle cache (stdlib only; lives with the suite: the leg never
imports the kit).

The pristine results are the same on every run for one pin, env and oracle: conftest keeps them
under KIT_ORACLE_CACHE with a manifest of what they depend on; any difference or damage means
compute again, and why.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

ORACLE_RESULTS = "pristine.pt"
ORACLE_MANIFEST = "manifest.json"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def oracle_key(pristine_commit: str, env_stamp: str, threads: int) -> dict[str, str]:
    """What the results depend on besides the files the oracle loads; the thread count too, since float
    reductions may sum in another order with more threads and the suite compares bit for bit."""
    return {"pristine_commit": pristine_commit, "env_stamp": env_stamp, "threads": str(threads)}


def oracle_entry(cache: Path, key: dict[str, str]) -> Path:
    """One thread budget's folder: a leg run alone (all cores) and one beside the other leg (half) keep
    their own."""
    return cache / f"threads-{key['threads']}"


def outside_env(files: set[Path], prefixes: set[Path], path_entries: list[str]) -> list[str]:
    """The files among ``files`` that the env's stamp does not cover: those under none of its prefixes
    and none of the site-packages on the path (a layered env's lower env is one: its .pth puts it
    there)."""
    sites = {Path(p) for p in path_entries if Path(p).name in ("site-packages", "dist-packages")}
    roots = {root.resolve() for root in prefixes | sites}
    return sorted(str(f) for f in files if not any(f.is_relative_to(root) for root in roots))


def oracle_inputs_digest(inputs: dict[str, str]) -> str:
    """One digest over the oracle's code and inputs: every file it loaded outside the env, by content."""
    return hashlib.sha256(json.dumps(sorted(inputs.items())).encode()).hexdigest()


def oracle_stale_reason(cache: Path, key: dict[str, str]) -> str | None:
    """None when the cache in ``cache`` can be trusted for ``key``; otherwise why it cannot."""
    manifest = cache / ORACLE_MANIFEST
    if not manifest.is_file():
        return "no cached results yet"
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        recorded, inputs, results_digest = data["key"], data["inputs"], data["results_sha256"]
    except (ValueError, KeyError, TypeError):
        return f"{ORACLE_MANIFEST} is corrupt"
    changed = [name for name in sorted(key) if recorded.get(name) != key[name]]
    if changed:
        name = changed[0]
        return f"{name} changed ({str(recorded.get(name))[:12]} -> {key[name][:12]})"
    results = cache / ORACLE_RESULTS
    if not results.is_file() or sha256_file(results) != results_digest:
        return f"{ORACLE_RESULTS} is missing or corrupt (sha256 differs from the manifest)"
    for name, digest in sorted(inputs.items()):
        path = Path(name)
        if not path.is_file():
            return f"oracle input {name} is gone"
        if sha256_file(path) != digest:
            return f"oracle input {name} changed"
    if data.get("inputs_sha256") != oracle_inputs_digest(inputs):
        return f"{ORACLE_MANIFEST} is corrupt (inputs digest)"
    return None


def store_oracle(cache: Path, key: dict[str, str], results: Path, inputs: list[str]) -> None:
    """Keep freshly computed results: the results first, the manifest last (a torn write reads as
    stale)."""
    cache.mkdir(parents=True, exist_ok=True)
    (cache / ORACLE_MANIFEST).unlink(missing_ok=True)
    shutil.copyfile(results, cache / ORACLE_RESULTS)
    digests = {str(Path(p).resolve()): sha256_file(Path(p)) for p in sorted(set(inputs))}
    manifest = {
        "key": key,
        "inputs": digests,
        "inputs_sha256": oracle_inputs_digest(digests),
        "results_sha256": sha256_file(cache / ORACLE_RESULTS),
    }
    tmp = cache / f"{ORACLE_MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(cache / ORACLE_MANIFEST)
