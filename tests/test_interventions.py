"""Edits by name, ablation, steering and activation patching (bertfn/model/recorder.py, bertfn/interventions/).

* an identity edit at every point leaves every tensor bit-identical;
* patching every layer's output of a clean run into a corrupted run gives the clean logits exactly;
* zero-ablating a head equals a head mask of 0 and prune_heads (1e-6), on both attention paths;
* in a padded batch of sentence pairs with token types, each text gets under every intervention what
  it gets alone (1e-5); fill_mask, score and embed take edits, and a patch of a recording of several texts gives
  each text of the pipeline's groups its own;
* a sweep's every value equals the corrupted run patched at that one slice (1e-5), and attribution
  patching correlates with it; gradients flow through edits; bad names, shapes and positions get
  InputError naming what is valid.
"""

from __future__ import annotations

import pytest
import torch
from conftest import random_model
from hypothesis import given, settings
from hypothesis import strategies as st

import bertfn
from bertfn import interventions as iv
from bertfn.model.point_names import point_names

TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def tiny(tiny_folder) -> bertfn.Model:
    return bertfn.load(tiny_folder)


def identity(x, point):
    return x


def pair_batch(m: bertfn.Model):
    """A padded batch of three inputs of different lengths, two of them sentence pairs (token types 0 and 1)."""
    firsts = ["the cat sat on the mat .", "when in rome do as the romans do", "a big dog"]
    seconds = ["the dog sat .", None, "hello world"]
    encs = [m.tokenizer([a], [b] if b else None) for a, b in zip(firsts, seconds)]
    S = max(e.input_ids.shape[1] for e in encs)
    ids = torch.zeros(3, S, dtype=torch.long)
    types, mask = torch.zeros_like(ids), torch.zeros_like(ids)
    for i, e in enumerate(encs):
        n = e.input_ids.shape[1]
        ids[i, :n], types[i, :n], mask[i, :n] = e.input_ids[0], e.token_type_ids[0], 1
    return encs, ids, types, mask


def test_identity_edit_at_every_point_is_bit_identical(tiny):
    ids = tiny.tokenizer(["the cat sat on the [MASK] ."]).input_ids
    plain, edited = bertfn.Trace(), bertfn.Trace()
    bertfn.encoder(tiny, ids, impl="eager", trace=plain)
    bertfn.encoder(tiny, ids, edits={"*": identity}, trace=edited)
    assert list(plain.store) == list(edited.store)
    assert all(torch.equal(plain.store[k], edited.store[k]) for k in plain.store)
    rec, rec_id = bertfn.trace("the cat sat on the [MASK] .", tiny), \
        bertfn.trace("the cat sat on the [MASK] .", tiny, edits={n: identity for n in point_names(tiny.config)})
    assert rec.keys() == rec_id.keys() and all(torch.equal(rec[k], rec_id[k]) for k in rec.keys())


def test_every_point_name_is_one_the_trace_records(tiny):
    rec = bertfn.trace("the cat sat on the [MASK] .", tiny)
    assert set(point_names(tiny.config)) == set(rec.keys())


def test_patching_every_layer_output_gives_the_clean_logits_exactly(tiny):
    clean = bertfn.trace("when in rome do as the [MASK] do", tiny)
    patched = bertfn.trace("when in paris do as the [MASK] do", tiny, edits=iv.patch(clean, "layer.*.output"))
    assert torch.equal(patched["mlm.logits"], clean["mlm.logits"])
    assert not torch.equal(bertfn.trace("when in paris do as the [MASK] do", tiny)["mlm.logits"], clean["mlm.logits"])


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_zero_head_equals_head_mask_and_pruning(tiny, impl):
    enc = tiny.tokenizer(["the cat sat on the mat .", "a dog"])
    args = (enc.input_ids, enc.attention_mask, enc.token_type_ids)
    ablated = bertfn.encoder(tiny, *args, impl=impl, edits=iv.zero_heads({1: [2]}))
    assert ablated.attn_impl == impl  # the context is an edit point on both paths
    head_mask = torch.ones(2, 3)
    head_mask[1, 2] = 0
    masked = bertfn.encoder(tiny, *args, head_mask=head_mask)
    pruned = bertfn.encoder(bertfn.prune_heads(tiny, {1: [2]}), *args, impl=impl)
    real = enc.attention_mask.bool()
    torch.testing.assert_close(ablated.last_hidden_state[real], pruned.last_hidden_state[real], atol=1e-6, rtol=1e-6)
    # a head mask always runs the eager path; against SDPA the two kernels differ by float rounding (3e-6 seen)
    tol = dict(atol=1e-6, rtol=1e-6) if impl == "eager" else TOL
    torch.testing.assert_close(ablated.last_hidden_state[real], masked.last_hidden_state[real], **tol)


