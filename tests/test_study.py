"""Studies over datasets of pairs, metrics of any point, gradients, composed edits (issue 37).

* a sweep over a list of pairs of different lengths gives each pair's map, equal to its sweep alone and
  to the corrupted run patched at that one slice (1e-5; that test on BERTFN_TEST_DEVICE, conftest.DEVICE), for
  every ``over`` (positions, heads, neurons, heads x positions) and for a metric that reads a hidden state
  instead of the logits;
* the mean and Student's t interval are those of the per-example values (SciPy's ``t.interval``);
* attribution over a dataset is each pair's attribution; gradients equal torch.autograd on the same pass;
* several edits at one point run in order; merge_edits keeps both where ``{**a, **b}`` drops one;
* the mistakes of issue 37 get InputErrors that say what differs.
"""

from __future__ import annotations

import importlib
import math

import pytest
import torch
from conftest import ACCELERATOR, DEVICE, VOCAB

import bertfn
from bertfn import interventions as iv
from bertfn.interventions.stats import mean_interval, t_quantile

CLEAN = ["when in rome do as the [MASK] do", "the cat sat on the [MASK] .", "a big [MASK]"]
CORRUPTED = ["when in paris do as the [MASK] do", "the dog sat on the [MASK] .", "a small [MASK]"]


@pytest.fixture(scope="module")
def tiny(tiny_folder) -> bertfn.Model:
    return bertfn.load(tiny_folder)


@pytest.fixture(scope="module")
def tiny_on_device(tiny, tiny_folder) -> bertfn.Model:
    """``tiny`` on BERTFN_TEST_DEVICE (on the CPU, the same model)."""
    return bertfn.load(tiny_folder, device=DEVICE) if ACCELERATOR else tiny


@pytest.fixture(scope="module")
def metric(tiny):
    return iv.logit_difference(tiny.tokenizer.token_to_id("romans"), tiny.tokenizer.token_to_id("people"))


def close(a: float, b: float) -> bool:
    """Within fp32 parity's 1e-5, absolute and relative (the copies run SDPA, the explicit run eager)."""
    return abs(a - b) <= 1e-5 + 1e-5 * abs(b)


def patched(tiny, clean: str, corrupted: str, name: str, **where) -> bertfn.Recording:
    return bertfn.trace(corrupted, tiny, edits=iv.patch(bertfn.trace(clean, tiny), name, **where))


@pytest.mark.parametrize("max_rows", [2048, 20])  # 20: the copies of one layer cut into chunks
def test_a_study_over_pairs_is_each_pair_patched_at_each_slice(tiny_on_device, metric, max_rows, monkeypatch):
    tiny = tiny_on_device
    monkeypatch.setattr(iv.copies, "MAX_ROWS", max_rows)
    study = iv.sweep(CLEAN, CORRUPTED, tiny, metric, over="positions", progress=False)
    lengths = [len(bertfn.trace(t, tiny).tokens) for t in CORRUPTED]
    assert study.per_example.shape == (3, 2, max(lengths))
    for p, (clean, corrupted) in enumerate(zip(CLEAN, CORRUPTED)):
        alone = iv.sweep(clean, corrupted, tiny, metric, over="positions", progress=False)
        torch.testing.assert_close(study.per_example[p, :, :lengths[p]], alone.values, atol=1e-5, rtol=0)
        assert torch.isnan(study.per_example[p, :, lengths[p]:]).all()  # a shorter pair has no such positions
        assert close(study.clean_runs[p].item(), metric(bertfn.trace(clean, tiny)).item())
        for i in range(2):
            for k in range(lengths[p]):
                run = patched(tiny, clean, corrupted, f"layer.{i}.output", positions=k)
                assert close(study.per_example[p, i, k].item(), metric(run).item())
    assert repr(study).startswith("Sweep(over positions of layer.0.output .. layer.1.output, 3 pairs: 2 x 10 map per pair")
    assert study.count[0].tolist() == [sum(n > k for n in lengths) for k in range(max(lengths))]
    mean = torch.nanmean(study.per_example, dim=0)
    torch.testing.assert_close(study.values, mean, atol=1e-6, rtol=0)


