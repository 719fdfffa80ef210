"""Warnings outside file mode: a mostly-[UNK] text named by its index once per call and flagged in its
results (Python calls, stream); bertfn's warnings in classes of their own, so that one kind can be quieted."""

from __future__ import annotations

import warnings

import pytest

import bertfn
from bertfn.corpus import stream

UNK = "é [MASK] ü"  # the test vocabulary has neither letter


@pytest.fixture(scope="module")
def model(tiny_folder):
    return bertfn.load(tiny_folder)


def caught(call):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in seen if issubclass(w.category, bertfn.UnknownTokensWarning)]


def test_python_calls_name_the_text_once_and_flag_its_results(model):
    texts = ["the [MASK] sat", UNK, "the cat [MASK]", "ü [MASK] é é", UNK]
    answers, said = caught(lambda: bertfn.fill_mask(texts, model, top_k=2))
    assert len(said) == 1 and said[0].startswith("text 1 (and texts 3, 4 like it): 2 of its 2 tokens are [UNK]")
    assert [all("warning" in a for a in per_text) for per_text in answers] == [False, True, False, True, True]
    assert answers[3][1]["warning"].startswith("3 of its 3 tokens are [UNK] (e.g. 'ü', 'é', 'é')")
    scores, said = caught(lambda: bertfn.score(["the cat sat", "é ü"], model))
    assert said == [scores[1]["warning"].join(["text 1: ", ""])] and "warning" not in scores[0]
    _, said = caught(lambda: bertfn.embed(["é ü", "the cat"], model))  # a tensor holds no flag: the warning says it
    assert len(said) == 1 and said[0].startswith("text 0: 2 of its 2 tokens")


def test_score_warns_of_an_unknown_token_it_scores_in_a_text_mostly_known(model):
    """A PLL adds log P([UNK]) where a character is not in the vocabulary (a 'J' or '*' in a chain for AntiBERTy's
    capitals moved a PLL by ~25 nats) and reads every other token beside it: said, where the tokenizer's rule of
    mostly [UNK] is silent, and flagged in the text's dict; a text mostly [UNK] keeps the tokenizer's words alone."""
    scores, said = caught(lambda: bertfn.score(["the cat sat", "the é sat", "é ü", "é the cat ü"], model))
    assert said[0].startswith("text 2: 2 of its 2 tokens are [UNK]")  # the tokenizer's, as before
    assert said[1].startswith("text 1 (and text 3 like it): 1 of its 3 scored tokens read as [UNK] (e.g. 'é'): its "
                              "PLL adds the log-probability of [UNK] itself there") and len(said) == 2
    assert "warning" not in scores[0] and scores[1]["warning"] == said[1].removeprefix("text 1 (and text 3 like it): ")
    assert scores[3]["warning"].startswith("2 of its 4 scored tokens read as [UNK] (e.g. 'é', 'ü')")
    assert scores[2]["warning"].startswith("2 of its 2 tokens are [UNK]")


def test_stream_names_the_texts_by_their_place_in_the_stream(model):
    texts = ["the [MASK] sat"] * 5 + [UNK, "no mask", UNK]
    results, said = caught(lambda: list(stream(texts, model, top_k=1, chunk_size=4, errors="return")))
    # chunk 2 ran as halves after "no mask" was refused: its [UNK] texts are still 5 and 7
    assert [s.split(":")[0] for s in said] == ["text 5", "text 7"]
    assert "warning" in results[5][0] and isinstance(results[6], bertfn.InputError)
    assert str(results[6]).startswith("text 6 has no [MASK]")


def test_unused_weights_warning_can_be_quieted_alone(tiny_folder, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    folder = shutil.copytree(tiny_folder, tmp_path / "leftovers")
    state = load_file(folder / "model.safetensors")
    state["optimizer.step"] = torch.tensor(3)  # a leftover of training, which no part reads
    save_file(state, str(folder / "model.safetensors"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        bertfn.load(folder)
    assert [w.category for w in seen] == [bertfn.UnusedWeightsWarning]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=bertfn.UnusedWeightsWarning)
        m = bertfn.load(folder)
        bertfn.fill_mask("the [MASK] sat", m)
        assert not seen
        bertfn.fill_mask(UNK, m)  # the other kind still speaks
    assert [w.category for w in seen] == [bertfn.UnknownTokensWarning]
    assert issubclass(bertfn.UnusedWeightsWarning, UserWarning)
