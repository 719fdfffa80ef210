"""bertfn.answer against transformers' ``pipeline("question-answering")``.

Every member that has a reader (tests/family_checkpoints.py: random weights, its own tokenizer kind) gives the
pipeline's answers, start and end characters exactly and its scores within 1e-4: one question, several at once,
a context of thousands of tokens read in many windows, top_k, the no-answer score, spans not widened to words, and
Unicode contexts whose character offsets matter (accents, CJK, emoji). The windows themselves equal the fast
tokenizer's (ids, offsets, types, sequences). Random weights pick arbitrary spans, which is all parity needs. Then
the input forms, bf16, edits, the errors, the CLI and a corpus file.
"""

from __future__ import annotations

import json

import numpy
import pytest
import torch
from conftest import fp32_atol, on_device
from family_checkpoints import CORPUS, HEAD_TASKS, kind_params, member_tokenizer, save_head, say_max_length

import bertfn
from bertfn.cli import main
from bertfn.tasks.answer_windows import context_windows

needs_transformers = pytest.mark.needs_transformers
KINDS = tuple(k for k, tasks in HEAD_TASKS.items() if "question-answering" in tasks)
WINDOW = dict(max_seq_len=64, doc_stride=16)  # the test checkpoints read 64 tokens (the pipeline's default is 384)
QUESTION, CONTEXT = "Where did the cat sit?", "The cat sat on the mat, and the dog sat on the cat."
UNICODE = ("Où est le café ? 東京", "Le café crème est à Zürich, près du musée 🎨 et de la tour de 東京 — une façade "
           "naïve 🙂, où l'on boit un thé glacé.")  # accents, CJK, emoji (one character, two UTF-16 units)
PAIRS = [(QUESTION, CONTEXT), UNICODE, ("Who lived in a big castle?", " ".join(CORPUS[:12]))]  # 1 to 3 windows
LONG = " ".join(CORPUS) * 4  # 3000 to 4000 tokens: 70 to 100 windows of 64 tokens


@pytest.fixture(scope="module", params=kind_params(KINDS))
def member(request, tmp_path_factory, device):
    """(kind, bertfn model on the test device, transformers' pipeline) of a random reader."""
    import transformers

    folder = tmp_path_factory.mktemp(request.param)
    hf = save_head(request.param, "question-answering", folder)
    pipe = transformers.pipeline("question-answering", model=on_device(hf), tokenizer=member_tokenizer(request.param),
                                 device=torch.device(device))
    return request.param, bertfn.load(folder, device=device), pipe


def same(ours, theirs, tol: float = 1e-4) -> None:
    """Equal results: the same nesting, answers and characters, scores within ``tol``."""
    assert type(ours) is type(theirs), (ours, theirs)
    if isinstance(theirs, list):
        assert len(ours) == len(theirs), (ours, theirs)
        for a, b in zip(ours, theirs):
            same(a, b, tol)
    else:
        assert {k: ours[k] for k in ("answer", "start", "end")} == {k: theirs[k] for k in ("answer", "start", "end")}, \
            (ours, theirs)
        assert set(ours) == {"score", "start", "end", "answer"} and isinstance(ours["score"], float)
        assert ours["score"] == pytest.approx(theirs["score"], abs=tol)


@needs_transformers
def test_answer_equals_the_pipeline_on_every_member(member):
    _, model, pipe = member
    tol = fp32_atol(1e-4)
    questions, contexts = [q for q, _ in PAIRS], [c for _, c in PAIRS]
    q, c = UNICODE  # one question: its answer alone
    same(bertfn.answer(q, c, model, **WINDOW), pipe(question=q, context=c, **WINDOW), tol)
    same(bertfn.answer(questions, contexts, model, **WINDOW), pipe(question=questions, context=contexts, **WINDOW), tol)
    same(bertfn.answer(questions, CONTEXT, model, top_k=3, **WINDOW),  # several questions over one context
         pipe(question=questions, context=CONTEXT, top_k=3, **WINDOW), tol)
    # bertfn's item forms against the pipeline's keywords (its own positional item form is deprecated: transformers
    # 4.57 says so in a FutureWarning; it reads the same questions and contexts)
    items = [{"question": q, "context": c} for q, c in PAIRS]
    same(bertfn.answer(items, model, max_seq_len=48, doc_stride=8, handle_impossible_answer=True, top_k=2),
         pipe(question=questions, context=contexts, max_seq_len=48, doc_stride=8, handle_impossible_answer=True,
              top_k=2), tol)
    q, c = UNICODE
    same(bertfn.answer({"question": q, "context": c}, model, align_to_words=False, max_answer_len=3, top_k=5, **WINDOW),
         pipe(question=q, context=c, align_to_words=False, max_answer_len=3, top_k=5, **WINDOW), tol)