@pytest.mark.parametrize("over, name, where", [
    ("heads", "layer.{i}.attention.context", lambda c, S: dict(heads=c)),
    ("neurons", "layer.{i}.ffn.intermediate", lambda c, S: dict(neurons=c)),
    ("heads x positions", "layer.{i}.attention.context", lambda c, S: dict(heads=c // S, positions=c % S)),
])
def test_every_kind_of_slice_is_one_explicit_patch(tiny, metric, over, name, where, monkeypatch):
    monkeypatch.setattr(iv.copies, "MAX_ROWS", 64)  # several chunks and groups
    clean, corrupted = CLEAN[0], CORRUPTED[0]
    S = len(bertfn.trace(clean, tiny).tokens)
    study = iv.sweep(clean, corrupted, tiny, metric, over=over, progress=False)
    shape = {"heads": (3,), "neurons": (80,), "heads x positions": (3, S)}[over]
    assert study.values.shape == (2, *shape)
    flat = study.values.flatten(1)
    for i in range(2):
        for c in range(0, flat.shape[1], 7 if over == "neurons" else 1):
            run = patched(tiny, clean, corrupted, name.format(i=i), **where(c, S))
            assert close(flat[i, c].item(), metric(run).item())


def test_a_metric_of_any_point(tiny):
    """A probe on a hidden state: the copies keep exactly the points it reads (no [MASK] needed)."""
    probe = torch.randn(48, generator=torch.Generator().manual_seed(0))

    def reads_layer_0(run):  # reads a point at layer 0: copies patched at layer 1 read the corrupted run's
        return run["layer.0.output"][0, 2] @ probe + run["layer.1.attention.probs"][0, 1, 2, 3]

    clean, corrupted = "the cat sat on the mat .", "the dog sat on the mat ."
    for over, name, key in (("positions", "layer.{i}.output", "positions"), ("heads", "layer.{i}.attention.context", "heads")):
        study = iv.sweep(clean, corrupted, tiny, reads_layer_0, over=over, progress=False)
        for i in range(2):
            for k in range(study.values.shape[1]):
                run = patched(tiny, clean, corrupted, name.format(i=i), **{key: k})
                assert close(study.values[i, k].item(), reads_layer_0(run).item())
        assert study.values[0].sub(study.corrupted).abs().max() > 0.1  # a patch at layer 0 moves what the metric reads
        torch.testing.assert_close(study.values[1], torch.full_like(study.values[1], study.corrupted))  # after both
    pooled = iv.sweep(clean, corrupted, tiny, lambda run: run["pooler"][0, :4].sum(), over="heads", layers=[1],
                      progress=False)
    assert pooled.values.shape == (1, 3) and pooled.names == ["layer.1.attention.context"]
    for h in range(3):
        run = patched(tiny, clean, corrupted, "layer.1.attention.context", heads=h)
        assert close(pooled.values[0, h].item(), run["pooler"][0, :4].sum().item())


def test_the_interval_is_students_t(tiny, metric):
    assert abs(t_quantile(0.975, 15) - 2.131449545559323) < 1e-9  # published tables
    assert abs(t_quantile(0.975, 1) - 12.706204736174707) < 1e-6
    assert abs(t_quantile(0.95, 4) - 2.13184678632665) < 1e-9
    values = torch.tensor([[1.0, 2.0], [2.0, float("nan")], [4.0, 3.0], [3.0, 5.0]])
    mean, low, high = mean_interval(values)
    x = torch.tensor([1.0, 2.0, 4.0, 3.0])
    half = t_quantile(0.975, 3) * x.std().item() / 2
    assert abs(mean[0].item() - 2.5) < 1e-6 and abs(high[0].item() - (2.5 + half)) < 1e-5
    assert abs(mean[1].item() - 10 / 3) < 1e-6  # the NaN is left out
    study = iv.sweep(CLEAN, CORRUPTED, tiny, metric, over="heads", progress=False)
    low, high = study.interval(0.9)
    assert (low <= study.values).all() and (study.values <= high).all()
    scipy = pytest.importorskip("scipy.stats")
    a, b = scipy.t.interval(0.9, 2, loc=study.per_example[:, 1, 2].double().mean(),
                            scale=scipy.sem(study.per_example[:, 1, 2].double().numpy()))
    assert abs(low[1, 2].item() - a) < 1e-4 and abs(high[1, 2].item() - b) < 1e-4
    with pytest.raises(bertfn.InputError, match="between 0 and 1"):
        study.interval(95)


def test_heads_writes_are_patched_as_the_guide_says(tiny, metric):
    """name="layer.{i}.attention.head_outputs" (each head's write, which a pass computes only when asked): the sweep
    and attribution patch it, where both refused it (the clean run held no head_outputs, and the message said to
    trace with head_outputs=True); a head's write is its context times its columns of the output projection, so
    the maps are those of the contexts, and each cell is that one head's write patched."""
    name = "layer.{i}.attention.head_outputs"
    for over, pairs in (("heads", 2), ("heads x positions", 1)):
        writes = iv.sweep(CLEAN[:pairs], CORRUPTED[:pairs], tiny, metric, over=over, name=name, progress=False)
        contexts = iv.sweep(CLEAN[:pairs], CORRUPTED[:pairs], tiny, metric, over=over, progress=False)
        torch.testing.assert_close(writes.per_example, contexts.per_example, atol=1e-5, rtol=1e-5, equal_nan=True)
        guess = iv.attribution(CLEAN[:pairs], CORRUPTED[:pairs], tiny, metric, over=over, name=name)
        torch.testing.assert_close(guess.per_example, iv.attribution(CLEAN[:pairs], CORRUPTED[:pairs], tiny, metric,
                                                                     over=over).per_example,
                                   atol=1e-5, rtol=1e-5, equal_nan=True)
    assert writes.names == ["layer.0.attention.head_outputs", "layer.1.attention.head_outputs"]
    clean, corrupted = CLEAN[0], CORRUPTED[0]
    one = iv.sweep(clean, corrupted, tiny, metric, over="heads", name=name, progress=False)
    for h in range(3):
        run = bertfn.trace(corrupted, tiny, edits=iv.patch(bertfn.trace(clean, tiny, head_outputs=True),
                                                           "layer.1.attention.head_outputs", heads=h))
        assert close(one.values[1, h].item(), metric(run).item())


def test_attribution_over_pairs_is_each_pairs_attribution(tiny, metric):
    study = iv.attribution(CLEAN, CORRUPTED, tiny, metric, over="heads")
    assert study.per_example.shape == (3, 2, 3)
    for p in range(3):  # the corrupted texts ran as one padded batch: its products round in another order
        alone = iv.attribution(CLEAN[p], CORRUPTED[p], tiny, metric, over="heads")
        torch.testing.assert_close(study.per_example[p], alone.values, atol=1e-5, rtol=1e-5)
    exact = iv.sweep(CLEAN, CORRUPTED, tiny, metric, over="heads x positions", progress=False)
    guess = iv.attribution(CLEAN, CORRUPTED, tiny, metric, over="heads x positions")
    assert guess.values.shape == exact.values.shape and -1 <= iv.correlation(guess, exact) <= 1


@pytest.fixture
def one_kernel():
    """Every product on F.linear: elsewhere those that track no gradient run on oneDNN, and which do differs between
    passes with other leaves, which then differ by the kernels' rounding (1e-5 in a gradient, more than 1e-6)."""
    from test_fast_path import forced
    with forced("F.linear"):
        yield


def test_gradients_are_autograds(tiny, metric, monkeypatch, one_kernel):
    text = "when in paris do as the [MASK] do"
    g = iv.gradients(text, tiny, metric, ["layer.*.ffn.output", "layer.0.output", "layer.1.output", "layer.0.attention.probs"])
    assert list(g.grads) == ["layer.0.attention.probs", "layer.0.ffn.output", "layer.0.output", "layer.1.ffn.output",
                             "layer.1.output"]  # in the pass's order
    assert abs(g.value - metric(bertfn.trace(text, tiny)).item()) < 1e-5
    # by hand: the same pass with the probabilities of layer 0 as a leaf
    leaf = {}

    def grab(x, point):
        leaf["x"] = x.detach().requires_grad_(True)
        return leaf["x"]

    with torch.enable_grad():
        run = bertfn.trace(text, tiny)  # the values
        ids = tiny.tokenizer([text]).input_ids
        out = bertfn.encoder(tiny, ids, impl="eager", edits={"layer.0.attention.probs": grab})
        where = run.mask_positions
        logits = bertfn.model.heads.mlm_head(tiny.params, out.last_hidden_state[0, where])
        value = logits[0, tiny.tokenizer.token_to_id("romans")] - logits[0, tiny.tokenizer.token_to_id("people")]
        (grad,) = torch.autograd.grad(value, leaf["x"])
    torch.testing.assert_close(g.grads["layer.0.attention.probs"], grad, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(g.activations["layer.1.output"], run["layer.1.output"], atol=1e-6, rtol=0)
    texts = [text, "the cat sat on the [MASK] .", "a big [MASK]"]
    many = iv.gradients(texts, tiny, metric, "layer.1.output")  # one padded batch
    assert len(many) == 3 and many[1].grads["layer.1.output"].shape == (1, 9, 48)
    monkeypatch.setattr(importlib.import_module("bertfn.interventions.gradients"), "MAX_TOKENS", 12)  # a batch per text
    for batched, alone, one in zip(many, iv.gradients(texts, tiny, metric, "layer.1.output"), texts):
        assert batched.run.tokens == alone.run.tokens == bertfn.trace(one, tiny).tokens
        assert abs(batched.value - alone.value) < 1e-5
        torch.testing.assert_close(batched.grads["layer.1.output"], alone.grads["layer.1.output"], atol=1e-5, rtol=1e-5)
    # gradient x activation summed over a position: attribution's first-order term, by hand
    assert torch.isfinite((g.grads["layer.0.output"] * g.activations["layer.0.output"]).sum())


def test_a_metric_of_a_heads_write_gets_it_computed(tiny):
    """Each head's write is computed only when asked (head_outputs=True); a metric that reads it gets it, in gradients
    and token_attributions alike, where the error told the user to pass an option neither takes."""
    text = "the cat sat on the [MASK] ."

    def metric(run):
        return run["layer.1.attention.head_outputs"][0, 1, 3].sum()

    asked = iv.gradients(text, tiny, metric, ["embeddings.word", "layer.1.attention.head_outputs"])
    found = iv.gradients(text, tiny, metric, "embeddings.word")
    assert found.value == pytest.approx(metric(bertfn.trace(text, tiny, head_outputs=True)).item(), rel=1e-5, abs=1e-5)
    torch.testing.assert_close(found.grads["embeddings.word"], asked.grads["embeddings.word"], atol=1e-6, rtol=1e-5)
    a = iv.token_attributions(text, tiny, metric, method="gradient_x_input")
    torch.testing.assert_close(torch.as_tensor(a.attributions),
                               (found.grads["embeddings.word"] * found.activations["embeddings.word"]).sum(-1)[0],
                               atol=1e-5, rtol=1e-4)
    with pytest.raises(bertfn.InputError, match="the model has 2 layers"):
        iv.gradients(text, tiny, lambda run: run["layer.7.attention.head_outputs"].sum(), "embeddings.word")


def test_integrated_gradients_complete(tiny, metric):
    """Integrated gradients from edits=: the attributions sum to metric(input) - metric(baseline)."""
    text = "when in paris do as the [MASK] do"
    x = bertfn.trace(text, tiny)["embeddings.output"]
    steps, total = 64, torch.zeros_like(x)
    for k in range(steps):
        alpha = (k + 0.5) / steps  # the midpoint rule
        scaled = {"embeddings.output": lambda t, point, a=alpha: a * t}
        total += iv.gradients(text, tiny, metric, "embeddings.output", edits=scaled).grads["embeddings.output"]
    ig = (x * total / steps).sum().item()
    zero = iv.gradients(text, tiny, metric, "embeddings.output", edits={"embeddings.output": lambda t, p: 0 * t}).value
    assert abs(ig - (metric(bertfn.trace(text, tiny)).item() - zero)) < 0.02 * (1 + abs(ig))


def test_edits_at_one_point_compose_in_order(tiny):
    ids = tiny.tokenizer(["the cat sat ."]).input_ids
    add = {"layer.0.output": lambda x, p: x + 1.0}
    double = {"layer.0.output": lambda x, p: x * 2.0}
    plain, both, reversed_ = bertfn.Trace(), bertfn.Trace(), bertfn.Trace()
    bertfn.encoder(tiny, ids, trace=plain)
    bertfn.encoder(tiny, ids, trace=both, edits=iv.merge_edits(add, double))
    bertfn.encoder(tiny, ids, trace=reversed_, edits={"layer.0.output": [double["layer.0.output"], add["layer.0.output"]]})
    x = plain.store["layer.0.output"]
    torch.testing.assert_close(both.store["layer.0.output"], (x + 1) * 2)
    torch.testing.assert_close(reversed_.store["layer.0.output"], x * 2 + 1)
    assert len(iv.merge_edits(add, double)["layer.0.output"]) == 2
    # a patch and a head ablation at one point: both run (issue 37's example)
    clean = bertfn.trace("the dog sat .", tiny)
    merged = iv.merge_edits(iv.patch(clean, "layer.1.attention.context", heads=0), iv.zero_heads({1: [1]}))
    run = bertfn.trace("the cat sat .", tiny, edits=merged)["layer.1.attention.context"]
    torch.testing.assert_close(run[:, 0], clean["layer.1.attention.context"][:, 0])
    assert run[:, 1].abs().max() == 0
    # an edit given to trace() and another at the same point through encoder(edits=) on that trace: both
    t = bertfn.Trace(edits=add)
    bertfn.encoder(tiny, ids, trace=t, edits=double)
    torch.testing.assert_close(t.store["layer.0.output"], (x + 1) * 2)


def test_mistakes_get_errors_that_say_what_differs(tiny, metric):
    one = bertfn.trace("the cat sat .", tiny)
    enc = tiny.tokenizer(["the dog sat .", "the cow sat ."])
    with pytest.raises(bertfn.InputError, match="clean run holds 1 text.* this run 2"):
        bertfn.encoder(tiny, enc.input_ids, enc.attention_mask, edits=iv.patch(one, "layer.0.output"))
    with pytest.raises(bertfn.InputError, match="clean run has 6 tokens but this run 9"):
        bertfn.trace("the cat sat on the mat .", tiny, edits=iv.patch(one, "layer.0.output"))
    with pytest.raises(bertfn.InputError, match="steer's vector has 12 values but layer.0.output is 48 wide"):
        bertfn.trace("the cat sat .", tiny, edits=iv.steer("layer.0.output", torch.ones(12)))
    with pytest.raises(bertfn.InputError, match=r"cannot be called as edit\(tensor, point\).*\(x\)"):
        bertfn.trace("the cat sat .", tiny, edits={"layer.0.output": lambda x: x})
    with pytest.raises(bertfn.InputError, match="2 clean and 3 corrupted"):
        iv.sweep(CLEAN[:2], CORRUPTED, tiny, metric, progress=False)
    with pytest.raises(bertfn.InputError, match="a clean and a corrupted text, or a list"):
        iv.sweep(CLEAN[0], CORRUPTED, tiny, metric, progress=False)
    with pytest.raises(bertfn.InputError, match="metric indexed the run with"):
        iv.sweep(CLEAN[0], CORRUPTED[0], tiny, lambda logits: logits[0, 5], progress=False)
    for written_for_logits in (lambda x: x.sum(), lambda x: x * 2, lambda x: x.softmax(-1)[0, 5]):
        with pytest.raises(bertfn.InputError, match="the metric treats the run as a tensor .* metric is metric\\(run\\)"):
            iv.sweep(CLEAN[0], CORRUPTED[0], tiny, written_for_logits, progress=False)
    with pytest.raises(bertfn.InputError, match="reads no point"):
        iv.sweep(CLEAN[0], CORRUPTED[0], tiny, lambda run: torch.tensor(1.0), progress=False)
    with pytest.raises(bertfn.InputError, match="one number"):
        iv.sweep(CLEAN[0], CORRUPTED[0], tiny, lambda run: run["layer.0.output"], progress=False)
    with pytest.raises(bertfn.InputError, match="has none; put \\[MASK\\]"):
        iv.sweep("the cat sat .", "the dog sat .", tiny, metric, progress=False)
    with pytest.raises(bertfn.InputError, match="over must be one of"):
        iv.sweep(CLEAN[0], CORRUPTED[0], tiny, metric, over="layers", progress=False)
    with pytest.raises(bertfn.InputError, match="layers must be layer numbers from 0 to 1"):
        iv.sweep(CLEAN[0], CORRUPTED[0], tiny, metric, layers=[2], progress=False)
    with pytest.raises(bertfn.InputError, match="has no heads to patch"):
        iv.sweep(CLEAN[0], CORRUPTED[0], tiny, metric, over="heads", name="layer.{i}.output", progress=False)
    with pytest.raises(bertfn.InputError, match="no point of this model"):
        iv.gradients(CLEAN[0], tiny, metric, "layer.0.outptu")
    with pytest.raises(bertfn.InputError, match="does not depend on the pass"):
        iv.gradients(CLEAN[0], tiny, lambda run: run["mlm.logits"].detach()[0, 0], "layer.0.output")
    with pytest.raises(bertfn.InputError, match="the run has 1 \\[MASK\\]\\(s\\); pass mask= from 0 to 0"):  # IndexError
        iv.sweep(CLEAN[0], CORRUPTED[0], tiny, iv.logit_difference(1, 2, mask=1), progress=False)
    with pytest.raises(bertfn.InputError, match=f"vocabulary has {len(VOCAB)} \\(ids 0 to {len(VOCAB) - 1}\\)"):  # IndexError
        iv.logit_difference(1, 500)(bertfn.trace(CLEAN[0], tiny))
    with pytest.raises(bertfn.InputError, match="right must be an integer from 0 .*token_to_id"):  # was a TypeError
        iv.logit_difference("romans", "people")
    with pytest.raises(bertfn.InputError, match="each a Sweep .* or a tensor, got list"):  # was an AttributeError
        iv.correlation([1.0, 2.0], [1.0, 2.0])
    with pytest.raises(bertfn.InputError, match="merge_edits joins dicts"):
        iv.merge_edits({"layer.0.output": lambda x, p: x}, [lambda x, p: x])
    assert math.isfinite(iv.sweep(CLEAN[0], CORRUPTED[0], tiny, metric, layers=1, progress=False).values.sum().item())
    study = iv.sweep(CLEAN[0], CORRUPTED[0], tiny, metric, layers=1, progress=False)
    same = iv.sweep(CLEAN[0], CLEAN[0], tiny, metric, layers=1, progress=False)  # no gap to scale by: NaN, not +-inf
    assert same.normalized.isnan().all() and same.normalized_per_example.isnan().all()
    assert iv.correlation(study, study.values * 2 + 1) == pytest.approx(1.0)  # a tensor is a map too (an AttributeError)
