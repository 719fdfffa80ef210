"""fill_mask against transformers' fill-mask pipeline on the same checkpoint.

Same tokens, same order, same token strings and sequences; scores within 1e-5 (1e-4 on a GPU), both on
BERTFN_TEST_DEVICE (conftest.DEVICE).
"""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, build_hf, fp32_atol, save_checkpoint

import bertfn

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here

ATOL = fp32_atol(1e-5)


@pytest.fixture(scope="module")
def both(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    pipe = transformers.pipeline("fill-mask", model=str(folder), tokenizer=str(folder), device=DEVICE)
    return bertfn.load(folder, device=DEVICE), pipe


def assert_same(mine, theirs):
    """Same nesting, same tokens/strings/sequences, scores within ATOL."""
    assert type(mine) is type(theirs)
    if isinstance(theirs, dict):
        assert set(mine) == {"score", "token", "token_str", "sequence"}
        assert (mine["token"], mine["token_str"], mine["sequence"]) == \
            (theirs["token"], theirs["token_str"], theirs["sequence"])
        assert mine["score"] == pytest.approx(theirs["score"], abs=ATOL)
        return
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs):
        assert_same(a, b)


def test_one_mask(both):
    model, pipe = both
    text = "when in rome , do as the [MASK] do ."
    assert_same(bertfn.fill_mask(text, model), pipe(text))
    assert len(bertfn.fill_mask(text, model)) == 5


@pytest.mark.parametrize("top_k", [1, 3, 12])
def test_top_k(both, top_k):
    model, pipe = both
    text = "the cat sat on the [MASK] ."
    assert_same(bertfn.fill_mask(text, model, top_k=top_k), pipe(text, top_k=top_k))


def test_several_masks(both):
    model, pipe = both
    text = "the [MASK] sat on the [MASK] in [MASK] ."
    mine = bertfn.fill_mask(text, model, top_k=4)
    assert len(mine) == 3 and all(len(per_mask) == 4 for per_mask in mine)
    assert_same(mine, pipe(text, top_k=4))


def test_targets(both):
    model, pipe = both
    text = "paris is the [MASK] of france ."
    targets = ["capital", "city", "dog"]
    mine = bertfn.fill_mask(text, model, targets=targets)
    assert sorted(a["token_str"] for a in mine) == sorted(targets)
    assert_same(mine, pipe(text, targets=targets))
    assert_same(bertfn.fill_mask(text, model, targets=targets, top_k=2), pipe(text, targets=targets, top_k=2))


def test_batch_of_different_lengths(both):
    model, pipe = both
    texts = ["[MASK] .", "the big red dog sat on the [MASK] and the small cat sat on a mat .",
             "hello [MASK] !", "i [MASK] you [MASK] well", "when in rome , do as the [MASK] do ."]
    for batch_size in (1, 2, 16):
        assert_same(bertfn.fill_mask(texts, model, top_k=3, batch_size=batch_size), pipe(texts, top_k=3))


def test_mixed_case_and_punctuation(both):
    model, pipe = both
    text = "When in Rome, do as the [MASK] do!"
    assert_same(bertfn.fill_mask(text, model), pipe(text))


def test_no_mask_is_an_input_error(both):
    model, _ = both
    with pytest.raises(bertfn.InputError, match=r"no \[MASK\]"):
        bertfn.fill_mask("no mask here", model)


def test_model_by_path_is_loaded_once(mlm_checkpoint):
    from bertfn.checkpoint.resolve import get_model

    folder, _ = mlm_checkpoint
    assert get_model(str(folder)) is get_model(str(folder))
    assert bertfn.fill_mask("hello [MASK] !", str(folder), top_k=1)[0]["token_str"]


