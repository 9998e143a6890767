"""The npu leg's schema check (tests/regression/npu_standin/torch_npu_schema.py) on the host: op
schemas read as text and compared with Python signatures (no torch)."""

from __future__ import annotations  # signature_params reads the annotations as text

import io
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.regression.npu_standin import torch_npu_schema as npu_schema
from tests.regression.npu_standin.torch_npu_schema import (
    NO_DEFAULT,
    Param,
    WheelSchemaError,
    compare,
    parse_schema,
)

SMALL = 'f(Tensor query, int head_num, float scale=1., int[]? prefix=None, *, bool flag=True, str mode="") -> Tensor'

Tensor = object  # stands for torch.Tensor (signature_params reads the annotation's text)


def small(
    query: Tensor,
    head_num: int,
    scale: float = 1.0,
    prefix: list[int] | None = None,
    *,
    flag: bool = True,
    mode: str = "",
) -> Tensor:
    """Matches SMALL."""


def test_parse_reads_types_optionality_defaults_aliases_namespaces_and_keyword_only() -> None:
    assert parse_schema(SMALL) == [
        Param("query", "Tensor", False, NO_DEFAULT, False),
        Param("head_num", "int", False, NO_DEFAULT, False),
        Param("scale", "float", False, 1.0, False),
        Param("prefix", "int[]", True, None, False),
        Param("flag", "bool", False, True, True),
        Param("mode", "str", False, "", True),
    ]
    params = parse_schema(
        "ns::op.out(Tensor(a!) out, SymInt[2] size=[1, 2], Tensor? x=None) -> Tensor(a!)"
    )
    got = [(p.name, p.kind, p.default) for p in params]
    assert got == [("out", "Tensor", NO_DEFAULT), ("size", "int[]", [1, 2]), ("x", "Tensor", None)]
    with pytest.raises(ValueError, match="not an op schema"):
        parse_schema("npu_fusion_attention is documented below")


KW_ONLY = "keyword_only True, schema has False"
ALTERED = {  # SMALL with one text replaced, and what comparing it with small's signature reports
    "unchanged": (") -> Tensor", ") -> Tensor", []),
    "longer": (") -> Tensor", ", int seed=0) -> Tensor", ["missing parameter 'seed'"]),
    "renamed": (
        "float scale=1.",
        "float scale_value=1.",
        ["parameter 2 'scale_value': named 'scale'"],
    ),
    "redefaulted": ("scale=1.", "scale=2.", ["parameter 2 'scale': default 1.0, schema has 2.0"]),
    "shorter": (', str mode=""', "", ["extra parameter 'mode'"]),
    "required": (
        "int[]? prefix",
        "int[] prefix",
        ["parameter 3 'prefix': optional True, schema has False"],
    ),
    "retyped": (
        "int head_num",
        "float head_num",
        ["parameter 1 'head_num': kind 'int', schema has 'float'"],
    ),
    "positional": (
        "*, bool flag",
        "bool flag",
        [f"parameter 4 'flag': {KW_ONLY}", f"parameter 5 'mode': {KW_ONLY}"],
    ),
    "int_default": ("flag=True", "flag=1", ["parameter 4 'flag': default True, schema has 1"]),
}


@pytest.mark.parametrize("case", ALTERED)
def test_the_signature_is_compared_with_its_schema(case: str) -> None:
    old, new, problems = ALTERED[case]
    altered = SMALL.replace(old, new)
    assert (altered == SMALL) == (problems == [])  # the replacement took
    assert compare(parse_schema(altered), npu_schema.signature_params(small)) == problems


YAML = """\
- func: npu_fusion_attention_v2(Tensor query, int head_num) -> (Tensor, int)
- exposed: true
  func: npu_fusion_attention(Tensor query, int head_num, float scale=1.) -> (Tensor, int)
  impl_ns: op_api
- func: npu_fusion_attention.out(Tensor query, *, Tensor(a!) out) -> Tensor(a!)
"""