@settings(max_examples=10, deadline=None)
@given(layer=st.integers(0, 1), heads=st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True),
       neurons=st.lists(st.integers(0, 79), min_size=1, max_size=5, unique=True), scale=st.floats(-3, 3),
       which=st.sampled_from(["zero_heads", "zero_neurons", "mean_heads", "steer", "patch_probs"]))
@pytest.mark.slow
def test_each_text_of_a_padded_batch_of_pairs_gets_what_it_gets_alone(tiny_folder, layer, heads, neurons, scale, which):
    m = bertfn.load(tiny_folder)
    encs, ids, types, mask = pair_batch(m)
    g = torch.Generator().manual_seed(len(heads) * 7 + layer)
    edits = {
        "zero_heads": lambda: iv.zero_heads({layer: heads}),
        "zero_neurons": lambda: iv.zero_neurons({layer: neurons}),
        "mean_heads": lambda: iv.mean_heads({layer: heads}, torch.randn(2, 3, 16, generator=g)),
        "steer": lambda: iv.steer(f"layer.{layer}.output", torch.randn(48, generator=g), scale=scale, positions=[1, 2]),
        "patch_probs": lambda: {f"layer.{layer}.attention.probs": iv.replace_with(0.0, heads=heads, positions=[0])},
    }[which]()
    batch = bertfn.encoder(m, ids, mask, types, edits=edits).last_hidden_state
    for i, e in enumerate(encs):
        alone = bertfn.encoder(m, e.input_ids, e.attention_mask, e.token_type_ids, edits=edits).last_hidden_state
        # 1e-5 of the hidden states' scale: with no edit at all, this random model's padded batch already
        # differs from a text alone by up to 2.2e-5 where values reach 4.2 (fp32 rounding of batched products)
        scale = alone.abs().max().item()
        torch.testing.assert_close(batch[i, :e.input_ids.shape[1]], alone[0], atol=1e-5 * scale, rtol=1e-5)


def test_a_negative_position_counts_from_each_texts_own_end_in_a_batch(tiny):
    """-1 is each text's last token ([SEP]), not the padded batch's last position (the shorter texts' padding): an
    edit at negative positions gives each text of a padded batch, and of texts laid end to end (a task's groups), what
    it gives the text alone; a position before a shorter text's start is refused."""
    texts = ["when in rome do as the romans do , they say [MASK] .", "the cat sat on the [MASK] ."]
    for edits in (iv.zero_heads({1: [0, 2]}, positions=-1), iv.zero_neurons({0: [3, 7]}, positions=[-2, 0]),
                  iv.steer("layer.1.output", torch.linspace(-2, 2, 48), positions=-3)):
        both = bertfn.trace(texts, tiny, edits=edits)
        torch.testing.assert_close(both[1]["mlm.logits"], bertfn.trace(texts[1], tiny, edits=edits)["mlm.logits"], **TOL)
        assert not torch.equal(both[1]["mlm.logits"], bertfn.trace(texts[1], tiny)["mlm.logits"])  # it edits
        for ours, alone in zip(bertfn.fill_mask(texts, tiny, edits=edits), [bertfn.fill_mask(t, tiny, edits=edits)
                                                                           for t in texts]):
            assert [a["token"] for a in ours] == [a["token"] for a in alone]
            assert all(abs(a["score"] - b["score"]) < 1e-5 for a, b in zip(ours, alone))
    with pytest.raises(bertfn.InputError, match=r"position -10 is before the first token of text 1 at "
                                                r"layer\.1\.attention\.context, which has 9 tokens"):
        bertfn.trace(texts, tiny, edits=iv.zero_heads({1: [0]}, positions=-10))


