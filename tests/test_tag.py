"""bertfn.tag, the token-classification pipeline, held to transformers' ``pipeline("token-classification")`` (4.57).

Every member with a token-classification head gets a random checkpoint of five labels (O, B-/I-PER, B-/I-LOC: random
weights tag tokens arbitrarily, so every strategy has entities to group) and its own tokenizer (WordPiece "##",
byte-level BPE "Ġ", SentencePiece "▁", ESM-2's residues). For every aggregation strategy the entities, their words
and character spans equal the pipeline's exactly and their scores within 1e-4, on a batch of texts of different
lengths whose offsets matter (accents, CJK, emoji, runs of spaces, a tab), and on a text longer than the model reads,
cut to its first window or read in overlapping windows (``stride``). ESM-2's tokenizer is slow in transformers (no
offsets): there the pipeline's start/end are None and bertfn's are the residues' positions.
"""

from __future__ import annotations

import itertools
import json
import warnings

import pytest
import torch

import bertfn
from bertfn.cli import main
from bertfn.corpus.files import run_file
from bertfn.errors import InputError, MissingPartError
from bertfn.tasks.entities import group_entities, merge_windows, split_tag
from bertfn.model.family import longest_input
from bertfn.tasks.tag import STRATEGIES, tag, text_windows, window_spans
from conftest import fp32_atol, on_device
from family_checkpoints import CORPUS, ESM_KINDS, HEAD_TASKS, PROTEINS, kind_params, save_head, say_max_length

needs_transformers = pytest.mark.needs_transformers

KINDS = tuple(kind for kind, tasks in HEAD_TASKS.items() if "token-classification" in tasks)
LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
TEXTS = [
    CORPUS[0],
    "Café  crème à Paris — 東京 and 🙂 emoji!",
    "naïve façade in Zürich,   Ωmega ﬁne",
    CORPUS[2],
    "unbelievably internationalization",
    "  Two spaces first,\ta tab, then Rome.",
]
"""Texts of different lengths whose character offsets matter: accents (é, è, à, ï, ç, ü), CJK, an emoji, a dash,
a ligature, runs of spaces, a tab."""
LONG = " ".join(CORPUS[:12]) + " Café  crème à Paris — 東京 and 🙂 emoji!"
"""About 200-280 tokens: longer than the test checkpoints' 64 positions (66 for RoBERTa's kind, 128 for ModernBERT)."""
LONG_PROTEIN = "".join(PROTEINS)


def texts_of(kind: str) -> list[str]:
    return list(PROTEINS[:4]) if kind in ESM_KINDS else TEXTS


@pytest.fixture(scope="module", params=kind_params(KINDS))
def tagger(request, tmp_path_factory, device):
    """``(kind, folder, bertfn model, transformers pipeline)`` of a random token classifier of ``kind``, on the test
    device."""
    import transformers

    kind = request.param
    folder = tmp_path_factory.mktemp(f"{kind}-tagger")
    # ESM's random head gives nearly every residue one label; seed 4 mixes B- and I- labels, so that groups form
    hf = save_head(kind, "token-classification", folder, seed=4 if kind in ESM_KINDS else 0, num_labels=5,
                   id2label=LABELS)
    model = bertfn.load(folder, device=device)
    tok = transformers.AutoTokenizer.from_pretrained(folder, model_max_length=longest_input(model.config))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = transformers.pipeline("token-classification", model=on_device(hf), tokenizer=tok)
    return kind, folder, model, pipe


@pytest.fixture(scope="module")
def bert_tagger(tmp_path_factory, device):
    folder = tmp_path_factory.mktemp("bert-tagger")
    save_head("bert", "token-classification", folder, num_labels=5, id2label=LABELS)
    return folder, bertfn.load(folder, device=device)


def run_pipe(pipe, texts, **options) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Asking to truncate to max_length but no maximum length ..."
        return pipe(texts, **options)


def check_same(got: list, want: list, kind: str) -> None:
    """Entities of one text: the same keys in the same order, labels, words and spans exactly, scores within 1e-4;
    ESM-2's spans (None in transformers) are each residue's."""
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        assert list(g) == list(w)
        for key in w:
            if key == "score":
                assert g[key] == pytest.approx(float(w[key]), abs=fp32_atol(1e-4))
            elif w[key] is None and kind in ESM_KINDS:
                assert isinstance(g[key], int)
            else:
                assert g[key] == w[key], (key, g, w)
    if kind in ESM_KINDS and got and "index" in got[0]:
        assert all((e["start"], e["end"]) == (e["index"] - 1, e["index"]) for e in got)


