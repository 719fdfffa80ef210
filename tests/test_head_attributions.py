"""``head=`` and ``labels=`` on the decision tools (issue 56 item 5): a linear head the checkpoint stores beside its own
parts, on the pooler's output, explained as ``bertfn.classify(..., head=, labels=)`` runs it. On AntiBERTy's real
weights, its species head ``cls.species`` (``W tanh(W_p h_[CLS] + b_p) + b``), rituximab's VH called Mouse:

* ``token_attributions(head="cls.species", labels=SPECIES)`` is integrated gradients through the metric written here
  by hand (the pooler's output, the head's weight and bias, the label's logit): the same attributions, f(x) and
  f(baseline), f(x) classify's logit; A121, the last residue of the C-terminal TVTVSA, gives the most;
* ``logit_attribution``'s parts sum to the head's logits, which are classify's, and equal, part by part, those of the
  same head saved as a BertForSequenceClassification's classifier (the checkpoint classifier's path);
* the head metrics with ``head=`` in a study equal the metric by hand in the same study, and read classify's scores;
* the decision panel (and ``bertfn view --head --labels``) explains the head with classify's labels, these
  attributions and these parts;
* an unknown head, a head that is no string, labels of the wrong length and labels without a sequence classifier are
  refused with classify's messages (naming the call).

Tolerances: fp32 throughout. Where two sides run the same operations in the same order they are held to equality or
1e-6; the fast path (classify) against the reference path (a trace) to 1e-5, the parity of the two paths; the parts'
float64 sums against the pass's fp32 logits to 1e-4, as tests/test_class_attribution.py holds them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import antiberty_paths

import bertfn
from bertfn import interventions as iv
from bertfn.cli import main

SPECIES = ["Camel", "Human", "Mouse", "Rabbit", "Rat", "Rhesus"]  # AntiBERTyRunner's LABEL_TO_SPECIES, in order
MOUSE, HUMAN = SPECIES.index("Mouse"), SPECIES.index("Human")
HEAD = dict(head="cls.species", labels=SPECIES)


def heavy_chain(name: str) -> str:
    """An antibody's VH from tests/data/antibodies.tsv, one residue a token (AntiBERTy's spacing)."""
    lines = (Path(__file__).parent / "data" / "antibodies.tsv").read_text(encoding="utf-8").splitlines()
    return " ".join(next(line.split("\t")[2] for line in lines if line.startswith(f"{name}\theavy\t")))


def by_hand(m: bertfn.Model, label: int):
    """The species head's logit of ``label`` on the run's pooler output, written out: ``W pooler + b``."""
    w, b = m.state["cls.species.weight"], m.state["cls.species.bias"]  # (6, H), (6,)
    return lambda run: (run["pooler"][0] @ w.T + b)[label]


def species_logits(m: bertfn.Model, text: str) -> dict[str, float]:
    """classify's logits of the species head (the fast path)."""
    return {d["label"]: d["score"] for d in bertfn.classify(text, m, **HEAD, top_k=None, function_to_apply="none")}


def test_token_attributions_of_an_extra_head_are_those_of_the_metric_by_hand(antiberty):
    """Both at 8 steps (the equality holds at any; 8 keep the test quick). The by-hand metric multiplies in another
    order than F.linear may: the attributions are held to 1e-6 of the largest, f to 1e-6."""
    vh = heavy_chain("rituximab")
    a = iv.token_attributions(vh, antiberty, "Mouse", **HEAD, steps=8)
    hand = iv.token_attributions(vh, antiberty, by_hand(antiberty, MOUSE), steps=8)
    assert a.tokens == hand.tokens and len(a.tokens) == 123  # [CLS], 121 residues, [SEP]
    assert (a.attributions - hand.attributions).abs().max() <= 1e-6 * hand.attributions.abs().max()
    assert abs(a.value - hand.value) < 1e-6 and abs(a.baseline_value - hand.baseline_value) < 1e-6
    assert abs(a.value - species_logits(antiberty, vh)["Mouse"]) < 1e-5  # f(x) is classify's logit
    assert int(a.attributions.argmax()) == 121 and a.tokens[121] == "A"  # TVTVSA's last residue gives the most
    assert a.attributions[116:122].sum() > 0.2 * (a.value - a.baseline_value)  # the C-terminal TVTVSA: a fifth


