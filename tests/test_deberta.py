"""DeBERTa-v2/v3 (bertfn/model/members/deberta.py, deberta_attention.py) held to transformers 4.57.

Small random models built offline from a config (:func:`build`): every layer's hidden states, attention
probabilities and the logits of ``DebertaV2ForMaskedLM`` and the task heads within 1e-5 on right- and left-padded
batches, over the attention's options (log buckets or none, the span from ``max_relative_positions`` or the
positions, c2p and p2c or one, shared or own positional projections, the LayerNorm of ``rel_embeddings``, absolute
positions, token types, ``embedding_size`` < H, the convolution); fill-mask and classify equal transformers'
pipelines on the family checkpoint's tokenizer (tests/family_checkpoints.py, kind "deberta-v2"); the fast path
(the encoder on texts laid end to end, ``Segments``) equals the reference text by text on every variant.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from conftest import fp32_atol
from family_checkpoints import member_tokenizer, save_head, save_member

import bertfn
from bertfn.model.heads import mlm_head
from bertfn.model.members.deberta_attention import (
    log_bucket_position,
    relative_positions,
)
from bertfn.model.task_heads import run_head

pytestmark = pytest.mark.needs_transformers

TOL = fp32_atol(1e-5)
BASE = dict(vocab_size=97, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=40,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            relative_attention=True, position_buckets=8, max_relative_positions=64, pos_att_type=["p2c", "c2p"],
            share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0)
"""DeBERTa-v3's layout, small: 8 log buckets (so that the 13-token batch reaches beyond them), shared keys."""

VARIANTS = {
    "v3": {},
    "c2p-own-keys": dict(share_att_key=False, pos_att_type=["c2p"]),
    "p2c-own-keys": dict(share_att_key=False, pos_att_type=["p2c"]),
    "no-buckets-span-from-positions": dict(share_att_key=False, position_buckets=-1, max_relative_positions=-1),
    "buckets-0-v2-embeddings": dict(position_buckets=0, max_relative_positions=16, norm_rel_ebd="none",
                                    position_biased_input=True, type_vocab_size=2, embedding_size=24),
    "conv": dict(conv_kernel_size=3, conv_act="gelu", pos_att_type="p2c|c2p"),
    "no-relative-attention": dict(relative_attention=False, position_biased_input=True),
}