def test_a_position_past_a_shorter_texts_end_is_refused_in_a_batch(tiny):
    """In a padded batch, a position within the longest text but past a shorter one's last token is that text's
    padding: the edit would change nothing of it, in silence. It is refused, naming the text and its length, on the
    reference's padded batch and in a pipeline's groups; each text alone takes the positions it has."""
    texts = ["when in rome do as the romans do , they say [MASK] .", "the cat sat on the [MASK] ."]  # 14 and 9 tokens
    edits = iv.zero_heads({0: [0]}, positions=[2, 11])
    message = (r"position 11 is past the last token of text 1 at layer\.0\.attention\.context, which has 9 tokens "
               r"\(in a padded batch the positions after a text's end are padding\)")
    with pytest.raises(bertfn.InputError, match=message):
        bertfn.trace(texts, tiny, edits=edits)
    with pytest.raises(bertfn.InputError, match="position 11 is past the last token of text"):
        bertfn.fill_mask(texts, tiny, edits=edits)
    alone = bertfn.trace(texts[0], tiny, edits=edits)["mlm.logits"]
    assert not torch.equal(alone, bertfn.trace(texts[0], tiny)["mlm.logits"])  # the long text alone takes both
    bertfn.trace(texts, tiny, edits=iv.zero_heads({0: [0]}, positions=[2, 8]))  # within both texts


SEVERAL = (["when in rome do as the [MASK] do", "the cat sat on the [MASK] .", "a big [MASK] dog [MASK]"],
           ["when in paris do as the [MASK] do", "the dog sat on the [MASK] .", "a red [MASK] cat [MASK]"])
"""Clean and corrupted texts of 10, 9 and 7 tokens, in no order of length (a pipeline runs them as 2, 1; 0)."""


@pytest.mark.parametrize("name, where", [("layer.1.output", dict(positions=[1, 2])),
                                         pytest.param("layer.0.attention.probs", dict(heads=1), marks=pytest.mark.slow),
                                         pytest.param("mlm.transform", {}, marks=pytest.mark.slow)])
def test_a_recording_of_several_texts_patches_each_into_its_own_text_in_a_pipeline(tiny, name, where):
    """fill_mask runs its texts in groups sorted by length; a patch of bertfn.trace(clean texts) gives each corrupted
    text its own clean text's tensor there (Point.rows), as patching the texts one at a time does (it gave a group's
    row the recording's row of the same index, another text's, silently where the shapes agreed); a clean run that
    cannot say which of its rows are the group's texts is refused."""
    cleans, corrupted = SEVERAL
    recs = bertfn.trace(cleans, tiny)
    ours = bertfn.fill_mask(corrupted, tiny, edits=iv.patch(recs, name, **where), batch_size=2)  # texts 2, 1; then 0
    for i, (got, text) in enumerate(zip(ours, corrupted)):
        alone = bertfn.fill_mask(text, tiny, edits=iv.patch(recs[i], name, **where))
        got, alone = ([r] if isinstance(r[0], dict) else r for r in (got, alone))  # each mask's answers
        assert [[a["token"] for a in m] for m in got] == [[a["token"] for a in m] for m in alone]
        assert all(abs(a["score"] - b["score"]) < 1e-5 for m, n in zip(got, alone) for a, b in zip(m, n))
    with pytest.raises(bertfn.InputError, match=r"runs its inputs 2, 1 as one batch .*a dict of tensors"):
        bertfn.fill_mask(corrupted, tiny, edits=iv.patch(dict(recs.tensors), name, **where), batch_size=2)
    with pytest.raises(bertfn.InputError, match=r"holds 3 text\(s\) of \[7, 9, 10\] tokens"):
        bertfn.fill_mask(corrupted, tiny, edits=iv.patch(bertfn.trace(cleans[::-1], tiny), "layer.1.output"))


@pytest.mark.slow
def test_a_recording_of_several_texts_patches_each_into_its_own_text_in_embed(tiny):
    """embed's groups too: each text gets its own clean text's tensor."""
    cleans, corrupted = ([t.replace("[MASK]", "dog") for t in texts] for texts in SEVERAL)
    natives = bertfn.trace(cleans, tiny)
    alone = torch.cat([bertfn.embed(t, tiny, edits=iv.patch(natives[i], "layer.0.output"))[None]
                       for i, t in enumerate(corrupted)])
    torch.testing.assert_close(bertfn.embed(corrupted, tiny, edits=iv.patch(natives, "layer.0.output"), batch_size=2),
                               alone, **TOL)


