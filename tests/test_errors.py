"""Bad input, bad files: every case ends in a correct result or a specific bertfn error (issue 5).

Each test asserts the error's type and the part of its message that tells the user what to do:
the text, argument, key or file at fault and the way out. Checkpoints are copies of the session's
small MLM checkpoint (conftest), broken in one way each.
"""

from __future__ import annotations

import http.server
import json
import os
import pickle
import re
import shlex
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import VOCAB, build_hf, require_transformers, save_checkpoint
from safetensors.torch import load_file, save_file

import bertfn
from bertfn.cli import main
from bertfn.tasks.fill_mask import mask_windows, require_masks, window_around_masks

# --- inputs to fill_mask -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    return bertfn.load(folder)


@pytest.fixture(scope="module")
def pipe(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    return require_transformers().pipeline("fill-mask", model=str(folder), tokenizer=str(folder), device="cpu")


def test_text_without_mask(model):
    with pytest.raises(bertfn.InputError, match=r"text 1 has no \[MASK\] token: 'no mask here'; put \[MASK\] where"):
        bertfn.fill_mask(["a [MASK] .", "no mask here"], model)


def test_a_long_text_in_a_message_is_cut_with_an_ellipsis(model):
    """A message cuts a long text where it shows it, and says so (it read as the whole text, with no closing quote)."""
    text = "the cat sat on the mat " * 8
    with pytest.raises(bertfn.InputError) as e:
        bertfn.fill_mask(text, model)
    assert f"'{text[:78]}…;" in str(e.value) and repr(text) not in str(e.value)


def test_several_masks_give_one_list_per_mask(model, pipe):
    text = "[MASK] [MASK] the [MASK] ."
    mine, theirs = bertfn.fill_mask(text, model, top_k=3), pipe(text, top_k=3)
    assert len(mine) == 3 and all(len(per_mask) == 3 for per_mask in mine)
    assert [[a["token"] for a in m] for m in mine] == [[a["token"] for a in m] for m in theirs]


# The test vocabulary reads '<mask>' as '<', 'mask', '>', all [UNK], which bertfn notes before it raises the error.
@pytest.mark.filterwarnings(r"ignore:text 0.*3 of its 5 tokens are \[UNK\]:bertfn.UnknownTokensWarning")
def test_text_with_the_other_spelling_of_the_mask_says_whose_it_is(model, tmp_path):
    """Issue 49: a text that holds <mask> for a model that spells it [MASK] (or the reverse) is told so."""
    with pytest.raises(bertfn.InputError, match=r"text 0 has no \[MASK\] token: 'a <mask> \.'; <mask> is RoBERTa's and "
                                                r"ESM-2's spelling and this model's is \[MASK\]; put \[MASK\] where"):
        bertfn.fill_mask("a <mask> .", model)
    esm = ["<cls>", "<pad>", "<eos>", "<unk>", *"LAGVSERTIDPKQNFYMHWCXBUZO.-", "<null_1>", "<mask>"]  # ESM-2's vocab.txt
    (tmp_path / "vocab.txt").write_text("\n".join(esm) + "\n")
    with pytest.raises(bertfn.InputError, match=r"text 1 has no <mask> token: 'MK\[MASK\]L'; \[MASK\] is BERT's spelling "
                                                r"and this model's is <mask>; put <mask> where"):
        require_masks(bertfn.Tokenizer.from_path(tmp_path / "vocab.txt"), ["MK<mask>L", "MK[MASK]L"])


@pytest.mark.parametrize("text", ["", " ", "\t\n", "\u3000\u00a0"])
def test_empty_or_whitespace_text(model, text):
    with pytest.raises(bertfn.InputError, match=r"text 0 is empty; write a sentence with the mask token \(\[MASK\], or <mask>"):
        bertfn.fill_mask(text, model)


@pytest.mark.parametrize("bad", [None, 3, b"a [MASK]", ["a [MASK]"]])
def test_non_string_in_a_batch(model, bad):
    with pytest.raises(bertfn.InputError, match=f"text 1 must be a string, got {type(bad).__name__}"):
        bertfn.fill_mask(["a [MASK] .", bad], model)


@pytest.mark.parametrize("inputs", [[], (), 42, None])
def test_not_a_text_or_a_list(model, inputs):
    with pytest.raises(bertfn.InputError, match="takes a string or a non-empty list of strings"):
        bertfn.fill_mask(inputs, model)


def test_lone_surrogate_is_not_unicode(model):
    text = b"caf\xe9 [MASK]".decode("utf-8", errors="surrogateescape")  # what argv holds for Latin-1 bytes
    with pytest.raises(bertfn.InputError, match=r"text 0 holds '\\udce9' at character 3, which is not valid Unicode"):
        bertfn.fill_mask(text, model)


# --- texts longer than the model's positions (P = 64 in the test checkpoints) -------------------

WORD_IDS = {w: i for i, w in enumerate(VOCAB)}


def hf_top(hf_model, ids: list[int], k: int) -> list[tuple[int, float]]:
    """transformers' top-k (token, probability) at the single [MASK] of ``ids``."""
    with torch.no_grad():
        logits = hf_model(input_ids=torch.tensor([ids])).logits[0]
    probs = logits[ids.index(WORD_IDS["[MASK]"])].softmax(-1)
    scores, picks = probs.topk(k)
    return list(zip(picks.tolist(), scores.tolist()))


def test_too_long_text_is_an_error_by_default(model):
    text = "the cat sat on the mat . " * 20 + "[MASK]"
    with pytest.raises(bertfn.InputError, match=r"text 0 is 1\d\d tokens long but the model reads at most 64; "
                                                r"shorten it, or pass truncation=True"):
        bertfn.fill_mask(text, model)


@pytest.mark.parametrize("before, after, window", [
    (100, 100, (100 - 30, 100 + 32)),  # middle: 30 words before the mask, 31 after
    (5, 200, (0, 62)),  # near the start: the window starts at the text's start
    (200, 5, (206 - 62, 206)),  # near the end: the window ends at the text's end
])
def test_truncation_keeps_a_window_around_the_mask(model, mlm_checkpoint, before, after, window):
    """The window is [CLS] + 62 text tokens + [SEP], centred on the mask, and scores are the model's on it."""
    _, hf_model = mlm_checkpoint
    words = ["one", "two", "three", "red", "blue", "green", "cat", "dog"]
    text_words = [words[i % 8] for i in range(before)] + ["[MASK]"] + [words[(i + 3) % 8] for i in range(after)]
    ids = [WORD_IDS[w] for w in text_words]
    start, end = window
    expected_ids = [WORD_IDS["[CLS]"]] + ids[start:end] + [WORD_IDS["[SEP]"]]
    assert len(expected_ids) == 64 and WORD_IDS["[MASK]"] in expected_ids

    got = bertfn.fill_mask(" ".join(text_words), model, top_k=4, truncation=True)
    expected = hf_top(hf_model, expected_ids, 4)
    assert [a["token"] for a in got] == [t for t, _ in expected]
    assert [a["score"] for a in got] == pytest.approx([s for _, s in expected], abs=1e-5)
    sequence = got[0]["sequence"]  # the window's text with the mask filled in
    assert sequence.startswith(" ".join(text_words[start:before]))
    assert sequence.endswith(" ".join(text_words[before + 1:end]))


def test_window_moves_off_word_pieces():
    """Two-piece words (word ids 0 0 1 1 ...); the centred window [17, 27) would start and end mid-word."""
    ids = [0 if j == 21 else 1 for j in range(50)]  # 21: the mask, a word of its own
    words = [j // 2 + (j >= 21) for j in range(50)]
    assert window_around_masks(ids, words, mask_id=0, width=10) == (18, 26)
    assert window_around_masks(ids, words, mask_id=0, width=1) == (21, 22)  # the mask alone still fits


def test_truncation_does_not_cut_inside_a_word(model):
    """'sating' is two pieces (sat ##ing): the window ends after a whole word, and scores equal the window's own."""
    text = " ".join(["sating"] * 40 + ["[MASK]"] + ["sating"] * 40)
    enc = model.tokenizer([text])
    assert enc.tokens[0][1:3] == ["sat", "##ing"]
    window = mask_windows(model.tokenizer, enc, enc.attention_mask.sum(1).tolist(), 64)
    tokens = window.tokens[0]
    assert len(tokens) <= 64 and tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "[MASK]" in tokens
    assert tokens[1] == "sat" and tokens[-2] == "##ing"
    window_text = model.tokenizer.decode(window.input_ids[0].tolist(), skip_special_tokens=False)
    window_text = window_text.removeprefix("[CLS] ").removesuffix(" [SEP]")
    assert bertfn.fill_mask(text, model, truncation=True) == bertfn.fill_mask(window_text, model)


def test_truncation_with_masks_further_apart_than_the_window(model):
    text = "[MASK] " + "the cat sat on the mat . " * 12 + "[MASK]"
    with pytest.raises(bertfn.InputError, match=r"text 0 has masks 86 tokens apart \(first to last\) but the model "
                                                r"reads 64 tokens at a time .*split the text"):
        bertfn.fill_mask(text, model, truncation=True)


def test_truncation_keeps_every_mask_and_leaves_short_texts_alone(model):
    long = "two " * 80 + "[MASK] one [MASK] " + "three " * 80
    short = "the [MASK] sat on the mat ."
    got = bertfn.fill_mask([long, short], model, top_k=2, truncation=True)
    assert len(got[0]) == 2 and all(len(per_mask) == 2 for per_mask in got[0])
    alone = bertfn.fill_mask(short, model, top_k=2)  # unpadded: the same numbers up to float rounding
    assert [(a["token"], a["sequence"]) for a in got[1]] == [(a["token"], a["sequence"]) for a in alone]
    assert [a["score"] for a in got[1]] == pytest.approx([a["score"] for a in alone], abs=1e-6)


def test_truncation_must_be_a_bool(model):
    with pytest.raises(bertfn.InputError, match="truncation must be True or False, got 'yes'"):
        bertfn.fill_mask("a [MASK]", model, truncation="yes")


# --- top_k and targets ----------------------------------------------------------------------------


@pytest.mark.parametrize("top_k", [0, -1, True, 1.5, "3", None])
def test_top_k_below_one_or_not_an_int(model, top_k):
    with pytest.raises(bertfn.InputError, match="top_k must be a positive integer, got"):
        bertfn.fill_mask("a [MASK] .", model, top_k=top_k)


def test_top_k_above_the_vocabulary_is_clamped(model):
    got = bertfn.fill_mask("the [MASK] sat .", model, top_k=10**9)
    V = model.config.vocab_size
    assert len(got) == V and len({a["token"] for a in got}) == V  # every token once
    scores = [a["score"] for a in got]
    assert scores == sorted(scores, reverse=True) and sum(scores) == pytest.approx(1.0, abs=1e-5)


def test_top_k_above_the_targets_is_clamped_as_transformers(model, pipe):
    text, targets = "the [MASK] sat on the mat .", ["cat", "dog"]
    mine, theirs = bertfn.fill_mask(text, model, targets=targets, top_k=50), pipe(text, targets=targets, top_k=50)
    assert len(mine) == len(theirs) == 2
    assert [(a["token"], a["sequence"]) for a in mine] == [(a["token"], a["sequence"]) for a in theirs]


def test_targets_outside_the_vocabulary_one_piece_as_transformers_several_as_whole_words(model, pipe):
    """'Red' -> red: one piece, warned and scored as transformers does. 'cats' -> cat ##s, 'dogs' -> dog ##s:
    transformers scores their first piece; bertfn scores the whole word (tests/test_scoring.py checks how)."""
    text, targets = "the [MASK] sat on the mat .", ["cats", "dogs", "mat", "Red"]
    with pytest.warns(UserWarning) as caught:
        mine = bertfn.fill_mask(text, model, targets=targets, top_k=10)
    assert [str(w.message) for w in caught] == ["target 'Red' is not in the vocabulary; using its word piece 'red' instead"]
    assert sorted(a["token_str"] for a in mine) == ["cats", "dogs", "mat", "red"]
    words = {a["token_str"]: a for a in mine if "pieces" in a}
    assert sorted(words) == ["cats", "dogs"] and all(a["pieces"] == 2 and len(a["token"]) == 2 for a in words.values())
    theirs = {a["token_str"]: a for a in pipe(text, targets=["mat", "Red"], top_k=10)}
    for a in mine:
        if "pieces" not in a:
            assert set(a) == {"score", "token", "token_str", "sequence"}
            assert (a["token"], a["sequence"]) == (theirs[a["token_str"]]["token"], theirs[a["token_str"]]["sequence"])
            assert a["score"] == pytest.approx(theirs[a["token_str"]]["score"], abs=1e-5)
    assert [a["score"] for a in mine] == sorted((a["score"] for a in mine), reverse=True)


def test_target_that_tokenizes_to_nothing_is_skipped(model):
    with pytest.warns(UserWarning, match="tokenizes to nothing; skipped"):
        got = bertfn.fill_mask("the [MASK] sat .", model, targets=["\x00", "dog"])
    assert [a["token_str"] for a in got] == ["dog"]
    with pytest.warns(UserWarning), pytest.raises(bertfn.InputError, match="none of the targets"):
        bertfn.fill_mask("the [MASK] sat .", model, targets=["", " \t"])


@pytest.mark.parametrize("targets, message", [
    ([], "targets is empty; pass at least one word, or targets=None"),
    (7, "targets must be a string or a list of strings, got int"),
    (["cat", 7], "target 1 must be a string, got int"),
])
def test_bad_targets(model, targets, message):
    with pytest.raises(bertfn.InputError, match=message):
        bertfn.fill_mask("the [MASK] sat .", model, targets=targets)


# --- ids given to the encoder directly ----------------------------------------------------------

IDS = torch.tensor([[5, 40, 41, 6]])


@pytest.mark.parametrize("kwargs, message", [
    (dict(token_type_ids=torch.tensor([[0, 0, 2, 0]])),
     r"token_type_ids must lie in \[0, 2\), got values from 0 to 2; this model has 2 segment types"),
    (dict(position_ids=torch.tensor([[0, 1, 2, 64]])),
     r"position_ids must lie in \[0, 64\), got values from 0 to 64; this model has 64 positions"),
    (dict(position_ids=torch.tensor([-1, 0, 1, 2])), r"position_ids must lie in \[0, 64\), got values from -1"),
    (dict(input_ids=torch.tensor([[5, 40, 999, 6]])), r"input_ids must lie in \[0, 71\).*use the tokenizer that came"),
    (dict(input_ids=IDS.float()), r"input_ids must be an integer tensor \(torch.long\), got a torch.float32 tensor"),
    (dict(input_ids=[[5, 40]]), r"input_ids must be an integer tensor \(torch.long\), got a list"),
    (dict(input_ids=torch.zeros(1, 0, dtype=torch.long)), r"input_ids must have shape \(batch, seq\) with at least"),
    (dict(token_type_ids=torch.zeros(1, 3, dtype=torch.long)), r"token_type_ids must have shape \(1, 4\)"),
    (dict(position_ids=torch.arange(4.0)), r"position_ids must be an integer tensor"),
])
def test_bad_ids(model, kwargs, message):
    kwargs = {"input_ids": IDS, **kwargs}
    with pytest.raises(bertfn.InputError, match=message):
        bertfn.encoder(model.params, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(attention_mask=[[1, 1, 1, 1]]), r"attention_mask must be a tensor of shape \(1, 4\) or .*got list"),
    (dict(attention_mask=torch.ones(1, 5)), r"attention_mask must be a tensor of shape \(1, 4\) or .*got \(1, 5\)"),
    (dict(attention_mask=torch.ones(1, 4, 3)), r"attention_mask must be .*\(1, 4, 4\).*got \(1, 4, 3\)"),
    (dict(attention_mask=torch.ones(1, 2, 4, 4)), r"attention_mask must be .*\(1, 3, 4, 4\).*got \(1, 2, 4, 4\)"),
    (dict(head_mask=torch.ones(4)), r"head_mask must be a tensor of shape \(3,\) or \(2, 3\).*got \(4,\)"),
    (dict(head_mask=[1, 0, 1]), r"head_mask must be a tensor .*got list"),
])
def test_bad_masks(model, kwargs, message):
    with pytest.raises(bertfn.InputError, match=message):
        bertfn.encoder(model.params, IDS, **kwargs)


