"""How texts laid end to end attend (bertfn/fast/attention_batches.py): a call per run of one length, or padded
batches, chosen per device and dtype by measurement.

* ``padded_batches`` takes every text once, in order, keeps a run of one length in one batch, and keeps each batch
  within its bound of padded scores;
* ``Segments(batches=...)`` refuses counts that are not the texts', and its calls are the batches asked for;
* ``BERTFN_ATTENTION`` forces a way (a wrong name is an InputError) and nothing is measured; otherwise the first
  layout of several lengths on a device and dtype measures both ways, once, kept in the kernels' cache file;
* the pipelines give the same answers either way: fill-mask's on a tiny random masked LM, embed's on the real
  all-MiniLM-L6-v2 (installed with the tests' extras; every member's layers: tests/test_layouts.py).
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import minilm_folder
from hypothesis import given, settings
from hypothesis import strategies as st

import bertfn
from bertfn.fast import attention_batches as ab
from bertfn.model.layout import Segments


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=40), st.floats(0, 3))
def test_padded_batches_take_every_text_once_within_their_bound(lengths, slack):
    counts = ab.padded_batches(tuple(lengths), slack)
    assert sum(counts) == len(lengths) and all(c >= 1 for c in counts)
    start = 0
    for c in counts:
        ns = lengths[start:start + c]
        assert c == 1 or c * max(ns) ** 2 <= (1 + slack) * sum(n * n for n in ns) + 1e-9
        start += c
    sorted_runs = ab.padded_batches(tuple(sorted(lengths)), slack)  # a run of one length is never cut
    cut = torch.tensor([0, *sorted_runs]).cumsum(0).tolist()
    ends = set(cut[1:-1])
    ordered = sorted(lengths)
    assert not any(ordered[i - 1] == ordered[i] for i in ends)


def test_segments_batches_are_checked_and_give_the_calls():
    assert Segments((5, 3, 3, 2)).calls() == [(5,), (3, 3), (2,)]
    assert Segments((5, 3, 3, 2), batches=(1, 3)).calls() == [(5,), (3, 3, 2)]
    for bad in ((1, 2), (4, 0), (2, 3), (2.0, 2)):
        with pytest.raises(bertfn.InputError, match="batches count the texts"):
            Segments((5, 3, 3, 2), batches=bad)


def test_a_forced_way_is_taken_and_nothing_is_measured(monkeypatch):
    monkeypatch.setattr(ab, "measure", lambda *a, **k: pytest.fail("measured"))
    monkeypatch.setenv("BERTFN_ATTENTION", "padded")
    assert ab.batches((2, 3, 9), "cpu", torch.float32) == ab.padded_batches((2, 3, 9))
    monkeypatch.setenv("BERTFN_ATTENTION", "runs")
    assert ab.batches((2, 3, 9), "cpu", torch.float32) is None
    monkeypatch.setenv("BERTFN_ATTENTION", "dense")
    with pytest.raises(bertfn.InputError, match="BERTFN_ATTENTION='dense' names no way"):
        ab.batches((2, 3), "cpu", torch.float32)
    with pytest.raises(bertfn.InputError, match="names no way"):  # one length chooses nothing, but says so too
        ab.batches((2,), "cpu", torch.float32)


def test_the_way_is_measured_once_per_device_and_dtype_then_read_from_the_cache(monkeypatch, tmp_path):
    """Measured at the first layout of several lengths, kept for the process and in the kernels' cache file, which a
    later process reads instead of measuring; a layout of one length measures nothing."""
    monkeypatch.delenv("BERTFN_ATTENTION", raising=False)
    monkeypatch.setenv("BERTFN_KERNEL_CACHE", str(tmp_path / "kernels.json"))
    monkeypatch.setattr(ab, "_chosen", {})
    monkeypatch.setattr(ab, "_times", {})
    calls = []
    monkeypatch.setattr(ab, "measure", lambda device, dtype: calls.append(dtype) or {"runs": 2.0, "padded": 1.0})
    assert ab.batches((7, 7, 7), "cpu", torch.float32) is None and not calls  # one length: one call either way
    assert ab.way("cpu", torch.float32) == "padded" and ab.batches((3, 7), "cpu", torch.float32) == (2,)
    assert ab.way("cpu", torch.bfloat16) == "padded"
    assert calls == [torch.float32, torch.bfloat16]
    assert ab.chosen()["cpu float32"] == {"way": "padded", "ms": {"runs": 2000.0, "padded": 1000.0}}
    monkeypatch.setattr(ab, "_chosen", {})  # a later process
    assert ab.way("cpu", torch.float32) == "padded" and calls == [torch.float32, torch.bfloat16]
    written = json.loads((tmp_path / "kernels.json").read_text())[ab.device_key(torch.device("cpu"))]
    assert written["attention float32"] == {"way": "padded", "ms": {"runs": 2000.0, "padded": 1000.0}}


def test_a_changed_thread_count_chooses_the_way_anew(monkeypatch, tmp_path):
    """On the CPU the way is the thread count's (the cache file's key holds it): after ``torch.set_num_threads`` the
    process measures again instead of keeping the way measured at the other count."""
    monkeypatch.delenv("BERTFN_ATTENTION", raising=False)
    monkeypatch.setenv("BERTFN_KERNEL_CACHE", str(tmp_path / "kernels.json"))
    monkeypatch.setattr(ab, "_chosen", {})
    monkeypatch.setattr(ab, "_times", {})
    threads = torch.get_num_threads()
    measured = iter([{"runs": 1.0, "padded": 2.0}, {"runs": 2.0, "padded": 1.0}])
    monkeypatch.setattr(ab, "measure", lambda device, dtype: next(measured))
    try:
        assert ab.way("cpu", torch.float32) == "runs"
        torch.set_num_threads(1 if threads > 1 else 2)
        assert ab.way("cpu", torch.float32) == "padded" and ab.chosen()["cpu float32"]["way"] == "padded"
    finally:
        torch.set_num_threads(threads)
    assert ab.way("cpu", torch.float32) == "runs" and ab.chosen()["cpu float32"]["way"] == "runs"


def test_the_measurement_times_both_ways():
    times = ab.measure(torch.device("cpu"), torch.float32, reps=1)
    assert set(times) == set(ab.WAYS) and all(t > 0 for t in times.values())


def test_the_pipelines_answer_alike_either_way(monkeypatch, tiny_folder):
    """fill-mask on a tiny random masked LM (written without transformers: the plain stack runs it too); embed on the
    real all-MiniLM-L6-v2 where the tests' extras installed it (the plain stack has none of them)."""
    folder = minilm_folder()
    tiny = bertfn.load(tiny_folder)
    minilm = bertfn.load(folder) if folder is not None else None
    texts = ["a short one.", "a text of a few more words than the first.", "the same length here.",
             "the same length here!", "one more, the longest of them all by a good many words."]
    cloze = ["the cat sat.", "when in rome, do as the romans do.", "the dog sat on a mat.", "a big dog sat on a mat.",
             "the king and the queen of france are in paris, the capital city."]  # the tiny vocabulary's words
    answers = {}
    for way in ab.WAYS:
        monkeypatch.setenv("BERTFN_ATTENTION", way)
        filled = bertfn.fill_mask([t + " [MASK]" for t in cloze], tiny)
        answers[way] = [torch.tensor([[a["score"] for a in found] for found in filled])]
        if minilm is not None:
            answers[way].append(torch.as_tensor(bertfn.embed(texts, minilm)))
    for runs, padded in zip(answers["runs"], answers["padded"]):
        torch.testing.assert_close(runs, padded, atol=1e-5, rtol=0)
