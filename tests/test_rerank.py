"""bertfn.rerank: sentence-transformers' CrossEncoder.rank and .predict on every member's *ForSequenceClassification
of one output (a cross-encoder).

Each member with a sequence classifier gets a random cross-encoder, and bertfn's ranking equals CrossEncoder's built on
the same folder (its scores within 1e-5, the order up to scores closer than that): 100 passages of different lengths
on BERT (some longer than the model reads, cut "longest_first" as CrossEncoder cuts them), a dozen on each member,
Unicode, predict()'s unsorted scores, top_k and return_documents, the activation the model's files name. Then the
input forms, the errors, bf16, edits, the CLI and the corpus task.
"""

from __future__ import annotations

import json

import pytest
import torch

import bertfn
from bertfn.cli import main
from bertfn.corpus.files import run_file
from bertfn.tasks.pairs import longest_pair
from bertfn.tasks.rerank import model_activation, queries_and_passages, rerank
from conftest import fp32_atol
from family_checkpoints import CORPUS, ESM_KINDS, HEAD_TASKS, PROTEINS, kind_params, save_head

pytestmark = [
    pytest.mark.needs_transformers,
    # FEW's fourth passage (12 sentences) and PASSAGES' longest are longer than the test models read, on purpose: the
    # cut is part of what CrossEncoder is matched on. bertfn says so every call; test_a_hundred_passages asserts it.
    pytest.mark.filterwarnings("ignore:.*the longer of the two was cut:UserWarning"),
]

KINDS = [kind for kind, tasks in HEAD_TASKS.items() if "sequence-classification" in tasks]

QUERY = "Where did the Romans build their roads?"

