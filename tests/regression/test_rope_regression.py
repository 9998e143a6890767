"""RotaryEmbeddingWan: 2-D (S, D/2) cos/sin now broadcast per token; 4-D results unchanged."""

from __future__ import annotations

import _oracle
import pytest
import torch

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]

CASES = [(index, case[0]) for index, case in enumerate(_oracle.ROPE_CASES)]


@pytest.fixture(scope="module")
def rope():
    return _oracle.make_rope()


@pytest.mark.needs_patches("rope-2d-cos-sin")
@pytest.mark.parametrize("dtype_name", list(_oracle.DTYPES))
@pytest.mark.parametrize(("index", "name"), CASES, ids=[name for _, name in CASES])
def test_2d_cos_sin_equals_expanded_4d(rope, index, name, dtype_name):
    x, cos, sin = _oracle.rope_inputs(index, dtype_name)
    tokens = x.shape[1]
    out_2d = rope.forward_native(x, cos, sin)
    out_4d = rope.forward_native(x, cos.view(1, tokens, 1, -1), sin.view(1, tokens, 1, -1))
    assert out_2d.shape == x.shape and out_2d.dtype == x.dtype
    assert torch.equal(out_2d, out_4d)
    # The model calls the op through CustomOp dispatch, not forward_native directly.
    assert torch.equal(rope(x, cos, sin), out_4d)


@pytest.mark.needs_patches("rope-2d-cos-sin")
@pytest.mark.parametrize("dtype_name", list(_oracle.DTYPES))
@pytest.mark.parametrize(("index", "name"), CASES, ids=[name for _, name in CASES])
def test_results_equal_pristine_bit_for_bit(
    rope, pristine_results, patched_results, index, name, dtype_name
):
    x, cos, sin = _oracle.rope_inputs(index, dtype_name)
    for kind in ("native_4d", "forward_4d"):
        key = f"rope/{name}/{dtype_name}/{kind}"
        assert torch.equal(patched_results[key], pristine_results[key]), key
    # The fixed 2-D path gives exactly what pristine gives for the expanded 4-D table.
    assert torch.equal(
        rope.forward_native(x, cos, sin), pristine_results[f"rope/{name}/{dtype_name}/native_4d"]
    )


def test_square_case_is_not_vacuous():
    # With S == H the pre-fix broadcast aligned cos/sin with (H, D/2) and rotated by head index.
    # Make sure the data tells the two readings apart, so the equality above means something.
    index = [name for name, *_ in _oracle.ROPE_CASES].index("s_eq_h")
    x, cos, sin = _oracle.rope_inputs(index, "fp32")
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    by_head = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2, -1)
    tokens = x.shape[1]
    by_token = _oracle.make_rope().forward_native(
        x, cos.view(1, tokens, 1, -1), sin.view(1, tokens, 1, -1)
    )
    assert not torch.allclose(by_head, by_token)