def assert_close(got: list, want: list, tol: float = 1e-6) -> None:
    """Results of bertfn.tag (a text's entities, or a list of those) equal but for scores within ``tol``."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert_close(g, w, tol)
        else:
            assert g.keys() == w.keys() and {k: v for k, v in g.items() if k != "score"} == \
                {k: v for k, v in w.items() if k != "score"} and abs(g["score"] - w["score"]) <= tol, (g, w)


@needs_transformers
def test_every_strategy_equals_transformers(tagger):
    kind, _, model, pipe = tagger
    texts = texts_of(kind)
    for strategy in STRATEGIES:
        for ignore in ((), ("O",)):
            got = tag(texts, model, aggregation_strategy=strategy, ignore_labels=ignore)
            if kind in ESM_KINDS and strategy in ("first", "average", "max"):
                # transformers refuses them for a slow tokenizer; each residue is a word: the "simple" entities
                want = tag(texts, model, aggregation_strategy="simple", ignore_labels=ignore)
            else:
                want = run_pipe(pipe, texts, aggregation_strategy=strategy, ignore_labels=list(ignore))
            for g, w in zip(got, want):
                check_same(g, w, kind)
    tokens, groups = (tag(texts, model, aggregation_strategy=s, ignore_labels=()) for s in ("none", "simple"))
    assert any(len(g) < len(t) for g, t in zip(groups, tokens))  # some neighbours were joined
    assert_close(tag(texts[1], model, aggregation_strategy="first"), tag(texts, model, aggregation_strategy="first")[1],
                 fp32_atol(1e-6))  # one text alone: its entities, not a list of lists


@needs_transformers
def test_a_long_text_in_windows_equals_transformers(tagger):
    kind, _, model, pipe = tagger
    if kind in ESM_KINDS:
        pytest.skip("transformers reads ESM with a slow tokenizer, which has no stride: test_long_protein")
    limit = longest_input(model.config)
    assert len(model.tokenizer.backend.encode(LONG).ids) > 2 * limit
    with pytest.warns(UserWarning, match=f"tagged on their first {limit} only"):
        got = tag([LONG, CORPUS[3]], model, ignore_labels=())
    want = run_pipe(pipe, [LONG, CORPUS[3]], ignore_labels=[])
    for g, w in zip(got, want):
        check_same(g, w, kind)
    for stride, strategy, ignore in ((0, "simple", ()), (17, "simple", ("O",)), (17, "first", ("O",)),
                                     (17, "average", ("O",)), (17, "max", ("O",))):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # read whole: no warning
            got = tag([LONG, CORPUS[3]], model, aggregation_strategy=strategy, stride=stride, ignore_labels=ignore)
        want = run_pipe(pipe, [LONG, CORPUS[3]], aggregation_strategy=strategy, stride=stride,
                        ignore_labels=list(ignore))
        for g, w in zip(got, want):
            check_same(g, w, kind)
        if not ignore:
            assert got[0][-1]["end"] == len(LONG)  # the windows reach the end of the text


@needs_transformers
def test_windows_hold_the_tokenizers_model_max_length(tmp_path):
    """A tokenizer_config.json whose model_max_length (40) is less than the model's positions (64), as ESM-2's 1024 of
    its 1026: the pipeline's tokenizer cuts the text, or its windows, to 40 tokens, and so does tag (it read 64)."""
    import transformers

    save_head("bert", "token-classification", tmp_path, num_labels=5, id2label=LABELS, initializer_range=0.2)
    say_max_length(tmp_path, 40)
    model = bertfn.load(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = transformers.pipeline("token-classification", model=str(tmp_path))
    text = " ".join(CORPUS[:5])  # 59 tokens
    with pytest.warns(UserWarning, match="tagged on their first 40 only"):
        got = tag(text, model, ignore_labels=())
    check_same(got, run_pipe(pipe, text, ignore_labels=[]), "bert")
    check_same(tag(text, model, aggregation_strategy="simple", stride=8),
               run_pipe(pipe, text, aggregation_strategy="simple", stride=8), "bert")


@needs_transformers
def test_windows_are_the_tokenizers_overflowing_tokens(tagger):
    """The windows equal what the tokenizers library cuts with truncation and a stride (the pipeline's
    ``return_overflowing_tokens``), on a copy of the model's tokenizer."""
    from tokenizers import Tokenizer

    kind, _, model, _ = tagger
    text = LONG_PROTEIN if kind in ESM_KINDS else LONG
    limit = longest_input(model.config)
    cutter = Tokenizer.from_str(model.tokenizer.backend.to_str())
    cutter.no_padding()
    for stride in (0, 5, limit - 3):
        cutter.enable_truncation(limit, stride=stride)
        first = cutter.encode(text)
        want = [first, *first.overflowing]
        got = text_windows(model.tokenizer.backend.encode(text), limit, stride)
        assert len(got) == len(want) > 2
        for g, w in zip(got, want):
            assert (g.ids, g.offsets, g.special) == (w.ids, w.offsets, w.special_tokens_mask)


@needs_transformers
@pytest.mark.parametrize("kind", kind_params(ESM_KINDS, quick=ESM_KINDS))
def test_long_protein(tmp_path, kind):
    """ESM-2 and ESM-1b: a protein longer than the model reads is cut to its first window with a warning, or read
    whole in windows, each residue a word whose span is its position."""
    save_head(kind, "token-classification", tmp_path, num_labels=5, id2label=LABELS)
    model = bertfn.load(tmp_path)
    limit = longest_input(model.config)
    with pytest.warns(UserWarning, match="stride="):
        cut = tag(LONG_PROTEIN, model, aggregation_strategy="simple", ignore_labels=())
    assert cut[-1]["end"] == limit - 2
    whole = tag(LONG_PROTEIN, model, aggregation_strategy="first", ignore_labels=(), stride=10)
    assert whole[-1]["end"] == len(LONG_PROTEIN)
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(whole))  # one entity per place


