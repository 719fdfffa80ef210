"""MPNet, held to transformers 4.57: every layer's hidden states and attention probabilities, the logits and the pooler
within 1e-5 in fp32 on batches padded on either side (MPNetForMaskedLM, MPNetModel), fill-mask equal to the pipeline,
the shared relative position bias as a trace point of its own, and sentence embeddings equal to sentence-transformers'
on an MPNet sentence-transformers folder (all-mpnet-base-v2's layout: Transformer, mean Pooling, Normalize).

The checkpoints are small and random, with their tokenizer (tests/family_checkpoints.py: ``save_member("mpnet", ...)``).
The tests over every member (tests/test_family*.py, the task tests) take MPNet too, marked slow.
"""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, fp32_atol, on_device
from family_checkpoints import member_tokenizer, save_member

import bertfn
from bertfn.model.members.mpnet import relative_buckets
from bertfn.model.point_names import point_names

pytestmark = pytest.mark.needs_transformers

TOL = fp32_atol(1e-5)
TEXTS = ["When in Rome, do as the Romans do.", "The cat sat.", "The capital of France is Paris, a big city."]


@pytest.fixture(scope="module", params=["MPNetForMaskedLM", "MPNetModel"])
def mpnet(request, tmp_path_factory):
    """(transformers class name, transformers model, bertfn model, folder)."""
    folder = tmp_path_factory.mktemp(request.param)
    hf = save_member("mpnet", folder, model_class=request.param)
    return request.param, on_device(hf), bertfn.load(folder, device=DEVICE), folder


def batch(side: str, texts: list[str] = TEXTS):
    tok = member_tokenizer("mpnet")
    tok.padding_side = side
    try:
        enc = tok(texts, padding=True, return_tensors="pt")
    finally:
        tok.padding_side = "right"
    return on_device((enc["input_ids"], enc["attention_mask"]))


@pytest.mark.parametrize("side", ["right", "left"])
def test_every_layer_the_logits_and_the_pooler_equal_transformers(mpnet, side):
    cls, hf, model, _ = mpnet
    ids, mask = batch(side)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        out = bertfn.encoder(model, ids, mask, output_hidden_states=True, output_attentions=True)
    real = mask.bool()
    assert len(out.hidden_states) == len(ref.hidden_states) == 3
    for ours, theirs in zip(out.hidden_states, ref.hidden_states):
        torch.testing.assert_close(ours[real], theirs[real], atol=TOL, rtol=0)
    for ours, theirs in zip(out.attentions, ref.attentions):  # the real queries' rows
        torch.testing.assert_close(ours.transpose(1, 2)[real], theirs.transpose(1, 2)[real], atol=TOL, rtol=0)
    if cls == "MPNetForMaskedLM":
        assert out.pooler_output is None
        with torch.no_grad():
            logits = bertfn.mlm_head(model, out.last_hidden_state)
        torch.testing.assert_close(logits[real], ref.logits[real], atol=TOL, rtol=0)
    else:
        torch.testing.assert_close(out.pooler_output, ref.pooler_output, atol=TOL, rtol=0)


def test_the_sdpa_path_equals_the_eager_one(mpnet):
    _, _, model, _ = mpnet
    ids, mask = batch("right")
    with torch.no_grad():
        eager = bertfn.encoder(model, ids, mask, impl="eager").last_hidden_state
        sdpa = bertfn.encoder(model, ids, mask, impl="sdpa")
    assert sdpa.attn_impl == "sdpa"
    torch.testing.assert_close(sdpa.last_hidden_state[mask.bool()], eager[mask.bool()], atol=TOL, rtol=0)


def test_the_buckets_are_t5s():
    """Exact offsets up to 7 either side, then log-spaced, keys after the query in the upper 16."""
    offsets = torch.tensor([[-200, -128, -9, -8, -7, -1, 0, 1, 7, 8, 9, 128, 200]])
    assert relative_buckets(offsets).tolist() == [[15, 15, 8, 8, 7, 1, 0, 17, 23, 24, 24, 31, 31]]