def test_tasks_take_edits(tiny):
    texts = ["the cat sat on the [MASK] .", "when in rome do as the [MASK] do"]
    edits = iv.zero_heads({0: [0, 1]})
    pruned = bertfn.prune_heads(tiny, {0: [0, 1]})
    for ours, theirs in zip(bertfn.fill_mask(texts, tiny, edits=edits), bertfn.fill_mask(texts, pruned)):
        assert [a["token"] for a in ours] == [a["token"] for a in theirs]
        assert all(abs(a["score"] - b["score"]) < 1e-5 for a, b in zip(ours, theirs))
    plain = ["the cat sat on the mat .", "a big red dog"]
    for a, b in zip(bertfn.score(plain, tiny, edits=edits), bertfn.score(plain, pruned)):
        assert abs(a["pll"] - b["pll"]) < 1e-4
    torch.testing.assert_close(bertfn.embed(plain, tiny, edits=edits), bertfn.embed(plain, pruned), **TOL)
    # an identity edit at every point (each point scattered into the padded shape and back): the plain numbers again
    torch.testing.assert_close(bertfn.embed(plain, tiny, edits={"*": identity}), bertfn.embed(plain, tiny), **TOL)
    steered = bertfn.fill_mask(texts[0], tiny, edits=iv.steer("mlm.transform", torch.full((48,), 5.0)))
    assert steered != bertfn.fill_mask(texts[0], tiny)


@pytest.mark.parametrize("max_rows", [2048, 1])  # 1: every layer's copies run to the top as a batch of their own
def test_a_sweep_value_is_the_run_patched_at_that_slice(tiny, max_rows, monkeypatch):
    monkeypatch.setattr(iv.copies, "MAX_ROWS", max_rows)
    clean, corrupted = "when in rome do as the [MASK] do", "when in paris do as the [MASK] do"
    right, wrong = tiny.tokenizer.token_to_id("romans"), tiny.tokenizer.token_to_id("people")
    metric = iv.logit_difference(right, wrong)
    clean_rec = bertfn.trace(clean, tiny)
    S = len(clean_rec.tokens)
    for over, name, key in (("positions", "layer.{i}.output", "positions"),
                            ("heads", "layer.{i}.attention.context", "heads")):
        result = iv.sweep(clean, corrupted, tiny, metric, over=over, progress=False)
        assert result.values.shape == ((2, S) if over == "positions" else (2, 3))
        for i in range(2):
            for k in range(result.values.shape[1]):  # every slice of every layer
                edited = bertfn.trace(corrupted, tiny, edits=iv.patch(clean_rec, name.format(i=i), **{key: k}))
                assert abs(result.values[i, k].item() - metric(edited).item()) < 1e-5
        assert abs(result.clean - metric(clean_rec).item()) < 1e-5  # the copies' kernels sum in another order
        estimate = iv.attribution(clean, corrupted, tiny, metric, over=over)
        assert estimate.values.shape == result.values.shape
        assert -1 <= iv.correlation(estimate, result) <= 1


@pytest.mark.parametrize("kind", [dict(is_decoder=True), dict(position_embedding_type="relative_key")])
def test_a_sweep_of_a_decoder_or_relative_positions_is_the_run_patched(tiny, kind):
    """The sweep's last layer runs at the masks alone: with a causal mask (its rows) and with relative positions."""
    cfg = bertfn.BertConfig(**{**tiny.config.to_dict(), "num_hidden_layers": 3, **kind})
    m = bertfn.Model(cfg, random_model(cfg).state, tiny.tokenizer, "random")
    clean, corrupted = "when in rome do as the [MASK] do", "when in paris do as the [MASK] do"
    metric = iv.logit_difference(m.tokenizer.token_to_id("romans"), m.tokenizer.token_to_id("people"))
    clean_rec = bertfn.trace(clean, m)
    result = iv.sweep(clean, corrupted, m, metric, over="heads", progress=False)
    for i in range(3):
        for h in range(3):
            edited = bertfn.trace(corrupted, m, edits=iv.patch(clean_rec, f"layer.{i}.attention.context", heads=h))
            assert abs(result.values[i, h].item() - metric(edited).item()) < 1e-5


