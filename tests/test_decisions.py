"""Studies of a fine-tuned head's decision (issue 45): sweeps, attribution patching, gradients and path patching over
pairs of texts without [MASK], with metrics of the head's outputs (bertfn/interventions/head_metrics.py).

* a sweep over a dataset of pairs (two short texts and their changed twins; for ESM-2 two point mutants) equals,
  cell by cell, the corrupted run patched at that one slice by hand (``bertfn.trace`` with ``iv.patch``; 1e-5
  absolute and relative), over positions and over heads, on every member that has a sequence classifier; where the
  head reads the first token alone the last layer runs there alone, so a patch of the last layer anywhere else
  leaves the corrupted run's value and one at the first token gives the clean run's; ModernBERT's mean-pooling head
  (every position read) and BERT's tagger and reader are held to the same;
* attribution patching equals its first-order formula, ``corrupted + sum (clean - corrupted) * d metric / d x``,
  with the gradient taken by torch.autograd on a pass written by hand (the encoder, then the member's head,
  ``run_head``); ``iv.gradients`` equals that gradient;
* path patching equals its three runs written by hand;
* AntiBERTy's species head, an extra linear head on its pooler (not a checkpoint's task head): a metric that reads
  ``pooler`` and applies the head sweeps rituximab's VH (murine) against adalimumab's (human), both 121 residues:
  at layer 3 no position carries the "Mouse" call alone, at layer 4 [CLS] carries it; the same head as a
  checkpoint's classifier gives the same maps through ``label_difference``;
* the metrics read labels by name or id (``label_probability`` is classify's score), and a label the head lacks, a
  tagger's logits read as a classifier's (and back), a regression read as a probability, a span that ends before
  it starts and a head's metric on a masked LM get errors that say what to do.
"""

from __future__ import annotations

import pytest
import torch
from conftest import TINY, random_model, write_folder
from family_checkpoints import ESM_KINDS, HEAD_TASKS, PROTEINS, kind_params, save_head

import bertfn
from bertfn import interventions as iv
from bertfn.errors import InputError, MissingPartError
from bertfn.model.task_heads import run_head

pytestmark = pytest.mark.needs_transformers  # the checkpoints are built by transformers

LABELS = {0: "negative", 1: "neutral", 2: "positive"}
KINDS = tuple(k for k, tasks in HEAD_TASKS.items() if "sequence-classification" in tasks)
TEXTS = (("A big red cat.", "A small blue dog."), ("The cat sat on the mat.", "The dog sat on the mat."))
"""Pairs of as many tokens in every member's tokenizer."""
MUTANTS = ((PROTEINS[2][:11], PROTEINS[2][:4] + "A" + PROTEINS[2][5:11]), (PROTEINS[5][:11], PROTEINS[5][:9] + "AC"))


def pairs_of(kind: str) -> tuple[list[str], list[str]]:
    """(clean texts, corrupted texts) for ``kind``."""
    pairs = MUTANTS if kind in ESM_KINDS else TEXTS
    return [c for c, _ in pairs], [x for _, x in pairs]


