"""Bad numbers: fully masked rows and large scores stay finite on both attention paths, in fp32, fp16, bf16.

The additive mask is ``finfo(dtype).min``. In fp16 that is -65504, and adding a score below about
-16 rounds to -inf; a row whose every key is masked then becomes all -inf and softmax gives NaN.
bertfn clamps masked scores back to ``finfo.min`` (eager), and clamps the mask it folds a
relative-position bias into (SDPA); in fp32 the clamp changes nothing, so transformers' numbers
are kept exactly. CPU torch runs fp16 and bf16 matmuls and softmax, so all of this is checked here, and on a GPU
with BERTFN_TEST_DEVICE=cuda (conftest.DEVICE; fp32 within 1e-4 there), with the same low-precision tolerances.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from conftest import DEVICE, build_hf, fp32_atol, on_device, save_checkpoint

import bertfn

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
IMPLS = ["eager", "sdpa"]
# Low-precision results against fp32 on the same weights: fp16 keeps ~3 decimal digits, bf16 ~2;
# after two layers and LayerNorms the hidden states (of order 1) differ by a few units in the last place.
TOLERANCE = {torch.float32: fp32_atol(1e-5), torch.float16: 1e-2, torch.bfloat16: 1e-1}

IDS = torch.tensor([[5, 40, 41, 42, 6], [5, 43, 44, 6, 0], [5, 45, 46, 47, 6]], device=DEVICE)
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [0, 0, 0, 0, 0]], device=DEVICE)  # row 2 hides every key


@pytest.fixture(scope="module")
def model(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    return bertfn.load(folder, device=DEVICE)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("impl", IMPLS)
def test_fully_masked_row_is_finite(model, impl, dtype):
    m = model.to(dtype=dtype)
    out = bertfn.encoder(m.params, IDS, MASK, impl=impl)
    assert out.attn_impl == impl and out.last_hidden_state.dtype == dtype
    assert torch.isfinite(out.last_hidden_state).all()
    assert torch.isfinite(bertfn.mlm_head(m.params, out.last_hidden_state)).all()
    reference = bertfn.encoder(model.params, IDS, MASK, impl=impl).last_hidden_state  # fp32
    # Rows 0 and 1, which see keys, as fp32 has them. Row 2 sees none, so it has no right answer, only a finite one:
    # in fp32 the mask swamps the scores and its attention is uniform; CUDA's fp16 SDPA kernels add the fp16 mask
    # (-65504) to the scores in fp32, which keeps them, so its attention is their softmax (0.065 away on an H200).
    assert (out.last_hidden_state[:2].float() - reference[:2]).abs().max() < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("impl", IMPLS)
def test_query_rows_that_see_nothing_in_a_3d_mask(model, impl, dtype):
    """A (B, S_q, S_k) mask in which queries 1 and 3 may attend to no key at all."""
    keep = torch.ones(3, 5, 5, dtype=torch.long, device=DEVICE)
    keep[:, 1, :] = 0
    keep[:, 3, :] = 0
    m = model.to(dtype=dtype)
    h = bertfn.encoder(m.params, IDS, keep, impl=impl).last_hidden_state
    assert torch.isfinite(h).all()


def test_eager_probabilities_of_a_fully_masked_row_are_uniform(model):
    """In fp32 (as in transformers) a query that may see no key spreads its attention evenly."""
    out = bertfn.encoder(model.params, IDS, MASK, output_attentions=True)
    probs = out.attentions[0][2]  # (nh, S, S) of the fully masked row
    assert torch.allclose(probs, torch.full_like(probs, 1 / 5), atol=1e-7)


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    """A transformers BertModel per attention path and bertfn's load of the same weights."""
    out = {}
    for impl in IMPLS:
        hf = build_hf("BertModel", seed=5, attn=impl)
        out[impl] = on_device(hf), bertfn.load(save_checkpoint(hf, tmp_path_factory.mktemp(f"bert-{impl}")), device=DEVICE)
    return out


@pytest.mark.needs_transformers
@pytest.mark.parametrize("impl", IMPLS)
def test_fully_masked_row_equals_transformers_in_fp32(hf_pair, impl):
    hf, model = hf_pair[impl]
    with torch.no_grad():
        theirs = hf(input_ids=IDS, attention_mask=MASK).last_hidden_state
    mine = bertfn.encoder(model.params, IDS, MASK, impl=impl).last_hidden_state
    assert torch.isfinite(theirs).all()
    torch.testing.assert_close(mine, theirs, atol=fp32_atol(1e-5), rtol=0)


def test_clamp_is_a_no_op_in_fp32():
    """eager_attention in fp32 is bit-for-bit ``softmax(q k^T / sqrt(d) + mask) v``, transformers' formula."""
    g = torch.Generator().manual_seed(0)
    B, nh, S, hd = 2, 3, 7, 16
    q, k, v = (torch.randn(B, nh, S, hd, generator=g) * 4 for _ in range(3))
    keep = (torch.rand(B, S, generator=g) > 0.3).long()
    keep[1] = 0
    mask = bertfn.extended_mask(keep, torch.float32)
    context, probs = bertfn.eager_attention(q, k, v, mask)
    plain = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, dim=-1)
    assert torch.equal(probs, plain) and torch.equal(context, plain @ v)