PASSAGES = [" ".join([CORPUS[j % 46], CORPUS[(j + j // 46 + 1) % 46]] + [CORPUS[(7 * j + i) % 46]
                                                                           for i in range(j % 9)]) for j in range(100)]
"""100 passages of 2 to 10 sentences (about 15 to 130 tokens), no two alike in their first two sentences (which is what
the longest ones keep of themselves once cut)."""

FEW = [CORPUS[9], "Café naïve 東京 🙂, déjà vu.", CORPUS[31], " ".join(CORPUS[:12]), CORPUS[1], "Roads.",
       CORPUS[17]]


def cross_encoder(kind: str, folder, seed: int = 0):
    """A random ``kind`` cross-encoder (one output), its weights drawn wider than the default (0.02) so that the
    passages' scores differ enough for an order to be a real order. Returns the transformers model."""
    return save_head(kind, "sequence-classification", folder, seed=seed, num_labels=1, initializer_range=0.2)


def oracle(folder, model: bertfn.Model, **kwargs):
    """sentence-transformers' CrossEncoder on the folder, cutting to what the model reads (it caps the tokenizer's
    length at max_position_embeddings, which RoBERTa's 2 extra positions would overrun)."""
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(folder), max_length=longest_pair(model), **kwargs)


def same_ranking(got: list[dict], want: list[dict], atol: float = 1e-5) -> None:
    """The same entries with the same scores, in the same order but for scores closer than ``atol``."""
    assert len(got) == len(want)
    assert [g["score"] for g in got] == pytest.approx([float(w["score"]) for w in want], abs=fp32_atol(atol))
    scores = {w["corpus_id"]: float(w["score"]) for w in want}
    assert all(g["score"] == pytest.approx(scores[g["corpus_id"]], abs=fp32_atol(atol)) for g in got)
    texts = {w["corpus_id"]: w.get("text") for w in want}
    assert all(g.get("text") == texts[g["corpus_id"]] for g in got)


@pytest.fixture(scope="module", autouse=True)
def offline():
    """sentence-transformers reads the local folders alone: no network."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="module", params=kind_params(KINDS, quick=KINDS))  # ESM-1b in the slow run
def member(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"{request.param}-ce")
    cross_encoder(request.param, folder)
    return request.param, folder


@pytest.fixture(scope="module")
def bert_ce(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert-ce")
    cross_encoder("bert", folder)
    return folder, bertfn.load(folder)


def test_a_hundred_passages_match_cross_encoder(bert_ce, device):
    folder, _ = bert_ce
    model = bertfn.load(folder, device=device)
    want = oracle(folder, model).rank(QUERY, PASSAGES, return_documents=True)
    cut = r"text 0: with passage \d+ it is \d+ tokens \(and \d+ more of its pairs are too long\).*'longest_first'"
    with pytest.warns(UserWarning, match=cut):
        got = rerank(QUERY, PASSAGES, model, return_documents=True, batch_size=16)
    same_ranking(got, want)
    top = rerank(QUERY, PASSAGES, model, top_k=5, activation="identity")  # the logits: sigmoid's inverse of want's
    same_ranking(top, [{"corpus_id": w["corpus_id"], "score": torch.logit(torch.tensor(float(w["score"]))).item()}
                       for w in want[:5]], atol=1e-4)


def test_every_member_matches_cross_encoder(member, device):
    kind, folder = member
    model = bertfn.load(folder, device=device)
    query, passages = (QUERY, FEW) if kind not in ESM_KINDS else (PROTEINS[5], [p[:n] for p in PROTEINS for n in (20, 200)])
    ce = oracle(folder, model)
    same_ranking(rerank(query, passages, model, return_documents=True), ce.rank(query, passages, return_documents=True))
    pairs = [[query, p] for p in passages[:3]]
    assert rerank(query, passages[:3], model, sort=False) == pytest.approx(ce.predict(pairs).tolist(),
                                                                           abs=fp32_atol(1e-5))


def test_the_activation_the_model_names(tmp_path):
    folder = tmp_path / "logits"
    cross_encoder("bert", folder)
    config = json.loads((folder / "config.json").read_text())
    config["sentence_transformers"] = {"activation_fn": "torch.nn.modules.linear.Identity", "version": "4.0.1"}
    (folder / "config.json").write_text(json.dumps(config))
    model = bertfn.load(folder)
    assert model_activation(model) == "identity"
    same_ranking(rerank(QUERY, FEW, model), oracle(folder, model).rank(QUERY, FEW))
    assert min(r["score"] for r in rerank(QUERY, FEW, model)) < 0  # logits, not probabilities
    st_config = folder / "config_sentence_transformers.json"
    st_config.write_text(json.dumps({"activation_fn": "torch.nn.modules.activation.Sigmoid"}))
    assert model_activation(bertfn.load(folder)) == "sigmoid"  # this file first, as sentence-transformers reads it
    st_config.write_text(json.dumps({"activation_fn": "torch.nn.modules.activation.Tanh"}))
    with pytest.raises(bertfn.InputError, match="Tanh, which bertfn does not apply; pass activation="):
        rerank(QUERY, FEW, bertfn.load(folder))
    assert rerank(QUERY, FEW, bertfn.load(folder), activation="sigmoid")


def test_the_folders_prompt_goes_before_each_query(bert_ce, tmp_path, capsys):
    """A CrossEncoder saved with prompts and a default_prompt_name puts that prompt before each pair's first text in
    predict(); so does rerank, and prompt_name= / prompt= choose as predict's do ("" for none)."""
    from sentence_transformers import CrossEncoder

    folder, model = bert_ce
    CrossEncoder(str(folder), prompts={"web": "Judge the relevance: ", "short": "Q: "},
                 default_prompt_name="web").save(str(tmp_path / "ce"))
    ce = oracle(tmp_path / "ce", model)
    prompted = bertfn.load(tmp_path / "ce")
    pairs = [[QUERY, p] for p in FEW]
    for mine, theirs in (({}, {}), ({"prompt_name": "short"}, {"prompt_name": "short"}), ({"prompt": ""}, {"prompt": ""}),
                         ({"prompt": "Rank: "}, {"prompt": "Rank: "})):
        assert rerank(QUERY, FEW, prompted, sort=False, **mine) == pytest.approx(ce.predict(pairs, **theirs).tolist(),
                                                                                   abs=fp32_atol(1e-5)), mine
    assert rerank(QUERY, FEW, prompted, sort=False) != pytest.approx(rerank(QUERY, FEW, model, sort=False), abs=1e-3)
    with pytest.raises(bertfn.InputError, match="prompt_name 'query' is not a prompt of the model's folder"):
        rerank(QUERY, FEW, prompted, prompt_name="query")
    assert main(["rerank", QUERY, *FEW[:2], "--json", "--prompt-name", "short", "--model", str(tmp_path / "ce")]) == 0
    same_ranking(json.loads(capsys.readouterr().out), ce.rank(QUERY, FEW[:2], prompt_name="short", return_documents=True))


def test_the_forms_it_takes(bert_ce):
    folder, model = bert_ce
    want = rerank(QUERY, FEW, model)
    assert rerank({"query": QUERY, "passages": FEW}, model) == want
    both = rerank([{"query": QUERY, "passages": FEW}, {"query": "Who?", "passages": "Roads."}], model=model)
    same_ranking(both[0], want)  # the two queries' pairs run together: the same numbers but for the last bits
    same_ranking(both[1], rerank("Who?", ["Roads."], model))
    assert rerank(QUERY, tuple(FEW), model, top_k=2) == want[:2]
    assert queries_and_passages("q", "one passage") == ([("q", ["one passage"])], True)


def test_errors(bert_ce, tmp_path):
    folder, model = bert_ce
    for query, passages, options, said in (
        (QUERY, [], {}, "the passages must be a non-empty list"),
        (QUERY, None, {}, "needs the passages"),
        (QUERY, ["a", 3], {}, "passage 1 must be a string"),  # "" and " " are scored, as CrossEncoder scores them
        ([{"query": "a", "passages": ["b"]}, {"query": "a"}], None, {}, "text 1: an item of rerank is"),
        ([{"query": "a", "passages": ["b"]}, {"query": "a", "passages": ["c", None]}], None, {},
         "text 1: passage 1 must be a string"),
        (QUERY, FEW, {"top_k": 0}, "top_k must be a positive integer"),
        (QUERY, FEW, {"activation": "tanh"}, "activation must be one of"),
        (QUERY, FEW, {"sort": 1}, "sort must be True or False"),
    ):
        with pytest.raises(bertfn.InputError, match=said):
            rerank(query, passages, folder / "not loaded: checked first", **options)
    with pytest.raises(bertfn.InputError, match="takes the model second"):
        rerank([{"query": "a", "passages": ["b"]}], model, model)
    save_head("bert", "sequence-classification", tmp_path / "nli", num_labels=3)
    with pytest.raises(bertfn.MissingPartError, match="one output.*3 labels.*bertfn.zero_shot"):
        rerank(QUERY, FEW, tmp_path / "nli")
    save_head("bert", "question-answering", tmp_path / "reader")
    with pytest.raises(bertfn.MissingPartError, match="rerank needs a sequence-classification head.*bertfn.answer"):
        rerank(QUERY, FEW, tmp_path / "reader")


def test_bf16_scores_near_fp32(bert_ce):
    folder, model = bert_ce
    fp32 = rerank(QUERY, FEW, model, sort=False)
    bf16 = rerank(QUERY, FEW, model, sort=False, dtype="bfloat16")
    assert bf16 == pytest.approx(fp32, abs=1e-2)
    best, second = sorted(fp32, reverse=True)[:2]
    assert best - second > 2e-2  # a clear winner, which bf16 keeps
    assert rerank(QUERY, FEW, model, dtype="bfloat16")[0]["corpus_id"] == fp32.index(best)


def test_edits_run_the_reference_path_and_apply(bert_ce):
    folder, model = bert_ce
    plain = rerank(QUERY, FEW, model)
    same_ranking(rerank(QUERY, FEW, model, edits={"classifier.logits": lambda t, point: t}), plain)
    flipped = rerank(QUERY, FEW, model, edits={"classifier.logits": lambda t, point: -t})
    assert [r["corpus_id"] for r in flipped] == [r["corpus_id"] for r in plain][::-1]


def test_cli_table_json_and_file(bert_ce, tmp_path, capsys):
    folder, model = bert_ce
    want = rerank(QUERY, FEW[:3], model, return_documents=True)
    assert main(["rerank", QUERY, *FEW[:3], "--model", str(folder)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == QUERY and "rank" in out and "passage" in out
    for rank, w in enumerate(want, 1):
        assert f"{rank:>4}  {w['score']:>8.4f}  {w['corpus_id']:>4}  {w['text']}" in out
    assert main(["rerank", QUERY, *FEW[:3], "--top-k", "2", "--json", "--model", str(folder)]) == 0
    same_ranking(json.loads(capsys.readouterr().out), want[:2])
    assert main(["rerank", QUERY, "--model", str(folder)]) == 2
    assert "pass a query and at least one passage" in capsys.readouterr().err

    items = [{"id": i, "query": CORPUS[i], "passages": FEW[i % 3:i % 3 + 3]} for i in range(6)]
    items[3]["passages"] = []  # an error line; the others run
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in items) + "\n", encoding="utf-8")
    assert main(["rerank", "--input", str(src), "--output", str(out), "--top-k", "2", "--model", str(folder),
                 "--no-progress"]) == 2
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert rows[3]["error"].startswith("line 4 (id 3): field 'passages' is a JSON list, not a string")
    assert rows[0]["id"] == 0 and rows[0]["query"] == CORPUS[0]
    good = [x for x in items if x["passages"]]
    for got, x in zip([r["result"] for r in rows if "result" in r], good):
        same_ranking(got, rerank(x["query"], x["passages"], model, top_k=2))
    whole = out.read_bytes()  # an interrupted run: its first 2 lines written, then resumed
    out.write_bytes(b"".join(whole.splitlines(keepends=True)[:2]))
    assert main(["rerank", "--input", str(src), "--output", str(out), "--top-k", "2", "--model", str(folder),
                 "--resume", "--no-progress"]) == 2
    assert "resumed after line 2" in capsys.readouterr().err
    resumed = out.read_bytes().splitlines(keepends=True)
    assert resumed[:2] == whole.splitlines(keepends=True)[:2] and len(resumed) == len(whole.splitlines())
    for line, before in zip(resumed[2:], whole.splitlines()[2:]):  # run in groups of other sizes: the last bits differ
        got, want = json.loads(line), json.loads(before)
        assert {k: v for k, v in got.items() if k != "result"} == {k: v for k, v in want.items() if k != "result"}
        if "result" in want:
            same_ranking(got["result"], want["result"])


def test_corpus_task_runs_a_file(bert_ce, tmp_path):
    folder, model = bert_ce
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(json.dumps({"q": CORPUS[i], "passages": FEW}) for i in range(4)) + "\n", encoding="utf-8")
    summary = run_file(src, out, model, task="rerank", field={"query": "q"}, activation="identity", progress=False)
    assert summary.errors == 0
    for i, line in enumerate(out.read_text(encoding="utf-8").splitlines()):
        same_ranking(json.loads(line)["result"], rerank(CORPUS[i], FEW, model, activation="identity"))