@needs_transformers
def test_mostly_unknown_text_is_flagged(bert_tagger):
    _, model = bert_tagger
    with pytest.warns(bertfn.UnknownTokensWarning, match="text 1"):
        got = tag([CORPUS[0], "東京 🙂 ☃"], model, ignore_labels=())
    assert got[1] and all("[UNK]" in e["warning"] for e in got[1]) and not any("warning" in e for e in got[0])
    assert [e["word"] for e in got[1]] == ["東", "京", "🙂", "☃"]  # the unknown token's word is its text


@needs_transformers
def test_bf16_gives_the_same_labels(bert_tagger):
    _, model = bert_tagger
    want = tag(TEXTS, model, aggregation_strategy="simple", ignore_labels=())
    got = tag(TEXTS, model, aggregation_strategy="simple", ignore_labels=(), dtype="bfloat16")
    for g, w in zip(got, want):
        assert [(e["entity_group"], e["start"], e["end"]) for e in g] == \
            [(e["entity_group"], e["start"], e["end"]) for e in w]
        assert [e["score"] for e in g] == pytest.approx([e["score"] for e in w], abs=1e-2)


@needs_transformers
def test_edits_reach_the_head(bert_tagger):
    _, model = bert_tagger

    def loc(t, point):  # every token's logits: B-LOC far ahead
        return t + 100 * torch.nn.functional.one_hot(torch.tensor(3), 5).to(t)

    got = tag(CORPUS[0], model, aggregation_strategy="simple", edits={"classifier.logits": loc})
    assert [e["entity_group"] for e in got] == ["LOC"] * len(got) and all(e["score"] > 0.999 for e in got)
    assert len(got) == len(tag(CORPUS[0], model, ignore_labels=()))  # B- each time: no two tokens joined
    unedited = tag(CORPUS[0], model, aggregation_strategy="simple", edits={"classifier.logits": lambda t, p: t})
    assert_close(unedited, tag(CORPUS[0], model, aggregation_strategy="simple"), 1e-5)


def test_window_spans_cut_as_the_tokenizers_library():
    assert window_spans(5, 8, None) == [(0, 5)] == window_spans(5, 8, 2)
    assert window_spans(20, 8, None) == [(0, 8)]
    assert window_spans(20, 8, 0) == [(0, 8), (8, 16), (16, 20)]
    assert window_spans(20, 8, 3) == [(0, 8), (5, 13), (10, 18), (15, 20)]
    assert window_spans(16, 8, 0) == [(0, 8), (8, 16)]


def test_grouping_and_merging():
    def e(label, start, end, score=0.5, word="w"):
        return {"entity": label, "score": score, "word": word, "start": start, "end": end}

    assert split_tag("B-PER") == ("B", "PER") and split_tag("I-LOC") == ("I", "LOC") and split_tag("O") == ("I", "O")
    groups = group_entities([e("B-PER", 0, 1, word="a"), e("I-PER", 1, 2, 0.7, "b"), e("B-PER", 3, 4),
                             e("PER", 4, 5), e("I-LOC", 6, 7), e("O", 8, 9)], " ".join)
    assert [(g["entity_group"], g["start"], g["end"], g["word"]) for g in groups] == [
        ("PER", 0, 2, "a b"), ("PER", 3, 5, "w w"), ("LOC", 6, 7, "w"), ("O", 8, 9, "w")]
    assert groups[0]["score"] == pytest.approx(0.6)
    # overlapping windows: the longer entity wins, then the more confident; the earlier window on a tie
    a, b, c, d = e("X", 0, 4, 0.2), e("X", 2, 8, 0.1), e("X", 2, 8, 0.3), e("Y", 10, 12)
    assert merge_windows([d, a, b]) == [b, d]
    assert merge_windows([a, c, b]) == [c]
    assert merge_windows([c, b]) == [c]
    empty = e("X", 5, 5)  # a lone space token's span: transformers' merge repeats such an entity when it comes first
    assert merge_windows([empty, d]) == [empty, d]


