"""Path patching (bertfn/interventions/paths.py), held to the same three runs written by hand.

* :func:`path_patch` equals the three runs of Wang et al. (2022) written here with explicit edits (1e-6;
  the same operations in the same order, so in fact the same bits), with heads picked at the sender and at
  the receivers, through a layer whose heads are frozen;
* what is true whatever the weights: receivers that are the later layers' heads' writes (frozen in run 2 at
  the corrupted run's) give the corrupted run's metric, and so does a clean text equal to the corrupted one;
  the last layer's output as the receiver gives run 2's metric (the sender's paths through the feed-forward
  blocks and the residual stream); and path patching into the queries does change the metric;
* bad senders, receivers, texts and metrics get InputError naming what is valid.
"""

from __future__ import annotations

import pytest
from conftest import TINY, random_model, write_folder

import bertfn
from bertfn.errors import InputError
from bertfn.interventions.paths import path_patch

CLEAN, CORRUPTED = "when in rome do as the [MASK] do", "when in paris do as the [MASK] do"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> bertfn.Model:
    """A random masked LM of three layers, so that one layer lies between a sender and its receivers."""
    cfg = bertfn.BertConfig(**{**TINY, "num_hidden_layers": 3})
    return bertfn.load(write_folder(random_model(cfg, seed=11), tmp_path_factory.mktemp("three")))


@pytest.fixture(scope="module")
def metric(model):
    right, wrong = model.tokenizer.token_to_id("romans"), model.tokenizer.token_to_id("people")
    return lambda rec: rec["mlm.logits"][0, right] - rec["mlm.logits"][0, wrong]


def keep(x, point):
    return x


def by_hand(model, metric, sender_heads, receivers):
    """Sender (0, sender_heads); receivers {name in layer 2: heads or None}: the three runs, edits spelled out."""
    heads = {"layer.*.attention.head_outputs": keep}  # what trace(head_outputs=True) asks for
    clean = bertfn.trace(CLEAN, model, edits=heads)
    corrupted = bertfn.trace(CORRUPTED, model, edits=heads)

    def sender(x, point):  # layer 0: the sender's heads from the clean run
        x = x.clone()
        x[:, sender_heads] = clean[point.name][:, sender_heads]
        return x

    def frozen(x, point):  # layers 1 and 2: every head as in the corrupted run
        return corrupted[point.name].clone()

    run2 = bertfn.trace(CORRUPTED, model, edits={**heads, "layer.0.attention.head_outputs": [keep, sender],
                                                 "layer.1.attention.head_outputs": [keep, frozen],
                                                 "layer.2.attention.head_outputs": [keep, frozen]})

    def receiver(heads_at):
        def edit(x, point):
            x = x.clone()
            if heads_at is None:
                return run2[point.name].clone()
            x[:, heads_at] = run2[point.name][:, heads_at]
            return x
        return edit

    run3 = bertfn.trace(CORRUPTED, model, edits={**heads, **{n: receiver(h) for n, h in receivers.items()}})
    return metric(run3).item(), metric(run2).item(), metric(corrupted).item()


@pytest.mark.parametrize("sender_heads, receivers", [
    ([1], {"layer.2.attention.q": [0], "layer.2.attention.k": None, "layer.2.attention.v": [0, 2]}),
    ([0, 2], {"layer.2.attention.q": [1, 2]}),
])
def test_path_patch_equals_the_three_runs_by_hand(model, metric, sender_heads, receivers):
    ours = path_patch(CLEAN, CORRUPTED, model, metric, sender=(0, sender_heads), receivers=receivers)
    hand, _, corrupted = by_hand(model, metric, sender_heads, receivers)
    assert ours == pytest.approx(hand, abs=1e-6)
    assert abs(ours - corrupted) > 1e-4  # the sender's path into these receivers matters


def test_the_last_output_as_receiver_gives_run_two(model, metric):
    ours = path_patch(CLEAN, CORRUPTED, model, metric, sender=(0, 1), receivers={"layer.2.output": None})
    _, run2, _ = by_hand(model, metric, [1], {})
    assert ours == pytest.approx(run2, abs=1e-6)


def test_frozen_receivers_and_an_unchanged_sender_give_the_corrupted_run(model, metric):
    corrupted = metric(bertfn.trace(CORRUPTED, model, head_outputs=True)).item()
    writes = {f"layer.{j}.attention.head_outputs": None for j in (1, 2)}
    assert path_patch(CLEAN, CORRUPTED, model, metric, sender=(0, [0, 1, 2]), receivers=writes) == corrupted
    assert path_patch(CORRUPTED, CORRUPTED, model, metric, sender=(1, 2),
                      receivers={"layer.2.attention.q": None, "layer.2.output": None}) == corrupted


@pytest.mark.parametrize("sender, receivers, message", [
    ((1, 0), {"layer.1.attention.q": [0]}, "not in a layer above the sender"),
    ((1, 0), {"layer.0.output": None}, "not in a layer above"),
    ((1, 0), {"embeddings.output": None}, "not in a layer above"),
    ((0, 0), {"layer.2.attention.qq": None}, "did you mean layer.2.attention.q"),
    ((0, 0), {"layer.2.attention.q": [3]}, "out of range at layer.2.attention.q, which has 3 heads"),
    ((0, 0), {"layer.2.output": [0]}, "not split into heads"),
    ((0, 5), {"layer.2.attention.q": None}, "out of range at the sender's layer 0"),
    ((3, 0), {"layer.2.attention.q": None}, "layer from 0 to 2"),
    ((0, []), {"layer.2.attention.q": None}, "one head or a list"),
    (0, {"layer.2.attention.q": None}, "sender must be"),
    ((0, 0), {}, "non-empty dict"),
])
def test_bad_senders_and_receivers(model, metric, sender, receivers, message):
    with pytest.raises(InputError, match=message):
        path_patch(CLEAN, CORRUPTED, model, metric, sender=sender, receivers=receivers)


def test_bad_texts_and_metrics(model, metric):
    with pytest.raises(InputError, match="same length in tokens"):
        path_patch(CLEAN, "when in big paris do as the [MASK] do", model, metric, sender=(0, 0),
                   receivers={"layer.1.attention.q": None})
    with pytest.raises(InputError, match="scalar"):
        path_patch(CLEAN, CORRUPTED, model, lambda rec: rec["mlm.logits"], sender=(0, 0),
                   receivers={"layer.1.attention.q": None})