def test_the_cutting_copy_of_a_tokenizer_is_made_once_and_the_models_stays_whole(tiny_folder):
    """cut_pairs copied the whole tokenizer on every call (15 ms for a 30k vocabulary, about a tenth of a second
    for XLM-R's: more than a small cross-encoder's pass); the copy is now made once per limit and truncation, and
    the model's own tokenizer, shared by every call, never cuts."""
    from bertfn.tasks.pairs import _cutting, cut_pairs

    tok = bertfn.load(tiny_folder).tokenizer
    long = " ".join(["the cat sat on the mat"] * 8)
    first = cut_pairs(tok, ["the cat", long], [long, "a dog"], 12, "longest_first")
    assert first.input_ids.shape == (2, 12) and len(_cutting[tok]) == 1
    copy = _cutting[tok][(12, "longest_first")]
    again = cut_pairs(tok, ["the cat", long], [long, "a dog"], 12, "longest_first")
    assert _cutting[tok][(12, "longest_first")] is copy and torch.equal(again.input_ids, first.input_ids)
    only = cut_pairs(tok, [long], ["a dog"], 12, "only_first")
    assert len(_cutting[tok]) == 2 and only.input_ids.shape == (1, 12)
    assert tok([long]).input_ids.shape[1] > 12  # the model's tokenizer is left as it was