def _wheel(path: Path, yaml: str | None, binary: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        if yaml is not None:
            archive.writestr(npu_schema.SCHEMA_MEMBER, yaml)
        archive.writestr(npu_schema.BINARY_MEMBER, binary)
    return path


def test_the_schema_is_the_exact_op_in_the_yaml_and_confirmed_in_the_library(
    tmp_path: Path,
) -> None:
    exact = "npu_fusion_attention(Tensor query, int head_num, float scale=1.) -> (Tensor, int)"
    assert npu_schema.schema_line(YAML) == exact  # not another version or overload
    for text in ("", YAML + YAML):
        with pytest.raises(WheelSchemaError, match="schemas for 'npu_fusion_attention'"):
            npu_schema.schema_line(text)
    wheel = tmp_path / "torch_npu-9.9-x.whl"
    assert (
        npu_schema.wheel_schema(_wheel(wheel, YAML, b"\x00junk" + exact.encode() + b"\x00"))
        == exact
    )
    other = b"npu_fusion_attention(Tensor query, int head_num) -> (Tensor, int)"
    for yaml, binary, refusal in [
        (YAML, other, "does not register"),
        (None, b"", "is not a torch_npu wheel"),
    ]:
        with pytest.raises(WheelSchemaError, match=refusal):
            npu_schema.wheel_schema(_wheel(wheel, yaml, binary))


@pytest.mark.parametrize("at", range(8))
def test_the_library_is_searched_across_its_reads(at: int) -> None:
    needle = b"schema"
    data = b"x" * at + needle + b"y" * 5
    # every offset, straddling reads or not
    assert npu_schema.contains(io.BytesIO(data), needle, chunk=4)
    assert not npu_schema.contains(io.BytesIO(data.replace(needle, b"schemA")), needle, chunk=4)


def test_the_pinned_wheel_is_read_from_the_leg_pins_and_the_cache(
    tmp_path: Path, monkeypatch
) -> None:
    pins = tmp_path / "leg-npu.txt"
    pins.write_text("-r leg-stock.txt\n# torch-npu==0.1 in a comment\ntorch-npu==2.13.0\n")
    assert npu_schema.pinned_version(pins) == "2.13.0"
    assert npu_schema.pinned_version(tmp_path / "absent.txt") == npu_schema.DEFAULT_VERSION
    cached = tmp_path / "torch_npu-1.0-cp311-x.whl"
    cached.write_bytes(b"")
    assert npu_schema.download_wheel("1.0", tmp_path) == cached
    failed = subprocess.CompletedProcess(
        [], 1, "", "ERROR: No matching distribution found for torch-npu==2.0\n"
    )
    monkeypatch.setattr(npu_schema.subprocess, "run", lambda *args, **kwargs: failed)
    with pytest.raises(
        WheelSchemaError, match="could not download torch-npu==2.0 .*No matching distribution"
    ):
        npu_schema.download_wheel("2.0", tmp_path)


DOCUMENTED_PREFIX = (
    "npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, "
    "Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, float scale=1., "
    "float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, int "
    "inner_precise=0, "
    "int[]? prefix=None, int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int "
    "sparse_mode=0, "
    'bool gen_mask_parallel=True, bool sync=False, str softmax_layout=""'
)


@pytest.mark.network  # the pinned torch-npu wheel, downloaded once into .work/downloads
def test_real_wheel_schema_extends_the_documented_prototype() -> None:
    real_schema = npu_schema.wheel_schema(npu_schema.download_wheel(npu_schema.pinned_version()))
    real = parse_schema(real_schema)
    assert real_schema.startswith(DOCUMENTED_PREFIX)
    assert real_schema.endswith("-> (Tensor, Tensor, Tensor, Tensor, int, int, int)")
    assert [p.name for p in real[20:]] == ["sink", "dropout_mask", "seed", "offset"]
