"""Empty and blank texts (``""``, ``"   "``) answered as transformers' pipelines answer them (issue 56 item 4).

What transformers 4.57.6 and sentence-transformers 5.x do with them, measured on these small random models, and what
each test holds bertfn to, alone and in lists beside real texts, on the fast path and the reference one (an edit that
changes nothing), within 1e-5:

- text-classification: a label for ``[CLS] [SEP]`` (RoBERTa's byte-level BPE reads ``"   "`` as tokens of spaces);
  an empty ``text_pair`` is no pair (the fast tokenizer reads a falsy pair as none), a blank one is a pair.
- token-classification: no entities, ``[]``, for ``""``; for ``"   "`` none where the tokenizer drops spaces (BERT),
  the tokens of spaces labelled where it keeps them (RoBERTa).
- question-answering: ``""`` as question or context raises ValueError (``"`question` cannot be empty"``), bertfn an
  InputError; a blank question or context is answered (a context of no token: ``{"score": 0.0, "start": 0, "end": 0,
  "answer": ""}``).
- zero-shot-classification: ``""`` raises ValueError (``"You must include at least one label and at least one
  sequence."``), alone or in a list, bertfn an InputError; ``"   "`` is classified.
- CrossEncoder.predict / .rank: an empty or blank passage, or query, is scored (``[CLS] q [SEP] [SEP]``).
- multiple choice (the tokenizer's pairs and ``*ForMultipleChoice``): an empty prompt or choice is scored.
- SentenceTransformer.encode: ``""`` is embedded (the vector of ``[CLS] [SEP]``, or of the prompt's tokens).
- fill-mask: ``""`` has no mask; the pipeline raises (PipelineException), and bertfn keeps its InputError.

Then the command line and a corpus file with empty lines, rows and cells.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from family_checkpoints import save_head, save_member

import bertfn
from bertfn.cli import main
from bertfn.corpus import run_file
from bertfn.model.recorder import NO_TRACE, with_edits
from bertfn.tasks.choose import choice_logits
from bertfn.tasks.pairs import longest_pair

pytestmark = pytest.mark.needs_transformers

LABELS = {0: "negative", 1: "neutral", 2: "positive"}
NLI = {0: "entailment", 1: "neutral", 2: "contradiction"}
MIXED = ["a cat sat on the mat", "", "   ", "the dog", " \t\n "]
"""Real texts with empty and blank ones among them."""
SAME = {"embeddings.output": lambda t, point: t}
"""An edit that changes nothing: the reference path."""
PATHS = ({}, {"batch_size": 1}, {"edits": SAME})
"""The fast path in one group and text by text, and the reference path."""


@pytest.fixture(scope="module", autouse=True)
def offline():
    """sentence-transformers reads the local folders alone: no network."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A folder per head, built lazily: ``folders(kind, task)``."""
    root, made = tmp_path_factory.mktemp("empty"), {}

    def folder(kind: str, task: str):
        if (kind, task) not in made:
            path = root / f"{kind}-{task}"
            if task == "classifier":
                save_head(kind, "sequence-classification", path, id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
            elif task == "nli":
                save_head(kind, "sequence-classification", path, id2label=NLI, label2id={v: k for k, v in NLI.items()})
            elif task == "cross-encoder":
                save_head(kind, "sequence-classification", path, num_labels=1, initializer_range=0.2)
            elif task == "multiple-choice":
                hf = save_head(kind, task, path, seed=1, initializer_range=0.2)
                return made.setdefault((kind, task), (path, hf))
            else:
                save_head(kind, task, path)
            made[kind, task] = path
        return made[kind, task]

    return folder


def plain(x):
    """numpy's floats as Python's, recursively (the pipelines give np.float32 scores)."""
    if isinstance(x, list):
        return [plain(y) for y in x]
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return float(x) if isinstance(x, np.floating) else x


def close(got, want, atol: float = 1e-5) -> None:
    """The same nesting, keys and values; floats within ``atol``."""
    got, want = plain(got), plain(want)
    assert type(got) is type(want), (got, want)
    if isinstance(want, list):
        assert len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            close(g, w, atol)
    elif isinstance(want, dict):
        assert set(got) == set(want), (got, want)
        for k in want:
            close(got[k], want[k], atol)
    elif isinstance(want, float):
        assert got == pytest.approx(want, abs=atol)
    else:
        assert got == want


def pipeline(task: str, folder):
    import transformers

    return transformers.pipeline(task, model=str(folder), tokenizer=str(folder))


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_classify_answers_as_the_pipeline(folders, kind):
    folder = folders(kind, "classifier")
    pipe, model = pipeline("text-classification", folder), bertfn.load(folder)
    for options in PATHS:
        close(bertfn.classify(MIXED, model, top_k=None, **options), pipe(MIXED, top_k=None))
    for text in ("", "   "):
        close(bertfn.classify(text, model), pipe(text))  # one text: a list of one dict
    pairs = [{"text": "", "text_pair": ""}, {"text": "a cat", "text_pair": ""}, {"text": "", "text_pair": "a cat"},
             {"text": "the dog", "text_pair": "  "}]  # "" is no pair, "  " is one
    for options in ({}, {"edits": SAME}):
        close(bertfn.classify(pairs, model, top_k=None, **options), pipe(pairs, top_k=None))
    close(bertfn.classify(MIXED[:3], model, text_pair=""), pipe(MIXED[:3], text_pair=""))


@pytest.mark.parametrize("kind", ["bert", "roberta"])  # RoBERTa keeps tokens of spaces, and labels them
@pytest.mark.filterwarnings("ignore:Tokenizer does not support real words:UserWarning")  # the pipeline's, on RoBERTa
def test_tag_answers_as_the_pipeline(folders, kind):
    folder = folders(kind, "token-classification")
    pipe, model = pipeline("token-classification", folder), bertfn.load(folder)
    for strategy in ("none", "simple", "first"):
        want = pipe(MIXED, aggregation_strategy=strategy)
        assert want[1] == []
        for options in PATHS:
            close(bertfn.tag(MIXED, model, aggregation_strategy=strategy, **options), want)
        for text in ("", "   "):
            close(bertfn.tag(text, model, aggregation_strategy=strategy), pipe(text, aggregation_strategy=strategy))


def test_answer_takes_blank_and_refuses_empty_as_the_pipeline(folders):
    folder = folders("bert", "question-answering")
    pipe, model = pipeline("question-answering", folder), bertfn.load(folder)
    questions, contexts = ["  ", "where", "  ", "where is it"], ["a cat sat on the mat", "   ", "\t", "the cat sat"]
    for options in ({}, {"handle_impossible_answer": True}):
        want = [pipe(question=q, context=c, **options) for q, c in zip(questions, contexts)]
        if not options:
            assert want[1] == {"score": 0.0, "start": 0, "end": 0, "answer": ""}  # a context of no token
        for path in ({}, {"edits": SAME}):
            close(bertfn.answer(questions, contexts, model, **options, **path), want)
        close(bertfn.answer(questions[1], contexts[1], model, **options), want[1])
    for question, context, which in (("", "a cat", "question"), ("where", "", "context"), ("", "", "question")):
        with pytest.raises(ValueError, match=f"`{which}` cannot be empty"):
            pipe(question=question, context=context)
        with pytest.raises(bertfn.InputError, match=rf"^text 0's {which} is empty \(''\), which transformers' "
                                                    rf"question-answering pipeline refuses too; write the {which}"):
            bertfn.answer(question, context, model)
    with pytest.raises(bertfn.InputError, match=r"^text 1's question is empty \(''\)"):
        bertfn.answer(["where", ""], "a cat", model)


def test_zero_shot_takes_blank_and_refuses_empty_as_the_pipeline(folders):
    folder = folders("bert", "nli")
    pipe, model = pipeline("zero-shot-classification", folder), bertfn.load(folder)
    texts, labels = ["a cat sat", "   ", " \t", "the dog"], ["sports", "art", "cats"]
    for multi_label in (False, True):
        want = pipe(texts, candidate_labels=labels, multi_label=multi_label)
        for options in PATHS:
            close(bertfn.zero_shot(texts, model, candidate_labels=labels, multi_label=multi_label, **options), want)
    close(bertfn.zero_shot("   ", model, candidate_labels=labels), pipe("   ", candidate_labels=labels))
    for texts, i in (("", 0), (["a cat", ""], 1)):
        with pytest.raises(ValueError, match="at least one label and at least one sequence"):
            pipe(texts, candidate_labels=labels)
        with pytest.raises(bertfn.InputError, match=rf"^text {i} is empty \(''\), which transformers' zero-shot-"
                                                    r"classification pipeline refuses too; write the text to classify"):
            bertfn.zero_shot(texts, model, candidate_labels=labels)


def test_rerank_scores_as_cross_encoder(folders):
    from sentence_transformers import CrossEncoder

    folder = folders("bert", "cross-encoder")
    model = bertfn.load(folder)
    ce = CrossEncoder(str(folder), max_length=longest_pair(model))
    passages = ["the cat sat on the mat", "", "  ", "a dog", "\t"]
    for query in ("where did the cat sit", "", "   "):
        want = ce.predict([[query, p] for p in passages]).tolist()
        for options in PATHS:
            assert bertfn.rerank(query, passages, model, sort=False, **options) == pytest.approx(want, abs=1e-5)
        ranked = bertfn.rerank(query, passages, model)  # passages alike tie: compare each one's score
        assert {r["corpus_id"]: r["score"] for r in ranked} == pytest.approx(dict(enumerate(want)), abs=1e-5)
        assert [r["score"] for r in ranked] == pytest.approx(sorted(want, reverse=True), abs=1e-5)
    items = [{"query": "", "passages": ["a dog", ""]}, {"query": "a cat", "passages": [" "]}]
    assert bertfn.rerank(items, model=model, sort=False) == [
        pytest.approx(ce.predict([[i["query"], p] for p in i["passages"]]).tolist(), abs=1e-5) for i in items]


def test_choose_scores_as_the_multiple_choice_model(folders):
    from family_checkpoints import member_tokenizer

    folder, hf = folders("bert", "multiple-choice")
    model, tok = bertfn.load(folder), member_tokenizer("bert")
    items = [("", ["a cat", "", "the dog"]), ("   ", ["the dog", "a cat", ""]), ("the cat sat", ["", "on the mat", " "])]
    for (prompt, choices), options in zip(items, PATHS):
        enc = tok([prompt] * len(choices), choices, padding=True, return_tensors="pt")  # run_swag's pairs
        with torch.no_grad():
            want = hf(**{k: v[None] for k, v in enc.items()}).logits[0]  # (C,)
        points = with_edits(NO_TRACE, options.get("edits"), model.config)
        (got,), _ = choice_logits(model, [(prompt, choices)], options.get("batch_size", 32), points)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
        result = bertfn.choose(prompt, choices, model, **options)
        assert result["scores"] == pytest.approx(sorted(want.softmax(-1).tolist(), reverse=True), abs=1e-5)
        assert bertfn.choose([p for p, _ in items], [c for _, c in items], model)[items.index((prompt, choices))][
            "scores"] == pytest.approx(result["scores"], abs=1e-5)  # in a list, as alone


def st_folder(root, pooling: str, include_prompt: bool, prompts: dict):
    """A sentence-transformers folder around a small random BERT, saved by sentence-transformers."""
    from sentence_transformers import SentenceTransformer
    try:
        from sentence_transformers.sentence_transformer import modules
    except ImportError:  # before 5.x
        from sentence_transformers import models as modules

    save_member("bert", root / "hf", seed=3)
    transformer = modules.Transformer(str(root / "hf"), max_seq_length=24)
    pooled = modules.Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling, include_prompt=include_prompt)
    SentenceTransformer(modules=[transformer, pooled, modules.Normalize()], device="cpu", prompts=prompts).save(
        str(root / "st"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the checkpoint's MLM head, which no sentence module reads
        return root / "st", SentenceTransformer(str(root / "st"), device="cpu")


@pytest.mark.parametrize("pooling, include_prompt", [("cls", True), ("mean", False)])  # BGE's; the prompt left out
def test_embed_gives_sentence_transformers_vectors(tmp_path, pooling, include_prompt):
    folder, st = st_folder(tmp_path, pooling, include_prompt, {"query": "query: "})
    model = bertfn.load(folder)
    for options in ({}, {"prompt_name": "query"}):
        want = st.encode(MIXED, convert_to_tensor=True, **options).cpu()
        for path in PATHS:
            torch.testing.assert_close(bertfn.embed(MIXED, model, **options, **path), want, atol=1e-5, rtol=0)
        torch.testing.assert_close(bertfn.embed("", model, **options), st.encode("", convert_to_tensor=True, **options),
                                   atol=1e-5, rtol=0)


def test_fill_mask_still_refuses_a_text_without_a_mask(mlm_checkpoint):
    from transformers import pipeline as hf_pipeline
    from transformers.pipelines import PipelineException

    folder, hf = mlm_checkpoint
    pipe, model = hf_pipeline("fill-mask", model=hf, tokenizer=str(folder)), bertfn.load(folder)
    for text in ("", "   "):
        with pytest.raises(PipelineException, match="No mask_token"):
            pipe(text)
        with pytest.raises(bertfn.InputError, match=r"^text 1 is empty; write a sentence with the mask token"):
            bertfn.fill_mask(["the [MASK] sat", text], model)


def test_the_command_line_answers_empty_texts(folders, capsys):
    classifier, tagger, ce, nli, reader = (folders("bert", t) for t in ("classifier", "token-classification",
                                                                        "cross-encoder", "nli", "question-answering"))
    assert main(["classify", "", "a cat sat", "--model", str(classifier), "--json"]) == 0
    close(json.loads(capsys.readouterr().out), pipeline("text-classification", classifier)(["", "a cat sat"]))
    assert main(["tag", "  ", "--model", str(tagger)]) == 0
    assert capsys.readouterr().out == "  \n  (no entities)\n"
    assert main(["rerank", "", "a dog", "", "--model", str(ce), "--json"]) == 0
    got = {r["corpus_id"]: r["score"] for r in json.loads(capsys.readouterr().out)}
    assert got == pytest.approx(dict(enumerate(bertfn.rerank("", ["a dog", ""], ce, sort=False))), abs=1e-6)
    assert main(["zero-shot", "a cat", "", "--labels", "art", "sports", "--model", str(nli)]) == 2
    assert capsys.readouterr().err == ("bertfn: error: text 2 is empty (''), which transformers' zero-shot-classification "
                                       "pipeline refuses too; write the text to classify, or leave it out\n")
    assert main(["answer", "", "--context", "a cat", "--model", str(reader)]) == 2
    assert capsys.readouterr().err == ("bertfn: error: text 1's question is empty (''), which transformers' "
                                       "question-answering pipeline refuses too; write the question to answer\n")


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_file_with_empty_lines_rows_and_cells_runs_whole(folders, tmp_path, capsys):
    classifier, tagger, ce, nli = (folders("bert", t) for t in ("classifier", "token-classification", "cross-encoder",
                                                                "nli"))
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("a cat sat\n\n   \nthe dog\n", encoding="utf-8")  # an empty line and a blank one
    assert main(["classify", "--input", str(src), "--output", str(out), "--model", str(classifier), "--no-progress"]) == 0
    rows = read_jsonl(out)
    assert [r["text"] for r in rows] == ["a cat sat", "", "   ", "the dog"] and not any("error" in r for r in rows)
    close([r["result"] for r in rows], pipeline("text-classification", classifier)([r["text"] for r in rows]))

    table = tmp_path / "in.csv"  # a row whose text cell is empty
    table.write_text('id,text\n1,a cat sat\n2,""\n3,the dog\n', encoding="utf-8")
    summary = run_file(table, tmp_path / "tags.jsonl", tagger, task="tag", progress=False)
    rows = read_jsonl(tmp_path / "tags.jsonl")
    assert summary.errors == 0 and [r["id"] for r in rows] == ["1", "2", "3"] and rows[1]["result"] == []
    close([r["result"] for r in rows], pipeline("token-classification", tagger)(["a cat sat", "", "the dog"]))

    pairs = tmp_path / "pairs.jsonl"  # an empty query, an empty passage
    items = [{"query": "", "passages": ["a dog", "the cat"]}, {"query": "a cat", "passages": ["", "a dog"]}]
    pairs.write_text("".join(json.dumps(x) + "\n" for x in items), encoding="utf-8")
    assert run_file(pairs, tmp_path / "ranked.jsonl", ce, task="rerank", sort=False, progress=False).errors == 0
    for row, item in zip(read_jsonl(tmp_path / "ranked.jsonl"), items):
        assert row["result"] == pytest.approx(bertfn.rerank(item["query"], item["passages"], ce, sort=False), abs=1e-6)

    src.write_text("a cat sat\n\n   \n", encoding="utf-8")  # zero-shot refuses "" (the pipeline does), and goes on
    assert main(["zero-shot", "--input", str(src), "--output", str(tmp_path / "zs.jsonl"), "--labels", "art", "sports",
                 "--model", str(nli), "--no-progress"]) == 2
    rows = read_jsonl(tmp_path / "zs.jsonl")
    assert "result" in rows[0] and "result" in rows[2] and rows[1]["error"].startswith("line 2 is empty ('')")
    capsys.readouterr()
