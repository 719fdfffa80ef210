"""Direct attribution into a class (bertfn/interventions/class_attribution.py): a fine-tuned head's logits of some
labels split into one part per head, per layer's attention bias and feed-forward write, the embeddings and the bias.

* on every member that has a sequence classifier (random weights at a scale where the heads' nonlinearities bend:
  BERT's and ALBERT's pooler tanh, RoBERTa's, XLM-R's and ESM-2's tanh, ELECTRA's GELU, DistilBERT's ReLU, ModernBERT's
  activation and LayerNorm, with "cls" and with "mean" pooling) the parts sum to the logits within 1e-4, and the
  logits are transformers' ``*ForSequenceClassification`` logits (1e-4) and ``classify``'s; labels by name and by id,
  in the order asked; a text pair;
* one head's part equals a computation by hand through BERT's pooler (1e-9, float64);
* a tagger's logits at a token and a reader's start and end logits at a token split the same way on BERT, DistilBERT
  and ModernBERT (their heads' own linearizations);
* on real weights: AntiBERTy's species head saved as a BertForSequenceClassification, on rituximab's VH;
* a label the head lacks, a position where the head has none (or none where it needs one), a multiple-choice head,
  and a label given to a masked LM get errors that say what to do.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from conftest import TINY, random_model, write_folder
from family_checkpoints import ESM_KINDS, HEAD_TASKS, PROTEINS, kind_params, save_head

import bertfn
from bertfn import interventions as iv
from bertfn.errors import InputError
from bertfn.interventions.residual_parts import hidden_contributions

pytestmark = pytest.mark.needs_transformers  # the checkpoints are built by transformers

LABELS = {0: "negative", 1: "neutral", 2: "positive"}
KINDS = tuple(k for k, tasks in HEAD_TASKS.items() if "sequence-classification" in tasks)


def text_of(kind: str) -> str:
    return PROTEINS[3] if kind in ESM_KINDS else "The king and the queen lived in a big castle."


def saved(kind: str, task: str, folder: Path, **overrides):
    """(transformers model, bertfn model) of a random ``kind`` checkpoint with ``task``'s head, at a weight scale
    (``initializer_range`` 0.3) where its activations are far from linear."""
    labels = {} if task == "question-answering" else dict(id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    hf = save_head(kind, task, folder, initializer_range=0.3, **labels, **overrides)
    return hf, bertfn.load(folder)


def inputs_of(hf, m: bertfn.Model, text: str, pair: str | None = None) -> dict:
    """transformers' inputs of ``text`` (and ``pair``) as bertfn's tokenizer makes them (token types where the model
    takes them)."""
    enc = m.tokenizer([text], [pair] if pair else None)
    inputs = dict(input_ids=enc.input_ids, attention_mask=enc.attention_mask)
    if "token_type_ids" in hf.forward.__code__.co_varnames and m.config.type_vocab_size > 1:
        inputs["token_type_ids"] = enc.token_type_ids
    return inputs


def check_sums(hf, m: bertfn.Model, text: str, labels, pair: str | None = None) -> iv.ClassAttribution:
    """The parts of ``labels``' logits sum to them (1e-4), which are transformers' logits and classify's."""
    dla = iv.logit_attribution(text, m, labels, pair=pair)
    cfg = m.config
    L, nh, T = cfg.num_hidden_layers, cfg.num_attention_heads, len(dla.ids)
    assert dla.heads.shape == (L, nh, T) and dla.ffn.shape == dla.attention_bias.shape == (L, T)
    assert dla.embeddings.shape == dla.bias.shape == dla.logits.shape == (T,)
    torch.testing.assert_close(dla.total, dla.logits, atol=1e-4, rtol=0)
    with torch.no_grad():
        theirs = hf(**inputs_of(hf, m, text, pair)).logits[0, dla.ids].double()
    torch.testing.assert_close(dla.logits, theirs, atol=1e-4, rtol=0)
    scores = bertfn.classify({"text": text, "text_pair": pair} if pair else text, m, top_k=None,
                             function_to_apply="none")
    ours = {d["label"]: d["score"] for d in scores}
    assert all(abs(ours[label] - v) < 1e-5 for label, v in zip(dla.labels, dla.logits.tolist()))
    assert dla.heads.abs().max() > 1e-3  # the heads' writes do reach the class
    return dla