@needs_transformers
@pytest.mark.parametrize("call, message", [
    (lambda m: tag(["a", 3], m), "text 1 must be a string"),  # "" gives no entities, as the pipeline's
    (lambda m: tag([], m), "non-empty list"),
    (lambda m: tag("a", m, aggregation_strategy="longest"), "aggregation_strategy must be one of"),
    (lambda m: tag("a", m, stride=4), "needs an aggregation strategy"),
    (lambda m: tag("a", m, aggregation_strategy="simple", stride=62), "less than the 62 tokens"),
    (lambda m: tag("a", m, aggregation_strategy="simple", stride=-1), "stride must be a non-negative integer or None"),
    (lambda m: tag("a", m, ignore_labels=[1]), "ignore_labels must be"),
    (lambda m: tag("a", m, batch_size=0), "batch_size must be a positive integer"),
])
def test_bad_inputs_are_refused_with_what_to_do(bert_tagger, call, message):
    _, model = bert_tagger
    with pytest.raises(InputError, match=message):
        call(model)


@needs_transformers
def test_a_checkpoint_without_the_head_is_named_with_its_call(tmp_path):
    save_head("bert", "sequence-classification", tmp_path, num_labels=3)
    with pytest.raises(MissingPartError, match="tag needs a token-classification head, and model .* is a "
                       "BertForSequenceClassification .*: use bertfn.classify"):
        tag("a text", str(tmp_path))


@needs_transformers
def test_cli_table_and_json(bert_tagger, capsys):
    folder, model = bert_tagger
    on = ["--model", str(folder), "--device", str(model.device)]
    assert main(["tag", CORPUS[0], TEXTS[1], *on, "--aggregation", "first"]) == 0
    out = capsys.readouterr().out
    want = tag([CORPUS[0], TEXTS[1]], model, aggregation_strategy="first")
    assert out.startswith(CORPUS[0] + "\n  entity") and "start-end" in out
    for e in want[0] + want[1]:
        assert f"{e['score']:.4f}" in out and f"{e['start']}-{e['end']}" in out
    assert main(["tag", LONG, *on, "--aggregation", "max", "--stride", "8", "--json",
                 "--ignore-labels", "O,B-PER"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert_close(got, tag(LONG, model, aggregation_strategy="max", stride=8, ignore_labels=("O", "B-PER")))
    assert main(["tag", "a", "--model", str(folder), "--stride", "4"]) == 2
    assert "--aggregation simple" in capsys.readouterr().err


@needs_transformers
def test_corpus_file_runs_and_resumes(bert_tagger, tmp_path, capsys):
    folder, model = bert_tagger
    texts = (TEXTS + [LONG]) * 2
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    texts = texts[:5] + [""] + texts[5:]  # an empty line: no entities, as the pipeline's []
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    options = {"aggregation_strategy": "simple", "stride": 10, "ignore_labels": ("O",), "batch_size": 32}  # the CLI's
    summary = run_file(src, out, model, task="tag", progress=False, **options)
    assert summary.errors == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows[5]["text"] == "" and rows[5]["result"] == []
    want = tag(texts, model, **options)
    assert_close([r["result"] for r in rows if "result" in r], want, fp32_atol(1e-6))
    whole = out.read_bytes()
    out.write_bytes(b"".join(whole.splitlines(keepends=True)[:4]))  # an interrupted run: 4 lines written
    assert main(["tag", "--input", str(src), "--output", str(out), "--model", str(folder), "--device",
                 str(model.device), "--aggregation", "simple", "--stride", "10", "--resume"]) == 0
    assert "resumed after line 4" in capsys.readouterr().err
    resumed = [json.loads(x) for x in out.read_bytes().splitlines()]
    assert [{k: v for k, v in r.items() if k != "result"} for r in resumed] == \
        [{k: v for k, v in r.items() if k != "result"} for r in rows]
    assert_close([r["result"] for r in resumed if "result" in r], want, fp32_atol(1e-6))  # other batches on a GPU
