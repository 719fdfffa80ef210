"""Property tests (hypothesis): shape and mask invariants over random small configs and inputs."""

from __future__ import annotations

import torch
from conftest import random_model
from hypothesis import given, settings
from hypothesis import strategies as st

import bertfn

ATOL = 1e-5
SETTINGS = settings(max_examples=25, deadline=None)


@st.composite
def configs(draw):
    nh = draw(st.integers(1, 4))
    hd = draw(st.integers(2, 12))
    return bertfn.BertConfig(
        vocab_size=draw(st.integers(10, 60)),
        hidden_size=nh * hd,
        num_attention_heads=nh,
        num_hidden_layers=draw(st.integers(1, 3)),
        intermediate_size=draw(st.integers(4, 40)),
        hidden_act=draw(st.sampled_from(["gelu", "gelu_new", "relu", "silu"])),
        max_position_embeddings=24,
        type_vocab_size=draw(st.integers(1, 3)),
        position_embedding_type=draw(st.sampled_from(["absolute", "relative_key", "relative_key_query"])),
    )


@st.composite
def model_and_batch(draw):
    """A random model and a padded batch: ids (B, S), a 0/1 mask with at least one real token per row, types."""
    cfg = draw(configs())
    model = random_model(cfg, seed=draw(st.integers(0, 2**16)))
    B, S = draw(st.integers(1, 4)), draw(st.integers(1, 12))
    lengths = draw(st.lists(st.integers(1, S), min_size=B, max_size=B))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    ids = torch.randint(0, cfg.vocab_size, (B, S), generator=g)
    mask = (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]).long()
    types = torch.randint(0, cfg.type_vocab_size, (B, S), generator=g)
    return model, ids, mask, types


@SETTINGS
@given(model_and_batch())
def test_output_shapes(mb):
    model, ids, mask, types = mb
    cfg = model.config
    B, S = ids.shape
    out = bertfn.encoder(model.params, ids, mask, types, output_hidden_states=True, output_attentions=True)
    assert out.last_hidden_state.shape == (B, S, cfg.hidden_size)
    assert out.pooler_output.shape == (B, cfg.hidden_size)
    assert len(out.hidden_states) == cfg.num_hidden_layers + 1
    assert all(h.shape == (B, S, cfg.hidden_size) for h in out.hidden_states)
    assert all(a.shape == (B, cfg.num_attention_heads, S, S) for a in out.attentions)
    assert bertfn.mlm_head(model.params, out.last_hidden_state).shape == (B, S, cfg.vocab_size)
    assert torch.isfinite(out.last_hidden_state).all()


@SETTINGS
@given(model_and_batch(), st.integers(1, 6))
def test_padding_never_changes_real_tokens(mb, extra):
    model, ids, mask, types = mb
    out = bertfn.encoder(model.params, ids, mask, types).last_hidden_state
    padded_ids = torch.cat([ids, torch.randint(0, model.config.vocab_size, (ids.shape[0], extra))], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(ids.shape[0], extra, dtype=torch.long)], dim=1)
    padded_types = torch.cat([types, torch.zeros(ids.shape[0], extra, dtype=torch.long)], dim=1)
    more = bertfn.encoder(model.params, padded_ids, padded_mask, padded_types).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(more[:, : ids.shape[1]][real], out[real], atol=ATOL, rtol=0)


@SETTINGS
@given(model_and_batch())
def test_a_batch_equals_its_rows_alone(mb):
    model, ids, mask, types = mb
    batched = bertfn.encoder(model.params, ids, mask, types).last_hidden_state
    for r in range(ids.shape[0]):
        n = int(mask[r].sum())
        # its own all-ones mask: random ids may be the pad id, which without a mask draws a warning
        alone = bertfn.encoder(model.params, ids[r : r + 1, :n], mask[r : r + 1, :n], types[r : r + 1, :n]).last_hidden_state
        torch.testing.assert_close(batched[r, :n], alone[0], atol=ATOL, rtol=0)


@SETTINGS
@given(model_and_batch(), st.integers(0, 2**16))
def test_tokens_under_a_zero_mask_change_no_unmasked_output(mb, seed):
    model, ids, mask, types = mb
    hidden = ~mask.bool()
    g = torch.Generator().manual_seed(seed)
    changed = torch.where(hidden, torch.randint(0, model.config.vocab_size, ids.shape, generator=g), ids)
    a = bertfn.encoder(model.params, ids, mask, types).last_hidden_state
    b = bertfn.encoder(model.params, changed, mask, types).last_hidden_state
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=ATOL, rtol=0)


@SETTINGS
@given(model_and_batch())
def test_attention_probabilities_sum_to_one_and_ignore_masked_keys(mb):
    model, ids, mask, types = mb
    out = bertfn.encoder(model.params, ids, mask, types, output_attentions=True)
    assert out.attn_impl == "eager"
    for probs in out.attentions:  # (B, nh, S, S)
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]), atol=ATOL, rtol=0)
        assert (probs.masked_select(~mask.bool()[:, None, None, :]) == 0).all()


@SETTINGS
@given(model_and_batch())
def test_eager_and_sdpa_agree(mb):
    model, ids, mask, types = mb
    eager = bertfn.encoder(model.params, ids, mask, types, impl="eager")
    sdpa = bertfn.encoder(model.params, ids, mask, types, impl="sdpa")
    assert (eager.attn_impl, sdpa.attn_impl) == ("eager", "sdpa")
    real = mask.bool()
    torch.testing.assert_close(sdpa.last_hidden_state[real], eager.last_hidden_state[real], atol=ATOL, rtol=0)