def long_context_equals_the_pipeline(model: bertfn.Model, pipe, context: str) -> None:
    """A context of thousands of tokens: dozens of windows, the same answer found in several (its scores summed)."""
    windows, _ = context_windows(model.tokenizer, [(QUESTION, context)], ["text 0"], 64, 16)
    assert len(windows[0]) > 30
    same(bertfn.answer(QUESTION, context, model, top_k=3, **WINDOW), pipe(question=QUESTION, context=context, top_k=3,
                                                                           **WINDOW), fp32_atol(1e-4))


@needs_transformers
@pytest.mark.slow
def test_a_context_of_thousands_of_tokens_is_read_in_many_windows(member):
    _, model, pipe = member
    long_context_equals_the_pipeline(model, pipe, LONG)


@needs_transformers
def test_the_windows_are_the_fast_tokenizers(member):
    """As the pipeline calls the tokenizer: truncation="only_second", stride, overflowing windows, offsets."""
    kind, model, _ = member
    tok = member_tokenizer(kind)
    pairs = [*PAIRS, (QUESTION, LONG[:1500])]
    for max_seq_len, stride in ((64, 16), (40, 10), (30, 0)):
        ours, _ = context_windows(model.tokenizer, pairs, [f"text {i}" for i in range(len(pairs))], max_seq_len, stride)
        for (q, c), windows in zip(pairs, ours):
            theirs = tok(q, c, truncation="only_second", max_length=max_seq_len, stride=stride,
                         return_overflowing_tokens=True, return_offsets_mapping=True, return_token_type_ids=True)
            assert [w.ids for w in windows] == theirs["input_ids"]
            assert [w.offsets for w in windows] == [[tuple(o) for o in span] for span in theirs["offset_mapping"]]
            assert [w.type_ids for w in windows] == theirs["token_type_ids"]
            assert [w.sequence_ids for w in windows] == [theirs.sequence_ids(i) for i in range(len(windows))]


@needs_transformers
def test_xlm_r_with_two_token_types_reads_every_window_as_type_0(tmp_path):
    """XLM-R's template types every token 0, but the windows after a pair's first hold type 1 for the context (as
    ``tokenizers`` cuts them); the pipeline gives XLM-R no token types, so a reader whose table has two rows
    (XLMRobertaConfig's default) reads type 0 in every window."""
    import transformers

    hf = save_head("xlm-roberta", "question-answering", tmp_path, type_vocab_size=2)
    pipe = transformers.pipeline("question-answering", model=hf, tokenizer=member_tokenizer("xlm-roberta"), device="cpu")
    model = bertfn.load(tmp_path)
    question, context = PAIRS[2]
    windows, _ = context_windows(model.tokenizer, [(question, context)], ["text 0"], 40, 10)
    assert len(windows[0]) > 2 and 1 in windows[0][1].type_ids  # what tokenizers leaves in the later windows
    same(bertfn.answer(question, context, model, top_k=5, max_seq_len=40, doc_stride=10),
         pipe(question=question, context=context, top_k=5, max_seq_len=40, doc_stride=10))


@needs_transformers
def test_the_default_window_holds_the_tokenizers_model_max_length(tmp_path):
    """The default max_seq_len is the pipeline's min(384, model_max_length): 40 where tokenizer_config.json says 40
    of the model's 64 positions (it was 64), and doc_stride half of it; an explicit max_seq_len up to 64 still runs."""
    import transformers

    save_head("bert", "question-answering", tmp_path, initializer_range=0.2)
    say_max_length(tmp_path, 40)
    model, pipe = bertfn.load(tmp_path), transformers.pipeline("question-answering", model=str(tmp_path))
    context = " ".join(CORPUS[:5])  # 59 tokens: windows of 40 differ from one window of 64
    for top_k in (1, 3):
        same(bertfn.answer(QUESTION, context, model, top_k=top_k), pipe(question=QUESTION, context=context, top_k=top_k))
    same(bertfn.answer(QUESTION, context, model, max_seq_len=64),
         pipe(question=QUESTION, context=context, max_seq_len=64))


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """(folder, bertfn model) of a random BERT reader."""
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("bert-reader")
    save_head("bert", "question-answering", folder)
    return folder, bertfn.load(folder)


