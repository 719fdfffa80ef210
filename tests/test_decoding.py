"""Decoding with the KV cache: token by token equals one full causal pass, and equals transformers.

transformers 4.57 is compared in the two ways it is right: a full pass with use_cache=False, and
decoding one token at a time with its cache. (With a cache object and relative positions it places
*every* query at ``key_length - 1``, which is only correct for a single new token; see
test_transformers_relative_cache_quirk.) bertfn places query i of a step at ``past + i``, so it may
also feed several tokens per step.

Padding: rows are left-padded, as for generation. A padded position at the start of a row sees no
key at all; the full pass then spreads its attention over every key, token-by-token decoding over
the keys seen so far, so outputs at padded positions legitimately differ between the two ways and
are compared at real (unpadded) positions only. Between bertfn and transformers doing the same
thing (both full, or both step by step) every position is compared.
"""

from __future__ import annotations

import re

import pytest
import torch
from conftest import build_hf, hf_params
from hypothesis import given, settings
from hypothesis import strategies as st

import bertfn

pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here

TOL = dict(atol=1e-5, rtol=1e-5)
POSITION_TYPES = ("absolute", "relative_key", "relative_key_query")


def close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(actual, expected, **TOL, msg=lambda m: f"{what}: {m}")


def decoder(kind: str, cross: bool, seed: int = 0):
    hf = build_hf("BertLMHeadModel", seed=seed, position_embedding_type=kind, is_decoder=True,
                  add_cross_attention=cross, num_hidden_layers=2, max_position_embeddings=16)
    return hf, hf_params(hf)


