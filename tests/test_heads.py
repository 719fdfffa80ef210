"""The heads of fine-tuned checkpoints, every member's, against transformers' *For... classes.

Each (member, task) checkpoint is saved by transformers 4.57 (random weights, tests/family_checkpoints.py) and
loaded by bertfn as it comes; the head's logits on the encoder's last hidden states (bertfn.model.task_heads)
equal the class's within 1e-5 in fp32 on padded batches, right and left, of texts and text pairs.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import bertfn
from bertfn.model.task_heads import TASKS, head_of, run_head, task_head
from family_checkpoints import (CORPUS, ESM_KINDS, HEAD_TASKS, PROTEINS, QUICK_KINDS, kind_params, member_tokenizer,
                                save_head)
from test_family_modern import esm_oracle

pytestmark = pytest.mark.needs_transformers

CASES = [(kind, task) for kind, tasks in HEAD_TASKS.items() for task in tasks]
LABELS = {"sequence-classification": 3, "token-classification": 5, "question-answering": 2, "multiple-choice": 2}


def texts_of(kind: str) -> tuple[list[str], list[str]]:
    """Four texts of different lengths and four second segments, in the member's alphabet."""
    if kind == "esm1b":  # its learned positions hold 128 tokens (ESM-2's rotary ones run past): pairs cut to fit
        return list(PROTEINS[:4]), [b[:128 - len(a) - 3] for a, b in zip(PROTEINS[:4], PROTEINS[2:6])]
    if kind == "esm":
        return list(PROTEINS[:4]), list(PROTEINS[2:6])
    return [CORPUS[0], CORPUS[3], CORPUS[2], CORPUS[15]], [CORPUS[1], CORPUS[20], CORPUS[5], CORPUS[8]]


@pytest.fixture(scope="module", params=[pytest.param((k, t), marks=() if k in QUICK_KINDS else pytest.mark.slow) for k, t in CASES],
                ids=[f"{k}-{t}" for k, t in CASES])
