"""One loaded model used from several threads at once gives exactly what serial use gives.

bertfn's functions are pure: they read the state_dict and the config and write nothing shared, so
N threads x M calls of fill_mask and of the encoder must equal the same calls made one after
another, bit for bit (same inputs, same shapes, same kernels).
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import bertfn
from bertfn.checkpoint.resolve import get_model

THREADS, CALLS = 4, 4

TEXTS = ["the [MASK] sat on the mat .", "when in rome , do as the [MASK] do .", "i [MASK] you [MASK] well",
         "[MASK] !", "paris is the [MASK] of france .", "the big red dog and the small [MASK] cat ."]


@pytest.fixture(scope="module")
def model(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    return bertfn.load(folder)


def work(model: bertfn.Model, job: int) -> tuple:
    """One call's worth of work, different per job: a fill_mask and an encoder pass."""
    texts = [TEXTS[(job + i) % len(TEXTS)] for i in range(1 + job % 3)]
    answers = bertfn.fill_mask(texts, model, top_k=3, targets=["cat", "dog", "mat"] if job % 4 == 3 else None)
    enc = model.tokenizer(texts)
    impl = "eager" if job % 2 else "sdpa"
    hidden = bertfn.encoder(model.params, enc.input_ids, enc.attention_mask, impl=impl).last_hidden_state
    return answers, hidden


def test_threads_equal_serial(model):
    jobs = range(THREADS * CALLS)
    serial = [work(model, j) for j in jobs]
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        threaded = list(pool.map(lambda j: work(model, j), jobs))
    for (answers, hidden), (answers_t, hidden_t) in zip(serial, threaded):
        assert answers_t == answers
        assert torch.equal(hidden_t, hidden)


def test_threads_share_one_model_loaded_by_name(mlm_checkpoint, tmp_path):
    """The first calls by name race to load the model: it is loaded once and every thread gets it."""
    folder, _ = mlm_checkpoint
    name = str(shutil.copytree(folder, tmp_path / "fresh"))  # a name no earlier test has loaded
    text = "the [MASK] sat on the mat ."
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        results = list(pool.map(lambda _: bertfn.fill_mask(text, name, top_k=2), range(THREADS * 2)))
        models = set(pool.map(lambda _: id(get_model(name)), range(THREADS)))
    assert len(models) == 1
    assert all(r == results[0] for r in results)
    assert results[0] == bertfn.fill_mask(text, get_model(name), top_k=2)
