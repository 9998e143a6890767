"""Check a Python stand-in's signature against an op schema read, as text, from the torch_npu wheel
(never imported).

The schema is the ``func:`` line of the code generator's input (SCHEMA_MEMBER), confirmed in
libtorch_npu.so (what is really registered). Not ``_op_plugin_docs.py``: its prototype can lag
(2.14.0's lacks ``sink``, ``dropout_mask``, ``seed``, ``offset``).
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

DEFAULT_VERSION = "2.14.0"
OP = "npu_fusion_attention"
SCHEMA_MEMBER = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
BINARY_MEMBER = "torch_npu/lib/libtorch_npu.so"
KIT_ROOT = Path(__file__).resolve().parents[3]
LEG_PINS = KIT_ROOT / "ci" / "leg-npu.txt"
DOWNLOADS = KIT_ROOT / ".work" / "downloads"  # the kit's download cache (ignored by git)

NO_DEFAULT = "<required>"


class WheelSchemaError(Exception):
    """The wheel or its schema is not what the check needs: what, and the fix."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(f"{what} -- {fix}")
        self.what = what
        self.fix = fix


# Aliases of the base types (Tensor, int, float, bool, str, int[]), in schemas and Python
# annotations.
_PY_TYPES = {
    "torch.Tensor": "Tensor",
    "SymInt": "int",
    "SymInt[]": "int[]",
    "list[int]": "int[]",
    "Sequence[int]": "int[]",
}


@dataclass(frozen=True)
class Param:
    """One parameter, as both a schema and a Python signature can state it."""

    name: str
    kind: str  # base type: Tensor, int, float, bool, str, int[]
    optional: bool  # accepts None (``Tensor?`` / ``X | None``)
    default: Any  # NO_DEFAULT when required
    keyword_only: bool


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets (defaults like ``[1, 2]`` hold commas)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return [*parts, tail] if tail else parts


def _schema_default(text: str) -> Any:
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    if text.startswith('"') or text.startswith("'"):
        return text[1:-1]
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?(\d+\.\d*|\.\d+|\d+)(e-?\d+)?", text):
        return float(text)
    if text.startswith("["):
        return [_schema_default(v) for v in _split_top_level(text[1:-1])]
    raise ValueError(f"unknown schema default {text!r}")


def _schema_param(text: str, keyword_only: bool) -> Param:
    match = re.fullmatch(
        r"(?P<type>[\w.]+(?:\(\w!?\))?(?:\[\d*\])?\??)\s+(?P<name>\w+)(?:=(?P<default>.+))?", text
    )
    if match is None:
        raise ValueError(f"cannot read schema argument {text!r}")
    type_text = re.sub(r"\(\w!?\)", "", match["type"])  # alias annotations, e.g. Tensor(a!)
    base = re.sub(r"\[\d+\]", "[]", type_text.rstrip("?"))
    default = NO_DEFAULT if match["default"] is None else _schema_default(match["default"])
    return Param(
        match["name"], _PY_TYPES.get(base, base), type_text.endswith("?"), default, keyword_only
    )


def parse_schema(text: str) -> list[Param]:
    """Parameters of one schema line, e.g. ``op(Tensor a, *, int b=0) -> Tensor`` (namespace optional)."""
    match = re.search(r"[\w.:]+\((?P<args>.*)\)\s*->", text)
    if match is None:
        raise ValueError(f"not an op schema: {text[:80]!r}")
    params, keyword_only = [], False
    for part in _split_top_level(match["args"]):
        if part == "*":
            keyword_only = True
            continue
        params.append(_schema_param(part, keyword_only))
    return params


def _annotation_kind(annotation: str) -> tuple[str, bool]:
    members = [m.strip() for m in annotation.split("|")]
    optional = "None" in members or annotation.startswith("Optional[")
    base = next((m for m in members if m != "None"), annotation)
    base = re.sub(r"^Optional\[(.*)\]$", r"\1", base)
    return _PY_TYPES.get(base, base), optional


def signature_params(fn: Callable[..., Any]) -> list[Param]:
    """Parameters of a Python function, annotations read as text (``from __future__ import
    annotations``)."""
    params = []
    for p in inspect.signature(fn).parameters.values():
        annotation = (
            p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
        )
        default = NO_DEFAULT if p.default is inspect.Parameter.empty else p.default
        keyword_only = p.kind is inspect.Parameter.KEYWORD_ONLY
        params.append(Param(p.name, *_annotation_kind(annotation), default, keyword_only))
    return params