def test_head_mask_on_a_pruned_model(model):
    pruned = bertfn.prune_heads(model, {0: [1]})
    with pytest.raises(bertfn.InputError, match="head_mask needs every layer to have all its heads"):
        bertfn.encoder(pruned.params, IDS, head_mask=torch.ones(3))


@pytest.mark.parametrize("embeds, message", [
    (torch.ones(1, 4, 48, dtype=torch.float64), r"inputs_embeds must have the model's dtype torch.float32, got "
                                                 r"torch.float64; convert it with .to\(torch.float32\)"),
    (torch.ones(1, 4, 47), r"inputs_embeds must be a tensor of shape \(batch, seq, 48\), got \(1, 4, 47\)"),
    ([[0.0] * 48], r"inputs_embeds must be a tensor of shape \(batch, seq, 48\), got list"),
])
def test_bad_inputs_embeds(model, embeds, message):
    with pytest.raises(bertfn.InputError, match=message):
        bertfn.encoder(model.params, inputs_embeds=embeds)


@pytest.mark.parametrize("kwargs, message", [
    (dict(device="gpu"), r"device 'gpu' cannot be used here \(no device torch knows: cpu, cuda, .*\); pass 'cpu'"),
    (dict(device="xpu"), r"device 'xpu' cannot be used here \(this torch, [^ ]+, has no xpu backend\); pass 'cpu'$"),
    (dict(dtype="float8"), "dtype must be a floating-point torch.dtype or one of 'float32', .* got 'float8'"),
    (dict(dtype=torch.int64), "dtype must be a floating-point torch.dtype"),
])
def test_bad_device_or_dtype(model, kwargs, message):
    with pytest.raises(bertfn.InputError, match=message):
        model.to(**kwargs)