@pytest.mark.parametrize("kind", kind_params(KINDS))
def test_the_parts_sum_to_a_classifiers_logits(kind, tmp_path):
    hf, m = saved(kind, "sequence-classification", tmp_path)
    dla = check_sums(hf, m, text_of(kind), ["positive", 0, "neutral"])
    assert dla.labels == ["positive", "negative", "neutral"] and dla.ids == [2, 0, 1] and dla.position is None
    assert repr(dla).startswith("ClassAttribution(sequence-classification labels ['positive', 'negative', 'neutral']: "
                                "logits [")
    one = iv.logit_attribution(text_of(kind), m, "negative")  # one label: a list of one
    torch.testing.assert_close(one.heads[..., 0], dla.heads[..., 1], atol=0, rtol=0)


@pytest.mark.slow
def test_the_parts_sum_with_modernberts_mean_pooling_and_a_text_pair(tmp_path):
    """Mean pooling: each part is the mean of its parts at every token, each through the final LayerNorm frozen at
    its token; the head's GELU and LayerNorm frozen at the pooled vector."""
    hf, m = saved("modernbert", "sequence-classification", tmp_path, classifier_pooling="mean")
    check_sums(hf, m, text_of("modernbert"), [2, 1, 0])
    check_sums(hf, m, "The cat sat on the mat.", "positive", pair="The dog sat on the cat.")


def test_the_parts_sum_for_a_text_pair(tmp_path):
    hf, m = saved("bert", "sequence-classification", tmp_path)
    check_sums(hf, m, "The cat sat on the mat.", ["positive", "negative"], pair="The dog sat on the cat.")


def test_one_head_part_through_berts_pooler_by_hand(tmp_path):
    _, m = saved("bert", "sequence-classification", tmp_path)
    text = text_of("bert")
    dla = iv.logit_attribution(text, m, "positive")
    rec = bertfn.trace(text, m, head_outputs=True)
    cfg, p = m.config, m.params
    eps, i, h = cfg.layer_norm_eps, cfg.num_hidden_layers - 1, 1

    def at(name):
        return rec[name][0, 0].double()  # [CLS]

    def w(name):
        return p[name].double()

    def frozen(v, whole, gamma):  # LayerNorm with this run's sigma, without beta
        return gamma * (v - v.mean()) / torch.sqrt(whole.var(unbiased=False) + eps)

    lay = f"bert.encoder.layer.{i}."
    v = rec[f"layer.{i}.attention.head_outputs"][0, h, 0].double()
    v = frozen(v, at(f"layer.{i}.attention.dense") + at(f"layer.{i - 1}.output"), w(lay + "attention.output.LayerNorm.weight"))
    v = frozen(v, at(f"layer.{i}.attention.output") + at(f"layer.{i}.ffn.dense"), w(lay + "output.LayerNorm.weight"))
    z = hidden_contributions(rec, 0).total @ w("bert.pooler.dense.weight").T + w("bert.pooler.dense.bias")
    u = torch.tanh(z) / z * (v @ w("bert.pooler.dense.weight").T)  # the tanh as a gate
    torch.testing.assert_close(dla.heads[i, h, 0], w("classifier.weight")[2] @ u, atol=1e-9, rtol=1e-9)
    assert not math.isclose(torch.tanh(z).abs().max().item(), z.abs().max().item(), rel_tol=0.05)  # tanh bends here


@pytest.mark.parametrize("kind", ["bert", pytest.param("distilbert", marks=pytest.mark.slow),
                                  pytest.param("modernbert", marks=pytest.mark.slow)])
def test_a_taggers_and_a_readers_logits_at_a_token(kind, tmp_path):
    text = text_of(kind)
    hf, m = saved(kind, "token-classification", tmp_path / "tag")
    dla = iv.logit_attribution(text, m, ["positive", "negative"], position=3)
    torch.testing.assert_close(dla.total, dla.logits, atol=1e-4, rtol=0)
    with torch.no_grad():
        theirs = hf(**inputs_of(hf, m, text)).logits[0, 3, [2, 0]].double()
    torch.testing.assert_close(dla.logits, theirs, atol=1e-4, rtol=0)
    assert dla.position == 3 and "at position 3" in repr(dla)
    hf, m = saved(kind, "question-answering", tmp_path / "qa")
    question = "Who lived in a big castle?"
    dla = iv.logit_attribution(question, m, ["start", "end"], position=9, pair=text)
    torch.testing.assert_close(dla.total, dla.logits, atol=1e-4, rtol=0)
    with torch.no_grad():
        out = hf(**inputs_of(hf, m, question, text))
    torch.testing.assert_close(dla.logits, torch.stack([out.start_logits[0, 9], out.end_logits[0, 9]]).double(),
                               atol=1e-4, rtol=0)