def _same_default(a: Any, b: Any) -> bool:
    return a == b and (a is None) == (b is None) and isinstance(a, bool) == isinstance(b, bool)


def compare(expected: list[Param], actual: list[Param]) -> list[str]:
    """Differences between two parameter lists (name, order, type, optionality, default); [] = match."""
    problems = []
    for index, (want, got) in enumerate(zip(expected, actual, strict=False)):
        where = f"parameter {index} '{want.name}'"
        if want.name != got.name:
            problems.append(f"{where}: named '{got.name}'")
            continue
        for attr in ("kind", "optional", "keyword_only"):
            if getattr(want, attr) != getattr(got, attr):
                problems.append(
                    f"{where}: {attr} {getattr(got, attr)!r}, schema has {getattr(want, attr)!r}"
                )
        if not _same_default(want.default, got.default):
            problems.append(f"{where}: default {got.default!r}, schema has {want.default!r}")
    names = [p.name for p in actual]
    problems += [
        f"missing parameter '{p.name}'" for p in expected[len(actual) :] if p.name not in names
    ]
    problems += [f"extra parameter '{p.name}'" for p in actual[len(expected) :]]
    return problems


def schema_line(text: str, op: str = OP) -> str:
    """The ``func:`` schema of exactly ``op`` (no overload, no _v2/_v3) in the codegen YAML text."""
    found = re.findall(rf"^\s*(?:-\s+)?func:\s+({re.escape(op)}\(.*\)\s*->.*)$", text, re.MULTILINE)
    if len(found) != 1:
        raise WheelSchemaError(
            f"{SCHEMA_MEMBER} has {len(found)} schemas for '{op}'",
            "expected exactly one; check the op name",
        )
    return found[0].strip()


# -- edge: the wheel ------------------------------------------------------------------------------


def pinned_version(pins: Path = LEG_PINS, default: str = DEFAULT_VERSION) -> str:
    """The torch-npu version the npu leg pins (``torch-npu==X`` in ci/leg-npu.txt), else ``default``."""
    if not pins.exists():
        return default
    match = re.search(
        r"^\s*torch[-_]npu\s*==\s*([\w.+]+)", pins.read_text(), re.MULTILINE | re.IGNORECASE
    )
    return match[1] if match else default


def download_wheel(version: str, cache: Path = DOWNLOADS) -> Path:
    """The torch-npu wheel for this platform, downloaded once into ``cache``."""
    cached = sorted(cache.glob(f"torch_npu-{version}-*.whl"))
    if cached:
        return cached[0]
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--quiet",
        f"torch-npu=={version}",
        "-d",
        str(cache),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    cached = sorted(cache.glob(f"torch_npu-{version}-*.whl"))
    if result.returncode != 0 or not cached:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise WheelSchemaError(
            f"could not download torch-npu=={version} ({last})",
            "check the registry is reachable and the version exists",
        )
    return cached[0]


def contains(stream: BinaryIO, needle: bytes, chunk: int = 1 << 20) -> bool:
    """Whether the stream holds ``needle``, read up to its first match: the library is about 100 MB
    unpacked (2.13.0 holds the schema 15 MB in), and reading all of it was most of this check's
    time."""
    kept = b""
    while block := stream.read(chunk):
        window = kept + block
        if needle in window:
            return True
        # a match may straddle reads
        kept = window[-(len(needle) - 1) :] if len(needle) > 1 else b""
    return False


def wheel_schema(wheel: Path, op: str = OP) -> str:
    """The schema text of ``op`` from the wheel's codegen YAML, confirmed in libtorch_npu.so."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            yaml_text = archive.read(SCHEMA_MEMBER).decode()
            schema = schema_line(yaml_text, op)
            with archive.open(BINARY_MEMBER) as library:
                registered = contains(library, schema.encode())
    except (KeyError, zipfile.BadZipFile) as error:
        raise WheelSchemaError(
            f"{wheel.name} is not a torch_npu wheel with {SCHEMA_MEMBER} ({error})",
            "delete it and rerun",
        ) from None
    if not registered:
        raise WheelSchemaError(
            f"{BINARY_MEMBER} in {wheel.name} does not register '{schema[:60]}...'",
            "the YAML and the library disagree; read the library's schema",
        )
    return schema


def check_against_wheel(
    fn: Callable[..., Any], version: str, cache: Path = DOWNLOADS, op: str = OP
) -> list[str]:
    """Differences between ``fn``'s signature and ``op`` in torch-npu ``version``; [] = match."""
    return compare(
        parse_schema(wheel_schema(download_wheel(version, cache), op)), signature_params(fn)
    )