def test_gradients_flow_through_edits(tiny):
    vector = torch.zeros(48, requires_grad=True)
    ids = tiny.tokenizer(["the cat sat on the mat ."]).input_ids
    out = bertfn.encoder(tiny, ids, edits=iv.steer("layer.0.output", vector))
    out.last_hidden_state.square().sum().backward()
    assert vector.grad is not None and vector.grad.abs().sum() > 0


def test_bad_edits_get_clear_errors(tiny):
    ids = tiny.tokenizer(["the cat sat ."]).input_ids
    with pytest.raises(bertfn.InputError, match=r"layer\.1\.attention\.probs"):  # a close valid name
        bertfn.encoder(tiny, ids, edits={"layer.1.attention.prob": identity})
    with pytest.raises(bertfn.InputError, match="layers 0-1"):
        bertfn.encoder(tiny, ids, edits={"layer.7.output": identity})
    with pytest.raises(bertfn.InputError, match=r"must return a tensor of the shape it was given, \(1, 6, 48\)"):
        bertfn.encoder(tiny, ids, edits={"layer.0.output": lambda x, p: x[:, :2]})
    with pytest.raises(bertfn.InputError, match="heads \\[5\\] out of range .* 3 heads"):
        bertfn.encoder(tiny, ids, edits=iv.zero_heads({0: [5]}))
    with pytest.raises(bertfn.InputError, match="positions \\[9\\] out of range"):
        bertfn.encoder(tiny, ids, edits=iv.steer("layer.0.output", torch.ones(48), positions=9))
    with pytest.raises(bertfn.InputError, match="has no heads"):
        bertfn.encoder(tiny, ids, edits={"layer.0.output": iv.replace_with(0.0, heads=0)})
    with pytest.raises(bertfn.InputError, match="edits map point names to functions"):
        bertfn.encoder(tiny, ids, edits={"layer.0.output": 3})
    with pytest.raises(bertfn.InputError, match="same number of tokens"):
        bertfn.trace("the cat sat on the mat .", tiny, edits=iv.patch(bertfn.trace("the cat", tiny), "layer.0.output"))
    with pytest.raises(bertfn.InputError, match=r"same length in tokens \(they part at position 4: clean '\. \[SEP\]', "
                                                r"corrupted 'on the mat \.'\)"):
        iv.sweep("the [MASK] sat .", "the [MASK] sat on the mat .", tiny, lambda run: run["mlm.logits"][0, 0],
                 progress=False)


def test_transformer_lens_names_are_answered_with_bertfns(tiny):
    """A name as TransformerLens spells it (HookedEncoder's, the bridge's), in edits=, a recording, path_patch's
    receivers or activation_means, gets bertfn's point for it, not difflib's nearest spelling (blocks.1.attn.hook_z
    was answered with layer.1.attention.k)."""
    ids = tiny.tokenizer(["the cat sat ."]).input_ids
    rec = bertfn.trace("the cat sat on the [MASK] .", tiny)
    for theirs, ours in (("blocks.1.attn.hook_z", r"layer\.1\.attention\.context \(bertfn's name for TransformerLens' "
                                                  r"blocks\.1\.attn\.hook_z; its heads before its positions"),
                         ("blocks.*.attn.hook_pattern", r"layer\.\*\.attention\.probs \(bertfn's name"),
                         ("blocks.0.hook_resid_pre", r"did you mean embeddings\.output \("),
                         ("blocks.1.hook_resid_pre", r"did you mean layer\.0\.output \("),
                         ("blocks.1.attn.hook_result", r"layer\.1\.attention\.head_outputs \("),
                         ("blocks.0.mlp.hook_post", r"layer\.0\.ffn\.intermediate \("), ("hook_unembed", r"mlm\.logits \(")):
        with pytest.raises(bertfn.InputError, match=ours):
            bertfn.encoder(tiny, ids, edits={theirs: identity})
        with pytest.raises(bertfn.InputError, match=ours):
            rec[theirs]
    with pytest.raises(bertfn.InputError, match=r"layer\.1\.attention\.q \(bertfn's name"):
        iv.path_patch("the [MASK] sat .", "the [MASK] ran .", tiny, lambda run: run["mlm.logits"][0, 0], sender=(0, 0),
                      receivers={"blocks.1.attn.hook_q": None})
    with pytest.raises(bertfn.InputError, match=r"layer\.0\.attention\.context \(bertfn's name"):
        iv.activation_means(["the cat"], tiny, ["blocks.0.attn.hook_z"])