def head_model(kind: str, task: str, folder, **overrides) -> bertfn.Model:
    """A random ``kind`` checkpoint with ``task``'s head, its weights at a scale where the head's outputs move
    (``initializer_range`` 0.3), loaded by bertfn."""
    labels = {} if task == "question-answering" else dict(id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    save_head(kind, task, folder, initializer_range=0.3, **labels, **overrides)
    return bertfn.load(folder)


@pytest.fixture(scope="module", params=kind_params(KINDS))
def classifier(request, tmp_path_factory) -> tuple[str, bertfn.Model]:
    return request.param, head_model(request.param, "sequence-classification", tmp_path_factory.mktemp(request.param))


def close(a: float, b: float) -> bool:
    """Within fp32 parity's 1e-5, absolute and relative (the copies run SDPA, the explicit run eager)."""
    return abs(a - b) <= 1e-5 + 1e-5 * abs(b)


def check_sweep_by_hand(m: bertfn.Model, cleans: str | list[str], corrupteds: str | list[str], metric) -> dict[str, iv.Sweep]:
    """Sweeps over positions and heads of a dataset of pairs (or one), each cell equal to the corrupted run patched
    by hand."""
    cleans, corrupteds = ([cleans], [corrupteds]) if isinstance(cleans, str) else (cleans, corrupteds)
    studies = {}
    for over, name, key in (("positions", "layer.{i}.output", "positions"),
                            ("heads", "layer.{i}.attention.context", "heads")):
        study = iv.sweep(cleans, corrupteds, m, metric, over=over, progress=False)
        for p, (clean, corrupted) in enumerate(zip(cleans, corrupteds)):
            recorded = bertfn.trace(clean, m)
            assert close(study.clean_runs[p].item(), metric(recorded).item())
            assert close(study.corrupted_runs[p].item(), metric(bertfn.trace(corrupted, m)).item())
            L, n = study.per_example.shape[1], len(recorded.tokens) if over == "positions" else study.per_example.shape[2]
            for i in range(L):
                for k in range(n):
                    run = bertfn.trace(corrupted, m, edits=iv.patch(recorded, name.format(i=i), **{key: k}))
                    assert close(study.per_example[p, i, k].item(), metric(run).item()), (over, p, i, k)
        assert (study.per_example - study.corrupted_runs[:, None, None]).nan_to_num().abs().max() > 1e-2  # patches move it
        studies[over] = study
    return studies


def test_a_sweep_of_a_classifiers_decision_is_each_pair_patched_by_hand(classifier):
    kind, m = classifier
    cleans, corrupteds = pairs_of(kind)
    metric = iv.label_difference("positive", "negative")
    positions = check_sweep_by_hand(m, cleans, corrupteds, metric)["positions"]
    L = m.config.num_hidden_layers
    if m.family.name != "ModernBERT" or m.config.classifier_pooling == "cls":  # the head reads the first token alone
        for p in range(len(cleans)):
            last = positions.per_example[p, L - 1]
            assert close(last[0].item(), positions.clean_runs[p].item())
            n = len(bertfn.trace(cleans[p], m).tokens)
            torch.testing.assert_close(last[1:n], torch.full((n - 1,), positions.corrupted_runs[p].item()), atol=1e-5,
                                       rtol=1e-5)


@pytest.mark.slow
def test_modernberts_mean_pooled_decision_is_patched_by_hand(tmp_path):
    """Mean pooling reads every token: the copies run the last layer whole."""
    m = head_model("modernbert", "sequence-classification", tmp_path, classifier_pooling="mean")
    cleans, corrupteds = pairs_of("modernbert")
    check_sweep_by_hand(m, cleans, corrupteds, iv.label_logit("positive"))


@pytest.mark.parametrize("task, metric", [("token-classification", iv.entity_score("B-PER", 3)),
                                          ("question-answering", iv.span_score(2, 4))])
def test_a_taggers_and_a_readers_decisions_are_patched_by_hand(tmp_path, task, metric):
    labels = dict(id2label={0: "O", 1: "B-PER", 2: "I-PER"}, label2id={"O": 0, "B-PER": 1, "I-PER": 2})
    save_head("bert", task, tmp_path, initializer_range=0.3, **(labels if task == "token-classification" else {}))
    m = bertfn.load(tmp_path)
    clean, corrupted = TEXTS[0]
    check_sweep_by_hand(m, clean, corrupted, metric)
    check_gradients(m, corrupted, metric)
    check_path_patch(m, clean, corrupted, metric)


def hand_pass_gradient(m: bertfn.Model, text: str, metric, name: str) -> tuple[float, torch.Tensor]:
    """The metric of ``text`` and its gradient with respect to the point ``name``, by torch.autograd on a pass written
    out: the encoder with ``name`` made a leaf, then the checkpoint's head (``run_head``), the metric of that run."""
    leaf = {}

    def grab(x, point):
        leaf["x"] = x.detach().requires_grad_(True)
        return leaf["x"]

    enc = m.tokenizer([text])
    record = bertfn.Trace()
    with torch.enable_grad():
        out = bertfn.encoder(m, enc.input_ids, enc.attention_mask, enc.token_type_ids, impl="eager",
                             trace=bertfn.Trace(record.store, edits={name: grab}))
        run_head(m.params, m.head.task, out.last_hidden_state, enc.attention_mask, trace=record)
        value = metric(bertfn.Recording(enc.tokens[0], enc.input_ids, [], record.store, m.config, m))
        (grad,) = torch.autograd.grad(value, leaf["x"])
    return value.item(), grad


def check_gradients(m: bertfn.Model, text: str, metric) -> None:
    name = f"layer.{m.config.num_hidden_layers - 2}.output"
    g = iv.gradients(text, m, metric, name)
    value, grad = hand_pass_gradient(m, text, metric, name)
    assert close(g.value, value)
    torch.testing.assert_close(g.grads[name], grad, atol=1e-6, rtol=1e-5)
    assert grad.abs().max() > 1e-3


def check_path_patch(m: bertfn.Model, clean: str, corrupted: str, metric) -> None:
    """path_patch from layer 0's head 1 into the last layer's output: its three runs by hand."""
    L = m.config.num_hidden_layers
    heads = "layer.{i}.attention.head_outputs"
    got = iv.path_patch(clean, corrupted, m, metric, sender=(0, 1), receivers={f"layer.{L - 1}.output": None})
    run1 = bertfn.trace(clean, m, head_outputs=True), bertfn.trace(corrupted, m, head_outputs=True)
    frozen = [iv.patch(run1[1], heads.format(i=i)) for i in range(1, L)]
    run2 = bertfn.trace(corrupted, m, head_outputs=True,
                        edits=iv.merge_edits(iv.patch(run1[0], heads.format(i=0), heads=1), *frozen))
    run3 = bertfn.trace(corrupted, m, head_outputs=True, edits=iv.patch(run2, f"layer.{L - 1}.output"))
    assert close(got, metric(run3).item())


def test_attribution_and_gradients_of_a_decision_are_autograds(classifier):
    kind, m = classifier
    cleans, corrupteds = pairs_of(kind)
    metric = iv.label_probability("positive")
    study = iv.attribution(cleans, corrupteds, m, metric, over="positions")
    for p, (clean, corrupted) in enumerate(zip(cleans, corrupteds)):
        recorded = bertfn.trace(clean, m)
        for i in range(m.config.num_hidden_layers):
            name = f"layer.{i}.output"
            value, grad = hand_pass_gradient(m, corrupted, metric, name)  # (1, S, H)
            first_order = value + ((recorded[name] - bertfn.trace(corrupted, m)[name]) * grad)[0].sum(-1)  # (S,)
            n = first_order.shape[0]
            torch.testing.assert_close(study.per_example[p, i, :n], first_order, atol=1e-5, rtol=1e-4)
    check_gradients(m, corrupteds[0], metric)


def test_path_patching_of_a_decision_is_its_three_runs(classifier):
    kind, m = classifier
    cleans, corrupteds = pairs_of(kind)
    check_path_patch(m, cleans[0], corrupteds[0], iv.label_difference(2, "negative"))


# --- AntiBERTy's species head ------------------------------------------------------------------------------

SPECIES = ["Camel", "Human", "Mouse", "Rabbit", "Rat", "Rhesus"]  # AntiBERTyRunner's LABEL_TO_SPECIES, in order


def heavy_chains() -> dict[str, str]:
    """Each antibody's VH in tests/data/antibodies.tsv, one residue a token (AntiBERTy's spacing)."""
    from pathlib import Path

    lines = (Path(__file__).parent / "data" / "antibodies.tsv").read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines if line and not line.startswith(("#", "name"))]
    return {name: " ".join(seq) for name, chain, seq in rows if chain == "heavy"}


