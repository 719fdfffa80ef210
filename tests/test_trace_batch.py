"""bertfn.trace on a list of texts: one padded batch, every point recorded, each text's slice equal to tracing it alone.

And the encoder given a keeping Trace records as much as bertfn.trace does (the eager path), never silently less.
Each text's slice is held to tracing it alone at 1e-5 of the tensor's scale (``max |a - b| <= 1e-5 max(1, max |b|)``):
the batch runs the same functions on a (B, S) input, whose matrix products round in another order, so a score of
57 differs by up to 4e-5 (about 1e-6 of it) and an elementwise tolerance fails where large terms cancel.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import TINY, random_model, write_folder

import bertfn
from bertfn.interventions import zero_heads
from bertfn.model.point_names import point_names

TEXTS = ["the cat sat on the [MASK] .", "hello world", "when in rome do as the [MASK] do [MASK]", "a big red dog"]
PAIRS = [None, "the dog sat on the mat .", None, "two"]  # texts 1 and 3 are sentence pairs: 9, 12, 11, 8 tokens


@pytest.fixture(scope="module")
def tiny(tiny_folder) -> bertfn.Model:
    return bertfn.load(tiny_folder)


@pytest.fixture(scope="module")
def recs(tiny) -> bertfn.inspect.trace.Recordings:
    return bertfn.trace(TEXTS, tiny, pair=PAIRS)


def assert_same_pass(got: bertfn.Recording, alone: bertfn.Recording) -> None:
    """Every point of ``got`` equals ``alone``'s (same names, order, shapes; values to 1e-5 of the tensor's scale)."""
    assert got.keys() == alone.keys()
    assert got.tokens == alone.tokens and got.mask_positions == alone.mask_positions
    assert torch.equal(got.input_ids, alone.input_ids)
    for name in alone.keys():
        a, b = got[name], alone[name]
        assert a.shape == b.shape, name
        assert (a - b).abs().max() <= 1e-5 * max(1.0, b.abs().max().item()), name


def test_each_texts_slice_equals_tracing_it_alone_at_every_point(tiny, recs):
    assert len(recs) == len(TEXTS) and len(set(recs.lengths)) == len(TEXTS)  # every text pads differently
    for i, (text, pair) in enumerate(zip(TEXTS, PAIRS)):
        assert_same_pass(recs[i], bertfn.trace(text, tiny, pair=pair))
    assert_same_pass(recs[-1], recs[len(TEXTS) - 1])
    assert [r.tokens for r in recs] == recs.tokens  # iteration gives the texts in order


def test_the_batch_records_every_point_a_single_text_does(tiny, recs):
    alone = bertfn.trace(TEXTS[0], tiny)
    assert recs.keys() == alone.keys() and len(recs.keys()) == len(point_names(tiny.config))
    for i in range(tiny.config.num_hidden_layers):
        for step in ("scores", "scaled_scores", "masked_scores", "probs"):
            assert f"layer.{i}.attention.{step}" in recs


def test_the_batch_tensors_keep_the_batch_axis_first(tiny, recs):
    B, S = recs.input_ids.shape
    nh, H = tiny.config.num_attention_heads, tiny.config.hidden_size
    assert (B, S) == (len(TEXTS), max(recs.lengths)) and recs.attention_mask.sum(dim=1).tolist() == recs.lengths
    assert recs["embeddings.output"].shape == (B, S, H)
    assert recs["layer.1.attention.probs"].shape == (B, nh, S, S)
    assert recs["pooler"].shape == (B, H)
    probs = recs["layer.0.attention.probs"]  # a real query puts nothing on the padding's keys
    for i, n in enumerate(recs.lengths):
        assert not probs[i, :, :n, n:].any()
        torch.testing.assert_close(probs[i, :, :n, :n].sum(dim=-1), torch.ones(nh, n))


def test_mlm_rows_run_at_every_mask_of_every_text(tiny, recs):
    mask_id = tiny.tokenizer.mask_token_id
    assert recs.mask_rows == [(t, p) for t, ids in enumerate(recs.input_ids.tolist()) for p, x in enumerate(ids)
                              if x == mask_id]
    assert [t for t, _ in recs.mask_rows] == [0, 2, 2]
    assert recs["mlm.logits"].shape == (3, tiny.config.vocab_size)
    assert recs[2]["mlm.logits"].shape == (2, tiny.config.vocab_size)
    assert "mlm.logits" not in recs[1]  # no [MASK]: the head never ran for it alone either
    assert recs[0].mask_positions == [recs.tokens[0].index("[MASK]")]


def test_texts_without_pairs_and_all_pairs(tiny):
    for pairs in (None, ["the dog", "a cat", "two", "one"]):
        recs = bertfn.trace(TEXTS, tiny, pair=pairs)
        for i in (0, 3):
            assert_same_pass(recs[i], bertfn.trace(TEXTS[i], tiny, pair=pairs[i] if pairs else None))


def test_a_chunked_feed_forward_is_cut_as_each_text_records_it(tiny):
    chunked = dataclasses.replace(tiny, config=dataclasses.replace(tiny.config, chunk_size_feed_forward=8))
    recs = bertfn.trace(TEXTS, chunked, pair=PAIRS)
    assert "layer.0.ffn.chunk.1.output" in recs  # the batch's 12 positions take two slices
    for i, (text, pair) in enumerate(zip(TEXTS, PAIRS)):  # 8 tokens fit one slice, 9 to 12 take two
        assert_same_pass(recs[i], bertfn.trace(text, chunked, pair=pair))


def test_edits_apply_to_the_batch(tiny, recs):
    edited = bertfn.trace(TEXTS, tiny, pair=PAIRS, edits=zero_heads({1: [0]}))
    assert not edited["layer.1.attention.context"][:, 0].any()
    assert torch.equal(edited["layer.0.output"], recs["layer.0.output"])
    assert not torch.equal(edited["layer.1.output"], recs["layer.1.output"])
    for i in range(len(TEXTS)):
        assert_same_pass(edited[i], bertfn.trace(TEXTS[i], tiny, pair=PAIRS[i], edits=zero_heads({1: [0]})))
    with pytest.raises(bertfn.InputError, match="did you mean layer.0.attention.probs"):
        bertfn.trace(TEXTS, tiny, edits={"layer.0.attention.prob": lambda x, point: x})


def test_names_and_indices_that_are_not_there(recs):
    with pytest.raises(bertfn.InputError, match="did you mean layer.0.attention.probs"):
        recs["layer.0.attention.prob"]
    for bad in (4, -5, True, 1.0, slice(0, 2)):
        with pytest.raises(bertfn.InputError, match=r"index from 0 to 3 \(or -4 to -1"):
            recs[bad]
    assert "layer.0.output" in recs and "layer.9.output" not in recs
    for one_texts in ("attention", "save_html"):  # a Recording's methods, asked of the batch's: which text?
        with pytest.raises(AttributeError, match=rf"Recordings has no '{one_texts}': that is one text's \(a "
                                                 rf"Recording's\); pick a text as recs\[i\], e.g. recs\[0\]\.{one_texts}"):
            getattr(recs, one_texts)
    assert not hasattr(recs, "nothing") and hasattr(recs[0], "attention")


def test_numpy_and_torch_integers_index_a_text(recs):
    """np.argsort's indices and 0-d tensors are integers: recs[np.int64(1)] is recs[1], not a refusal."""
    np = pytest.importorskip("numpy")
    for index in (np.int64(1), torch.tensor(1), np.int32(-3)):
        assert recs[index].tokens == recs[int(index)].tokens
    with pytest.raises(bertfn.InputError, match=r"for several texts, \[recs\[i\] for i in"):
        recs[0:2]


