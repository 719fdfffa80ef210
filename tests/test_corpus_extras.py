"""bertfn.corpus with the libraries that spread a corpus out: Ray Data on a local Ray, and datasets.map.

The test extra installs both (ray[data], datasets); the plain stack in .ci/run leaves this file out.
"""

from __future__ import annotations

import json
import re

import datasets
import numpy
import pytest
import ray

import bertfn
from bertfn.corpus import Classify, Embed, FillMask, run_file
from test_corpus import BAD, corpus_lines, same_answers

pytestmark = pytest.mark.slow  # a local Ray and datasets


@pytest.fixture(scope="module")
def local_ray():
    """Two CPUs, no dashboard, a small object store: as quick to start as Ray gets."""
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 2**20, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_map_batches_equals_single_process(local_ray, tiny_folder, tmp_path):
    """1,200 rows of a JSONL file through FillMask on two Ray workers: every row as the single-process run."""
    texts = corpus_lines(1200, bad_every=13)
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)), encoding="utf-8")

    # Read first (materialize): on 2 CPUs, two workers of 1 CPU each would leave none for the read tasks.
    ds = ray.data.read_json(str(src)).materialize()
    out = ds.map_batches(FillMask, fn_constructor_kwargs={"model": str(tiny_folder), "top_k": 3}, batch_size=256,
                         compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1)
    rows = sorted(out.take_all(), key=lambda r: r["id"])

    single = tmp_path / "single.jsonl"
    run_file(src, single, str(tiny_folder), field="text", top_k=3, progress=False)
    expected = [json.loads(line) for line in single.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == list(range(1200))
    assert sum(r["error"] is not None for r in rows) == sum(t in BAD for t in texts) > 0
    for row, want in zip(rows, expected):
        assert row["text"] == want["text"]
        if "error" in want:
            assert row["result"] is None
            # file mode names the line and the row's id ("line 14 (id 13)"); a Ray row is "the text"
            assert row["error"] == re.sub(rf"line {want['line']}( \(id [^)]*\))?", "the text", want["error"], count=1)
        else:
            assert row["error"] is None
            same_answers(json.loads(row["result"]), want["result"])


@pytest.mark.needs_transformers
def test_ray_map_batches_on_a_roberta(local_ray, tmp_path):
    """A family member through the same callable class: RoBERTa's <mask>, its byte-level BPE, its own names."""
    from family_checkpoints import save_member

    save_member("roberta", tmp_path / "roberta")
    texts = ["The <mask> sat on the mat.", "no mask here", "When in Rome, do as the <mask> do."] * 20
    ds = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
    out = ds.map_batches(FillMask, fn_constructor_kwargs={"model": str(tmp_path / "roberta"), "top_k": 2},
                         batch_size=16, compute=ray.data.ActorPoolStrategy(size=1), num_cpus=1)
    rows = sorted(out.take_all(), key=lambda r: r["id"])
    model = bertfn.load(tmp_path / "roberta")
    for row, text in zip(rows, texts):
        if "<mask>" in text:
            assert row["error"] is None
            same_answers(json.loads(row["result"]), bertfn.fill_mask(text, model, top_k=2))
        else:
            assert row["result"] is None and "has no <mask> token" in row["error"]


@pytest.mark.needs_transformers
def test_ray_map_batches_embeds_as_the_sentence_transformers_folder_says(local_ray, tmp_path):
    """Embed on Ray reads the folder's modules as bertfn.embed does: a BGE-shaped folder (CLS, Normalize, a query
    prompt, saved by sentence-transformers) gives each row the vector embed gives, prompt_name and truncate_dim too, as
    a float32 vector (Ray's tensor column), NaN where a row was refused."""
    from sentence_transformers import SentenceTransformer
    from family_checkpoints import save_member
    from test_sentence_folders import st_modules

    save_member("bert", tmp_path / "hf", seed=3)
    SentenceTransformer(modules=st_modules(tmp_path / "hf", "cls", True, ["normalize"]), device="cpu",
                        prompts={"query": "Represent this sentence: "}).save(str(tmp_path / "st"))
    texts = ["The cat sat on the mat.", "Paris is a beautiful city.", "Hi."] * 8
    ds = ray.data.from_items([{"id": i, "text": t if i != 5 else None} for i, t in enumerate(texts)])
    options = {"model": str(tmp_path / "st"), "prompt_name": "query", "truncate_dim": 12}
    out = ds.map_batches(Embed, fn_constructor_kwargs=options, batch_size=8, compute=ray.data.ActorPoolStrategy(size=1),
                         num_cpus=1)
    rows = sorted(out.take_all(), key=lambda r: r["id"])
    want = bertfn.embed(texts, tmp_path / "st", prompt_name="query", truncate_dim=12).numpy()  # (N, 12)
    assert [r["error"] is None for r in rows] == [i != 5 for i in range(len(texts))]
    got = numpy.stack([r["result"] for r in rows])  # each row's vector, an array: no JSON to read
    assert got.dtype == numpy.float32 and got.shape == want.shape and numpy.isnan(got[5]).all()
    numpy.testing.assert_allclose(numpy.delete(got, 5, axis=0), numpy.delete(want, 5, axis=0), atol=1e-6, rtol=0)


def test_ray_map_batches_classifies_with_antibertys_trained_species_head(local_ray, antiberty):
    """A head's task on Ray: Classify over real weights, AntiBERTy's species head on the ten chains of
    tests/data/antibodies.tsv (four times) and two odd rows, each row as bertfn.classify gives it; then rows of two
    columns, text and text_pair (a heavy chain with a light one), as classify(text_pair=...)."""
    from conftest import antiberty_paths
    from test_classify import SPECIES, antibodies

    chains = [" ".join(seq) for _, _, seq in antibodies()]
    texts = chains * 4 + ["", "q v q l"]  # an empty row ([CLS] [SEP]: labelled, as the pipeline does); a lowercase one
    # ([UNK] throughout: a warning, no error)
    folder, vocab = antiberty_paths()
    options = {"model": str(folder), "tokenizer": str(vocab), "lowercase": False, "head": "cls.species", "labels": SPECIES}
    ds = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
    out = ds.map_batches(Classify, fn_constructor_kwargs=options, batch_size=16,
                         compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1)
    rows = sorted(out.take_all(), key=lambda r: r["id"])
    expected = bertfn.classify(texts, antiberty, head="cls.species", labels=SPECIES)
    assert [r["id"] for r in rows] == list(range(len(texts)))
    for row, want in zip(rows, expected):
        assert row["error"] is None
        got = json.loads(row["result"])
        assert got["label"] == want["label"] and got["score"] == pytest.approx(want["score"], abs=1e-5)
    assert [json.loads(rows[i]["result"])["label"] for i, (name, _, _) in enumerate(antibodies())
            if name == "rituximab"] == ["Mouse", "Mouse"]  # chimeric: its variable domains are mouse ones

    heavy, light = chains[0::2], chains[1::2]  # the file lists each antibody's VH, then its VL
    pairs = ray.data.from_items([{"text": h, "text_pair": lt} for h, lt in zip(heavy, light)])
    rows = pairs.map_batches(Classify, fn_constructor_kwargs=options, batch_size=8,
                             compute=ray.data.ActorPoolStrategy(size=1), num_cpus=1).take_all()
    want = {h: r for h, r in zip(heavy, bertfn.classify(heavy, antiberty, text_pair=light, head="cls.species",
                                                        labels=SPECIES))}
    assert len(rows) == len(heavy)
    for row in rows:
        got = json.loads(row["result"])
        assert got["label"] == want[row["text"]]["label"]
        assert got["score"] == pytest.approx(want[row["text"]]["score"], abs=1e-5)


def test_datasets_map_batched(tiny_folder):
    """The README's datasets recipe: Dataset.map(batched=True) with the callable class."""
    model = bertfn.load(tiny_folder)
    texts = corpus_lines(90, bad_every=11)
    ds = datasets.Dataset.from_dict({"id": list(range(len(texts))), "text": texts})
    out = ds.map(FillMask(model, top_k=2), batched=True, batch_size=32)
    assert out.column_names == ["id", "text", "result", "error"]
    expected = iter(bertfn.fill_mask([t for t in texts if t not in BAD], model, top_k=2))
    for row, text in zip(out, texts):
        if text in BAD:
            assert row["result"] is None and row["error"].startswith(f"the text {BAD[text]}")
        else:
            assert row["error"] is None
            same_answers(json.loads(row["result"]), next(expected))


def test_datasets_map_with_errors_only_in_a_later_batch(tiny_folder):
    """A first batch without errors typed datasets' error column null, and the first later error stopped the map
    ("Couldn't cast array of type string to null"): a corpus's refused lines are seldom in its first 256. result and
    error come back as Arrow columns of their own types (a first batch of refused texts typed result null the same way),
    and the dataset's columns keep theirs (a ClassLabel)."""
    model = bertfn.load(tiny_folder)
    texts = ["the [MASK] sat on the mat .", "paris is the [MASK] of france ."] * 4
    for batch in (texts[:4] + ["no mask here"] + texts[4:], ["no mask here"] * 4 + texts):
        ds = datasets.Dataset.from_dict({"text": batch, "label": [0, 1] * (len(batch) // 2) + [0] * (len(batch) % 2)})
        ds = ds.cast_column("label", datasets.ClassLabel(names=["a", "b"]))
        out = ds.map(FillMask(model, top_k=1), batched=True, batch_size=4)
        assert out.features["result"] == out.features["error"] == datasets.Value("string")
        assert out.features["label"] == ds.features["label"] and out["label"] == ds["label"]
        assert [e is None for e in out["error"]] == [t != "no mask here" for t in batch]
        assert [r is None for r in out["result"]] == [t == "no mask here" for t in batch]
    ds = datasets.Dataset.from_dict({"text": texts[:4] + [None] + texts[4:]})  # a missing text: embed's error
    out = ds.map(Embed(model), batched=True, batch_size=4)
    assert out["error"][4].startswith("the text must be a string") and numpy.isnan(out["result"][4]).all()
    vectors = numpy.array([r for i, r in enumerate(out["result"]) if i != 4], dtype=numpy.float32)
    assert numpy.array_equal(vectors, bertfn.embed(texts, model).numpy())


@pytest.mark.needs_transformers
def test_a_task_of_two_inputs_reads_each_from_its_column(tmp_path):
    """Answer's question and context come from the columns of their names (the class read only the first input, from
    a column "text", before: every row failed); column= renames one, and names no input that the task lacks."""
    from bertfn.corpus import Answer
    from family_checkpoints import save_head

    save_head("bert", "question-answering", tmp_path / "reader")
    model = bertfn.load(tmp_path / "reader")
    questions = ["Who sat on the mat?", "Where was the dog?", "What did the cat do?"]
    contexts = ["The cat sat on the mat.", "The dog was in the park by the river.", "The cat sat and then it ran."]
    expected = bertfn.answer(questions, contexts, model)
    ds = datasets.Dataset.from_dict({"question": questions, "context": contexts})
    out = ds.map(Answer(model), batched=True, batch_size=2)
    assert out["error"] == [None] * 3
    for got, want in zip(out["result"], expected):
        got = json.loads(got)
        assert got == {**want, "score": pytest.approx(want["score"], rel=1e-6)}  # JSON holds a float32's digits
    renamed = datasets.Dataset.from_dict({"question": questions, "passage": contexts})
    out = renamed.map(Answer(model, column={"context": "passage"}), batched=True, batch_size=3)
    assert [json.loads(r)["answer"] for r in out["result"]] == [e["answer"] for e in expected]
    with pytest.raises(bertfn.InputError, match="column= names 'passage', which the answer task does not read; its "
                                                "inputs are 'question', 'context'"):
        Answer(model, column={"passage": "context"})