@pytest.mark.parametrize("call", [lambda m: bertfn.fill_mask("the [MASK] sat .", m, device="gpu"),
                                  lambda m: bertfn.embed("the cat sat .", m, device="gpu")], ids=["fill_mask", "embed"])
def test_a_loaded_model_sent_to_a_device_torch_does_not_know(model, call):
    """A task given a loaded Model and device="gpu" says so as Model.to does (it was a RuntimeError from torch.device)."""
    with pytest.raises(bertfn.InputError, match=r"device 'gpu' cannot be used here \(no device torch knows: cpu, cuda"):
        call(model)


@pytest.mark.parametrize("head, message", [
    (lambda p, h: bertfn.sequence_classification(p, h[:, 0]),
     r"no 'classifier.weight'; .* a \*ForSequenceClassification, \*ForTokenClassification or \*ForMultipleChoice checkpoint\)"),
    (lambda p, h: bertfn.question_answering(p, h), r"no 'qa_outputs.weight'; .* a \*ForQuestionAnswering checkpoint\)"),
    (lambda p, h: bertfn.nsp_head(p, h[:, 0]),
     r"no 'cls.seq_relationship.weight'; .* a BertForPreTraining or BertForNextSentencePrediction checkpoint\)"),
], ids=["classifier", "reader", "next-sentence"])
def test_a_head_the_checkpoint_lacks_names_the_checkpoints_that_hold_it(model, head, message):
    """A masked LM asked for another head's output: the message named a *ForMaskedLM checkpoint whatever was missing."""
    with pytest.raises(bertfn.CheckpointError, match=message):
        head(model.params, torch.zeros(1, 4, 48))


