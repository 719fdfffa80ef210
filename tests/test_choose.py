"""bertfn.choose, the multiple-choice call: every member's *ForMultipleChoice held to transformers' own class.

transformers has no multiple-choice pipeline, so the oracle is the model: ``{Prefix}ForMultipleChoice(**enc)`` on each
prompt's (prompt, choice) text pairs padded to (1, C, S), tokenized as run_swag tokenizes them
(``tokenizer(first_sentences, second_sentences)``); bertfn's logits equal its logits at 1e-5 and its scores their
softmax, best first. Then the input forms, the errors, bf16, edits, the CLI and the corpus task.
"""

from __future__ import annotations

import json

import numpy
import pytest
import torch

import bertfn
from bertfn.cli import main
from bertfn.corpus.files import run_file
from bertfn.tasks.choose import choice_items, choice_logits, choose
from family_checkpoints import CORPUS, HEAD_TASKS, kind_params, member_tokenizer, save_head, save_member

pytestmark = pytest.mark.needs_transformers

KINDS = [kind for kind, tasks in HEAD_TASKS.items() if "multiple-choice" in tasks]

ITEMS = [  # prompts of different lengths, with different numbers of choices, Unicode whose bytes differ from its letters
    (CORPUS[0], [CORPUS[1], CORPUS[5], "Café naïve 東京 🙂, déjà vu."]),
    (CORPUS[2], [CORPUS[3], CORPUS[20]]),
    ("The king and the queen lived in a big castle.", ["They were happy.", CORPUS[7], CORPUS[13], "Ünïcödé!"]),
    ("Hi.", ["Hello world!"]),
]


def saved(kind: str, folder, seed: int = 1):
    """A ``kind`` multiple-choice checkpoint with weights drawn wider than transformers' init (std 0.2, not 0.02), so
    that its choices' scores differ (a tiny random model at the usual init gives each about 1/C, within 1e-4)."""
    return save_head(kind, "multiple-choice", folder, seed=seed, initializer_range=0.2)


@pytest.fixture(scope="module", params=kind_params(KINDS))
def member(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"{request.param}-mc")
    hf = saved(request.param, folder)
    return request.param, folder, hf, bertfn.load(folder)


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
    folder = tmp_path_factory.mktemp("roberta-mc")
    saved("roberta", folder)
    return folder, bertfn.load(folder)


def hf_logits(kind: str, hf, prompts: list[str], choices: list[list[str]]) -> torch.Tensor:
    """transformers' logits (B, C) for B prompts with C choices each, rows padded together to (B, C, S)."""
    tok = member_tokenizer(kind)
    tok.padding_side = "right"
    C = len(choices[0])
    enc = tok([p for p in prompts for _ in range(C)], [c for cs in choices for c in cs], padding=True,
              return_tensors="pt")
    with torch.no_grad():
        return hf(**{k: v.view(len(prompts), C, -1) for k, v in enc.items()}).logits  # (B, C)


def test_logits_and_scores_equal_transformers(member):
    kind, _, hf, model = member
    got, unknown = choice_logits(model, ITEMS, batch_size=3)  # rows of several prompts share an encoder pass
    assert unknown == {}
    results = choose([p for p, _ in ITEMS], [c for _, c in ITEMS], model)
    for (prompt, choices), logits, result in zip(ITEMS, got, results):
        want = hf_logits(kind, hf, [prompt], [choices])[0]  # (C,)
        torch.testing.assert_close(logits, want, atol=1e-5, rtol=1e-5)
        probs = want.softmax(-1)
        order = probs.argsort(descending=True).tolist()
        assert result["prompt"] == prompt and result["choices"] == [choices[k] for k in order]
        assert result["scores"] == pytest.approx([probs[k].item() for k in order], abs=1e-4)
    assert len(set(results[0]["scores"])) == 3 and results[3]["scores"] == [1.0]  # one choice: all of it
    # prompts of the same number of choices as one (B, C, S) batch of transformers
    want = hf_logits(kind, hf, [ITEMS[0][0], "Paris is a beautiful city."], [ITEMS[0][1], ITEMS[0][1][::-1]])
    got, _ = choice_logits(model, [ITEMS[0], ("Paris is a beautiful city.", ITEMS[0][1][::-1])])
    torch.testing.assert_close(torch.stack(got), want, atol=1e-5, rtol=1e-5)