def test_repr_is_short(recs):
    text = repr(recs)
    assert text.startswith("Recordings(4 texts of 9, 12, 11, 8 tokens, padded to 12, [MASK] in texts 0, 2; ")
    assert "layer.{0..1}.attention.*" in text and len(text) < 300


def test_what_the_batch_refuses(tiny, tiny_folder):
    with pytest.raises(bertfn.InputError, match="one per text"):
        bertfn.trace(TEXTS, tiny, pair=["the dog"])
    with pytest.raises(bertfn.InputError, match="list of second segments"):
        bertfn.trace(TEXTS, tiny, pair="the dog")
    with pytest.raises(bertfn.InputError, match="second segment 1 is empty"):
        bertfn.trace(TEXTS[:2], tiny, pair=[None, " "])
    with pytest.raises(bertfn.InputError, match="text 1 is empty"):
        bertfn.trace(["the cat", ""], tiny)
    with pytest.raises(bertfn.InputError, match="non-empty list"):
        bertfn.trace([], tiny)
    with pytest.raises(bertfn.MissingPartError, match="trace needs a tokenizer, and model .* has none"):
        bertfn.trace(TEXTS, dataclasses.replace(tiny, tokenizer=None))


class LayerOutputs(dict):
    """A store that keeps each layer's output alone, as the docs' ``store=`` says a dict subclass may."""

    def __setitem__(self, name, tensor):
        if name.endswith(".output") and name.count(".") == 2:  # layer.{i}.output
            super().__setitem__(name, tensor)