def test_edits_of_attention_weights_run_the_eager_path(tiny):
    ids = tiny.tokenizer(["the cat sat ."]).input_ids
    assert bertfn.encoder(tiny, ids).attn_impl == "sdpa"
    assert bertfn.encoder(tiny, ids, edits={"layer.1.attention.probs": identity}).attn_impl == "eager"
    assert bertfn.encoder(tiny, ids, edits={"layer.1.attention.context": identity}).attn_impl == "sdpa"


def test_mean_ablation_with_means_of_the_same_text(tiny):
    """A head replaced by its own mean over one text differs from the plain run; over a single-token
    text (the mean is the value) it is the plain run."""
    means = iv.head_means(["the cat sat on the mat ."], tiny)
    assert means.shape == (2, 3, 16)
    ids = tiny.tokenizer(["the cat sat on the mat ."]).input_ids
    plain = bertfn.encoder(tiny, ids).last_hidden_state
    ablated = bertfn.encoder(tiny, ids, edits=iv.mean_heads({0: [0, 1, 2], 1: [0, 1, 2]}, means)).last_hidden_state
    assert not torch.allclose(plain, ablated)
    neurons = iv.neuron_means(["the cat sat on the mat ."], tiny)
    assert neurons.shape == (2, 80)


def test_mean_ablation_and_steering_refuse_means_and_vectors_of_another_shape(tiny):
    """Each was an IndexError or a RuntimeError of torch's: means of another layer count, another kind or width,
    a steering vector that does not broadcast; and names activation_means cannot average were a KeyError."""
    ids = tiny.tokenizer(["the cat sat ."]).input_ids
    heads, neurons = torch.zeros(2, 3, 16), torch.zeros(2, 80)
    with pytest.raises(bertfn.InputError, match="layer 5 has no means; the means hold layers 0 to 1"):
        iv.mean_heads({5: [0]}, heads)
    with pytest.raises(bertfn.InputError, match=r"mean_heads takes means of shape \(L, nh, hd\).*got shape \(2, 80\)"):
        iv.mean_heads({0: [0]}, neurons)
    with pytest.raises(bertfn.InputError, match=r"mean_neurons takes means of shape \(L, I\).*got shape \(2, 3, 16\)"):
        iv.mean_neurons({0: [0]}, heads)
    with pytest.raises(bertfn.InputError, match=r"shape \(1, 3, 1, 10\), which does not broadcast to layer\.0\.attention"):
        bertfn.encoder(tiny, ids, edits=iv.mean_heads({0: [0]}, heads[..., :10]))
    with pytest.raises(bertfn.InputError, match=r"steer's vector has shape \(3, 48\), which does not broadcast"):
        bertfn.encoder(tiny, ids, edits=iv.steer("layer.0.output", torch.ones(3, 48)))
    for name in ("layer.0.outptu", "layer.*.output", "pooler", "mlm.logits"):
        with pytest.raises(bertfn.InputError, match=f"activation_means averages .*{name.replace('*', '.')!s}"):
            iv.activation_means(["the cat sat ."], tiny, [name])


def test_point_names_cover_relative_positions_and_cross_attention():
    cfg = bertfn.BertConfig(vocab_size=20, hidden_size=8, num_attention_heads=2, num_hidden_layers=1, intermediate_size=8,
                            position_embedding_type="relative_key", is_decoder=True, add_cross_attention=True)
    names = point_names(cfg)
    assert "layer.0.attention.relative_scores" in names and "layer.0.crossattention.probs" in names
    assert "embeddings.position" not in names and "layer.0.crossattention.relative_scores" not in names
    m = random_model(cfg)
    rec = bertfn.Trace()
    ids = torch.tensor([[1, 2, 3]])
    bertfn.encoder(m, ids, encoder_hidden_states=torch.randn(1, 4, 8), impl="eager", trace=rec)
    assert set(rec.store) <= set(names)