def test_logit_attribution_of_an_extra_head_is_the_classifier_path(antiberty, tmp_path):
    from test_class_attribution import species_classifier

    vh = heavy_chain("rituximab")
    dla = iv.logit_attribution(vh, antiberty, ["Mouse", "Human"], **HEAD)
    assert dla.labels == ["Mouse", "Human"] and dla.ids == [MOUSE, HUMAN] and dla.head == "cls.species"
    assert dla.task == "sequence-classification" and dla.position is None
    assert repr(dla).startswith("ClassAttribution(cls.species (on the pooler) labels ['Mouse', 'Human']: logits [9.3")
    torch.testing.assert_close(dla.total, dla.logits, atol=1e-4, rtol=0)
    logits = species_logits(antiberty, vh)
    assert all(abs(logits[s] - v) < 1e-5 for s, v in zip(dla.labels, dla.logits.tolist()))
    by_classifier = iv.logit_attribution(vh, species_classifier(antiberty, tmp_path), ["Mouse", "Human"])
    for part in ("heads", "attention_bias", "ffn", "embeddings", "bias"):  # float64 sums of the same recorded pass
        torch.testing.assert_close(getattr(dla, part), getattr(by_classifier, part), atol=1e-9, rtol=0)
    torch.testing.assert_close(dla.logits, by_classifier.logits, atol=1e-5, rtol=0)  # fp32, (H,) and (1, H) products
    push = dla.layers[:, 0] - dla.layers[:, 1]  # each layer's direct push towards Mouse over Human
    assert int(push.argmax()) == 7 and push[7] > 5
    assert torch.equal(iv.logit_attribution(vh, antiberty, MOUSE, head="cls.species").heads[..., 0], dla.heads[..., 0])


def test_the_head_metrics_in_a_study_are_the_metric_by_hand(antiberty):
    """A sweep of layer 7's heads, rituximab's VH into adalimumab's: label_difference(head=) against the difference
    written by hand (1e-5: the copies run SDPA, and ``@`` sums in another order than F.linear)."""
    murine, human = heavy_chain("rituximab"), heavy_chain("adalimumab")
    metric = iv.label_difference("Mouse", "Human", **HEAD)
    hand = lambda run: by_hand(antiberty, MOUSE)(run) - by_hand(antiberty, HUMAN)(run)  # noqa: E731
    study = iv.sweep(murine, human, antiberty, metric, over="heads", layers=[7], progress=False)
    theirs = iv.sweep(murine, human, antiberty, hand, over="heads", layers=[7], progress=False)
    torch.testing.assert_close(study.per_example, theirs.per_example, atol=1e-5, rtol=0)
    logits = species_logits(antiberty, murine)
    assert abs(study.clean - (logits["Mouse"] - logits["Human"])) < 1e-5 and study.clean > 5
    run = bertfn.trace(murine, antiberty)
    assert iv.label_logit("Mouse", **HEAD)(run) == iv.label_logit(MOUSE, head="cls.species")(run)
    assert abs(iv.label_logit("Mouse", **HEAD)(run).item() - logits["Mouse"]) < 1e-5
    scores = {d["label"]: d["score"] for d in bertfn.classify(murine, antiberty, **HEAD, top_k=None)}  # softmax
    assert abs(iv.label_probability("Human", **HEAD)(run).item() - scores["Human"]) < 1e-6