@pytest.mark.needs_transformers
def test_relative_positions_past_the_table(tmp_path):
    """Relative-position models look up distances up to P - 1: a longer input is refused, not an IndexError."""
    folder = save_checkpoint(build_hf("BertModel", seed=4, position_embedding_type="relative_key",
                                      max_position_embeddings=16), tmp_path / "rel")
    rel = bertfn.load(folder)
    assert bertfn.encoder(rel.params, torch.full((1, 16), 9)).last_hidden_state.shape == (1, 16, 48)
    with pytest.raises(bertfn.InputError, match="the input reaches position 17 but this model has 16 positions"):
        bertfn.encoder(rel.params, torch.full((1, 17), 9))


# --- checkpoints ---------------------------------------------------------------------------------


@pytest.fixture
def ckpt(mlm_checkpoint, tmp_path) -> Path:
    """A fresh copy of the MLM checkpoint folder, free to break."""
    folder, _ = mlm_checkpoint
    return Path(shutil.copytree(folder, tmp_path / "ckpt"))


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def edit_weights(folder: Path, edit) -> None:
    state = load_file(folder / "model.safetensors")
    edit(state)
    save_file(state, folder / "model.safetensors")


def test_missing_config_json(ckpt):
    (ckpt / "config.json").unlink()
    with pytest.raises(bertfn.ConfigError, match=f"no config.json in {re.escape(str(ckpt))}; a BERT checkpoint"):
        bertfn.load(ckpt)


def test_missing_config_json_beside_a_weights_file_names_the_folder(ckpt, monkeypatch):
    """Issue 57: a weights file named from its own folder gave "no config.json at config.json"."""
    (ckpt / "config.json").unlink()
    monkeypatch.chdir(ckpt)
    with pytest.raises(bertfn.ConfigError, match=f"no config.json in {re.escape(os.getcwd())}; a BERT checkpoint folder "
                                                 "needs a config.json next to its weights"):
        bertfn.load("model.safetensors")


@pytest.mark.parametrize("name, kind, tokenizer", [
    ("vocab.txt", "a tokenizer's file", "vocab.txt"),
    ("tokenizer.json", "a tokenizer's file", "tokenizer.json"),
    ("tokenizer_config.json", "a tokenizer's file", ""),
    ("special_tokens_map.json", "a tokenizer's file", ""),
    ("config.json", "a config file", ""),
    ("modules.json", "a config file", ""),
])
def test_a_tokenizer_or_config_file_as_the_model_says_where_it_goes(ckpt, name, kind, tokenizer):
    """Issue 57: a checkpoint folder's other files, passed as the model, were read as a corrupt PyTorch checkpoint."""
    (ckpt / name).touch()  # modules.json, the one the checkpoint lacks; the others are there already
    with pytest.raises(bertfn.ModelLoadError) as e:
        bertfn.load(ckpt / name)
    assert str(e.value) == (
        f"{ckpt / name} is {kind}, not a model's weights: the model argument takes the checkpoint's folder, e.g. "
        f"bertfn.load({str(ckpt)!r}), or a weights file (model.safetensors or pytorch_model.bin); a vocabulary that "
        f"is not beside the weights goes to tokenizer={str(ckpt / tokenizer) if tokenizer else str(ckpt)!r}")


