"""bertfn.tag on texts given as their words (``is_split_into_words=True``, a dataset's ``tokens``), held to
transformers' ``pipeline("token-classification")`` (4.57) with the same option: the tokenizer cuts each word alone and ``start`` and
``end`` index the words joined with ``delimiter``. The same random checkpoints as tests/test_tag.py (its ``tagger``
fixture, every member, in the slow run); the quick run holds the options, the command line and a file of words.
"""

from __future__ import annotations

import json

import pytest

from bertfn.cli import main
from bertfn.corpus.files import run_file
from bertfn.errors import InputError, UnknownTokensWarning
from bertfn.tasks.tag import STRATEGIES, tag
from family_checkpoints import ESM_KINDS, PROTEINS
from test_tag import assert_close, bert_tagger, check_same, run_pipe, tagger  # noqa: F401, F811 (fixtures)

needs_transformers = pytest.mark.needs_transformers

WORDS = [
    ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
    ["Café", "crème", "à", "Paris", "—", "東京", "🙂", "unbelievably", "Rome."],
    ["Ada", "Lovelace", ",", "naïve", "façade", "in", "Zürich"],
]
"""Texts as a dataset gives them, word by word: punctuation as words, accents, CJK, an emoji, a word of many pieces."""


def with_prefix_space(folder, tmp_path):
    """A copy of a folder of byte-level BPE whose tokenizer.json adds the space before each word (``add_prefix_space``,
    as RoBERTa NER checkpoints save it), which words given split need."""
    import shutil

    copy = tmp_path / "prefix-space"
    shutil.copytree(folder, copy)
    spec = json.loads((copy / "tokenizer.json").read_text(encoding="utf-8"))
    spec["pre_tokenizer"]["add_prefix_space"] = True
    if "add_prefix_space" in spec["post_processor"]:  # RoBERTa's RobertaProcessing trims the space off the spans
        spec["post_processor"]["add_prefix_space"] = True
    (copy / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    return copy


@needs_transformers
@pytest.mark.slow  # 1-5 s a member on 2 loaded cores: the pipeline's six runs, each member's tokenizer
def test_words_given_split_equal_transformers(tagger, tmp_path):
    import transformers

    import bertfn
    from bertfn.model.family import longest_input

    kind, folder, model, pipe = tagger
    if kind in ESM_KINDS:  # transformers' ESM tokenizer is slow, and refuses words; each residue is a word
        residues = [list(p) for p in PROTEINS[:3]]
        with pytest.raises(ValueError, match="only supported with fast tokenizers"):
            run_pipe(pipe, residues, is_split_into_words=True)
        for strategy in STRATEGIES:
            assert_close(tag(residues, model, is_split_into_words=True, delimiter="", aggregation_strategy=strategy),
                         tag(list(PROTEINS[:3]), model, aggregation_strategy=strategy))
        return
    state = model.tokenizer.backend.pre_tokenizer.__getstate__()
    if b'"type":"ByteLevel","add_prefix_space":false' in state:  # RoBERTa's and ModernBERT's, as saved
        with pytest.raises(InputError, match="add_prefix_space"):
            tag(WORDS, model, is_split_into_words=True)
        if kind != "modernbert":  # its generic fast tokenizer reads the words without their spaces; RoBERTa's refuses
            with pytest.raises(AssertionError, match="add_prefix_space=True"):
                run_pipe(pipe, WORDS, is_split_into_words=True)
        folder = with_prefix_space(folder, tmp_path)
        model = bertfn.load(folder, device=model.device)
        tok = transformers.AutoTokenizer.from_pretrained(folder, model_max_length=longest_input(model.config),
                                                         add_prefix_space=True)
        pipe = transformers.pipeline("token-classification", model=pipe.model, tokenizer=tok)
    for strategy, delimiter in [(s, " ") for s in STRATEGIES] + [("first", " | ")]:
        got = tag(WORDS, model, is_split_into_words=True, delimiter=delimiter, aggregation_strategy=strategy,
                  ignore_labels=())
        want = run_pipe(pipe, WORDS, is_split_into_words=True, delimiter=delimiter, aggregation_strategy=strategy,
                        ignore_labels=[])
        for g, w in zip(got, want):
            check_same(g, w, kind)
        joined = delimiter.join(WORDS[1])
        assert all(0 <= e["start"] <= e["end"] <= len(joined) for e in got[1])
    long = [w for words in WORDS * 6 for w in words]  # longer than the model's positions: read in windows
    got = tag([long], model, is_split_into_words=True, aggregation_strategy="first", stride=9)
    want = run_pipe(pipe, [long], is_split_into_words=True, aggregation_strategy="first", stride=9)
    check_same(got[0], want[0], kind)


@needs_transformers
@pytest.mark.parametrize("call, message", [
    (lambda m: tag("EU rejects", m, is_split_into_words=True), "takes a non-empty list of texts, each the list of"),
    (lambda m: tag(["EU", "rejects"], m, is_split_into_words=True), r"for one text pass \[words\]"),
    (lambda m: tag([["EU"], "rejects"], m, is_split_into_words=True), "text 1 is str 'rejects'"),
    (lambda m: tag([["EU", 3]], m, is_split_into_words=True), "text 0 is list"),
    (lambda m: tag([["EU"]], m, is_split_into_words=True, delimiter=None), "delimiter must be a string"),
    (lambda m: tag([["EU"]], m, is_split_into_words="yes"), "is_split_into_words must be True or False"),
])
def test_words_not_given_as_lists_are_refused(bert_tagger, call, message):
    _, model = bert_tagger
    with pytest.raises(InputError, match=message):
        call(model)


@needs_transformers
def test_words_on_the_command_line_and_in_a_file(bert_tagger, tmp_path, capsys):
    folder, model = bert_tagger
    want = tag([WORDS[0], WORDS[2]], model, is_split_into_words=True, delimiter="|", aggregation_strategy="first")
    on = ["--model", str(folder), "--device", str(model.device)]
    assert main(["tag", "|".join(WORDS[2]), *on, "--split-into-words", "--delimiter", "|", "--aggregation", "first",
                 "--json"]) == 0
    assert_close(json.loads(capsys.readouterr().out), want[1])
    assert main(["tag", "EU rejects", *on, "--split-into-words", "--delimiter", ""]) == 2
    assert "--delimiter cuts each text" in capsys.readouterr().err

    src, out = tmp_path / "conll.jsonl", tmp_path / "out.jsonl"
    lines = [{"id": "a", "tokens": WORDS[0]}, {"id": "b", "tokens": "EU rejects"}, {"id": "c", "tokens": WORDS[2]}]
    src.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    summary = run_file(src, out, model, task="tag", field="tokens", progress=False, is_split_into_words=True,
                       delimiter="|", aggregation_strategy="first")
    assert summary.errors == 1
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == ["a", "b", "c"] and rows[0]["tokens"] == WORDS[0]
    assert_close([rows[0]["result"], rows[2]["result"]], want)
    assert "the field must hold the JSON list of the words" in rows[1]["error"]


@needs_transformers
def test_a_file_field_of_lists_is_an_error_line_for_a_task_of_strings(bert_tagger, tmp_path):
    """A JSON field holding a list (a dataset's tokens) given to a task that reads strings: each such line an error,
    the rest run (the run counted each line's tokens by passing the list to the tokenizer as a text, a TypeError)."""
    _, model = bert_tagger
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [{"tokens": ["EU", "rejects", "German"]}, {"tokens": "EU rejects"}]
    src.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    summary = run_file(src, out, model, task="tag", field="tokens", progress=False)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert summary.errors == 1 and "must be a string" in rows[0]["error"]
    assert_close([rows[1]["result"]], [tag("EU rejects", model)])


@needs_transformers
def test_unknown_words_are_named_by_their_own_characters(bert_tagger):
    _, model = bert_tagger
    with pytest.warns(UnknownTokensWarning, match=r"2 of its 3 tokens are \[UNK\] \(e\.g\. '🙂', '🙂'\)"):
        got = tag([["a", "🙂", "🙂"]], model, is_split_into_words=True, ignore_labels=())
    assert [(e["word"], e["start"], e["end"]) for e in got[0]] == [("a", 0, 1), ("🙂", 2, 3), ("🙂", 4, 5)]