def strongly_negative(model: bertfn.Model, scale: float = 64.0) -> bertfn.Model:
    """The same model with key = -query, both scaled up: every score q_i . k_j is large and negative
    for a text of one repeated word (in layer 0 about -23 to -565), as trained models can produce."""
    state = dict(model.state)
    for i in range(model.config.num_hidden_layers):
        p = f"bert.encoder.layer.{i}.attention.self."
        for part in ("weight", "bias"):
            state[p + "query." + part] = model.state[p + "query." + part] * scale
            state[p + "key." + part] = -state[p + "query." + part]
    return replace(model, state=state)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_large_negative_scores_do_not_overflow_the_mask(model, dtype):
    ids = torch.tensor([[5, 40, 40, 40, 6], [5, 40, 40, 40, 6]], device=DEVICE)
    keep = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], device=DEVICE)
    m = strongly_negative(model).to(dtype=dtype)
    trace = bertfn.Trace()
    eager = bertfn.encoder(m.params, ids, keep, impl="eager", trace=trace).last_hidden_state
    sdpa = bertfn.encoder(m.params, ids, keep, impl="sdpa").last_hidden_state
    scores = trace.store["layer.0.attention.scaled_scores"]
    assert scores.max() < -16  # below fp16's rounding step at finfo.min: the sum overflows there
    naive = torch.softmax(scores + bertfn.extended_mask(keep, dtype), dim=-1)
    if dtype == torch.float16:
        assert naive[1].isnan().all()  # what the unclamped formula gives: the test does reach the overflow
    assert torch.isfinite(eager).all() and torch.isfinite(sdpa).all()
    assert (eager[0].float() - sdpa[0].float()).abs().max() < TOLERANCE[dtype]  # the row with visible keys


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_relative_bias_folded_into_the_sdpa_mask_does_not_overflow(dtype, monkeypatch):
    """SDPA gets ``bias / sqrt(d) + mask`` as one additive mask; in fp16 that sum overflows without the clamp.

    torch 2.13's CPU kernel turns an all -inf row into zeros rather than NaN, but other kernels need
    not: bertfn hands SDPA a finite mask on every path, as the spy on the kernel's arguments checks.
    """
    masks_seen = []
    kernel = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kwargs):
        masks_seen.append(attn_mask)
        return kernel(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    g = torch.Generator().manual_seed(1)
    B, nh, S, hd = 2, 2, 6, 16
    q, k, v = (torch.randn(B, nh, S, hd, generator=g).to(DEVICE, dtype) for _ in range(3))
    bias = (-50 * math.sqrt(hd) * torch.rand(B, nh, S, S, generator=g) - 20 * math.sqrt(hd)).to(DEVICE, dtype)
    keep = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]], device=DEVICE)
    mask = bertfn.extended_mask(keep, dtype)
    if dtype == torch.float16:
        assert torch.isinf(bias / math.sqrt(hd) + mask).any()  # the unclamped fold reaches -inf
    fused = bertfn.sdpa_attention(q, k, v, mask, bias)
    reference, _ = bertfn.eager_attention(q, k, v, mask, bias)
    assert len(masks_seen) == 1 and torch.isfinite(masks_seen[0]).all()
    assert torch.isfinite(fused).all() and torch.isfinite(reference).all()
    assert (fused[0].float() - reference[0].float()).abs().max() < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fill_mask_in_low_precision(model, dtype):
    texts = ["the [MASK] sat on the mat .", "[MASK] !", "i [MASK] you [MASK] well"]
    got = bertfn.fill_mask(texts, model.to(dtype=dtype), top_k=3)
    scores = [a["score"] for a in got[0] + got[1] + got[2][0] + got[2][1]]
    assert all(math.isfinite(s) and 0 <= s <= 1 for s in scores)


def test_a_dtype_in_the_device_place_of_to_is_the_dtype(model):
    # torch's Module.to and Tensor.to take a dtype first (model.to(torch.bfloat16)); Model.to read it as a device
    # and refused it as "device 'torch.float32' cannot be used here"
    half = model.to(torch.bfloat16)
    assert half.dtype == torch.bfloat16 and half.device == model.device
    back = half.to(torch.float32)
    assert back.dtype == torch.float32
    assert all(torch.equal(back.state[k], half.state[k].float()) for k in half.state if half.state[k].is_floating_point())
    assert model.to("fp16").dtype == torch.float16 and model.to(model.device, "bf16").dtype == torch.bfloat16
    with pytest.raises(bertfn.InputError, match=r"to\(\) got two dtypes, torch.float32 in the device's place"):
        model.to(torch.float32, torch.float16)
    with pytest.raises(bertfn.InputError, match="dtype must be a floating-point torch.dtype"):
        model.to(torch.int8)