def test_config_json_that_is_not_json(ckpt):
    (ckpt / "config.json").write_text('{"hidden_size": 48,')
    with pytest.raises(bertfn.ConfigError, match=f"{re.escape(str(ckpt / 'config.json'))} is not valid JSON"):
        bertfn.load(ckpt)


def test_missing_key_names_key_and_file(ckpt):
    edit_weights(ckpt, lambda s: s.pop("bert.encoder.layer.1.output.dense.bias"))
    with pytest.raises(bertfn.CheckpointError) as e:
        bertfn.load(ckpt)
    assert f"the weights in {ckpt / 'model.safetensors'} do not fit {ckpt / 'config.json'}" in str(e.value)
    assert "missing 1 key(s): bert.encoder.layer.1.output.dense.bias" in str(e.value)


def test_extra_key_inside_a_bert_part_is_refused_at_any_strictness(ckpt):
    edit_weights(ckpt, lambda s: s.update({"bert.encoder.layer.0.attention.self.gate.weight": torch.zeros(3)}))
    for strict in (False, True):
        with pytest.raises(bertfn.CheckpointError, match=r"unexpected 1 key\(s\): bert\.encoder\.layer\.0\.attention"
                                                         r"\.self\.gate\.weight.*check that .*config\.json belongs to"):
            bertfn.load(ckpt, strict=strict)


def test_wrong_shape_names_key_and_both_shapes(ckpt):
    edit_weights(ckpt, lambda s: s.update({"bert.encoder.layer.0.attention.self.value.bias": torch.zeros(47)}))
    with pytest.raises(bertfn.CheckpointError,
                       match=r"wrong shape: bert\.encoder\.layer\.0\.attention\.self\.value\.bias: expected \(48,\), "
                             r"found \(47,\)"):
        bertfn.load(ckpt)


@pytest.mark.parametrize("changes, contradiction", [
    (dict(num_hidden_layers=3), "num_hidden_layers=3 but the weights have 2"),
    (dict(num_hidden_layers=1), "num_hidden_layers=1 but the weights have 2"),
    (dict(hidden_size=96), "hidden_size=96 but the weights have 48"),
    (dict(vocab_size=100), "vocab_size=100 but the weights have 71"),
    (dict(max_position_embeddings=128), "max_position_embeddings=128 but the weights have 64"),
    (dict(intermediate_size=64), "intermediate_size=64 but the weights have 80"),
    (dict(position_embedding_type="relative_key"),
     "position_embedding_type='relative_key' but the weights lack relative-position distance_embedding tables"),
])
def test_config_values_that_contradict_the_weights(ckpt, changes, contradiction):
    edit_config(ckpt, **changes)
    with pytest.raises(bertfn.CheckpointError) as e:
        bertfn.load(ckpt)
    message = str(e.value)
    assert message.startswith(f"{ckpt / 'config.json'} contradicts the weights in {ckpt / 'model.safetensors'}: ")
    assert contradiction in message and "use the config.json that came with these weights" in message


def test_tokenizer_larger_than_the_vocabulary(ckpt):
    (ckpt / "tokenizer.json").unlink()
    with (ckpt / "vocab.txt").open("a", encoding="utf-8") as f:
        f.write("zebra\nyak\n")
    with pytest.raises(bertfn.CheckpointError, match=f"the tokenizer {re.escape(str(ckpt / 'vocab.txt'))} has 73 tokens but "
                                                     "the model's "
                                                     "vocab_size is 71"):
        bertfn.load(ckpt)


@pytest.mark.parametrize("field, value", [("hidden_act", "swiglu"), ("position_embedding_type", "rotary")])
def test_unknown_activation_or_position_type(ckpt, field, value):
    edit_config(ckpt, **{field: value})
    with pytest.raises(bertfn.ConfigError, match=f"{re.escape(str(ckpt / 'config.json'))}: config {field} '{value}' .*expected one of"):
        bertfn.load(ckpt)