def test_the_position_bias_is_a_point_and_editing_it_is_zeroing_the_table(tmp_path):
    """``layer.{i}.attention.position_bias`` (B, nh, S, S) is traced in every layer; zeroing it in every layer is
    transformers' model with its ``relative_attention_bias`` zeroed."""
    hf = on_device(save_member("mpnet", tmp_path))
    model = bertfn.load(tmp_path, device=DEVICE)
    names = point_names(model.config)
    assert "embeddings.token_type" not in names
    assert [n for n in names if n.endswith("position_bias")] == ["layer.0.attention.position_bias",
                                                                   "layer.1.attention.position_bias"]
    ids, mask = batch("right")
    rec = bertfn.Trace()
    with torch.no_grad():
        bertfn.encoder(model, ids, mask, impl="eager", trace=rec)
    assert [n for n in rec.store] == [n for n in names if n in rec.store]
    B, S = ids.shape
    assert rec.store["layer.1.attention.position_bias"].shape == (B, 4, S, S)
    with torch.no_grad():
        zeroed = bertfn.encoder(model, ids, mask, edits={"layer.*.attention.position_bias": lambda t, _: t * 0})
        hf.mpnet.encoder.relative_attention_bias.weight.zero_()
        theirs = hf.mpnet(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(zeroed.last_hidden_state[mask.bool()], theirs[mask.bool()], atol=TOL, rtol=0)


def test_fill_mask_equals_the_pipeline(tmp_path):
    import transformers

    hf = save_member("mpnet", tmp_path)
    tok = member_tokenizer("mpnet")
    model = bertfn.load(tmp_path)
    pipe = transformers.pipeline("fill-mask", model=hf, tokenizer=tok, top_k=5)
    texts = [t.format(m=tok.mask_token) for t in ("When in Rome, do as the {m} do.", "The capital of France is {m}.")]
    ours = bertfn.fill_mask(texts, model, top_k=5)
    for text, answers in zip(texts, ours):
        theirs = pipe(text)
        assert [a["token"] for a in answers] == [a["token"] for a in theirs]
        assert [a["token_str"] for a in answers] == [a["token_str"] for a in theirs]
        assert [a["sequence"] for a in answers] == [a["sequence"] for a in theirs]
        for a, b in zip(answers, theirs):
            assert a["score"] == pytest.approx(b["score"], abs=1e-5)


def test_embed_equals_sentence_transformers_on_an_mpnet_folder(tmp_path):
    """A sentence-transformers folder as all-mpnet-base-v2's (Transformer over an MPNetModel, mean Pooling, Normalize):
    bertfn.embed with mean pooling and normalize equals SentenceTransformer(folder).encode."""
    st = pytest.importorskip("sentence_transformers")
    models = pytest.importorskip("sentence_transformers.models")
    save_member("mpnet", tmp_path / "base", model_class="MPNetModel")
    word = models.Transformer(str(tmp_path / "base"), max_seq_length=60)
    pooling = models.Pooling(word.auto_model.config.hidden_size, pooling_mode="mean")
    st.SentenceTransformer(modules=[word, pooling, models.Normalize()], device="cpu").save(str(tmp_path / "st"))
    texts = TEXTS + ["Hi.", "The king and the queen lived in a big castle, and the cat sat on the mat."]
    theirs = st.SentenceTransformer(str(tmp_path / "st"), device=DEVICE).encode(texts, convert_to_tensor=True)
    model = bertfn.load(tmp_path / "st", device=DEVICE)
    assert model.family.name == "MPNet"
    ours = bertfn.embed(texts, model, pooling="mean", normalize=True, batch_size=2)
    torch.testing.assert_close(ours, theirs, atol=TOL, rtol=0)


def test_heads_are_silenced_not_pruned(tmp_path):
    """Every layer reads one bias table with a column per head: pruning is refused in one line, and zero_heads silences
    a head in one layer."""
    save_member("mpnet", tmp_path)
    model = bertfn.load(tmp_path, device=DEVICE)
    with pytest.raises(bertfn.InputError, match="share one relative position bias"):
        bertfn.prune_heads(model, {0: [1]})
    ids, mask = batch("right")
    rec = bertfn.Trace()
    with torch.no_grad():
        bertfn.encoder(model, ids, mask, trace=rec, edits=bertfn.interventions.zero_heads({1: [0, 2]}))
    assert not rec.store["layer.1.attention.context"][:, [0, 2]].any()
    assert rec.store["layer.0.attention.context"][:, [0, 2]].abs().sum() > 0
