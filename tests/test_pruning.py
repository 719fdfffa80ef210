"""Head pruning: pruned equals head-masked, and equals transformers' ``prune_heads`` (fp32, 1e-5)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import build_hf, hf_params, save_checkpoint
from hypothesis import given, settings
from hypothesis import strategies as st

import bertfn

pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here

TOL = dict(atol=1e-5, rtol=1e-5)


@st.composite
def prunings(draw):
    """A config, and one or two rounds of {layer: heads} that leave every layer at least one head."""
    nh, L = draw(st.integers(2, 4)), draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["absolute", "relative_key", "relative_key_query"]))
    gone = {layer: draw(st.sets(st.integers(0, nh - 1), max_size=nh - 1)) for layer in range(L)}
    rounds = [{}, {}]
    for layer, heads in gone.items():
        for h in heads:
            rounds[draw(st.integers(0, 1))].setdefault(layer, []).append(h)
    return dict(num_attention_heads=nh, hidden_size=4 * nh, num_hidden_layers=L, position_embedding_type=kind), \
        gone, [r for r in rounds if r]


@settings(max_examples=20, deadline=None)
@given(case=prunings(), seed=st.integers(0, 1000))
def test_pruned_equals_head_masked(case, seed):
    cfg, gone, rounds = case
    hf = build_hf("BertModel", seed=seed % 5, **cfg)
    params = hf_params(hf)
    pruned = params
    for heads in rounds:
        pruned = bertfn.prune_heads(pruned, heads)
    assert pruned.config.pruned_heads == {layer: tuple(sorted(h)) for layer, h in gone.items() if h}

    L, nh = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    head_mask = torch.ones(L, nh)
    for layer, heads in gone.items():
        head_mask[layer, sorted(heads)] = 0
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, hf.config.vocab_size, (2, 6), generator=g)
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 4:] = 0
    with torch.no_grad():
        masked = bertfn.encoder(params, ids, mask, head_mask=head_mask, output_attentions=True)
        small = bertfn.encoder(pruned, ids, mask, output_attentions=True)
        fast = bertfn.encoder(pruned, ids, mask)
    torch.testing.assert_close(small.last_hidden_state, masked.last_hidden_state, **TOL)
    torch.testing.assert_close(fast.last_hidden_state, masked.last_hidden_state, **TOL)
    assert fast.attn_impl == "sdpa"
    for layer in range(L):
        kept = [h for h in range(nh) if h not in gone[layer]]
        assert small.attentions[layer].shape[1] == len(kept)
        torch.testing.assert_close(small.attentions[layer], masked.attentions[layer][:, kept], **TOL)


@pytest.mark.parametrize("overrides", [
    dict(num_attention_heads=4, hidden_size=32),
    dict(num_attention_heads=3, position_embedding_type="relative_key_query", is_decoder=True,
         add_cross_attention=True),
], ids=["encoder", "decoder-cross-relative"])
def test_pruning_equals_transformers(overrides, tmp_path):
    hf = build_hf("BertModel", seed=2, num_hidden_layers=3, **overrides)
    model = bertfn.load(save_checkpoint(hf, tmp_path / "full"))
    first, second = {0: [1], 2: [0, 2]}, {0: [2, 1], 1: [0]}  # second round names head 1 again: skipped
    ours = bertfn.prune_heads(bertfn.prune_heads(model, first), second)

    theirs = copy.deepcopy(hf)
    theirs.prune_heads(first)
    theirs.prune_heads(second)
    assert ours.config.pruned_heads == {k: tuple(sorted(v)) for k, v in theirs.config.pruned_heads.items()}
    their_state = hf_params(theirs).state
    assert set(ours.state) == set(their_state)
    for key, t in ours.state.items():
        assert torch.equal(t, their_state[key]), key  # the same rows and columns removed, in the same order

    ids = torch.randint(1, hf.config.vocab_size, (2, 5))
    extra = {}
    if overrides.get("add_cross_attention"):  # cross-attention keeps all its heads
        extra = dict(encoder_hidden_states=torch.randn(2, 3, hf.config.hidden_size))
        assert ours.state["bert.encoder.layer.0.crossattention.self.query.weight"] is \
            model.state["bert.encoder.layer.0.crossattention.self.query.weight"]
    with torch.no_grad():
        expected = theirs(ids, **extra, **({"use_cache": False} if overrides.get("is_decoder") else {}))
        got = bertfn.encoder(ours.params, ids, **extra)
    torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state, **TOL)

    # transformers writes pruned_heads to config.json; bertfn.load reads the smaller weights back
    reloaded = bertfn.load(save_checkpoint(theirs, tmp_path / "pruned"))
    assert reloaded.config.pruned_heads == ours.config.pruned_heads
    with torch.no_grad():
        again = bertfn.encoder(reloaded.params, ids, **extra)
    torch.testing.assert_close(again.last_hidden_state, got.last_hidden_state, **TOL)


def test_pruning_returns_a_new_model_and_leaves_the_old_one(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    model = bertfn.load(folder)
    before = {k: t.clone() for k, t in model.state.items()}
    pruned = bertfn.prune_heads(model, {1: [2]})
    assert isinstance(pruned, bertfn.Model) and model.config.pruned_heads == {}
    assert all(torch.equal(model.state[k], t) for k, t in before.items())
    assert pruned.state["bert.encoder.layer.1.attention.self.key.weight"].shape[0] == 2 * model.config.head_dim
    assert pruned.state["bert.encoder.layer.1.attention.output.dense.weight"].shape[1] == 2 * model.config.head_dim
    assert pruned.state["cls.predictions.decoder.weight"] is pruned.state["bert.embeddings.word_embeddings.weight"]
    for name in ("self.query.weight", "output.dense.weight"):  # load's (in, out) layout is kept
        key = f"bert.encoder.layer.1.attention.{name}"
        assert model.state[key].t().is_contiguous() and pruned.state[key].t().is_contiguous(), key
    as_params = bertfn.prune_heads(model.params, {1: [2]})
    assert isinstance(as_params, bertfn.Params) and as_params.config == pruned.config


@pytest.mark.parametrize("heads, match", [
    ({5: [0]}, "layer in 0..1"),
    ({0: [3]}, "heads in 0..2"),
    ({0: [0, 1, 2]}, "no attention heads"),
])
def test_bad_pruning_requests_say_what_is_allowed(mlm_checkpoint, heads, match):
    model = bertfn.load(mlm_checkpoint[0])
    with pytest.raises(bertfn.InputError, match=match):
        bertfn.prune_heads(model, heads)


def test_pruning_needs_the_root_params(mlm_checkpoint):
    model = bertfn.load(mlm_checkpoint[0])
    with pytest.raises(bertfn.InputError, match="root params"):
        bertfn.prune_heads(model.params.scope("bert"), {0: [0]})