@pytest.mark.parametrize("damage", ["truncated", "header", "empty", "text"])
def test_truncated_or_corrupted_safetensors(ckpt, damage):
    path = ckpt / "model.safetensors"
    data = path.read_bytes()
    broken = {"truncated": data[: len(data) // 2], "header": b"\xff" * 8 + data[8:], "empty": b"",
              "text": b"<html>404 not found</html>"}[damage]
    path.write_bytes(broken)
    with pytest.raises(bertfn.CheckpointError, match=f"{re.escape(str(path))} is not a readable safetensors file .*it may be "
                                                     "truncated or corrupt, download it again"):
        bertfn.load(ckpt)


def test_truncated_bin(ckpt):
    state = load_file(ckpt / "model.safetensors")
    (ckpt / "model.safetensors").unlink()
    torch.save(state, ckpt / "pytorch_model.bin")
    path = ckpt / "pytorch_model.bin"
    assert bertfn.load(ckpt).config.num_hidden_layers == 2  # the intact .bin loads
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(bertfn.CheckpointError, match=f"{re.escape(str(path))} is not a PyTorch checkpoint bertfn can read "
                                                     r"\(\w+Error: .*\); it may be truncated or corrupt"):
        bertfn.load(ckpt)


class RunsCode:
    """Unpickling this runs a shell command: the classic payload of a malicious pickle."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # torch's note on the plain pickle's protocol
@pytest.mark.parametrize("layout", ["torch.save", "torch.save legacy", "plain pickle"])
def test_bin_with_pickled_code_is_refused_and_never_run(ckpt, tmp_path, monkeypatch, layout):
    marker, control = tmp_path / "code-ran", tmp_path / "control-ran"
    state = dict(load_file(ckpt / "model.safetensors"))
    (ckpt / "model.safetensors").unlink()
    path = ckpt / "pytorch_model.bin"

    def write(target: Path, marker: Path) -> None:
        payload = {**state, "bert.pooler.dense.bias": RunsCode(marker)}
        if layout == "plain pickle":
            target.write_bytes(pickle.dumps(payload))
        else:
            torch.save(payload, target, _use_new_zipfile_serialization=layout == "torch.save")

    write(path, marker)
    write(tmp_path / "control.bin", control)
    # The payload is live: an unsafe load of the same file runs it.
    if layout == "plain pickle":
        pickle.loads((tmp_path / "control.bin").read_bytes())
    else:
        torch.load(tmp_path / "control.bin", weights_only=False)
    assert control.exists()

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # a user's global opt-out does not reach bertfn
    with pytest.raises(bertfn.CheckpointError, match=f"{re.escape(str(path))} "):
        bertfn.load(ckpt)
    assert not marker.exists()


def test_bin_with_pickled_code_names_the_refused_call(ckpt, tmp_path):
    (ckpt / "model.safetensors").unlink()
    torch.save({"bert.pooler.dense.bias": RunsCode(tmp_path / "code-ran")}, ckpt / "pytorch_model.bin")
    with pytest.raises(bertfn.CheckpointError, match=r"holds more than plain tensors \(UnpicklingError: .*GLOBAL "
                                                     r"posix\.system.*never runs code a pickle carries"):
        bertfn.load(ckpt)
    assert not (tmp_path / "code-ran").exists()


def test_folder_without_weights(ckpt):
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(bertfn.CheckpointError, match=f"{re.escape(str(ckpt))} has no model.safetensors or pytorch_model.bin"):
        bertfn.load(ckpt)


def test_a_folder_of_checkpoints_names_the_one_inside(ckpt, tmp_path, capsys):
    """antiberty's trained_models holds its checkpoint in a subfolder: --model on the folder above names that one."""
    inner = ckpt  # in tmp_path, which holds no weights of its own
    assert main(["fill-mask", "the [MASK] .", "--model", str(inner.parent)]) == bertfn.CheckpointError.exit_code
    assert capsys.readouterr().err.strip().endswith(f"; {inner} holds them: pass --model {inner}")
    with pytest.raises(bertfn.CheckpointError, match=re.escape(f"; {inner} holds them: pass {str(inner)!r}")):
        bertfn.load(inner.parent)


def test_path_that_does_not_exist(tmp_path):
    with pytest.raises(bertfn.ModelLoadError, match=r"does not exist \(no such folder or file here\); pass an existing folder, file or a hub id"):
        bertfn.load(tmp_path / "no-such-model")


# --- hub ids -------------------------------------------------------------------------------------


@pytest.fixture
def hf_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face cache, offline (huggingface_hub read HF_HUB_CACHE at import: patch both)."""
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.mark.parametrize("call", [lambda: bertfn.zero_shot("a text", candidate_labels=["a", "b"]),
                                  lambda: bertfn.rerank("a query", ["a passage"]),
                                  lambda: bertfn.choose("a prompt", ["a", "b"]),
                                  lambda: bertfn.contacts("MKTAYIAKQR")])
def test_a_heads_pipeline_without_a_default_asks_for_a_model_before_loading_any(call, hf_cache):
    """zero_shot, rerank, choose and contacts given no model went for bert-base-uncased, which has none of their heads
    (with the hub up, a 440 MB download and then the refusal): transformers has no default for them in BERT's family."""
    with pytest.raises(bertfn.InputError, match=r"needs a model fine-tuned for it, and has no default: pass model="):
        call()


@pytest.mark.parametrize("call, default", [
    (lambda: bertfn.classify("a text"), "distilbert/distilbert-base-uncased-finetuned-sst-2-english"),
    (lambda: bertfn.tag("a text"), "dbmdz/bert-large-cased-finetuned-conll03-english"),
    (lambda: bertfn.answer("a question?", "a context."), "distilbert/distilbert-base-cased-distilled-squad")])
def test_classify_tag_and_answer_given_no_model_load_transformers_default(call, default, hf_cache):
    """As transformers' pipelines do for their task (not bert-base-uncased, which has no head for it)."""
    with pytest.raises(bertfn.ModelLoadError, match=f"there is no folder named '{default}' here"):
        call()


def test_offline_with_an_empty_cache(hf_cache):
    with pytest.raises(bertfn.ModelLoadError) as e:
        bertfn.load("some-org/some-bert")
    message = str(e.value)
    assert (f"there is no folder named 'some-org/some-bert' here, and HF_HUB_OFFLINE is set while the Hugging Face "
            f"cache ({hf_cache}) has no copy of it") in message
    assert "unset HF_HUB_OFFLINE to download it, or pass a local folder" in message
    assert "bertfn.load('./some-bert')" in message


def test_hub_id_in_the_cache_loads_offline(hf_cache, mlm_checkpoint):
    """The layout huggingface_hub writes: models--org--name/refs/main -> snapshots/<sha>/files."""
    folder, _ = mlm_checkpoint
    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = hf_cache / "models--some-org--some-bert"
    shutil.copytree(folder, repo / "snapshots" / sha)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)

    cached, local = bertfn.load("some-org/some-bert"), bertfn.load(folder)
    assert cached.name == "some-org/some-bert" and cached.state.keys() == local.state.keys()
    assert all(torch.equal(cached.state[k], local.state[k]) for k in local.state)
    text = "the [MASK] sat on the mat ."
    assert bertfn.fill_mask(text, cached) == bertfn.fill_mask(text, local)