def test_a_store_keeps_only_its_points_for_a_batch_too(tiny):
    """200 texts keep every point (7 GB on AntiBERTy): a store that keeps less works for a list as for one text,
    and recs[i] cuts what it kept (it was refused: store= 'receives the pass of one text')."""
    recs = bertfn.trace(TEXTS, tiny, pair=PAIRS, store=LayerOutputs())
    assert recs.keys() == [f"layer.{i}.output" for i in range(tiny.config.num_hidden_layers)]
    for i in (1, 2):
        alone = bertfn.trace(TEXTS[i], tiny, pair=PAIRS[i])
        assert recs[i].keys() == recs.keys()
        torch.testing.assert_close(recs[i]["layer.1.output"], alone["layer.1.output"], rtol=0, atol=1e-5)


def test_encoder_with_a_keeping_trace_records_the_weights(tiny):
    enc = tiny.tokenizer(TEXTS)
    for impl in ("sdpa", "eager"):
        record = bertfn.Trace()
        out = bertfn.encoder(tiny, enc.input_ids, enc.attention_mask, enc.token_type_ids, impl=impl, trace=record)
        assert out.attn_impl == "eager"
        assert set(record.store) == {n for n in point_names(tiny.config) if not n.startswith("mlm.")}
    silent = bertfn.Trace(keep=False, edits={"layer.0.output": lambda x, point: x})
    assert bertfn.encoder(tiny, enc.input_ids, enc.attention_mask, trace=silent).attn_impl == "sdpa"
    assert bertfn.encoder(tiny, enc.input_ids, enc.attention_mask).attn_impl == "sdpa"


def test_a_model_without_mlm_head_records_no_mlm(tmp_path):
    headless = bertfn.load(write_folder(random_model(bertfn.BertConfig(**TINY), seed=6, mlm=False), tmp_path))
    recs = bertfn.trace(TEXTS, headless)
    assert recs.mask_rows and "mlm.logits" not in recs and "mlm.logits" not in recs[0]
    assert_same_pass(recs[0], bertfn.trace(TEXTS[0], headless))
    with pytest.raises(bertfn.InputError, match="and only where the checkpoint has one"):  # not 'put a mask in it'
        recs[0]["mlm.logits"]


FRAGMENTS = ["E V Q L V E S G [MASK] G L V Q", "D I Q M T Q S P S S L S A S V G D R V T I T C",
             "Q V Q L [MASK] Q S G A E V K K P G A S V K V S C K A S G Y T F T"]


def test_real_antiberty_fragments_equal_their_own_traces(antiberty):
    recs = bertfn.trace(FRAGMENTS, antiberty)
    assert recs.lengths == [15, 25, 32] and [t for t, _ in recs.mask_rows] == [0, 2]
    assert recs["layer.7.attention.probs"].shape == (3, 8, 32, 32)
    for i, text in enumerate(FRAGMENTS):
        assert_same_pass(recs[i], bertfn.trace(text, antiberty))


@pytest.mark.needs_transformers  # save_member builds the member with transformers
@pytest.mark.parametrize("kind, own", [("deberta-v2", ("c2p_scores", "p2c_scores")), ("mpnet", ("position_bias",))])
def test_a_members_own_attention_terms_are_cut_on_the_keys_too(kind, own, tmp_path):
    """DeBERTa's c2p and p2c terms and MPNet's position bias are (B, nh, S, S), like the scores: recs[i] cuts the
    padding's keys from them as from the probabilities, so they equal the text's own trace."""
    from family_checkpoints import save_member

    save_member(kind, tmp_path)
    model = bertfn.load(tmp_path)
    texts = ["The cat sat on the mat.", "When in Rome, do as the Romans do, said the king to the queen."]
    recs = bertfn.trace(texts, model)
    assert all(f"layer.0.attention.{name}" in recs for name in own)
    assert_same_pass(recs[0], bertfn.trace(texts[0], model))