def test_a_folder_saved_again_or_another_folder_of_the_same_name_loads_anew(tiny_folder, tmp_path, monkeypatch):
    """Tried as a student fine-tuning in a notebook: ``fill_mask(text, "./tuned")``, then the model trained further and
    saved to ./tuned again, then ``fill_mask(text, "./tuned")`` answered with the first weights (the cache kept a
    folder by its name for ever); and after ``os.chdir``, ``"./tuned"`` named the other directory's folder."""
    from bertfn.checkpoint.resolve import get_model

    text = "the cat sat on the [MASK] ."
    model = bertfn.load(tiny_folder)
    for place in ("a", "b"):
        (tmp_path / place).mkdir()
        bertfn.save(model, tmp_path / place / "tuned")
    monkeypatch.chdir(tmp_path / "a")
    first = get_model("tuned")
    assert get_model("tuned") is first  # unchanged: loaded once
    model.state["cls.predictions.bias"].add_(torch.arange(model.config.vocab_size) / 2.0)  # trained further
    bertfn.save(model, tmp_path / "a" / "tuned")
    again = get_model("tuned")
    assert again is not first and torch.equal(again.state["cls.predictions.bias"], model.state["cls.predictions.bias"])
    assert bertfn.fill_mask(text, "tuned") == bertfn.fill_mask(text, model)
    monkeypatch.chdir(tmp_path / "b")  # the same name, another folder: the first weights
    assert torch.equal(get_model("tuned").state["cls.predictions.bias"],
                       bertfn.load(tiny_folder).state["cls.predictions.bias"])


def test_device_is_part_of_the_cache_and_no_move_when_already_there(mlm_checkpoint):
    from bertfn.checkpoint.resolve import get_model

    folder, _ = mlm_checkpoint
    on_cpu = get_model(str(folder), "cpu")
    assert on_cpu is get_model(str(folder), "cpu") and on_cpu.device == torch.device("cpu")
    assert get_model(on_cpu, "cpu") is on_cpu  # already there: not copied per call
    assert bertfn.fill_mask("hello [MASK] !", str(folder), device="cpu") == bertfn.fill_mask("hello [MASK] !", on_cpu)
    here = bertfn.load(folder, device=DEVICE)
    assert get_model(here, DEVICE) is here  # on a GPU too: "cuda" names the cuda:0 the model is on


def test_dtype_loads_once_per_dtype_and_converts_a_given_model(mlm_checkpoint):
    from bertfn.checkpoint.resolve import get_model

    folder, _ = mlm_checkpoint
    bf16 = get_model(str(folder), dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16 and bf16 is get_model(str(folder), dtype=torch.bfloat16)
    assert get_model(str(folder)).dtype == torch.float32  # the stored precision, a separate entry
    fp32 = get_model(str(folder))
    assert get_model(fp32, dtype=torch.float32) is fp32
    assert get_model(fp32, dtype=torch.bfloat16).dtype == torch.bfloat16
    text = "the cat sat on the [MASK] ."
    answers = bertfn.fill_mask(text, str(folder), dtype=torch.bfloat16, top_k=3)
    assert answers == bertfn.fill_mask(text, bf16, top_k=3)
    with pytest.raises(bertfn.InputError, match="floating-point"):
        bertfn.fill_mask(text, fp32, dtype=torch.int64)


def test_a_model_with_more_rows_than_its_tokenizer_has_tokens_answers_from_every_row(tmp_path):
    """A model whose vocabulary outnumbers its tokenizer's tokens (DeBERTa-v3's 128100 rows for 128001 tokens,
    ModernBERT's 50368 for 50285): top_k counts the model's rows, as the pipeline's does, an answer past the
    tokenizer's tokens spelled "" as transformers decodes it."""
    folder = save_checkpoint(build_hf("BertForMaskedLM", seed=3, vocab_size=91), tmp_path / "wide")  # 71 tokens
    model = bertfn.load(folder, device=DEVICE)
    pipe = transformers.pipeline("fill-mask", model=str(folder), device=DEVICE)
    assert model.tokenizer.vocab_size == 71 < model.config.vocab_size == 91
    text = "the cat [MASK] on the mat ."
    for top_k in (80, 91):
        mine = bertfn.fill_mask(text, model, top_k=top_k)
        assert len(mine) == top_k and any(a["token"] >= 71 for a in mine)
        assert_same(mine, pipe(text, top_k=top_k))
