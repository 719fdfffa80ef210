"""bertfn.zero_shot: transformers' zero-shot-classification pipeline on every member's *ForSequenceClassification.

Each member with a sequence classifier gets a random NLI checkpoint (three labels, entailment first or last, as MNLI
checkpoints have them), and bertfn's labels equal the pipeline's built on the same folder, its scores within 1e-5:
one text and several, one label at most true or several, a single label, Unicode, and a text longer than the model
reads (the pipeline's tokenizer cuts it "only_first", to the model's length here). Then what the config must name,
the errors, bf16, edits, the CLI and the corpus task.
"""

from __future__ import annotations

import json
import re

import numpy
import pytest
import torch

import bertfn
from bertfn.cli import main
from bertfn.corpus.files import run_file
from bertfn.tasks.pairs import longest_pair
from bertfn.tasks.zero_shot import candidate_list, zero_shot
from conftest import fp32_atol
from family_checkpoints import CORPUS, ESM_KINDS, HEAD_TASKS, PROTEINS, kind_params, save_head

pytestmark = pytest.mark.needs_transformers

KINDS = [kind for kind, tasks in HEAD_TASKS.items() if "sequence-classification" in tasks]

MNLI = ({0: "entailment", 1: "neutral", 2: "contradiction"}, {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"})
"""The two orders of NLI checkpoints' labels (MoritzLaurer's DeBERTa models; roberta-large-mnli, in capitals)."""

LONG = " ".join(CORPUS[:14])
"""A text of about 150 tokens: longer than every test checkpoint reads with a hypothesis (64 or 128 tokens)."""

TEXTS = [CORPUS[6], "Café naïve 東京 🙂, déjà vu.", LONG, "Hi."]
LABELS = ["politics", "the weather in London", "sports"]


def nli_checkpoint(kind: str, folder, labels: dict[int, str], seed: int = 0):
    """A random ``kind`` NLI classifier with these labels; its weights drawn wider than the default (0.02), so that
    the texts' logits differ enough for an order of labels to be a real order. Returns the transformers model."""
    return save_head(kind, "sequence-classification", folder, seed=seed, num_labels=len(labels), id2label=labels,
                     label2id={v: k for k, v in labels.items()}, initializer_range=0.2)


@pytest.fixture(scope="module", params=kind_params(KINDS, quick=KINDS))  # ESM-1b in the slow run
def member(request, tmp_path_factory):
    kind = request.param
    folder = tmp_path_factory.mktemp(f"{kind}-nli")
    hf = nli_checkpoint(kind, folder, MNLI[KINDS.index(kind) % 2])
    return kind, folder, hf


@pytest.fixture(scope="module")
def bert_nli(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert-nli")
    nli_checkpoint("bert", folder, MNLI[0])
    return folder, bertfn.load(folder)


def pipeline(folder, hf, model: bertfn.Model):
    """transformers' zero-shot pipeline on the folder's model, its tokenizer cutting to what the model reads (the test
    tokenizers say no model_max_length, and the pipeline would run a longer pair into an index error)."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(folder, model_max_length=longest_pair(model))
    return transformers.pipeline("zero-shot-classification", model=hf, tokenizer=tok)


def same(got, want, atol: float = 1e-5) -> None:
    for g, w in zip(got if isinstance(got, list) else [got], want if isinstance(want, list) else [want]):
        assert g["sequence"] == w["sequence"] and g["labels"] == w["labels"]
        assert g["scores"] == pytest.approx(w["scores"], abs=fp32_atol(atol))


def test_matches_the_pipeline_on_every_member(member, device):
    kind, folder, hf = member
    model = bertfn.load(folder, device=device)
    oracle = pipeline(folder, hf, model)
    texts, labels, template = TEXTS, LABELS, "This example is {}."
    if kind in ESM_KINDS:  # proteins, and labels that are residues (an English hypothesis would be all <unk>)
        texts, labels, template = [PROTEINS[0], PROTEINS[5], PROTEINS[2] * 3], ["MKT", "GIVE", "LLV"], "{}"
    with pytest.warns(UserWarning, match="text 2: with the hypothesis .* cut to fit"):
        got = zero_shot(texts, model, candidate_labels=labels, hypothesis_template=template)
    same(got, oracle(texts, candidate_labels=labels, hypothesis_template=template))
    for multi_label, chosen in ((True, labels), (False, labels[1:2])):  # each label alone; one label (scored alone too)
        got = zero_shot(texts[1], model, candidate_labels=chosen, hypothesis_template=template, multi_label=multi_label,
                        batch_size=2)
        same(got, oracle(texts[1], candidate_labels=chosen, hypothesis_template=template, multi_label=multi_label))


@pytest.mark.needs_transformers
def test_tied_labels_come_in_the_pipelines_order(bert_nli):
    """Labels whose hypotheses are the same tokens (BERT's uncased "cats" and "Cats", a label given twice) tie; the
    pipeline ranks them by numpy's reversed argsort, the last of them first, and so does bertfn (it put the first
    first), with the labels alone (multi_label) and with more than 16 of them (numpy's quicksort, not insertion)."""
    import transformers

    folder, model = bert_nli
    pipe = transformers.pipeline("zero-shot-classification", model=str(folder))
    many = [f"{w}{i}" for i in range(6) for w in ("cat", "Cat", "CAT")]  # 18 labels, in threes that tie
    for labels in (["cats", "Cats"], ["sports", "cats", "politics", "cats", "Cats"], many):
        for multi_label in (False, True):
            want = pipe(CORPUS[3], candidate_labels=labels, multi_label=multi_label)
            assert len(set(want["scores"])) < len(labels)  # some tie
            same(zero_shot(CORPUS[3], model, candidate_labels=labels, multi_label=multi_label), want)


def test_labels_as_the_pipeline_reads_them():
    assert candidate_list("politics, sports ,, the weather ") == ["politics", "sports", "the weather"]
    assert candidate_list(("a", "b")) == ["a", "b"]
    # an array and a dataframe's column, as transformers' pipeline takes them: they were refused
    assert candidate_list(numpy.array(["a", "b"])) == ["a", "b"]
    for bad, said in ((None, r"candidate_labels=\[...\]"), ([], "holds no label"), (" , ", "holds no label"),
                      (["a", " "], "label 1 is empty"), ({"a": 1}, "must be a list of strings")):
        with pytest.raises(bertfn.InputError, match=said):
            candidate_list(bad)
    pd = pytest.importorskip("pandas")  # in the test extra, not in a plain install
    assert candidate_list(pd.Series(["a", "b"])) == ["a", "b"]


def test_the_nli_outputs_it_reads(tmp_path):
    """Entailment and contradiction by name; a two-label model's other output; an error where the pipeline guesses."""
    texts, labels = ["The cat sat on the mat.", CORPUS[9]], ["animals", "history"]
    folder = tmp_path / "two"
    hf = nli_checkpoint("bert", folder, {0: "not_entailment", 1: "entailment"})
    model = bertfn.load(folder)
    for multi_label in (False, True):
        same(zero_shot(texts, model, candidate_labels=labels, multi_label=multi_label),
             pipeline(folder, hf, model)(texts, candidate_labels=labels, multi_label=multi_label))

    folder = tmp_path / "odd"  # neutral first: the pipeline takes output 0 for contradiction, bertfn the one so named
    hf = nli_checkpoint("bert", folder, {0: "neutral", 1: "entailment", 2: "contradiction"})
    got = zero_shot(texts[0], bertfn.load(folder), candidate_labels=labels, multi_label=True)
    tok = bertfn.load(folder).tokenizer
    enc = tok([texts[0]] * 2, [f"This example is {label}." for label in labels])
    with torch.no_grad():
        z = hf(input_ids=enc.input_ids, token_type_ids=enc.token_type_ids, attention_mask=enc.attention_mask).logits
    want = z[:, [2, 1]].softmax(dim=-1)[:, 1].tolist()  # contradiction against entailment
    assert dict(zip(got["labels"], got["scores"])) == pytest.approx(dict(zip(labels, want)), abs=1e-5)

    for name, config, said in (("plain", {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, "entailment output"),
                               ("no-contradiction", {0: "entailment", 1: "neutral", 2: "other"},
                                "contradiction output")):
        nli_checkpoint("bert", tmp_path / name, config)
        model = bertfn.load(tmp_path / name)
        with pytest.raises(bertfn.MissingPartError, match=f"{said}.*name its outputs in config.json"):
            zero_shot("a text", model, candidate_labels=labels, multi_label=True)
    assert zero_shot("a text", model, candidate_labels=labels)["labels"]  # one label of several: no contradiction


def test_errors(bert_nli, tmp_path):
    folder, model = bert_nli
    for texts, options, said in (
        ("", {}, r"text 0 is empty \(''\), which transformers' zero-shot-classification pipeline refuses too"),
        (["a cat", ""], {}, r"text 1 is empty \(''\)"),  # "  " is classified, as the pipeline does
        ("a cat", {"hypothesis_template": "This example is good."}, "has no {} for the label"),
        ("a cat", {"hypothesis_template": "It is {kind}."}, "cannot be filled"),
        ("a cat", {"multi_label": "yes"}, "multi_label must be True or False"),
        ("a cat", {"batch_size": 0}, "batch_size must be a positive integer"),
        ("a cat", {"candidate_labels": None}, "candidate_labels="),
    ):
        with pytest.raises(bertfn.InputError, match=said):
            zero_shot(texts, folder / "not loaded: checked first", **{"candidate_labels": LABELS, **options})
    with pytest.raises(bertfn.InputError, match="labels as a keyword"):
        zero_shot("a cat", ["politics", "sports"])
    with pytest.raises(bertfn.InputError, match="text 0: the hypothesis .* no token of the text would be left"):
        zero_shot("a cat", model, candidate_labels=["x"], hypothesis_template=LONG + " {}")
    save_head("bert", "token-classification", tmp_path / "tagger", num_labels=3)
    with pytest.raises(bertfn.MissingPartError, match="zero_shot needs a sequence-classification head.*bertfn.tag"):
        zero_shot("a cat", tmp_path / "tagger", candidate_labels=LABELS)


def test_bf16_gives_the_same_labels(bert_nli):
    folder, model = bert_nli
    cut = "text 2: with the hypothesis .* the end of the text was cut to fit"  # LONG, on purpose
    with pytest.warns(UserWarning, match=cut):
        fp32 = zero_shot(TEXTS, model, candidate_labels=LABELS)
    with pytest.warns(UserWarning, match=cut):
        bf16 = zero_shot(TEXTS, model, candidate_labels=LABELS, dtype="bfloat16")
    assert [r["labels"] for r in bf16] == [r["labels"] for r in fp32]
    for b, f in zip(bf16, fp32):
        assert b["scores"] == pytest.approx(f["scores"], abs=1e-2)


def test_edits_run_the_reference_path_and_apply(bert_nli):
    folder, model = bert_nli
    plain = zero_shot(TEXTS[:2], model, candidate_labels=LABELS, multi_label=True)
    same(zero_shot(TEXTS[:2], model, candidate_labels=LABELS, multi_label=True,
                   edits={"classifier.logits": lambda t, point: t}), plain)  # the padded reference path, unedited
    sure = zero_shot(TEXTS[:2], model, candidate_labels=LABELS, multi_label=True,
                     edits={"classifier.logits": lambda t, point: t + torch.tensor([20.0, 0.0, 0.0])})  # entailment up
    assert all(s > 0.999 for r in sure for s in r["scores"]) and not all(s > 0.999 for r in plain for s in r["scores"])


def test_cli_table_json_and_file(bert_nli, tmp_path, capsys):
    folder, model = bert_nli
    want = zero_shot([CORPUS[6], CORPUS[0]], model, candidate_labels=LABELS)
    assert main(["zero-shot", CORPUS[6], CORPUS[0], "--labels", *LABELS, "--model", str(folder)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == CORPUS[6] and "rank" in out and "label" in out
    for w in want:
        for rank, (label, score) in enumerate(zip(w["labels"], w["scores"]), 1):
            assert f"{rank:>4}  {score:>8.4f}  {label}" in out
    assert main(["zero-shot", CORPUS[6], "--labels", ", ".join(LABELS), "--multi-label", "--json",
                 "--model", str(folder)]) == 0
    same(json.loads(capsys.readouterr().out), zero_shot(CORPUS[6], model, candidate_labels=LABELS, multi_label=True))
    assert main(["zero-shot", "a cat", "--model", str(folder)]) == 2
    assert "--labels LABEL" in capsys.readouterr().err

    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    lines = [CORPUS[i] for i in range(8)] + [""] + ["Café naïve 東京 🙂"]
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["zero-shot", "--input", str(src), "--output", str(out), "--labels", *LABELS, "--model", str(folder),
                 "--no-progress"]) == 2  # the empty line is an error line, as the pipeline refuses ""
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert "line 9 is empty ('')" in rows[8]["error"]
    want = zero_shot([t for t in lines if t], model, candidate_labels=LABELS)
    same([r["result"] for r in rows if "result" in r], want)
    whole = out.read_bytes()  # an interrupted run: its first 4 lines written, then resumed
    out.write_bytes(b"".join(whole.splitlines(keepends=True)[:4]))
    assert main(["zero-shot", "--input", str(src), "--output", str(out), "--labels", *LABELS, "--model", str(folder),
                 "--resume", "--no-progress"]) == 2
    assert "resumed after line 4" in capsys.readouterr().err
    again = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]  # the same, to float rounding (the
    # resumed lines run in other groups, whose products round in another order)
    assert [{k: v for k, v in r.items() if k != "result"} for r in again] == \
        [{k: v for k, v in r.items() if k != "result"} for r in rows]
    same([r["result"] for r in again if "result" in r], [r["result"] for r in rows if "result" in r])


def test_cli_names_the_command_and_counts_the_texts_from_one(bert_nli, capsys):
    """Issue 57: the CLI says zero-shot (the Python API zero_shot), and its second text is text 2 (Python's text 1)."""
    folder, _ = bert_nli
    said = "is empty (''), which transformers' zero-shot-classification pipeline refuses too; write the text to classify"
    with pytest.raises(bertfn.InputError, match=re.escape(f"text 1 {said}")):
        zero_shot(["a cat", ""], folder, candidate_labels=LABELS)
    assert main(["zero-shot", "a cat", "", "--labels", *LABELS, "--model", str(folder)]) == 2
    assert capsys.readouterr().err == f"bertfn: error: text 2 {said}, or leave it out\n"
    assert main(["zero-shot", "a cat", "--labels", "sports", " ", "--model", str(folder)]) == 2
    assert capsys.readouterr().err.startswith("bertfn: error: label 2 is empty;")
    assert main(["zero-shot", "Hi.", LONG, "--labels", *LABELS, "--model", str(folder), "--json"]) == 0
    assert re.fullmatch(r"bertfn: warning: text 2: with the hypothesis .* cut to fit \(truncation 'only_first', .*\n",
                        capsys.readouterr().err)


def test_corpus_task_runs_a_file(bert_nli, tmp_path):
    folder, model = bert_nli
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(json.dumps({"id": i, "body": CORPUS[i]}) for i in range(5)) + "\n", encoding="utf-8")
    summary = run_file(src, out, model, task="zero-shot", field="body", candidate_labels=LABELS, multi_label=True,
                       progress=False)
    assert summary.errors == 0
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == list(range(5))
    same([r["result"] for r in rows], zero_shot(list(CORPUS[:5]), model, candidate_labels=LABELS, multi_label=True))


def test_file_run_says_a_truncation_warning_once_naming_lines(bert_nli, tmp_path, capsys):
    """A warning about several texts of a piece names their lines, not their places in the piece ("(and texts 1, 2
    like it)"), and is said once per run, however many pieces it comes back in (it came once per piece)."""
    folder, _ = bert_nli
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    texts = ["Hi."] * 3 + [LONG, LONG, "Hi.", LONG] + ["Hi.", LONG]  # pieces of 1, 2, 4 lines, then the rest
    src.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts)), encoding="utf-8")
    assert main(["zero-shot", "--input", str(src), "--output", str(out), "--field", "text", "--labels", *LABELS,
                 "--model", str(folder), "--no-progress", "--flush-every", "60"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("bertfn: warning:")]
    assert len(said) == 1, said
    assert re.match(r"bertfn: warning: line 4 \(id 't3'\) \(and lines 5, 7 like it\): with the hypothesis ", said[0])


def test_resume_names_the_options_as_the_command_line_spells_them(bert_nli, tmp_path, capsys):
    """A resume with other labels or another template named --candidate-labels and --hypothesis-template, flags that
    bertfn zero-shot does not have."""
    folder, _ = bert_nli
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("a cat\nthe rain\n", encoding="utf-8")
    run = ["zero-shot", "--input", str(src), "--output", str(out), "--model", str(folder), "--no-progress"]
    assert main([*run, "--labels", *LABELS]) == 0
    capsys.readouterr()
    assert main([*run, "--labels", *LABELS[::-1], "--resume"]) == 2
    assert f"was written with option --labels {LABELS!r}, and this run has {LABELS[::-1]!r}" in capsys.readouterr().err
    assert main([*run, "--labels", *LABELS, "--template", "It is {}.", "--resume"]) == 2
    assert "was written with option --template 'This example is {}.', and this run has 'It is {}.'" in \
        capsys.readouterr().err