def mouse_call(antiberty: bertfn.Model):
    """The species head on the pooler's output: Mouse's logit minus Human's (AntiBERTyHeads' ``species``)."""
    w, b = antiberty.state["cls.species.weight"], antiberty.state["cls.species.bias"]

    def metric(run):
        logits = torch.nn.functional.linear(run["pooler"], w, b)[0]  # (6,)
        return logits[SPECIES.index("Mouse")] - logits[SPECIES.index("Human")]

    return metric


@pytest.mark.slow
def test_which_positions_carry_antibertys_mouse_call(antiberty):
    """Rituximab's VH (murine) into adalimumab's (human), at each position of layers 3 and 4 (38 s on 2 cores)."""
    chains = heavy_chains()
    murine, human = chains["rituximab"], chains["adalimumab"]
    metric = mouse_call(antiberty)
    study = iv.sweep(murine, human, antiberty, metric, over="positions", layers=[3, 4], progress=False)
    scores = bertfn.classify([murine, human], antiberty, head="cls.species", labels=SPECIES, top_k=None,
                             function_to_apply="none")
    logit = [{d["label"]: d["score"] for d in r} for r in scores]
    assert abs(study.clean - (logit[0]["Mouse"] - logit[0]["Human"])) < 1e-4 and study.clean > 5  # called Mouse
    assert abs(study.corrupted - (logit[1]["Mouse"] - logit[1]["Human"])) < 1e-4 and study.corrupted < -10
    layer3, layer4 = study.values
    assert layer3.max() < 0  # no position of layer 3's output carries the call alone
    assert layer4[0] > 4 and layer4[1:].max() < 0  # by layer 4, [CLS] does
    recorded = bertfn.trace(murine, antiberty)
    for i, k in ((3, 0), (3, int(layer3.argmax())), (4, 0), (4, 50)):
        run = bertfn.trace(human, antiberty, edits=iv.patch(recorded, f"layer.{i}.output", positions=k))
        assert abs(study.values[i - 3, k].item() - metric(run).item()) < 1e-4