def inputs(hf, B: int = 2, S: int = 6, pad: int = 2, S_e: int = 4, seed: int = 0):
    """ids, types, a left-padded mask (row 1 starts with ``pad`` pads), encoder states and mask."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, hf.config.vocab_size, (B, S), generator=g)
    types = torch.randint(0, 2, (B, S), generator=g)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, :pad] = 0
    enc = torch.randn(B, S_e, hf.config.hidden_size, generator=g)
    enc_mask = torch.ones(B, S_e, dtype=torch.long)
    enc_mask[0, -1] = 0
    return ids, types, mask, enc, enc_mask


def bertfn_steps(params, ids, types, mask, enc, enc_mask, sizes):
    """Feed ``sizes[0]`` tokens, then ``sizes[1]``, ...: the hidden states of each step, joined, and the last cache."""
    cache, outs, start = None, [], 0
    for n in sizes:
        end = start + n
        out = bertfn.encoder(params, ids[:, start:end], mask[:, :end], types[:, start:end],
                             encoder_hidden_states=enc, encoder_attention_mask=enc_mask, cache=cache, use_cache=True)
        cache, start = out.cache, end
        outs.append(out.last_hidden_state)
    return torch.cat(outs, dim=1), cache


@pytest.mark.parametrize("kind", POSITION_TYPES)
@pytest.mark.parametrize("cross", [False, True], ids=["self-only", "cross"])
def test_token_by_token_equals_full_pass_and_transformers(kind, cross):
    hf, params = decoder(kind, cross)
    ids, types, mask, enc, enc_mask = inputs(hf)
    if not cross:
        enc = enc_mask = None
    B, S = ids.shape
    real = mask.bool()  # (B, S) unpadded positions
    with torch.no_grad():
        full = bertfn.encoder(params, ids, mask, types, encoder_hidden_states=enc,
                              encoder_attention_mask=enc_mask, use_cache=True)
        ref_full = hf(ids, mask, types, encoder_hidden_states=enc, encoder_attention_mask=enc_mask, use_cache=False,
                      output_hidden_states=True)
        steps, cache = bertfn_steps(params, ids, types, mask, enc, enc_mask, [1] * S)

        hf_cache, hf_steps, hf_logits = None, [], []
        for t in range(S):
            r = hf(ids[:, t:t + 1], mask[:, :t + 1], types[:, t:t + 1], encoder_hidden_states=enc,
                   encoder_attention_mask=enc_mask, past_key_values=hf_cache, use_cache=True, output_hidden_states=True)
            hf_cache = r.past_key_values
            hf_steps.append(r.hidden_states[-1])
            hf_logits.append(r.logits)
        hf_steps = torch.cat(hf_steps, dim=1)

    close(full.last_hidden_state, ref_full.hidden_states[-1], "full pass vs transformers (use_cache=False)")
    close(bertfn.mlm_head(params, full.last_hidden_state), ref_full.logits, "causal LM logits, full pass")
    close(steps, hf_steps, "token by token vs transformers token by token")
    close(bertfn.mlm_head(params, steps), torch.cat(hf_logits, dim=1), "causal LM logits, token by token")
    close(steps[real], full.last_hidden_state[real], "token by token vs full pass (real positions)")

    assert cache.length == full.cache.length == S
    for i in range(hf.config.num_hidden_layers):
        layer = hf_cache.self_attention_cache.layers[i]
        close(cache.self_attention[i][0], layer.keys, f"cached keys of layer {i} vs transformers")
        close(cache.self_attention[i][1], layer.values, f"cached values of layer {i} vs transformers")
        for a, b, what in zip(cache.self_attention[i], full.cache.self_attention[i], ("keys", "values")):
            close(a.transpose(1, 2)[real], b.transpose(1, 2)[real], f"{what} of layer {i}: steps vs full pass")
        if cross:
            cross_layer = hf_cache.cross_attention_cache.layers[i]
            close(cache.cross_attention[i][0], cross_layer.keys, f"cross keys of layer {i}")
            close(cache.cross_attention[i][1], cross_layer.values, f"cross values of layer {i}")


@settings(max_examples=15, deadline=None)
@given(kind=st.sampled_from(POSITION_TYPES), cross=st.booleans(), seed=st.integers(0, 1000),
       sizes=st.lists(st.integers(1, 3), min_size=1, max_size=5))
def test_any_split_into_steps_equals_full_pass(kind, cross, seed, sizes):
    """A prompt of several tokens, then a few at a time: the same as one pass (also for relative positions)."""
    hf, params = decoder(kind, cross, seed % 4)
    S = sum(sizes)
    ids, types, mask, enc, enc_mask = inputs(hf, S=S, pad=min(2, S - 1), seed=seed)
    if not cross:
        enc = enc_mask = None
    with torch.no_grad():
        full = bertfn.encoder(params, ids, mask, types, encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
        steps, cache = bertfn_steps(params, ids, types, mask, enc, enc_mask, sizes)
    real = mask.bool()
    close(steps[real], full.last_hidden_state[real], f"steps {sizes} vs full pass")
    assert cache.length == S


def test_cross_attention_cache_is_computed_once():
    hf, params = decoder("absolute", cross=True)
    ids, types, mask, enc, enc_mask = inputs(hf, pad=0)
    with torch.no_grad():
        first = bertfn.encoder(params, ids[:, :2], encoder_hidden_states=enc, encoder_attention_mask=enc_mask,
                               use_cache=True)
        second = bertfn.encoder(params, ids[:, 2:3], encoder_hidden_states=enc, encoder_attention_mask=enc_mask,
                                cache=first.cache, use_cache=True)
    for before, after in zip(first.cache.cross_attention, second.cache.cross_attention):
        assert before[0] is after[0] and before[1] is after[1]  # reused, not recomputed
    assert second.cache.length == 3 and first.cache.length == 2


def test_transformers_relative_cache_quirk():
    """Why the tests above avoid transformers' full pass with a cache for relative positions.

    With ``use_cache=True`` and several tokens at once, transformers 4.57 scores every query as if it
    sat at the last position; its own uncached pass (and bertfn with or without a cache) does not.
    """
    hf, params = decoder("relative_key", cross=False)
    ids = inputs(hf, pad=0)[0]
    with torch.no_grad():
        uncached = hf(ids, use_cache=False).logits
        cached = hf(ids, use_cache=True).logits
        ours = bertfn.mlm_head(params, bertfn.encoder(params, ids, use_cache=True).last_hidden_state)
    assert not torch.allclose(cached, uncached, **TOL)
    close(ours, uncached, "bertfn with a cache vs transformers without")
    close(cached[:, -1], uncached[:, -1], "transformers' last position, where its rule is right")


def test_a_cache_the_pass_cannot_continue_is_refused():
    """Tried as a student decoding by hand: a cache of another batch (a torch size error), of another model's layer
    count (IndexError), or transformers' own past_key_values (AttributeError: no .length) gave Python's errors."""
    hf, params = decoder("absolute", cross=True)
    ids, types, mask, enc, enc_mask = inputs(hf, pad=0)
    with torch.no_grad():
        cache = bertfn.encoder(params, ids[:, :2], encoder_hidden_states=enc, use_cache=True).cache
        hf_cache = hf(ids[:, :2], encoder_hidden_states=enc, use_cache=True).past_key_values
    cut = bertfn.Cache(cache.self_attention[:1], cache.cross_attention[:1])
    refused = {"of 1 texts and 3 heads; this pass has 2 texts": (ids[:, 2:3], enc, cache._replace(
                   self_attention=tuple((k[:1], v[:1]) for k, v in cache.self_attention))),
               "this pass has 1 texts and the model 3 heads": (ids[:1, 2:3], enc[:1], cache),
               "cache.self_attention holds 1 layers' keys and values; this model has 2": (ids[:, 2:3], enc, cut),
               "got EncoderDecoderCache; transformers' past_key_values are not read": (ids[:, 2:3], enc, hf_cache)}
    for message, (step, states, given) in refused.items():
        with pytest.raises(bertfn.InputError, match=re.escape(message)):
            bertfn.encoder(params, step, encoder_hidden_states=states, cache=given)