def same(a: dict, b: dict) -> None:
    """Two results alike: the same prompt and order, scores within float32's rounding (batches differ in their sums)."""
    assert a["prompt"] == b["prompt"] and a["choices"] == b["choices"]
    assert a["scores"] == pytest.approx(b["scores"], abs=1e-6)


def test_every_form_of_the_inputs_gives_the_same_answer(roberta):
    folder, model = roberta
    (p0, c0), (p1, c1) = ITEMS[:2]
    one = choose(p0, c0, model)
    assert isinstance(one, dict) and set(one) == {"prompt", "choices", "scores"}
    assert sum(one["scores"]) == pytest.approx(1.0)
    both = choose([p0, p1], [c0, c1], model)
    same(both[0], one)
    for a, b in zip(choose([{"prompt": p0, "choices": c0}, {"prompt": p1, "choices": c1}], model), both):
        same(a, b)  # items, and the model second
    same(choose({"prompt": p0, "choices": c0}, model=str(folder)), one)
    shared = choose([p0, p1], c0, model)  # one list of choices for every prompt, as zero-shot's labels
    same(shared[0], one)
    assert sorted(shared[1]["choices"]) == sorted(c0)
    same(choose((p0,), (tuple(c0),), model)[0], one)


@pytest.mark.parametrize("call, message", [
    (lambda m: choose(["The cat.", 3], ["a"], m), "text 1's prompt must be a string"),  # "" and " " are scored
    (lambda m: choose("The cat.", ["a", None], m), "text 0's choice 1 must be a string"),
    (lambda m: choose("The cat.", [], m), "choices must be a non-empty list"),
    (lambda m: choose("The cat.", "a, b", m), "choices must be a non-empty list"),
    (lambda m: choose(["The cat.", "The dog."], [["a"], ["b"], ["c"]], m), "2 prompt(s) and 3 lists"),
    (lambda m: choose([{"prompt": "The cat.", "choices": []}], m), "text 0 has no choices"),
    (lambda m: choose([{"prompt": "The cat.", "answers": ["a"]}], m), "must be a dict {'prompt'"),
    (lambda m: choose([{"prompt": "The cat.", "choices": ["a"]}], ["b"], m), "the items hold their own choices"),
    (lambda m: choose([], ["a"], m), "at least one prompt"),
    (lambda m: choose("The cat.", ["a"], m, batch_size=0), "batch_size must be a positive integer"),
    (lambda m: choose("The cat sat on the mat. " * 12, ["It slept."], m),
     "text 0 with choice 0 is 106 tokens long but the model reads at most 64; shorten the prompt or that choice"),
    (lambda m: choose("The cat.", ["It slept. " * 30, "It ran."], m),  # the choice is the long part
     "text 0 with choice 0 is 217 tokens long but the model reads at most 64; shorten the prompt or that choice"),
])
def test_bad_inputs_are_refused_with_what_to_do(roberta, call, message):
    with pytest.raises(bertfn.InputError) as e:
        call(roberta[1])
    assert message in str(e.value)


def test_a_checkpoint_without_the_head_is_named_with_its_call(tmp_path):
    save_head("roberta", "sequence-classification", tmp_path / "sc", num_labels=2)
    with pytest.raises(bertfn.MissingPartError, match=r"choose needs a multiple-choice head, and model .* is a "
                                                      r"RobertaForSequenceClassification .*: use bertfn.classify"):
        choose("The cat.", ["a", "b"], bertfn.load(tmp_path / "sc"))
    save_member("roberta", tmp_path / "mlm")
    with pytest.raises(bertfn.MissingPartError, match="is a RobertaForMaskedLM: use bertfn.fill_mask"):
        choose("The cat.", ["a", "b"], bertfn.load(tmp_path / "mlm"))


def test_mostly_unknown_items_are_named_by_prompt_not_by_row(member):
    kind, _, _, model = member
    if kind not in ("bert", "distilbert", "electra"):
        pytest.skip("a WordPiece vocabulary of English letters has no CJK: its rows are [UNK]")
    items = [ITEMS[1], ("東京 大阪", ["北京 上海", "札幌"])]
    with pytest.warns(bertfn.UnknownTokensWarning, match=r"^text 1: \d+ of its \d+ tokens are \[UNK\]"):
        results = choose([p for p, _ in items], [c for _, c in items], model)
    assert "warning" not in results[0] and "[UNK]" in results[1]["warning"]


