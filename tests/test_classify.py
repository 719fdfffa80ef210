"""bertfn.classify against transformers' ``pipeline("text-classification")``, and AntiBERTy's own heads.

Every member that has a sequence classifier (tests/family_checkpoints.py: random weights, its own tokenizer kind)
gives the pipeline's labels and, within 1e-4, its scores, in the pipeline's shapes (one text, a list, top_k given
or not, pairs as dicts or ``text_pair=``), on texts of several lengths and Unicode; the default function follows the
config's problem_type as the pipeline's does. Then bf16, edits, the errors, the CLI and a corpus file.

AntiBERTy's checkpoint holds three trained linear heads on its pooler beside its MLM head (``cls.species``,
``cls.chain``, ``cls.graft``): loading lists them (``model.extra_heads``) and ``head=`` runs one; its own
``AntiBERTyRunner`` is the oracle of their labels and logits.
"""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from conftest import antiberty_paths, fp32_atol, on_device
from family_checkpoints import (CORPUS, ESM_KINDS, HEAD_TASKS, PROTEINS, kind_params, member_tokenizer, save_head,
                                say_max_length)

import bertfn
from bertfn import interventions as iv
from bertfn.cli import main

needs_transformers = pytest.mark.needs_transformers
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
KINDS = tuple(k for k, tasks in HEAD_TASKS.items() if "sequence-classification" in tasks)
TEXTS = (CORPUS[0], CORPUS[2], "Café crème à Zürich, naïve — 東京 🙂!", "Rome.")  # lengths 4-18 words; accents, CJK, emoji
PAIR = ("The capital of France is Paris.", "Paris is a beautiful city with many museums.")


def texts_of(kind: str) -> tuple[str, ...]:
    return PROTEINS[:4] if kind in ESM_KINDS else TEXTS


def pair_of(kind: str) -> tuple[str, str]:
    return (PROTEINS[3], PROTEINS[5]) if kind in ESM_KINDS else PAIR


@pytest.fixture(scope="module", params=kind_params(KINDS, quick=KINDS))  # ESM-1b in the slow run
def member(request, tmp_path_factory, device):
    """(kind, bertfn model on the test device, transformers' pipeline) of a random 3-label classifier."""
    import transformers

    folder = tmp_path_factory.mktemp(request.param)
    hf = save_head(request.param, "sequence-classification", folder, id2label=LABELS,
                   label2id={v: k for k, v in LABELS.items()})
    pipe = transformers.pipeline("text-classification", model=on_device(hf), tokenizer=member_tokenizer(request.param),
                                 device=torch.device(device))
    return request.param, bertfn.load(folder, device=device), pipe


def same(ours, theirs, tol: float = 1e-4) -> None:
    """Equal results: the same nesting, labels and order, scores within ``tol``."""
    assert type(ours) is type(theirs), (ours, theirs)
    if isinstance(theirs, list):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            same(a, b, tol)
    else:
        assert set(ours) == {"label", "score"} and ours["label"] == theirs["label"]
        assert ours["score"] == pytest.approx(theirs["score"], abs=tol)


@needs_transformers
def test_classify_equals_the_pipeline_on_every_member(member):
    kind, model, pipe = member
    texts, (a, b) = list(texts_of(kind)), pair_of(kind)
    tol = fp32_atol(1e-4)
    same(bertfn.classify(texts, model), pipe(texts), tol)  # a list: each text's best label
    same(bertfn.classify(texts[0], model), pipe(texts[0]), tol)  # one text: a list of one dict
    same(bertfn.classify(texts, model, top_k=2), pipe(texts, top_k=2), tol)  # top_k given: a list per text
    same(bertfn.classify(texts[1], model, top_k=None), pipe(texts[1], top_k=None), tol)  # every label, best first
    same(bertfn.classify({"text": a, "text_pair": b}, model), pipe({"text": a, "text_pair": b}), tol)  # one dict
    same(bertfn.classify(a, model, text_pair=b), pipe(a, text_pair=b, top_k=1), tol)  # one text: a list of one dict
    same(bertfn.classify(texts, model), [d for (d,) in pipe(texts, top_k=1)], tol)  # the pipeline's top_k=1 wraps each
    mixed = bertfn.classify([texts[0], {"text": a, "text_pair": b}, texts[2]], model, top_k=None)
    same(mixed, [pipe(texts[0], top_k=None), pipe({"text": a, "text_pair": b}, top_k=None), pipe(texts[2], top_k=None)],
         tol)