def test_the_decision_panel_explains_an_extra_head(antiberty, tmp_path):
    """Two targets at 1 step (the panel's numbers are the tools' own, whatever the steps); the CLI's page holds the
    panel of a fragment (its first 20 residues: the command's plumbing, quickly)."""
    vh = heavy_chain("rituximab")
    dec = iv.decision(vh, antiberty, **HEAD, steps=1, max_targets=2)
    scores = bertfn.classify(vh, antiberty, **HEAD, top_k=None)
    assert dec.meta["task"] == "sequence-classification" and dec.meta["classes"]["function"] == "softmax"
    assert dec.meta["classes"]["scores"] == [[d["label"], d["score"]] for d in scores]
    assert [t["label"] for t in dec.meta["targets"]] == ["Mouse", "Human"]
    dla = iv.logit_attribution(vh, antiberty, ["Mouse", "Human"], **HEAD)
    assert [t["logit"] for t in dec.meta["targets"]] == [float(v) for v in dla.logits.tolist()]
    assert dec.arrays["heads"].shape == (2, 8, 8) and dec.arrays["tokens"].shape == (2, 123)
    assert torch.equal(torch.from_numpy(dec.arrays["heads"]), dla.heads.permute(2, 0, 1).float())
    ig = iv.token_attributions([vh] * 2, antiberty, ["Mouse", "Human"], **HEAD, steps=1)
    assert torch.equal(torch.from_numpy(dec.arrays["tokens"]), torch.stack([a.attributions for a in ig]).float())
    weights, vocab = antiberty_paths()
    fragment = " ".join(vh.split()[:20])
    assert main(["view", fragment, "--model", str(weights), "--tokenizer", str(vocab), "--cased", "--head", "cls.species",
                 "--labels", *SPECIES, "--steps", "1", "--out", str(tmp_path / "view.html"), "--quiet"]) == 0
    page = (tmp_path / "view.html").read_text(encoding="utf-8")
    scores = bertfn.classify(fragment, antiberty, **HEAD, top_k=None)
    assert '"classes":{"function":"softmax","scores":[["%s",' % scores[0]["label"] in page
    assert '"targets":[{"name":"%s"' % scores[0]["label"] in page and '"name":"LABEL_' not in page


def test_refusals_are_classifys(antiberty):
    """An unknown head, a head that is no string, labels of the wrong length, labels with no sequence classifier:
    classify's messages, naming the call."""
    vh = heavy_chain("rituximab")
    run = bertfn.trace(vh, antiberty)
    calls = {"token_attributions": lambda **kw: iv.token_attributions(vh, antiberty, "Mouse", steps=1, **kw),
             "logit_attribution": lambda **kw: iv.logit_attribution(vh, antiberty, "Mouse", **kw),
             "decision": lambda **kw: iv.decision(vh, antiberty, steps=1, **kw),
             "label_logit": lambda **kw: iv.label_logit("Mouse", **kw)(run),
             "label_probability": lambda **kw: iv.label_probability("Mouse", **kw)(run),
             "label_difference": lambda **kw: iv.label_difference("Mouse", "Human", **kw)(run)}
    for options, error in ((dict(head="cls.nope"), bertfn.MissingPartError), (dict(head=3), bertfn.InputError),
                           (dict(head="cls.species", labels=SPECIES[:5]), bertfn.InputError),
                           (dict(labels=["A", "B"]), bertfn.MissingPartError)):
        with pytest.raises(error) as theirs:
            bertfn.classify(vh, antiberty, **options)
        for what, call in calls.items():
            with pytest.raises(error) as ours:
                call(**options)
            assert str(ours.value) == str(theirs.value).replace("classify", what), (what, options)


def test_logit_attribution_of_an_extra_head_takes_one_text(antiberty):
    """A list of chains was split as its first chain alone, said of none."""
    vh = heavy_chain("rituximab")
    with pytest.raises(bertfn.InputError, match="one text, got a list of 2 texts; call it once per text"):
        iv.logit_attribution([vh, vh], antiberty, "Mouse", **HEAD)


def test_the_decision_panel_takes_one_text(antiberty):
    """A list of chains was a TypeError of Python's (list indices must be integers)."""
    vh = heavy_chain("rituximab")
    with pytest.raises(bertfn.InputError, match="decision explains one text, got a list of 2 texts; call it once per text"):
        iv.decision([vh, vh], antiberty, **HEAD, steps=1)