def species_classifier(antiberty: bertfn.Model, folder: Path) -> bertfn.Model:
    """AntiBERTy's species head saved as the classifier of a BertForSequenceClassification: its encoder and pooler,
    ``cls.species`` as ``classifier``, its six species as the labels (the head is ``W tanh(W_p h_[CLS] + b_p) + b``,
    BERT's sequence classifier)."""
    from importlib.util import find_spec

    from safetensors.torch import save_file

    source = Path(find_spec("antiberty").origin).parent / "trained_models"
    config = json.loads((source / "AntiBERTy_md_smooth" / "config.json").read_text(encoding="utf-8"))
    species = ["Camel", "Human", "Mouse", "Rabbit", "Rat", "Rhesus"]
    config.update(architectures=["BertForSequenceClassification"], id2label=dict(enumerate(species)),
                  label2id={s: i for i, s in enumerate(species)})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    state = {k: t for k, t in antiberty.state.items() if k.startswith("bert.")}
    state["classifier.weight"], state["classifier.bias"] = antiberty.state["cls.species.weight"], antiberty.state["cls.species.bias"]
    save_file({k: t.contiguous() for k, t in state.items()}, folder / "model.safetensors")
    return bertfn.load(folder, tokenizer=source / "vocab.txt", lowercase=False)


def test_the_parts_sum_to_antibertys_species_logits(antiberty, tmp_path):
    species = species_classifier(antiberty, tmp_path)
    rows = (Path(__file__).parent / "data" / "antibodies.tsv").read_text(encoding="utf-8").splitlines()
    vh = next(line.split("\t")[2] for line in rows if line.startswith("rituximab\theavy"))
    chain = " ".join(vh)
    dla = iv.logit_attribution(chain, species, ["Mouse", "Human"])
    torch.testing.assert_close(dla.total, dla.logits, atol=1e-4, rtol=0)
    ours = bertfn.classify(chain, antiberty, head="cls.species", labels=species.config.labels, top_k=None,
                           function_to_apply="none")
    assert [round({d["label"]: d["score"] for d in ours}[s], 4) for s in ("Mouse", "Human")] == \
        [round(v, 4) for v in dla.logits.tolist()]
    push = dla.layers[:, 0] - dla.layers[:, 1]  # each layer's direct push towards Mouse over Human
    assert int(push.argmax()) == 7 and push[7] > 2  # the last layer's writes carry most of the call


def test_errors_say_what_to_do(tmp_path):
    _, m = saved("bert", "sequence-classification", tmp_path / "cls")
    text = text_of("bert")
    with pytest.raises(InputError, match=r"no label 'happy'; its labels are 'negative', 'neutral', 'positive'"):
        iv.logit_attribution(text, m, ["positive", "happy"])
    with pytest.raises(InputError, match="an id from 0 to 2, got 5"):
        iv.logit_attribution(text, m, 5)
    with pytest.raises(InputError, match="non-empty list"):
        iv.logit_attribution(text, m, [])
    with pytest.raises(InputError, match="one row of logits per text, so it takes no position"):
        iv.logit_attribution(text, m, "positive", position=2)
    _, tagger = saved("bert", "token-classification", tmp_path / "tag")
    with pytest.raises(InputError, match="logits at every token; give position="):
        iv.logit_attribution(text, tagger, "positive")
    with pytest.raises(InputError, match=r"position must be an integer from 0 to 16 \(the text has 17 tokens\)"):
        iv.logit_attribution(text, tagger, "positive", position=17)
    save_head("bert", "multiple-choice", tmp_path / "mc")
    with pytest.raises(InputError, match=r"one per \(text, choice\) pair"):
        iv.logit_attribution(text, bertfn.load(tmp_path / "mc"), 0)
    masked_lm = bertfn.load(write_folder(random_model(bertfn.BertConfig(**TINY)), tmp_path / "mlm"))
    with pytest.raises(InputError, match=r"no token 'positive'; .* is a masked LM .*not per label"):
        iv.logit_attribution("the cat sat on the [MASK] .", masked_lm, "positive")
    with pytest.raises(InputError, match=r"position= and pair= are a fine-tuned head's"):
        iv.logit_attribution("the cat sat on the [MASK] .", masked_lm, "cat", position=1)