@needs_transformers
def test_a_context_of_thousands_of_tokens_on_bert(bert):
    """The quick run's long context: half of :data:`LONG`, 1500 tokens (every member's, all of it: the slow run)."""
    import transformers

    folder, model = bert
    pipe = transformers.pipeline("question-answering", model=str(folder), tokenizer=str(folder))
    long_context_equals_the_pipeline(model, pipe, LONG[:len(LONG) // 2])


@needs_transformers
def test_the_input_forms_give_one_result_per_question(bert):
    folder, model = bert
    one = bertfn.answer(QUESTION, CONTEXT, model)  # max_seq_len: the 64 tokens the model reads
    assert set(one) == {"score", "start", "end", "answer"} and one["answer"] == CONTEXT[one["start"]:one["end"]]
    same(bertfn.answer({"question": QUESTION, "context": CONTEXT}, model), one, 1e-6)
    same(bertfn.answer([{"question": QUESTION, "context": CONTEXT}], model), [one], 1e-6)  # a list stays a list
    same(bertfn.answer([QUESTION], [CONTEXT], model), [one], 1e-6)
    same(bertfn.answer([{"question": QUESTION, "context": CONTEXT}], str(folder)), [one], 1e-6)  # the model second
    many = bertfn.answer({"question": [QUESTION, UNICODE[0]], "context": CONTEXT}, model)  # a dict of lists
    same(many, bertfn.answer([QUESTION, UNICODE[0]], CONTEXT, model), 1e-6)
    nested = bertfn.answer([{"question": [QUESTION, UNICODE[0]], "context": CONTEXT}, {"question": QUESTION,
                                                                                         "context": CONTEXT}], model)
    same(nested, [many, one], 1e-6)  # a corpus line of several questions: a list of their answers
    same(bertfn.answer(QUESTION, [CONTEXT, UNICODE[1]], model), [one, bertfn.answer(QUESTION, UNICODE[1], model)], 1e-6)
    # a dataframe's columns and arrays, as lists: they were refused ("got Series"), where every call takes them
    pd = pytest.importorskip("pandas")  # in the test extra, not in a plain install
    same(bertfn.answer(pd.Series([QUESTION]), numpy.array([CONTEXT]), model), [one], 1e-6)


@needs_transformers
def test_bf16_gives_the_same_answers(tmp_path):
    """On a reader of weights of std 0.1: the default init's (0.02) give spans within 1e-6 of each other, which any
    rounding reorders."""
    save_head("bert", "question-answering", tmp_path, initializer_range=0.1)
    model = bertfn.load(tmp_path)
    questions, contexts = [q for q, _ in PAIRS], [c for _, c in PAIRS]
    fp32 = bertfn.answer(questions, contexts, model)
    same(bertfn.answer(questions, contexts, model, dtype="bfloat16"), fp32, 1e-2)


@needs_transformers
def test_edits_run_the_reference_functions_and_change_the_answer(bert):
    _, model = bert
    fast = bertfn.answer(QUESTION, LONG[:600], model, top_k=3, batch_size=4)
    same(bertfn.answer(QUESTION, LONG[:600], model, top_k=3, batch_size=4, edits={"layer.1.output": lambda x, p: x}),
         fast, 1e-5)
    enc = model.tokenizer(QUESTION, CONTEXT)
    mat = enc.tokens[0].index("mat")

    def push(x: torch.Tensor, point) -> torch.Tensor:  # (B, S): "mat" starts and ends every answer
        x = x.clone()
        x[:, mat] += 100.0
        return x

    pushed = bertfn.answer(QUESTION, CONTEXT, model, edits={"qa.start_logits": push, "qa.end_logits": push})
    assert pushed["answer"] == "mat" and pushed["score"] > 0.99 and CONTEXT[pushed["start"]:pushed["end"]] == "mat"


@needs_transformers
def test_bad_inputs_and_options_say_what_to_do(bert):
    _, model = bert
    long_question = " ".join(["cat"] * 70) + "?"
    cases = [
        (lambda: bertfn.answer("", CONTEXT, model), r"^text 0's question is empty \(''\), which transformers' "
                                                    r"question-answering pipeline refuses too; write the question to answer"),
        (lambda: bertfn.answer(QUESTION, model=model), r"answer\(question, context, model\).*; got no context"),
        (lambda: bertfn.answer(QUESTION, "", model), r"^text 0's context is empty \(''\).*; write the context that holds"),
        (lambda: bertfn.answer([{"question": "a", "context": "b"}, {"question": "a"}], model), r"^text 1 has no context"),
        (lambda: bertfn.answer([QUESTION, "x", ""], CONTEXT, model), r"^text 2's question is empty"),
        (lambda: bertfn.answer([QUESTION, "x"], [CONTEXT], model), r"^text 0: 2 questions but 1 contexts"),
        (lambda: bertfn.answer({"question": "a", "context": "b"}, "c", model), "the dicts hold the contexts"),
        (lambda: bertfn.answer([QUESTION], model), r'or dicts \{"question": \.\.\., "context": \.\.\.\} \(a list of '
                                                   r"them: a file's or a stream's items\); got the model where the "
                                                   r"context goes"),  # a stream of plain texts calls it so
        (lambda: bertfn.answer(QUESTION, CONTEXT, model, max_answer_len=0), "max_answer_len must be a positive integer"),
        (lambda: bertfn.answer(QUESTION, CONTEXT, model, top_k=0), "top_k must be a positive integer"),
        (lambda: bertfn.answer(QUESTION, CONTEXT, model, max_seq_len=100), r"model .* reads at most 64 tokens at a time"),
        (lambda: bertfn.answer(QUESTION, CONTEXT, model, max_seq_len=20, doc_stride=30), "doc_stride=30 is more than"),
        (lambda: bertfn.answer(long_question, CONTEXT, model), r"^text 0's question is 71 tokens, which with the 3 "
                                                                r"special tokens leaves no room for the context in "
                                                                r"max_seq_len=64; shorten the question"),
        (lambda: bertfn.answer(QUESTION, LONG[:600], model, max_seq_len=20, doc_stride=10),
         r"^text 0's context is read in windows of 9 context tokens \(max_seq_len=20 less the question's 8 and 3 "
         r"special tokens\), which must be more than doc_stride=10"),
    ]
    for call, message in cases:
        with pytest.raises(bertfn.InputError, match=message):
            call()
    bertfn.answer(QUESTION, "The cat sat.", model, max_seq_len=20, doc_stride=10)  # one window: the stride is not read


def test_a_model_without_a_reader_gets_require_heads_error(tiny_folder):
    with pytest.raises(bertfn.MissingPartError, match=r"^answer needs a question-answering head, and model .* is a "
                                                      r".*: use bertfn\.fill_mask"):
        bertfn.answer(QUESTION, CONTEXT, bertfn.load(tiny_folder))


# --- the command line and corpus files ---------------------------------------------------------------


@needs_transformers
def test_cli_table_json_and_a_context_file(bert, tmp_path, capsys):
    folder, model = bert
    base = ["--model", str(folder)]
    assert main(["answer", QUESTION, UNICODE[0], "--context", CONTEXT, *base, "--top-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    best = bertfn.answer([QUESTION, UNICODE[0]], CONTEXT, model, top_k=2)
    assert lines[0] == QUESTION and lines[1].split() == ["rank", "score", "start", "end", "answer"]
    assert lines[2].split()[:4] == ["1", f"{best[0][0]['score']:.4f}", str(best[0][0]["start"]), str(best[0][0]["end"])]
    assert lines[2].endswith(best[0][0]["answer"]) and lines[5] == UNICODE[0] and len(lines) == 9

    context = tmp_path / "context.txt"
    context.write_text(UNICODE[1], encoding="utf-8")
    assert main(["answer", UNICODE[0], "--context-file", str(context), *base, "--json"]) == 0
    same(json.loads(capsys.readouterr().out), bertfn.answer(*UNICODE, model), 1e-6)
    assert main(["answer", QUESTION, *base]) == 2
    assert "pass the context the answers are taken from: --context TEXT" in capsys.readouterr().err
    assert main(["answer", QUESTION, "--context", CONTEXT, *base, "--max-seq-len", "20", "--doc-stride", "30"]) == 2
    assert "--doc-stride 30 is more than --max-seq-len 20" in capsys.readouterr().err


@needs_transformers
def test_a_file_of_questions_and_contexts_runs_and_resumes(bert, tmp_path, capsys):
    folder, model = bert
    rows = [{"id": i, "question": q, "context": c} for i, (q, c) in enumerate(PAIRS)]
    rows.insert(2, {"id": 9, "question": "", "context": CONTEXT})  # an error line, as the pipeline refuses it
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    argv = ["answer", "--input", str(src), "--output", str(out), "--model", str(folder), "--top-k", "2", "--no-progress"]
    assert main(argv) == 2  # the empty question's error
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["id"] for line in lines] == [0, 1, 9, 2] and lines[2]["error"].startswith("line 3 (id 9)'s question is empty")
    expected = bertfn.answer([{"question": q, "context": c} for q, c in PAIRS], model, top_k=2)
    for line, want in zip([lines[0], lines[1], lines[3]], expected):
        same(line["result"], want, 1e-6)

    complete = out.read_bytes()
    out.write_bytes(b"".join(complete.splitlines(keepends=True)[:2]) + b'{"line": 3, "qu')  # killed mid-line
    assert main([*argv, "--resume"]) == 2  # the blank question's error again
    assert out.read_bytes() == complete and "(resumed after line 2)" in capsys.readouterr().err

    from bertfn.corpus import stream
    got = list(stream([{"question": q, "context": c} for q, c in PAIRS], model, task="answer", top_k=2))
    same(got, expected, 1e-6)