def case(request, tmp_path_factory):
    kind, task = request.param
    folder = tmp_path_factory.mktemp(f"{kind}-{task}")
    labels = {"id2label": {i: f"L{i}" for i in range(LABELS[task])}}
    hf = save_head(kind, task, folder, seed=3, **labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the head is read: no key is left over
        model = bertfn.load(folder)
    return kind, task, hf, model


def batch(kind: str, task: str, side: str) -> dict:
    """The transformers tokenizer's padded batch (``side`` padding) for ``task``: pairs for a sequence classifier
    and a reader, (2 prompts x 3 choices) flattened for multiple choice."""
    tok = member_tokenizer(kind)  # shared by every test of the process: its padding side is put back
    texts, pairs = texts_of(kind)
    if task == "multiple-choice":
        texts, pairs = [texts[0]] * 3 + [texts[1]] * 3, pairs[:3] * 2
    elif task == "token-classification":
        pairs = None
    tok.padding_side = side
    try:
        return dict(tok(texts, pairs, padding=True, return_tensors="pt"))
    finally:
        tok.padding_side = "right"


def hf_logits(hf, task: str, enc: dict):
    with torch.no_grad():
        if task == "multiple-choice":
            out = hf(**{k: v.view(2, 3, -1) for k, v in enc.items()})
            return out.logits.reshape(-1, 1)  # (6, 1), as bertfn's head gives it
        out = hf(**enc)
    return (out.start_logits, out.end_logits) if task == "question-answering" else out.logits


def bertfn_logits(model: bertfn.Model, task: str, enc: dict):
    types = enc.get("token_type_ids")
    out = bertfn.encoder(model, enc["input_ids"], enc["attention_mask"], types)
    return run_head(model.params, task, out.last_hidden_state, enc["attention_mask"])


def check(got, want, mask: torch.Tensor | None = None) -> None:
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        if mask is not None and g.dim() >= 2 and g.shape[:2] == mask.shape:  # per token: the real tokens' rows
            g, w = g[mask.bool()], w[mask.bool()]
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("side", ["right", "left"])
def test_head_equals_transformers(case, side):
    kind, task, hf, model = case
    enc = batch(kind, task, side)
    got = bertfn_logits(model, task, enc)
    if kind == "modernbert" and side == "left" and task in ("sequence-classification", "multiple-choice"):
        # transformers' ModernBERT classifier reads position 0, padding in a left-padded text; bertfn reads each text's
        # first real token, as transformers' multiple-choice head does: held to each text alone
        rows = [bertfn_logits(model, task, {k: v[i:i + 1, enc["attention_mask"][i].bool()]
                                            for k, v in enc.items()}) for i in range(len(enc["input_ids"]))]
        check(got, torch.cat(rows))
        return
    # ESM-1b's oracle: transformers with its embeddings given the mask (test_save.same_logits says why)
    restore = esm_oracle(hf, enc["attention_mask"]) if kind == "esm1b" else None
    try:
        want = hf_logits(hf, task, enc)
    finally:
        if restore is not None:
            hf.esm.embeddings.forward = restore
    check(got, want, enc["attention_mask"] if task != "multiple-choice" else None)


def test_model_head_says_what_the_checkpoint_carries(case):
    kind, task, hf, model = case
    head = model.head
    assert head.task == task and head.architecture == type(hf).__name__
    if task in ("sequence-classification", "token-classification"):
        assert head.labels == tuple(f"L{i}" for i in range(LABELS[task]))
    assert type(hf).__name__ in repr(model) and f"{task.replace('-', ' ')} head" in repr(model)
    assert str(head).startswith(type(hf).__name__)


def test_the_head_is_found_from_the_keys_without_architectures(case):
    kind, task, hf, model = case
    config = bertfn.BertConfig.from_dict({**model.config.to_dict(), "architectures": None})
    found = head_of(config, model.state).task
    if kind == "modernbert":  # its heads all hold head.* and a classifier: read as a tagger
        assert found == "token-classification"
    elif task == "multiple-choice" and kind != "electra":  # a classifier of one label, as a sequence classifier's
        assert found == "sequence-classification"
    else:
        assert found == task


def test_a_config_with_other_labels_than_the_weights_is_refused(tmp_path):
    hf = save_head("roberta", "sequence-classification", tmp_path, num_labels=3)
    config = hf.config.to_dict()
    config["id2label"] = {"0": "A", "1": "B"}
    config["label2id"] = {"A": 0, "B": 1}
    import json
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(bertfn.CheckpointError, match="num_labels=2 but the weights have 3"):
        bertfn.load(tmp_path)


def test_a_task_the_member_lacks_is_refused(tmp_path):
    save_head("esm", "sequence-classification", tmp_path)
    import json
    config = json.loads((tmp_path / "config.json").read_text())
    config["architectures"] = ["EsmForQuestionAnswering"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(bertfn.CheckpointError, match="no question-answering head for ESM-2"):
        bertfn.load(tmp_path)
    model = bertfn.load(tmp_path, config={**config, "architectures": ["EsmForSequenceClassification"]})
    with pytest.raises(bertfn.InputError, match="ESM-2 has no multiple-choice head"):
        task_head(model.config, "multiple-choice")
    with pytest.raises(bertfn.InputError, match="task must be one of"):
        task_head(model.config, "summarization")


@settings(max_examples=6, deadline=None)
@given(kind=st.sampled_from(["bert", "roberta", "distilbert", "electra", "modernbert"]),
       labels=st.integers(1, 4), problem=st.sampled_from([None, "multi_label_classification"]),
       pooling=st.sampled_from(["cls", "mean"]), pairs=st.booleans(), seed=st.integers(0, 99))
def test_sequence_classifiers_of_any_config(tmp_path_factory, kind, labels, problem, pooling, pairs, seed):
    folder = tmp_path_factory.mktemp("h")
    extra = {"classifier_pooling": pooling} if kind == "modernbert" else {}
    problem = problem if labels > 1 else None
    hf = save_head(kind, "sequence-classification", folder, seed=seed, num_labels=labels, problem_type=problem, **extra)
    model = bertfn.load(folder)
    assert model.head.problem_type == (problem or ("regression" if labels == 1 else "single_label_classification"))
    tok = member_tokenizer(kind)
    texts, seconds = texts_of(kind)
    enc = dict(tok(texts, seconds if pairs else None, padding=True, return_tensors="pt"))
    check(bertfn_logits(model, "sequence-classification", enc), hf_logits(hf, "sequence-classification", enc))


def test_every_task_has_a_head_in_every_member():
    from bertfn.model.family import FAMILIES
    from bertfn.model.naming import names_of

    for family in FAMILIES.values():
        config = bertfn.BertConfig.from_dict({"model_type": family.model_type})
        for task in names_of(config).tasks or TASKS:
            assert callable(task_head(config, task).run)


def test_the_fast_path_gives_each_text_the_reference_logits(case):
    """bertfn.fast.batching.head_outputs (texts end to end, no padding; the last layer at the first tokens alone where
    the head reads them) equals the reference head on each text alone."""
    from bertfn.fast.batching import head_outputs

    kind, task, hf, model = case
    texts, pairs = texts_of(kind)
    enc = model.tokenizer(texts, None if task == "token-classification" else pairs)
    lengths = enc.attention_mask.sum(1).tolist()
    with torch.inference_mode():
        fast = head_outputs(model, enc, lengths, task, batch_size=3)
    for i, n in enumerate(lengths):
        one = {"input_ids": enc.input_ids[i:i + 1, :n], "attention_mask": enc.attention_mask[i:i + 1, :n],
               "token_type_ids": enc.token_type_ids[i:i + 1, :n]}
        want = bertfn_logits(model, task, one)
        want = tuple(t[0] for t in want) if isinstance(want, tuple) else want[0]
        check(fast[i], want)


def test_a_trace_records_the_head_and_edits_reach_it(case):
    """bertfn.trace runs the checkpoint's head after the encoder and records its points (those point_names lists for
    it); a batch's recs[i] equals the text traced alone; an edit of the logits replaces them."""
    from bertfn.model.dry_run import task_points
    from bertfn.model.point_names import point_names

    kind, task, hf, model = case
    texts, _ = texts_of(kind)
    points = task_points(model.config, task)
    assert points and all(p in point_names(model.config) for p in points)
    recs = bertfn.trace(texts[:3], model)
    for i in range(3):
        alone = bertfn.trace(texts[i], model)
        assert all(p in alone.keys() for p in points)
        for p in points:
            torch.testing.assert_close(recs[i][p], alone[p], atol=1e-5, rtol=1e-5)
    last = points[-1]  # classifier.logits or qa.end_logits
    edited = bertfn.trace(texts[0], model, edits={last: lambda t, point: t * 0 + 7.0})
    assert torch.all(edited[last] == 7.0)


@pytest.mark.parametrize("kind", kind_params(ESM_KINDS, quick=ESM_KINDS))
def test_a_trace_of_esm_records_its_contacts(tmp_path, kind):
    from bertfn.model.members.esm import contact_head
    from family_checkpoints import save_member

    save_member(kind, tmp_path)
    model = bertfn.load(tmp_path)
    recs = bertfn.trace(list(PROTEINS[:3]), model)
    enc = model.tokenizer(list(PROTEINS[:3]))
    out = bertfn.encoder(model, enc.input_ids, enc.attention_mask, output_attentions=True, impl="eager")
    want = contact_head(model.params, enc.input_ids, torch.stack(out.attentions, 1), enc.attention_mask)
    for i, protein in enumerate(PROTEINS[:3]):
        r = len(protein)
        got = torch.sigmoid(recs[i]["contacts.logits"][0])
        assert got.shape == (r, r)
        torch.testing.assert_close(got, want[i, :r, :r], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(recs[i]["contacts.logits"], bertfn.trace(protein, model)["contacts.logits"],
                                   atol=1e-5, rtol=1e-5)


def test_a_packed_state_runs_every_head(case):
    """Where the fast path packs the weights (pack_state, what a call by name does), the heads' weights stay as
    stored, so that their reference functions read them: the same logits as the plain model."""
    from bertfn.fast.batching import head_outputs
    from bertfn.fast.choice import pack_state
    from test_fast_path import forced, needs_onednn  # noqa: F401

    kind, task, hf, model = case
    texts, _ = texts_of(kind)
    enc = model.tokenizer(texts)
    lengths = enc.attention_mask.sum(1).tolist()
    with torch.inference_mode():
        plain = head_outputs(model, enc, lengths, task, batch_size=4)
    with forced("onednn-packed"):
        packed = bertfn.Model(model.config, dict(model.state), model.tokenizer, model.name)
        if not pack_state(packed.state):
            pytest.skip("oneDNN cannot pack here")
        assert any(t.is_mkldnn for t in packed.state.values())
        with torch.inference_mode():
            got = head_outputs(packed, enc, lengths, task, batch_size=4)
    for g, w in zip(got, plain):
        check(g, w)