def build(tmp_path, model_class: str = "DebertaV2ForMaskedLM", **overrides):
    """A random transformers DeBERTa-v2 of :data:`BASE` with ``overrides``, saved to ``tmp_path``: (its model,
    bertfn's)."""
    import transformers

    config = transformers.DebertaV2Config(**{**BASE, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():  # move LayerNorms and biases off their init so every weight matters
        for name, p in hf.named_parameters():
            if "norm" in name.lower() or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    hf.save_pretrained(tmp_path, safe_serialization=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no tokenizer in the folder: ids only
        return hf, bertfn.load(tmp_path)


def padded(side: str, vocab: int = 97) -> tuple[torch.Tensor, torch.Tensor]:
    """Three texts of 13, 8 and 5 tokens, padded (id 0) on ``side``: (ids (3, 13), mask (3, 13))."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (3, 13), generator=g)
    mask = torch.ones(3, 13, dtype=torch.long)
    for row, n in ((1, 8), (2, 5)):
        pad = slice(n, None) if side == "right" else slice(None, 13 - n)
        mask[row, pad] = 0
        ids[row, pad] = 0
    return ids, mask


def compare(hf, model, ids, mask) -> tuple[torch.Tensor, object]:
    """Assert every layer's hidden states and attention probabilities equal transformers'; return the oracle's output
    and bertfn's encoder output."""
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        out = bertfn.encoder(model, ids, mask, impl="eager", output_hidden_states=True, output_attentions=True)
    assert len(out.hidden_states) == len(ref.hidden_states)
    for ours, theirs in zip(out.hidden_states, ref.hidden_states):
        torch.testing.assert_close(ours, theirs, atol=TOL, rtol=0)
    for ours, theirs in zip(out.attentions, ref.attentions):
        torch.testing.assert_close(ours, theirs, atol=TOL, rtol=0)
    return ref, out


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_masked_lm_equals_transformers_on_a_padded_batch(tmp_path, variant, side):
    hf, model = build(tmp_path, **VARIANTS[variant])
    ids, mask = padded(side)
    ref, out = compare(hf, model, ids, mask)
    with torch.no_grad():
        logits = mlm_head(model, out.last_hidden_state)
    torch.testing.assert_close(logits, ref.logits, atol=TOL, rtol=0)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_fast_path_equals_the_reference_per_text(tmp_path, variant):
    """The encoder on Segments: texts laid end to end (40 tokens, past the 8 buckets' reach, then 13, 8 and 5), every
    text's hidden states the reference encoder's on that text alone, also at a few rows only; then again on weights
    packed for oneDNN where it is the kernel chosen here (the positional projections then read packed weights)."""
    from bertfn.fast.choice import pack_state
    from conftest import ends

    _, model = build(tmp_path, **VARIANTS[variant])
    g = torch.Generator().manual_seed(2)
    texts = [torch.randint(5, 97, (1, n), generator=g) for n in (40, 13, 8, 5)]
    lengths = [t.shape[1] for t in texts]
    ids = torch.cat(texts, dim=1)  # (1, T)
    positions = torch.cat([torch.arange(n) for n in lengths])[None]  # (1, T), from 0 in each text
    rows = torch.tensor([0, 39, 40, 60, 65])
    with torch.no_grad():
        alone = torch.cat([bertfn.encoder(model, t).last_hidden_state[0] for t in texts])  # (T, H)
        for _ in ("as stored", "packed"):
            fast = ends(model.params, ids, torch.zeros_like(ids), lengths, positions=positions)[0]  # (T, H)
            some = ends(model.params, ids, torch.zeros_like(ids), lengths, rows, positions)[0]  # (5, H)
            torch.testing.assert_close(fast, alone, atol=TOL, rtol=0)
            torch.testing.assert_close(some, alone[rows], atol=TOL, rtol=0)
            if not pack_state(model.state):
                break  # oneDNN on packed weights is not the kernel chosen on this machine


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("task", ["sequence-classification", "token-classification", "question-answering"])
def test_task_heads_equal_transformers(tmp_path, task, side):
    suffix = {"sequence-classification": "ForSequenceClassification", "token-classification": "ForTokenClassification",
              "question-answering": "ForQuestionAnswering"}[task]
    hf, model = build(tmp_path, "DebertaV2" + suffix, num_labels=2 if task == "question-answering" else 3,
                      pooler_hidden_act="tanh")
    ids, mask = padded(side)
    ref, out = compare(hf, model, ids, mask)
    assert model.head.task == task
    with torch.no_grad():
        logits = run_head(model.params, task, out.last_hidden_state, mask)
    if task == "question-answering":
        torch.testing.assert_close(logits[0], ref.start_logits, atol=TOL, rtol=0)
        torch.testing.assert_close(logits[1], ref.end_logits, atol=TOL, rtol=0)
    else:
        torch.testing.assert_close(logits, ref.logits, atol=TOL, rtol=0)


def test_multiple_choice_equals_transformers(tmp_path):
    hf, model = build(tmp_path, "DebertaV2ForMultipleChoice")
    ids, mask = padded("right")
    with torch.no_grad():
        ref = hf(input_ids=ids[None], attention_mask=mask[None]).logits  # (1, 3): one text, three choices
        h = bertfn.encoder(model, ids, mask).last_hidden_state
        ours = run_head(model.params, "multiple-choice", h, mask)  # (3, 1)
    torch.testing.assert_close(ours.view(1, 3), ref, atol=TOL, rtol=0)


def test_the_trace_records_the_positional_terms_and_the_probabilities(tmp_path):
    hf = save_member("deberta-v2", tmp_path, conv_kernel_size=3)
    model = bertfn.load(tmp_path)
    rec = bertfn.trace(TEXTS[1], model)
    names = set(rec.keys())
    for point in ("embeddings.output", "layer.0.attention.scores", "layer.0.attention.c2p_scores",
                  "layer.0.attention.p2c_scores", "layer.0.attention.scaled_scores", "layer.0.attention.probs",
                  "layer.0.conv", "layer.1.output", "mlm.logits"):
        assert point in names, point
    enc = member_tokenizer("deberta-v2")([TEXTS[1]], return_tensors="pt")
    with torch.no_grad():
        ref = hf(**enc, output_attentions=True, output_hidden_states=True)
    torch.testing.assert_close(rec["layer.1.attention.probs"].reshape(ref.attentions[1].shape), ref.attentions[1],
                               atol=TOL, rtol=0)
    torch.testing.assert_close(rec["layer.0.output"].reshape(ref.hidden_states[1].shape), ref.hidden_states[1],
                               atol=TOL, rtol=0)
    terms = rec["layer.0.attention.scores"] + rec["layer.0.attention.c2p_scores"] + rec["layer.0.attention.p2c_scores"]
    torch.testing.assert_close(terms, rec["layer.0.attention.scaled_scores"], atol=TOL, rtol=0)


def test_log_buckets_match_transformers():
    from transformers.models.deberta_v2.modeling_deberta_v2 import (
        build_relative_position,
        make_log_bucket_position,
    )

    rel = torch.arange(-300, 300)[None]
    torch.testing.assert_close(log_bucket_position(rel, 256, 512), make_log_bucket_position(rel, 256, 512),
                               rtol=0, atol=0)
    import transformers

    config = bertfn.BertConfig.from_dict(transformers.DebertaV2Config(position_buckets=16, max_relative_positions=64,
                                                                      relative_attention=True).to_dict())
    q = torch.zeros(1, 40, 8)
    assert torch.equal(relative_positions(40, config), build_relative_position(q, q, 16, 64)[0])


def test_the_hubs_v3_head_names_read_as_the_legacy_head(tmp_path):
    """microsoft/deberta-v3-* hold ``lm_predictions.lm_head.*`` under a config without ``legacy`` (True): bertfn reads
    that head as the legacy one (the same function where E = H), where transformers 4.57 would draw a new one."""
    from safetensors.torch import load_file, save_file

    hf, _ = build(tmp_path)
    ids, mask = padded("right")
    names = {"cls.predictions.transform.dense.": "lm_predictions.lm_head.dense.",
             "cls.predictions.transform.LayerNorm.": "lm_predictions.lm_head.LayerNorm.",
             "cls.predictions.bias": "lm_predictions.lm_head.bias"}
    state = load_file(tmp_path / "model.safetensors")
    renamed = {}
    for k, t in state.items():
        for old, new in names.items():
            if k.startswith(old):
                k = new + k[len(old):]
                break
        if not k.startswith("cls."):
            renamed[k] = t
    renamed["mask_predictions.dense.weight"] = torch.zeros(3, 3)  # v3's replaced-token detector: ignored
    hub = tmp_path / "hub"
    hub.mkdir()
    save_file(renamed, hub / "model.safetensors")
    (hub / "config.json").write_text((tmp_path / "config.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = bertfn.load(hub)
    with torch.no_grad():
        ours = mlm_head(again, bertfn.encoder(again, ids, mask).last_hidden_state)
        theirs = hf(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(ours, theirs, atol=TOL, rtol=0)


def test_config_reads_deberta_fields(tmp_path):
    _, model = build(tmp_path, pos_att_type="p2c|c2p")
    config = model.config
    assert config.model_type == "deberta-v2" and config.type_vocab_size == 0 and config.pos_att_type == ("p2c", "c2p")
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "deberta-v2"
    with pytest.raises(bertfn.ConfigError, match="pos_att_type"):
        bertfn.BertConfig.from_dict({**config.to_dict(), "pos_att_type": ["c2c"]})


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deberta-v2")
    return save_member("deberta-v2", folder), folder


TEXTS = ["The capital of France is [MASK].",
         "When in Rome, do as the [MASK] do, and the king and the queen sat on the big mat with the cat."]


def test_fill_mask_equals_the_pipeline(checkpoint):
    import transformers

    hf, folder = checkpoint
    pipe = transformers.pipeline("fill-mask", model=hf, tokenizer=member_tokenizer("deberta-v2"))
    theirs = pipe(TEXTS, top_k=5)
    ours = bertfn.fill_mask(TEXTS, bertfn.load(folder), top_k=5)
    for o, t in zip(ours, theirs):
        assert [r["token"] for r in o] == [r["token"] for r in t]
        assert [r["sequence"] for r in o] == [r["sequence"] for r in t]
        torch.testing.assert_close(torch.tensor([r["score"] for r in o]), torch.tensor([r["score"] for r in t]),
                                   atol=1e-6, rtol=0)


def test_the_tokenizer_equals_transformers(checkpoint):
    _, folder = checkpoint
    tok = member_tokenizer("deberta-v2")
    ours = bertfn.load(folder).tokenizer([TEXTS[0]], [TEXTS[1]])  # a pair: [CLS] A [SEP] B [SEP]
    theirs = tok([TEXTS[0]], [TEXTS[1]], return_tensors="pt")
    assert ours.input_ids.tolist() == theirs["input_ids"].tolist()
    assert tok.convert_ids_to_tokens(theirs["input_ids"][0])[0] == "[CLS]"


def test_classify_equals_the_pipeline(tmp_path):
    import transformers

    hf = save_head("deberta-v2", "sequence-classification", tmp_path, num_labels=3)
    pipe = transformers.pipeline("text-classification", model=hf, tokenizer=member_tokenizer("deberta-v2"))
    theirs = pipe(TEXTS, top_k=None)
    ours = bertfn.classify(TEXTS, bertfn.load(tmp_path), top_k=None)
    for o, t in zip(ours, theirs):
        assert [r["label"] for r in o] == [r["label"] for r in t]
        torch.testing.assert_close(torch.tensor([r["score"] for r in o]), torch.tensor([r["score"] for r in t]),
                                   atol=1e-6, rtol=0)


def spm_model(path, tokenizer_json) -> None:
    """Write the unigram of a family tokenizer.json as DeBERTa's ``spm.model`` (a SentencePiece ModelProto, built
    with the protobuf classes transformers reads it with): [PAD] [CLS] [SEP] control pieces, [UNK] the unknown one, no
    character map. Those of ``import_protobuf``: sentencepiece's own where it is installed, else transformers' copy;
    both in one process clash (both register "sentencepiece_model.proto")."""
    pytest.importorskip("google.protobuf")
    from transformers.convert_slow_tokenizer import import_protobuf

    pb2 = import_protobuf()
    model = pb2.ModelProto()
    kinds = {"[PAD]": 3, "[CLS]": 3, "[SEP]": 3, "[UNK]": 2}
    for piece, score in json.loads(tokenizer_json.read_text())["model"]["vocab"]:
        p = model.pieces.add()
        p.piece, p.score, p.type = piece, score, kinds.get(piece, 1)
    model.trainer_spec.model_type = 1
    model.trainer_spec.unk_id = 3
    model.normalizer_spec.name = "identity"
    path.write_bytes(model.SerializeToString())


def test_a_folder_with_only_spm_model_reads_it_as_transformers_converts_it(tmp_path):
    """DeBERTa-v3 hub folders ship spm.model without tokenizer.json: bertfn reads the protobuf as data and builds
    DebertaV2Converter's pipeline; the ids equal those of the same pieces' tokenizer.json (the test texts are ASCII,
    which the family tokenizer's NFKC leaves alone)."""
    hf, folder = tmp_path / "hf", tmp_path / "spm"
    save_member("deberta-v2", hf)
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((hf / name).read_bytes())
    spm_model(folder / "spm.model", hf / "tokenizer.json")
    from bertfn.checkpoint.sentencepiece import read_model

    pieces, model_type, unk_id, _, charsmap = read_model(folder / "spm.model")
    vocab = json.loads((hf / "tokenizer.json").read_text())["model"]["vocab"]
    assert [p for p, _, _ in pieces] == [p for p, _ in vocab] and (model_type, unk_id, charsmap) == (1, 3, b"")
    torch.testing.assert_close(torch.tensor([s for _, s, _ in pieces]), torch.tensor([s for _, s in vocab]))
    ours = bertfn.load(folder).tokenizer(TEXTS, ["The cat sat.", "Paris is big."])
    theirs = member_tokenizer("deberta-v2")(TEXTS, ["The cat sat.", "Paris is big."], padding=True, return_tensors="pt")
    assert ours.input_ids.tolist() == theirs["input_ids"].tolist()
    assert ours.token_type_ids.tolist() == theirs["token_type_ids"].tolist()


def test_a_broken_spm_model_is_refused(tmp_path):
    build(tmp_path)
    (tmp_path / "spm.model").write_bytes(b"\x0a\xff\xff")
    with pytest.raises(bertfn.CheckpointError, match="spm.model"):
        bertfn.load(tmp_path)


def test_pruning_heads_is_refused_as_transformers_cannot_read_it_back(checkpoint):
    """transformers' DeBERTa-v2 has no prune_heads (a config with pruned_heads stops from_pretrained), and its position
    projections (pos_key_proj without share_att_key) keep every head: a pruned model crashed, or saved a folder
    transformers could not read."""
    model = bertfn.load(checkpoint[1])
    with pytest.raises(bertfn.InputError, match="DeBERTa-v2 has no prune_heads.*zero_heads"):
        bertfn.prune_heads(model, {0: [1]})