@pytest.mark.parametrize("name", ["some org/some bert", "org/name--x"])
def test_hub_id_that_cannot_exist(hf_cache, name):
    with pytest.raises(bertfn.ModelLoadError, match=f"'{name}' is neither a local folder nor a model on the hub "
                                                    r"\(HFValidationError\); check the spelling"):
        bertfn.load(name)


class _NoSuchRepo(http.server.BaseHTTPRequestHandler):
    """Answers every request as the hub does for a repository that does not exist."""

    code = "RepoNotFound"

    def _answer(self):
        self.send_response(404)
        self.send_header("X-Error-Code", self.code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _answer

    def log_message(self, *args):
        pass


class _NoSuchFile(_NoSuchRepo):
    """Answers every request as the hub does for a file that a repository does not hold."""

    code = "EntryNotFound"


@pytest.mark.parametrize("handler, said", [
    (_NoSuchRepo, "'some-org/nope' is neither a local folder nor a model on the hub (RepositoryNotFoundError); check "
                  "the spelling"),
    (_NoSuchFile, "'some-org/nope' on the hub has no config.json (nor its modules.json a Transformer module with one): "
                  "it is not a transformers checkpoint bertfn can read"),  # was: "HF_HUB_OFFLINE is set", online
])
def test_hub_id_that_does_not_exist(tmp_path, handler, said):
    """Online, against a stand-in hub on localhost that answers 404 RepoNotFound (or EntryNotFound for every file),
    through the real CLI."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{server.server_address[1]}", HF_HUB_CACHE=str(tmp_path))
    try:
        done = subprocess.run([sys.executable, "-m", "bertfn", "fill-mask", "a [MASK]", "--model", "some-org/nope"],
                              env=env, capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
        server.server_close()  # its listening socket too (else a ResourceWarning: unclosed socket)
    assert done.returncode == bertfn.ModelLoadError.exit_code == 5
    assert done.stderr.count("\n") == 1 and done.stdout == ""
    assert done.stderr.startswith(f"bertfn: error: {said}"), done.stderr


# --- the CLI: one line, the error's exit code, never a traceback ----------------------------------


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(err: str, *parts: str) -> None:
    assert err.startswith("bertfn: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for part in parts:
        assert part in err, err


@pytest.mark.parametrize("argv, part", [
    ([], "the following arguments are required: command; see 'bertfn --help'"),
    (["fill-mask"], "pass at least one text with the model's mask token ([MASK] or <mask>), or --input FILE"),
    (["score"], "pass at least one text to score, or --input FILE"),  # then where stdin is no terminal: --input -
    (["fill-mask", "a [MASK]", "--top-k", "many"], "argument --top-k: invalid int value: 'many'"),
    (["fill-mask", "a [MASK]", "--colour"], "unrecognized arguments: --colour"),
    (["fil-mask", "a [MASK]"], "invalid choice: 'fil-mask'"),
])
def test_cli_bad_arguments(capsys, argv, part):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert_one_line(err, part)


def test_cli_exit_codes_per_error_class(capsys, ckpt, tmp_path):
    text = "the [MASK] sat ."
    assert run_cli(capsys, "fill-mask", text, "--model", str(ckpt), "--top-k", "0")[0] == 2
    assert run_cli(capsys, "fill-mask", text, "--model", str(tmp_path / "none"))[0] == 5
    (ckpt / "model.safetensors").write_bytes(b"")
    code, _, err = run_cli(capsys, "fill-mask", text, "--model", str(ckpt))
    assert code == 4
    assert_one_line(err, "model.safetensors is not a readable safetensors file")
    (ckpt / "config.json").unlink()
    code, _, err = run_cli(capsys, "fill-mask", text, "--model", str(ckpt))
    assert code == 3
    assert_one_line(err, f"no config.json in {ckpt};")


def test_a_vocabulary_as_the_cli_model_says_model_takes_the_folder_and_tokenizer_the_file(capsys, ckpt):
    code, out, err = run_cli(capsys, "fill-mask", "a [MASK]", "--model", str(ckpt / "vocab.txt"))
    assert code == bertfn.ModelLoadError.exit_code and out == "" and "Unpickling" not in err
    assert_one_line(err, f"{ckpt / 'vocab.txt'} is a tokenizer's file, not a model's weights: --model takes the "
                         f"checkpoint's folder, e.g. --model {ckpt}, or a weights file (model.safetensors or "
                         f"pytorch_model.bin); a vocabulary that is not beside the weights goes to --tokenizer "
                         f"{ckpt / 'vocab.txt'}")


def test_cli_bad_device(capsys, ckpt):
    code, out, err = run_cli(capsys, "fill-mask", "the [MASK] sat .", "--model", str(ckpt), "--device", "gpu")
    assert code == 2 and out == ""
    assert_one_line(err, "device 'gpu' cannot be used here")


def test_cli_too_long_text_and_truncation(capsys, ckpt):
    text = "one two three " * 30 + "[MASK] ."
    code, _, err = run_cli(capsys, "fill-mask", text, "--model", str(ckpt))
    assert code == 2
    assert_one_line(err, "tokens long but the model reads at most 64", "or pass --truncation to keep")
    code, out, err = run_cli(capsys, "fill-mask", text, "--model", str(ckpt), "--truncation", "--json", "--top-k", "2")
    assert code == 0 and err == ""
    assert len(json.loads(out)) == 2


def test_cli_warnings_are_one_line(capsys, ckpt):
    code, out, err = run_cli(capsys, "fill-mask", "the [MASK] sat .", "--model", str(ckpt), "--targets", "Red", "dog")
    assert code == 0 and "rank" in out
    assert err == "bertfn: warning: target 'Red' is not in the vocabulary; using its word piece 'red' instead\n"


def test_cli_checks_the_texts_before_the_load_and_its_warnings(capsys, ckpt, tmp_path):
    """Issue 49: an empty text fails before the model loads (here: a model that does not exist); a text without
    the mask token fails alone, with none of the load's warnings (a key no BERT part reads) before its error."""
    code, out, err = run_cli(capsys, "fill-mask", "the [MASK] sat .", " ", "--model", str(tmp_path / "none"))
    assert code == 2 and out == ""
    assert_one_line(err, "text 2 is empty; write a sentence with the mask token")  # counted from 1, as typed
    edit_weights(ckpt, lambda state: state.update({"cls.species.weight": torch.zeros(2, 8)}))
    code, out, err = run_cli(capsys, "fill-mask", "the [MASK] sat .", "the <mask> sat .", "--model", str(ckpt))
    assert code == 2 and out == ""
    assert_one_line(err, "text 2 has no [MASK] token", "<mask> is RoBERTa's and ESM-2's spelling")
    code, out, err = run_cli(capsys, "fill-mask", "the [MASK] sat .", "--model", str(ckpt))
    assert code == 0 and "rank" in out
    assert err.startswith("bertfn: warning: ") and "cls.species.*" in err and err.count("\n") == 1, err


def test_cli_unexpected_failure_is_one_line_exit_1(capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("something deep\nwent wrong")

    monkeypatch.setattr("bertfn.tasks.fill_mask.fill_mask", broken)
    monkeypatch.setattr("bertfn.cli.fill_mask.model_from_args", lambda args, *_, **__: SimpleNamespace(tokenizer=None))
    monkeypatch.delenv("BERTFN_DEBUG", raising=False)
    code, out, err = run_cli(capsys, "fill-mask", "a [MASK]")
    assert code == 1 and out == ""
    assert_one_line(err, "unexpected RuntimeError: something deep went wrong", "BERTFN_DEBUG=1 shows the traceback")
    monkeypatch.setenv("BERTFN_DEBUG", "1")
    with pytest.raises(RuntimeError, match="something deep"):
        main(["fill-mask", "a [MASK]"])


def test_cli_ctrl_c(capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("bertfn.tasks.fill_mask.fill_mask", interrupted)
    monkeypatch.setattr("bertfn.cli.fill_mask.model_from_args", lambda args, *_, **__: SimpleNamespace(tokenizer=None))
    code, _, err = run_cli(capsys, "fill-mask", "a [MASK]")
    assert code == 130 and err == "bertfn: error: interrupted\n"


def test_cli_subprocess_bad_checkpoint_has_no_traceback(ckpt, tmp_path):
    torch.save({"bert.pooler.dense.bias": RunsCode(tmp_path / "code-ran")}, ckpt / "pytorch_model.bin")
    (ckpt / "model.safetensors").unlink()
    done = subprocess.run([sys.executable, "-m", "bertfn", "fill-mask", "a [MASK]", "--model", str(ckpt)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 4 and done.stdout == ""
    assert_one_line(done.stderr, "pytorch_model.bin holds more than plain tensors")
    assert not (tmp_path / "code-ran").exists()


def test_every_error_class_has_its_own_exit_code():
    classes = [bertfn.InputError, bertfn.ConfigError, bertfn.CheckpointError, bertfn.ModelLoadError]
    assert [c.exit_code for c in classes] == [2, 3, 4, 5]
    assert all(issubclass(c, bertfn.BertfnError) for c in classes)
    # InputError and ConfigError are ValueErrors too, so callers' `except ValueError` still catches them
    assert issubclass(bertfn.InputError, ValueError) and issubclass(bertfn.ConfigError, ValueError)


def test_the_model_functions_say_what_they_take(tiny_folder):
    """The edges a user meets when calling the model functions directly (issue #26, item 7)."""
    tiny = bertfn.load(tiny_folder)
    with pytest.raises(bertfn.InputError, match=r"token ids, got text .*model\.tokenizer\(\[text"):
        bertfn.encoder(tiny, "a sentence")
    with pytest.raises(bertfn.InputError, match=r"scope of a whole layer .*scope\('attention'\)"):
        bertfn.attention(tiny.params.layer(0), torch.randn(1, 3, 48))
    with pytest.raises(bertfn.InputError, match="string or a non-empty list of strings"):
        bertfn.trace({"the cat", "a dog"}, tiny)


def test_a_whole_word_target_holding_the_unknown_token_is_warned_about(model):
    """'cat中' -> cat [UNK]: scored as those pieces (no word of the vocabulary), and said so, as a target of one
    piece outside the vocabulary is; a whole word the vocabulary spells ('cats' -> cat ##s) is not warned about."""
    with pytest.warns(UserWarning) as caught:
        got = bertfn.fill_mask("the [MASK] sat .", model, targets=["cat中", "cats"])
    assert [str(w.message) for w in caught] == [
        "target 'cat中' is not in the vocabulary and its word pieces 'cat', '[UNK]' hold [UNK], so it is scored as "
        "those pieces, not as the word; pass words the vocabulary spells"]
    assert sorted(a["pieces"] for a in got) == [2, 2]


def test_a_text_of_unknown_tokens_is_warned_about_at_the_users_line(tiny_folder):
    """The warning names the line that called bertfn, whichever task met the text: it named a line of bertfn's
    (``enc = tok(list(batch))`` in embed.py), so Python's once-per-place filter kept it from a re-run notebook cell
    or any later cell that met such a text again."""
    m = bertfn.load(tiny_folder)
    calls = {"fill_mask": lambda: bertfn.fill_mask("é ü [MASK]", m), "score": lambda: bertfn.score("é ü ß", m),
             "embed": lambda: bertfn.embed(["é ü ß"], m), "trace": lambda: bertfn.trace("é ü ß", m)}
    for name, call in calls.items():
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            call()
        unknown = [w for w in said if issubclass(w.category, bertfn.UnknownTokensWarning)]
        assert [w.filename for w in unknown] == [__file__], name