@pytest.mark.slow
def test_the_species_head_as_a_checkpoints_classifier_gives_the_same_maps(antiberty, tmp_path):
    """The species head saved as a BertForSequenceClassification: the task head's path through the study engine (at
    [CLS] alone) and the pooler's give the same map of layer 7's heads."""
    from test_class_attribution import species_classifier

    species = species_classifier(antiberty, tmp_path)
    chains = heavy_chains()
    murine, human = chains["rituximab"], chains["adalimumab"]
    by_pooler = iv.sweep(murine, human, antiberty, mouse_call(antiberty), over="heads", layers=[7], progress=False)
    by_head = iv.sweep(murine, human, species, iv.label_difference("Mouse", "Human"), over="heads", layers=[7],
                       progress=False)
    torch.testing.assert_close(by_head.values, by_pooler.values, atol=1e-4, rtol=0)
    assert by_head.values.min() < by_head.corrupted - 1  # heads 4 and 5 of layer 7 carry much of the call


# --- the metrics and their errors --------------------------------------------------------------------------

def test_the_metrics_read_labels_by_name_or_id_and_say_what_is_wrong(tmp_path):
    m = head_model("bert", "sequence-classification", tmp_path / "cls")
    text = TEXTS[0][0]
    run = bertfn.trace(text, m)
    logits = run["classifier.logits"][0]
    assert iv.label_logit("positive")(run) == iv.label_logit(2)(run) == logits[2]
    assert iv.label_difference("positive", 0)(run) == logits[2] - logits[0]
    scores = {d["label"]: d["score"] for d in bertfn.classify(text, m, top_k=None)}
    assert abs(iv.label_probability("neutral")(run).item() - scores["neutral"]) < 1e-6
    with pytest.raises(InputError, match=r"no label 'happy'; its labels are 'negative', 'neutral', 'positive' \(ids 0 to 2\)"):
        iv.label_logit("happy")(run)
    with pytest.raises(InputError, match="an id from 0 to 2, got 3"):
        iv.sweep(*TEXTS[0], m, iv.label_difference("positive", 3), progress=False)  # at once, on the corrupted run
    with pytest.raises(InputError, match=r"a sequence classifier's .*iv\.label_logit"):
        iv.entity_score("positive", 1)(run)
    save_head("bert", "sequence-classification", tmp_path / "reg", num_labels=1)
    with pytest.raises(InputError, match=r"a regression .*iv\.label_logit\(0\)"):
        iv.label_probability(0)(bertfn.trace(text, bertfn.load(tmp_path / "reg")))
    save_head("bert", "token-classification", tmp_path / "tag")
    tagger = bertfn.load(tmp_path / "tag")
    with pytest.raises(InputError, match=r"a tagger's .*iv\.entity_score\(label, position\)"):
        iv.label_logit(0)(bertfn.trace(text, tagger))
    with pytest.raises(InputError, match="position must be a token's position from 0 to 6"):
        iv.entity_score(0, 7)(bertfn.trace(text, tagger))
    with pytest.raises(InputError, match="ends at or after its start"):
        iv.span_score(4, 2)
    masked_lm = bertfn.load(write_folder(random_model(bertfn.BertConfig(**TINY)), tmp_path / "mlm"))
    with pytest.raises(MissingPartError, match=r"reads \['classifier.logits'\], a fine-tuned task head's outputs, and "
                                               r"model .* is a masked-lm: use bertfn.fill_mask; study a checkpoint with that head"):
        iv.sweep("the cat sat", "the dog sat", masked_lm, iv.label_logit(0), progress=False)