@needs_transformers
@pytest.mark.parametrize("overrides,function", [
    (dict(problem_type="multi_label_classification"), "sigmoid"),
    (dict(num_labels=1, id2label=None, label2id=None), "sigmoid"),  # one output, no problem_type: the pipeline's sigmoid
    (dict(num_labels=1, id2label=None, label2id=None, problem_type="regression"), "none"),
])
def test_the_default_function_follows_the_problem_type_as_the_pipeline_does(overrides, function, tmp_path):
    import transformers

    from bertfn.tasks.classify import default_function

    config = {"id2label": LABELS, "label2id": {v: k for k, v in LABELS.items()}, **overrides}
    config = {k: v for k, v in config.items() if v is not None}
    hf = save_head("bert", "sequence-classification", tmp_path, **config)
    pipe = transformers.pipeline("text-classification", model=hf, tokenizer=member_tokenizer("bert"))
    model = bertfn.load(tmp_path)
    assert default_function(model.config.problem_type, model.config.num_labels) == function
    texts = list(TEXTS[:3])
    same(bertfn.classify(texts, model, top_k=None), pipe(texts, top_k=None))
    for f in ("softmax", "sigmoid", "none"):
        same(bertfn.classify(texts[0], model, function_to_apply=f.upper(), top_k=None),
             pipe(texts[0], function_to_apply=f, top_k=None))


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """(folder, bertfn model) of a random BERT classifier of 3 labels."""
    folder = tmp_path_factory.mktemp("bert-classifier")
    pytest.importorskip("transformers")
    save_head("bert", "sequence-classification", folder, id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    return folder, bertfn.load(folder)


@needs_transformers
def test_the_longest_text_the_positions_hold_runs_and_a_longer_one_is_refused(tmp_path):
    """RoBERTa's 66 positions hold 64 tokens (its positions count from padding_idx + 1)."""
    import transformers

    hf = save_head("roberta", "sequence-classification", tmp_path)
    model, tok = bertfn.load(tmp_path), member_tokenizer("roberta")
    longest = "cat" + " cat" * 60
    assert len(tok(longest).input_ids) == 64
    pipe = transformers.pipeline("text-classification", model=hf, tokenizer=tok)
    same(bertfn.classify(longest, model), pipe(longest))
    with pytest.raises(bertfn.InputError, match=r"^text 1 is 65 tokens long but the model reads at most 64; shorten it"):
        bertfn.classify(["cat", longest + " cat"], model)


@pytest.fixture(scope="module")
def max_length_40(tmp_path_factory):
    """(folder, bertfn model) of a random BERT classifier (64 positions) whose tokenizer_config.json says
    model_max_length 40, as a real checkpoint's says its 512: what transformers' truncation=True cuts to."""
    folder = tmp_path_factory.mktemp("bert-max-length-40")
    pytest.importorskip("transformers")
    save_head("bert", "sequence-classification", folder, id2label=LABELS, label2id={v: k for k, v in LABELS.items()},
              initializer_range=0.2)  # scores far apart: a cut one token off gives others
    say_max_length(folder, 40)
    return folder, bertfn.load(folder)


@needs_transformers
def test_truncation_cuts_as_the_pipelines_tokenizer_cuts(max_length_40):
    """Issue 57: truncation=True cuts a text to model_max_length, a pair "longest_first", as the pipeline's does; a
    text of 41-64 tokens runs whole without it, as in the pipeline; a longer one is refused, naming the option."""
    import transformers

    folder, model = max_length_40
    pipe = transformers.pipeline("text-classification", model=str(folder))
    short, medium, long = CORPUS[1], " ".join(CORPUS[:5]), " ".join(CORPUS[:8])  # 9, 59 and 104 tokens
    for x in (long, medium, {"text": long, "text_pair": short}, {"text": short, "text_pair": long},
              {"text": long, "text_pair": medium}):
        same(bertfn.classify(x, model, truncation=True, top_k=None), pipe(x, truncation=True, top_k=None), 1e-5)
    same(bertfn.classify([short, long, medium], model, truncation=True), pipe([short, long, medium], truncation=True),
         1e-5)
    same(bertfn.classify(medium, model, top_k=None), pipe(medium, top_k=None), 1e-5)  # no truncation: read whole
    with pytest.raises(bertfn.InputError, match=r"^text 1 is 104 tokens long but the model reads at most 64; shorten "
                                                r"it, or pass truncation=True to cut it as transformers' pipeline does$"):
        bertfn.classify([short, long], model)
    with pytest.raises(bertfn.InputError, match=r"^truncation must be True or False, got 'yes'$"):
        bertfn.classify(short, model, truncation="yes")


@needs_transformers
def test_cli_truncation_and_its_error_count_from_one(max_length_40, tmp_path, capsys):
    folder, model = max_length_40
    texts = [CORPUS[1], " ".join(CORPUS[:8])]  # the second: 104 tokens
    assert main(["classify", *texts, "--model", str(folder)]) == 2
    assert capsys.readouterr().err == ("bertfn: error: text 2 is 104 tokens long but the model reads at most 64; "
                                       "shorten it, or pass --truncation to cut it as transformers' pipeline does\n")
    assert main(["classify", *texts, "--model", str(folder), "--truncation", "--json"]) == 0
    same(json.loads(capsys.readouterr().out), bertfn.classify(texts, model, truncation=True), 1e-6)
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert main(["classify", "--input", str(src), "--output", str(out), "--model", str(folder), "--truncation",
                 "--no-progress"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    same([r["result"] for r in rows], bertfn.classify(texts, model, truncation=True), 1e-6)


@needs_transformers
def test_bf16_gives_the_same_labels(bert):
    _, model = bert
    texts = list(TEXTS)
    fp32 = bertfn.classify(texts, model, top_k=None)
    bf16 = bertfn.classify(texts, model, top_k=None, dtype="bfloat16")
    assert [[d["label"] for d in r] for r in bf16] == [[d["label"] for d in r] for r in fp32]
    assert all(isinstance(d["score"], float) for r in bf16 for d in r)
    for a, b in zip(bf16, fp32):
        same(a, b, tol=1e-2)


@needs_transformers
def test_edits_run_the_reference_functions_and_change_the_answer(bert):
    _, model = bert
    texts = list(TEXTS)
    fast = bertfn.classify(texts, model, top_k=None)
    same(bertfn.classify(texts, model, top_k=None, edits={"pooler": lambda x, point: x}, batch_size=2), fast, 1e-5)
    pushed = bertfn.classify(texts, model, edits={"classifier.logits": lambda x, point: x + torch.tensor([0., 0., 50.])})
    assert [r["label"] for r in pushed] == ["positive"] * len(texts) and min(r["score"] for r in pushed) > 0.99


@needs_transformers
def test_a_head_replaced_by_hand_that_does_not_fit_is_named(bert):
    """A classifier's weight or bias replaced by hand with another number of labels: the call names the weight and the
    shape its config implies (it was oneDNN's "could not create a primitive descriptor", or torch's size mismatch),
    on the fast path (classify) and on the traced one (trace) alike."""
    folder, _ = bert
    H = bertfn.load(folder).config.hidden_size
    for key, shape in (("classifier.bias", (2,)), ("classifier.weight", (2, H))):
        model = bertfn.load(folder)
        model.state[key] = torch.zeros(shape)
        for call in (lambda: bertfn.classify("a cat", model), lambda: bertfn.trace("a cat", model)):
            with pytest.raises(bertfn.CheckpointError, match=rf"{key} is {re.escape(str(shape))} where the config implies "
                                                             rf"\(3[,)].*3 labels"):
                call()


@needs_transformers
def test_a_patch_of_several_texts_gives_each_text_of_the_groups_its_own(bert):
    """classify runs its texts in groups sorted by length; the head's points (pooler, classifier.logits) of a recording
    of several texts go each to its own text there (they went by row, to another text of the group): patched with the
    clean texts' pooler or logits, each text is classified as its clean text."""
    _, model = bert
    cleans = ["the cat sat on the mat and the dog sat on the cat .", "rome .", "the cat sat on the mat ."]
    others = ["a dog .", "when in rome do as the romans do", "the dog sat on the mat ."]
    recs = bertfn.trace(cleans, model)
    for name in ("pooler", "classifier.logits"):
        same(bertfn.classify(others, model, top_k=None, edits=iv.patch(recs, name), batch_size=2),
             bertfn.classify(cleans, model, top_k=None), 1e-5)


@needs_transformers
def test_bad_inputs_and_options_say_what_to_do(bert):
    _, model = bert
    cases = [
        (lambda: bertfn.classify(["a cat", 3], model), r"^text 1 must be a string, got int"),  # "" is classified
        (lambda: bertfn.classify(["a", "b"], model, text_pair=["c"]), r"got 2 texts but 1 pairs"),
        (lambda: bertfn.classify({"text": "a", "pair": "b"}, model), r'item 0 is a dict.*\{"text": \.\.\., "text_pair"'),
        (lambda: bertfn.classify([{"text": "a", "text_pair": "b"}], model, text_pair="c"), "not both"),
        (lambda: bertfn.classify("a", model, top_k=0), "top_k must be a positive integer or None"),
        (lambda: bertfn.classify("a", model, function_to_apply="relu"), "function_to_apply must be one of"),
        (lambda: bertfn.classify("a", model, labels=["x", "y"]), r"labels must be 3 names"),
        (lambda: bertfn.classify(" ".join(["cat"] * 70), model), r"is 72 tokens long but the model reads at most 64"),
    ]
    for call, message in cases:
        with pytest.raises(bertfn.InputError, match=message):
            call()
    assert bertfn.classify("a cat", model, labels=["x", "y", "z"], top_k=None)[0]["label"] in ("x", "y", "z")


def test_a_model_without_a_classifier_gets_require_heads_error(tiny_folder):
    model = bertfn.load(tiny_folder)  # a masked LM with a pooler, and no other head
    with pytest.raises(bertfn.MissingPartError, match=r"^classify needs a sequence-classification head, and model .* is "
                                                      r"a .*: use bertfn\.fill_mask"):
        bertfn.classify("the cat sat", model)
    with pytest.raises(bertfn.MissingPartError, match=r"head='cls\.species' needs a linear head .*\(it holds none\)"):
        bertfn.classify("the cat sat", model, head="cls.species")


# --- heads beside a checkpoint's own parts (AntiBERTy's), found at load --------------------------------


def with_keys(folder: Path, target: Path, extra: dict[str, torch.Tensor]) -> Path:
    """A copy of checkpoint ``folder`` at ``target`` with the tensors ``extra`` added to its weights."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, target)
    state = load_file(target / "model.safetensors")
    save_file({**state, **extra}, str(target / "model.safetensors"))
    return target


def test_linear_heads_on_the_pooler_are_listed_and_leftovers_still_warned_about(tiny_folder, tmp_path):
    H = bertfn.load(tiny_folder).config.hidden_size
    g = torch.Generator().manual_seed(0)
    heads = {"cls.species.weight": torch.randn(6, H, generator=g), "cls.species.bias": torch.randn(6, generator=g),
             "chain.weight": torch.randn(2, H, generator=g), "chain.bias": torch.randn(2, generator=g)}
    leftovers = {"optimizer.step": torch.tensor(3), "old.weight": torch.randn(4, H + 1), "old.bias": torch.randn(4),
                 "extra.transform.dense.weight": torch.randn(H, H), "extra.transform.dense.bias": torch.randn(H),
                 "extra.transform.LayerNorm.weight": torch.ones(H)}  # no head: a wrong width, a layer of a block
    folder = with_keys(tiny_folder, tmp_path / "heads", {**heads, **leftovers})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = bertfn.load(folder)
    assert model.extra_heads == {"chain": 2, "cls.species": 6}
    assert [re.search(r"reads \((.*)\):", str(w.message))[1] for w in caught] == [
        "extra.transform.LayerNorm.*, extra.transform.dense.*, old.*, optimizer.*"]
    assert "extra heads chain (2), cls.species (6);" in repr(model)

    results = bertfn.classify(["the cat sat", "a red dog"], model, head="cls.species", top_k=None)
    with torch.no_grad():
        enc = model.tokenizer(["the cat sat", "a red dog"])
        h = bertfn.encoder(model, enc.input_ids, enc.attention_mask).last_hidden_state  # (2, S, H)
        probs = torch.nn.functional.linear(bertfn.pooler(model, h), heads["cls.species.weight"],
                                           heads["cls.species.bias"]).softmax(-1)  # (2, 6)
    for r, p in zip(results, probs):
        assert {d["label"]: d["score"] for d in r} == pytest.approx({f"LABEL_{i}": float(x) for i, x in enumerate(p)},
                                                                     abs=1e-5)
    assert [d["label"] for d in bertfn.classify("the cat", model, head="chain", labels=["H", "L"], top_k=None)] in (
        ["H", "L"], ["L", "H"])
    with pytest.raises(bertfn.MissingPartError, match=r"its extra heads are chain, cls\.species"):
        bertfn.classify("the cat", model, head="old")

    with pytest.warns(bertfn.UnusedWeightsWarning, match=r"has 6 key\(s\) that no BERT part reads"):  # as above
        state = bertfn.load(folder).state
    no_pooler = {k: t for k, t in state.items() if not k.startswith("bert.pooler.")}
    from bertfn.checkpoint.state import extra_heads
    assert extra_heads(model.config, no_pooler) == {}  # nothing to read them from


SPECIES = ["Camel", "Human", "Mouse", "Rabbit", "Rat", "Rhesus"]  # AntiBERTyRunner's LABEL_TO_SPECIES, in order
CHAINS = ["Heavy", "Light"]  # its LABEL_TO_CHAIN


def antibodies() -> list[tuple[str, str, str]]:
    """(name, "heavy" | "light", residues) of tests/data/antibodies.tsv: ten variable domains."""
    lines = (Path(__file__).parent / "data" / "antibodies.tsv").read_text(encoding="utf-8").splitlines()
    return [tuple(line.split("\t")) for line in lines[1:] if line and not line.startswith(("#", "name"))]


def test_antiberty_names_rituximabs_chains_mouse(antiberty):
    """Rituximab is chimeric: its variable domains are the original mouse ones."""
    assert antiberty.extra_heads == {"cls.chain": 2, "cls.graft": 2, "cls.species": 6}
    chains = [" ".join(seq) for name, _, seq in antibodies() if name == "rituximab"]  # heavy, light
    assert [r["label"] for r in bertfn.classify(chains, antiberty, head="cls.species", labels=SPECIES)] == ["Mouse"] * 2
    assert [r["label"] for r in bertfn.classify(chains, antiberty, head="cls.chain", labels=CHAINS)] == CHAINS
    with pytest.raises(bertfn.MissingPartError, match=r"use bertfn\.fill_mask; or run one of the linear heads it holds "
                                                      r"beside its own parts with head=cls\.chain, cls\.graft, cls\.species$"):
        bertfn.classify(chains, antiberty)


@needs_transformers
@pytest.mark.slow
def test_antiberty_heads_equal_its_own_runner(antiberty):
    """Every chain's species and chain type as AntiBERTyRunner.classify gives them, and the logits of its model on a
    padded batch within 1e-5: rituximab's chains Mouse, adalimumab's, nivolumab's and pembrolizumab's Human,
    every VH Heavy and every VL Light."""
    from antiberty import AntiBERTyRunner

    rows = antibodies()
    runner = AntiBERTyRunner()
    runner.model.to("cpu")
    sequences = [seq for _, _, seq in rows]
    species, chains = runner.classify(sequences)
    spaced = [" ".join(s) for s in sequences]  # the runner's own spacing: one token per residue
    enc = runner.tokenizer(spaced, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = runner.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
    for head, names, theirs, logits in (("cls.species", SPECIES, species, out.species_logits),
                                        ("cls.chain", CHAINS, chains, out.chain_logits)):
        ours = bertfn.classify(spaced, antiberty, head=head, labels=names, function_to_apply="none", top_k=None)
        assert [r[0]["label"] for r in ours] == theirs
        got = torch.tensor([[{d["label"]: d["score"] for d in r}[n] for n in names] for r in ours])  # (10, L)
        torch.testing.assert_close(got, logits, atol=1e-5, rtol=1e-6)  # logits up to 23: fp32 kernels that sum in other orders
    expected = {"rituximab": "Mouse", "adalimumab": "Human", "nivolumab": "Human", "pembrolizumab": "Human"}
    assert all(s == expected[name] for (name, _, _), s in zip(rows, species) if name in expected)
    assert chains == [chain.capitalize() for _, chain, _ in rows]


def test_cli_runs_an_extra_head_with_its_labels(capsys):
    paths = antiberty_paths()
    if paths is None:
        pytest.skip("antiberty is not installed")
    chains = [" ".join(seq) for name, _, seq in antibodies() if name == "adalimumab"]
    argv = ["classify", *chains, "--model", str(paths[0]), "--tokenizer", str(paths[1]), "--cased", "--head",
            "cls.chain", "--labels", *CHAINS]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err == ""  # the extra heads are no unused weights
    lines = out.splitlines()
    assert lines[0].split() == ["label", "score", "text"]
    assert [line.split()[0] for line in lines[1:]] == CHAINS and all(line.split()[1] == "1.0000" for line in lines[1:])
    assert main([*argv[:-len(CHAINS)], ",".join(CHAINS)]) == 2  # --labels Heavy,Light, as a user tried with view
    assert capsys.readouterr().err == (f"bertfn: error: --labels must be 2 names, one per output of the head, got "
                                       f"['{','.join(CHAINS)}']; separate them by spaces, not commas\n")
    with pytest.raises(bertfn.InputError, match=r"labels must be 2 names, .*; pass a list of names, not commas$"):
        bertfn.classify(chains, bertfn.load(paths[0], tokenizer=paths[1], lowercase=False), head="cls.chain",
                        labels=",".join(CHAINS).split(" "))


# --- the command line and corpus files ---------------------------------------------------------------


@needs_transformers
def test_cli_table_json_top_k_and_pairs(bert, capsys):
    folder, model = bert
    base = ["--model", str(folder)]
    assert main(["classify", *TEXTS[:2], *base]) == 0
    lines = capsys.readouterr().out.splitlines()
    best = bertfn.classify(list(TEXTS[:2]), model)
    assert lines[0].split() == ["label", "score", "text"] and len(lines) == 3
    assert [line.split()[:2] for line in lines[1:]] == [[r["label"], f"{r['score']:.4f}"] for r in best]
    assert lines[1].endswith(TEXTS[0])

    assert main(["classify", TEXTS[0], *base, "--all-labels", "--json"]) == 0
    same(json.loads(capsys.readouterr().out), bertfn.classify(TEXTS[0], model, top_k=None), 1e-6)
    assert main(["classify", *TEXTS[:2], *base, "--top-k", "2", "--function", "sigmoid", "--json"]) == 0
    same(json.loads(capsys.readouterr().out), bertfn.classify(list(TEXTS[:2]), model, top_k=2,
                                                              function_to_apply="sigmoid"), 1e-6)
    assert main(["classify", *PAIR[:1], *base, "--pair", PAIR[1], "--top-k", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{PAIR[0]} | {PAIR[1]}" and out[1].split() == ["rank", "score", "label"] and len(out) == 5
    assert main(["classify", "a", "b", *base, "--pair", "c", "d", "e"]) == 2
    assert "got 2 texts but 3 pairs (--pair)" in capsys.readouterr().err


@needs_transformers
def test_a_file_of_lines_or_of_pairs_runs_and_resumes(bert, tmp_path, capsys):
    folder, model = bert
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join([*TEXTS, ""]) + "\n", encoding="utf-8")  # the empty line is classified, as the pipeline does
    argv = ["classify", "--input", str(src), "--output", str(out), "--model", str(folder), "--top-k", "2"]
    assert main(argv) == 0
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 5 and lines[-1]["text"] == ""
    for line, expected in zip(lines, bertfn.classify([*TEXTS, ""], model, top_k=2)):
        assert line["text"] in (*TEXTS, "")
        same(line["result"], expected, 1e-6)

    complete = out.read_bytes()
    out.write_bytes(b"".join(complete.splitlines(keepends=True)[:2]) + b'{"line": 3, "te')  # killed mid-line
    assert main([*argv, "--resume"]) == 0
    assert out.read_bytes() == complete and "(resumed after line 2)" in capsys.readouterr().err
    assert main([*argv[:-2], "--all-labels", "--resume"]) == 2  # top_k None: every label, not the default (1)
    assert f"{out} was written with option --top-k 2, and this run has None; --resume" in capsys.readouterr().err
    assert main([*argv[:-2], "--resume"]) == 2  # the default top_k, 1, is a value the record holds
    assert f"{out} was written with option --top-k 2, and this run has 1; --resume" in capsys.readouterr().err

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps(r) for r in [{"id": 1, "sentence": PAIR[0], "second": PAIR[1]},
                                                        {"id": 2, "sentence": TEXTS[0]}]) + "\n", encoding="utf-8")
    paired = tmp_path / "paired.jsonl"
    assert main(["classify", "--input", str(pairs), "--output", str(paired), "--model", str(folder),
                 "--field", "text=sentence", "text_pair=second", "--no-progress"]) == 0
    got = [json.loads(line) for line in paired.read_text(encoding="utf-8").splitlines()]
    assert [g["id"] for g in got] == [1, 2]
    same(got[0]["result"], bertfn.classify({"text": PAIR[0], "text_pair": PAIR[1]}, model), 1e-6)
    same(got[1]["result"], bertfn.classify([TEXTS[0]], model)[0], 1e-6)
    capsys.readouterr()
    assert main(["classify", "--input", str(pairs), "--model", str(folder)]) == 2  # no --field: the pair's form named
    assert capsys.readouterr().err.endswith("looks like JSON Lines; name the field that holds the text with --field "
                                            "NAME, or with text_pair too, --field text=NAME text_pair=NAME\n")