def test_bf16_gives_the_same_order(roberta):
    _, model = roberta
    exact = choose([p for p, _ in ITEMS], [c for _, c in ITEMS], model)
    half = choose([p for p, _ in ITEMS], [c for _, c in ITEMS], model, dtype="bfloat16")
    for a, b in zip(exact, half):
        assert a["choices"] == b["choices"]
        assert b["scores"] == pytest.approx(a["scores"], abs=2e-2)


def test_edits_reach_the_head(roberta):
    _, model = roberta
    prompt, choices = ITEMS[2]
    plain = choose(prompt, choices, model)
    flipped = choose(prompt, choices, model, edits={"classifier.logits": lambda t, point: -t})
    assert flipped["choices"] == plain["choices"][::-1]
    unchanged = choose(prompt, choices, model, edits={"layer.0.output": lambda t, point: t})  # the padded path
    assert unchanged["choices"] == plain["choices"]
    assert unchanged["scores"] == pytest.approx(plain["scores"], abs=1e-5)


def test_cli_table_and_json(roberta, capsys):
    folder, model = roberta
    prompt, choices = ITEMS[0]
    want = choose(prompt, choices, model)
    assert main(["choose", prompt, "--choices", *choices, "--model", str(folder), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["choices"] == want["choices"] and printed["scores"] == pytest.approx(want["scores"], abs=1e-6)
    assert main(["choose", prompt, "--choices", *choices, "--model", str(folder)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == prompt and "rank" in out and "choice" in out
    for rank, (c, s) in enumerate(zip(want["choices"], want["scores"]), 1):
        assert f"{rank:>4}  {s:>8.4f}  {c}" in out
    assert main(["choose", prompt, "--model", str(folder)]) == 2
    assert "--choices A B C" in capsys.readouterr().err
    assert main(["choose", prompt, "--choices", "a", "", "--model", str(folder), "--json"]) == 0  # "" is a choice too
    assert sorted(json.loads(capsys.readouterr().out)["choices"]) == ["", "a"]


def test_corpus_file_runs_and_resumes(roberta, tmp_path, capsys):
    folder, model = roberta
    items = [{"id": i, "prompt": p, "choices": c} for i, (p, c) in enumerate(ITEMS * 3)]
    items[4]["prompt"] = "The cat sat on the mat. " * 12  # a bad line (too long): an error line, the others run
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in items) + "\n", encoding="utf-8")
    summary = run_file(src, out, model, task="choose", progress=False)
    assert summary.errors == 1
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert "text" not in rows[0] and rows[0]["prompt"] == ITEMS[0][0] and rows[0]["id"] == 0
    assert rows[4]["error"].startswith("line 5 (id 4)") and "the model reads at most 64" in rows[4]["error"]
    want = choose([{"prompt": x["prompt"], "choices": x["choices"]} for x in items if x["id"] != 4], model)
    got = [r["result"] for r in rows if "result" in r]
    assert [g["choices"] for g in got] == [w["choices"] for w in want]
    # an interrupted run: its first 7 lines written, then resumed from the CLI
    whole = out.read_bytes()
    out.write_bytes(b"".join(whole.splitlines(keepends=True)[:7]))
    assert main(["choose", "--input", str(src), "--output", str(out), "--model", str(folder), "--resume"]) == 2
    assert "resumed after line 7" in capsys.readouterr().err
    resumed = [json.loads(x) for x in out.read_bytes().splitlines()]
    assert [r.keys() for r in resumed] == [r.keys() for r in rows] and resumed[4] == rows[4]
    for a, b in zip(resumed, rows):
        if "result" in a:
            same(a["result"], b["result"])
    assert main(["choose", "--input", str(src), "--choices", "a", "--model", str(folder)]) == 2
    assert "drop --choices" in capsys.readouterr().err


def test_choice_items_takes_tuples_and_one_item():
    assert choice_items(("a b",), (("c", "d"),)) == ([("a b", ["c", "d"])], False)
    assert choice_items({"prompt": "a", "choices": ("b",)}, None) == ([("a", ["b"])], True)
    # an array and a dataframe's column, as rerank takes its passages: they were refused ("a non-empty list")
    assert choice_items("a", numpy.array(["b", "c"])) == ([("a", ["b", "c"])], True)
    pd = pytest.importorskip("pandas")  # in the test extra, not in a plain install
    assert choice_items("a", pd.Series(["b", "c"])) == ([("a", ["b", "c"])], True)
