"""Everything bertfn does, on every member of BERT's family, through the same calls as on BERT.

Each member (tests/family_checkpoints.py: random weights, its own tokenizer kind) against transformers:
fill-mask equals ``pipeline("fill-mask")`` (top-5 tokens, token_str with its leading space, sequence,
scores within 1e-4) with the member's own mask token, for one mask, several, batches and targets; the
PLL equals one computed with transformers; ELECTRA's replaced-token scores equal ``ElectraForPreTraining``'s.
Then the rest works unchanged: mutation scores, joint filling, embed, trace and edits by the same point
names, the explorer, the CLI, corpus files and datasets.map.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from family_checkpoints import kind_params, member_tokenizer, save_member

import bertfn
from bertfn.interventions import zero_heads

pytestmark = pytest.mark.needs_transformers

MLM_MEMBERS = ("roberta", "xlm-roberta", "distilbert", "electra", "albert", "camembert", "mpnet", "deberta-v2")


@pytest.fixture(scope="module", params=kind_params(MLM_MEMBERS))
def member(request, tmp_path_factory):
    """(kind, transformers model, its tokenizer, bertfn model, folder) for each masked LM of the family."""
    folder = tmp_path_factory.mktemp(request.param)
    hf = save_member(request.param, folder)
    return request.param, hf, member_tokenizer(request.param), bertfn.load(folder), folder


def masked(tok, text: str) -> str:
    """``text`` with its ``{m}`` written as the tokenizer's own mask token."""
    return text.format(m=tok.mask_token)


def same_answers(ours: list, theirs: list, tol: float = 1e-4) -> None:
    assert [a["token"] for a in ours] == [a["token"] for a in theirs]
    assert [a["token_str"] for a in ours] == [a["token_str"] for a in theirs]
    assert [a["sequence"] for a in ours] == [a["sequence"] for a in theirs]
    for a, b in zip(ours, theirs):
        assert a["score"] == pytest.approx(b["score"], abs=tol)


def test_fill_mask_equals_the_pipeline(member):
    import transformers

    kind, hf, tok, model, _ = member
    pipe = transformers.pipeline("fill-mask", model=hf, tokenizer=tok, top_k=5)
    texts = [masked(tok, t) for t in ("When in Rome, do as the {m} do.", "The capital of France is {m}.",
                                      "The {m} sat on the {m}.")]
    ours = bertfn.fill_mask(texts, model, top_k=5)
    for text, answers in zip(texts, ours):
        theirs = pipe(text)
        if text.count(tok.mask_token) > 1:
            for a, b in zip(answers, theirs):
                same_answers(a, b)
        else:
            same_answers(answers, theirs)
            same_answers(bertfn.fill_mask(text, model, top_k=5), answers, tol=1e-6)  # alone as in the batch
    if kind == "roberta":  # byte-level BPE's leading spaces, as the pipeline shows them
        assert any(a["token_str"].startswith(" ") for a in ours[0])


def test_targets_equal_the_pipelines(member):
    import transformers

    kind, hf, tok, model, _ = member
    pipe = transformers.pipeline("fill-mask", model=hf, tokenizer=tok)
    text = masked(tok, "The {m} sat on the mat.")
    vocab = tok.get_vocab()
    targets = [t for t in (" cat", " dog", "cat", "dog", "▁cat", "▁dog", "Ġcat") if t in vocab][:3]
    assert targets
    same_answers(bertfn.fill_mask(text, model, targets=targets, top_k=3), pipe(text, targets=targets, top_k=3))


def pll_transformers(hf, tok, text: str, within_word: bool = False) -> float:
    """Salazar et al.'s PLL by transformers: each token but the specials masked alone, log P(true token); with
    ``within_word``, Kauf & Ivanova's PLL-word-l2r: the later pieces of its word (the tokenizer's word_ids) too."""
    enc = tok(text, return_special_tokens_mask=True, return_tensors="pt")
    ids, special, words = enc["input_ids"][0], enc["special_tokens_mask"][0], enc.word_ids()
    where = [j for j in range(len(ids)) if not special[j]]
    copies = ids.repeat(len(where), 1)
    for c, j in enumerate(where):
        hidden = [k for k in where if k >= j and words[k] == words[j]] if within_word else [j]
        copies[c, hidden] = tok.mask_token_id
    with torch.no_grad():
        logp = hf(input_ids=copies).logits.log_softmax(dim=-1)
    return sum(float(logp[c, j, ids[j]]) for c, j in enumerate(where))


def test_pll_equals_one_computed_with_transformers(member):
    kind, hf, tok, model, _ = member
    texts = ["When in Rome, do as the Romans do.", "The cat sat on the mat."]
    for text, ours in zip(texts, bertfn.score(texts, model)):
        assert ours["pll"] == pytest.approx(pll_transformers(hf, tok, text), abs=1e-3)
        assert ours["num_tokens"] == len(tok(text, add_special_tokens=False)["input_ids"])
    for text, ours in zip(texts, bertfn.score(texts, model, method="within_word_l2r")):
        assert ours["pll"] == pytest.approx(pll_transformers(hf, tok, text, within_word=True), abs=1e-3)


def test_mutation_scores_equal_masked_marginals_by_transformers(member):
    """score_mutations of "dog" for "cat": log P(dog) - log P(cat) at the masked position, as transformers gives it."""
    kind, hf, tok, model, _ = member
    for a, b in (("cat", "dog"), ("king", "queen"), ("man", "woman"), ("red", "blue"), ("big", "small")):
        reference, variant = f"The {a} sat on the mat.", f"The {b} sat on the mat."
        ids, other = tok(reference)["input_ids"], tok(variant)["input_ids"]
        if len(ids) == len(other) and sum(x != y for x, y in zip(ids, other)) == 1:
            break  # two words of one piece each in this vocabulary
    else:
        pytest.fail("no pair of one-piece words in this vocabulary")
    j = next(j for j, (a, b) in enumerate(zip(ids, other)) if a != b)
    copy = torch.tensor([ids])
    copy[0, j] = tok.mask_token_id
    with torch.no_grad():
        logp = hf(input_ids=copy).logits[0, j].log_softmax(-1)
    ours = bertfn.score_mutations(variant, model, reference=reference)
    assert ours["score"] == pytest.approx(float(logp[other[j]] - logp[ids[j]]), abs=1e-4)
    assert [m["position"] for m in ours["mutations"]] == [j]  # counted from 1 over the scored tokens: <s> is 0


def test_joint_filling_and_embeddings_run_on_every_member(member):
    kind, hf, tok, model, _ = member
    joint = bertfn.fill_mask(masked(tok, "The {m} sat on the {m}."), model, joint=True, top_k=2)
    assert len(joint) == 2 and len(joint[0]["tokens"]) == 2
    texts = ["The cat sat.", "Paris is a city, the capital of France."]
    vectors = bertfn.embed(texts, model, pooling="mean")  # (2, H)
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = hf(**enc, output_hidden_states=True).hidden_states[-1]  # (2, S, H)
    keep = enc["attention_mask"][:, :, None]
    torch.testing.assert_close(vectors, (h * keep).sum(1) / keep.sum(1), atol=1e-5, rtol=0)


def test_trace_and_edits_by_the_same_names(member):
    kind, hf, tok, model, _ = member
    text = masked(tok, "When in Rome, do as the {m} do.")
    rec = bertfn.trace(text, model)
    S = len(rec.tokens)
    assert rec["layer.1.attention.probs"].shape == (1, model.config.num_attention_heads, S, S)
    assert "mlm.logits" in rec and rec.mask_positions
    silenced = bertfn.fill_mask(text, model, edits=zero_heads({i: range(model.config.num_attention_heads)
                                                                for i in range(model.config.num_hidden_layers)}))
    assert silenced != bertfn.fill_mask(text, model)
    with torch.no_grad():  # the edit as transformers' head_mask does it (ALBERT's head_mask reads one row: layer 0 only)
        layers = 1 if kind == "albert" else model.config.num_hidden_layers
        head_mask = torch.ones(model.config.num_hidden_layers, model.config.num_attention_heads)
        head_mask[:layers, 0] = 0
        enc = tok(text, return_tensors="pt")
        if kind == "deberta-v2":  # transformers' DeBERTa takes no head_mask: zero head 0's context by a hook instead
            hd = model.config.head_dim
            hooks = [layer.attention.self.register_forward_hook(
                lambda mod, args, out: (torch.cat([torch.zeros_like(out[0][..., :hd]), out[0][..., hd:]], -1), out[1]))
                for layer in hf.deberta.encoder.layer]
            try:
                theirs = hf(**enc).logits[0].softmax(-1)
            finally:
                for hook in hooks:
                    hook.remove()
        else:
            theirs = hf(**{k: v for k, v in enc.items() if k != "token_type_ids" or kind != "distilbert"},
                        head_mask=head_mask).logits[0].softmax(-1)
    ours = bertfn.fill_mask(text, model, top_k=1, edits=zero_heads({i: [0] for i in range(layers)}))
    where = int((enc["input_ids"][0] == tok.mask_token_id).nonzero()[0, 0])
    assert ours[0]["score"] == pytest.approx(float(theirs[where].max()), abs=1e-4)


@pytest.mark.slow
def test_the_explorer_and_the_cli(member, tmp_path):
    kind, hf, tok, model, folder = member
    text = masked(tok, "When in Rome, do as the {m} do.")
    page = bertfn.trace(text, model).save_html(tmp_path / "view.html")
    assert page.stat().st_size > 10_000
    run = [sys.executable, "-m", "bertfn"]
    out = subprocess.run([*run, "fill-mask", text, "--model", str(folder), "--json", "--top-k", "3"],
                         capture_output=True, text=True, check=True)
    assert [a["token"] for a in json.loads(out.stdout)] == [a["token"] for a in bertfn.fill_mask(text, model, top_k=3)]
    subprocess.run([*run, "view", text, "--model", str(folder), "--out", str(tmp_path / "cli.html")],
                   capture_output=True, text=True, check=True)
    assert (tmp_path / "cli.html").stat().st_size > 10_000
    wrong = subprocess.run([*run, "fill-mask", "no mask here", "--model", str(folder)], capture_output=True, text=True)
    assert wrong.returncode == 2 and tok.mask_token in wrong.stderr


def test_a_corpus_file_and_datasets_map(member, tmp_path):
    import datasets

    from bertfn.corpus import FillMask, run_file

    kind, hf, tok, model, folder = member
    lines = [masked(tok, t) for t in ("The {m} sat on the mat.", "no mask", "The capital of France is {m}.")]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run_file(src, tmp_path / "out.jsonl", str(folder), top_k=2, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [("error" in r) for r in rows] == [False, True, False]
    same_answers(rows[0]["result"], bertfn.fill_mask(lines[0], model, top_k=2), tol=1e-6)  # scores rounded in JSON
    ds = datasets.Dataset.from_dict({"text": [lines[0], lines[2]]}).map(FillMask(model, top_k=2), batched=True)
    same_answers(json.loads(ds[1]["result"]), bertfn.fill_mask(lines[2], model, top_k=2), tol=1e-6)


def test_replaced_tokens_equal_electras_discriminator(tmp_path):
    hf = save_member("electra-discriminator", tmp_path)
    tok = member_tokenizer("electra-discriminator")
    model = bertfn.load(tmp_path)
    texts = ["The cat sat on the mat.", "When in Rome, do as the Romans do."]
    ours = bertfn.replaced_tokens(texts, model)
    for text, tokens in zip(texts, ours):
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            theirs = torch.sigmoid(hf(**enc).logits[0])[1:-1]  # [CLS] and [SEP] left out
        assert [t["token"] for t in tokens] == tok.convert_ids_to_tokens(enc["input_ids"][0])[1:-1]
        torch.testing.assert_close(torch.tensor([t["score"] for t in tokens]), theirs, atol=1e-5, rtol=0)
        assert all(t["replaced"] == (t["score"] > 0.5) for t in tokens)
    with pytest.raises(bertfn.MissingPartError, match="masked-LM head"):
        bertfn.fill_mask("The [MASK] sat.", model)
    generator = save_member("electra", tmp_path / "generator")
    with pytest.raises(bertfn.MissingPartError, match="discriminator"):
        bertfn.replaced_tokens("The cat sat.", bertfn.load(tmp_path / "generator"))
    del generator


def test_trace_records_electras_discriminator_as_transformers_computes_it(tmp_path):
    """The discriminator of an ``ElectraForPreTraining`` checkpoint runs in a traced pass (``Family.own_head``): its
    ``discriminator.*`` points are listed by point_names, equal transformers' logits (a batch of two lengths too), and
    an edit takes them by name."""
    from bertfn.model.point_names import point_names

    hf = save_member("electra-discriminator", tmp_path)
    tok = member_tokenizer("electra-discriminator")
    model = bertfn.load(tmp_path)
    texts = ["The cat sat on the mat.", "When in Rome, do as the Romans do."]
    assert list(point_names(model.config)[-2:]) == ["discriminator.transform", "discriminator.logits"]
    rec = bertfn.trace(texts[1], model)
    enc = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        theirs = hf(**enc).logits  # (2, S)
    torch.testing.assert_close(rec["discriminator.logits"], theirs[1:], atol=1e-5, rtol=0)
    assert rec["discriminator.transform"].shape == (1, theirs.shape[1], model.config.hidden_size)
    recs = bertfn.trace(texts, model)
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(recs["discriminator.logits"][real], theirs[real], atol=1e-5, rtol=0)
    short = recs[0]  # the shorter text's own: its tokens alone, no padding
    assert short["discriminator.logits"].shape == (1, len(short.tokens)) == (1, int(real[0].sum()))
    assert short["discriminator.transform"].shape == (1, len(short.tokens), model.config.hidden_size)
    flipped = bertfn.trace(texts[1], model, edits={"discriminator.logits": lambda t, point: -t})
    torch.testing.assert_close(flipped["discriminator.logits"], -theirs[1:], atol=1e-5, rtol=0)


def test_a_target_of_several_pieces_is_scored_as_a_whole_word(member):
    """A word the vocabulary cuts into pieces is scored whole (P(piece 1 | k masked) x P(piece 2 | piece 1 shown, ...)),
    the product computed here with transformers; transformers' pipeline would score its first piece alone."""
    kind, hf, tok, model, _ = member
    text = masked(tok, "She was reading an {m} book.")
    word = next(w for w in ("unbelievably", " unbelievably", "interesting", " interesting")
                if len(tok(w, add_special_tokens=False)["input_ids"]) > 1)
    pieces = tok(word, add_special_tokens=False)["input_ids"]
    answer = next(a for a in bertfn.fill_mask(text, model, targets=[word, "a"], top_k=2) if a.get("pieces"))
    assert answer["token"] == pieces and answer["pieces"] == len(pieces)
    ids = tok(text)["input_ids"]
    at = ids.index(tok.mask_token_id)
    ids = ids[:at] + [tok.mask_token_id] * len(pieces) + ids[at + 1:]  # the mask widened to the word's k pieces
    p = 1.0
    for n, piece in enumerate(pieces):
        with torch.no_grad():
            p *= float(hf(input_ids=torch.tensor([ids])).logits[0, at + n].softmax(-1)[piece])
        ids[at + n] = piece  # shown for the next piece
    assert answer["score"] == pytest.approx(p, rel=1e-4)


def test_a_patching_sweep_is_the_run_patched_at_that_slice(member):
    """interventions.sweep on a member (ELECTRA's and ALBERT's layer 0 reads embeddings.projected): each value is
    the metric of the corrupted run with that one slice patched in from the clean run."""
    from bertfn import interventions as iv

    kind, hf, tok, model, _ = member
    clean = masked(tok, "When in Rome, do as the {m} do.")
    corrupted = next(c for c in (masked(tok, "When in " + city + ", do as the {m} do.") for city in
                                 ("Paris", "London", "Spain", "Italy", "France", "Romans", "the"))
                     if len(tok(c)["input_ids"]) == len(tok(clean)["input_ids"]))  # a city of as many pieces
    metric = iv.logit_difference(*tok(" dog cat" if kind == "roberta" else "dog cat", add_special_tokens=False)["input_ids"][:2])
    clean_rec = bertfn.trace(clean, model)
    result = iv.sweep(clean, corrupted, model, metric, over="positions", progress=False)
    for i in range(model.config.num_hidden_layers):
        for k in (0, 4, len(clean_rec.tokens) - 2):
            edited = bertfn.trace(corrupted, model, edits=iv.patch(clean_rec, f"layer.{i}.output", positions=k))
            assert abs(result.values[i, k].item() - metric(edited).item()) < 1e-5


def test_each_member_reads_as_many_tokens_as_its_positions_hold(member):
    """RoBERTa's positions start at padding_idx + 1, so its 66 rows hold 64 tokens (roberta-base: 514, 512): a window
    cut for a longer text fits, and every length error names that number (issue 46's edge)."""
    from bertfn.model.family import longest_input

    kind, _, tok, model, folder = member
    fits = 64 if kind in ("roberta", "xlm-roberta", "camembert", "mpnet") else model.config.max_position_embeddings
    assert longest_input(model.config) == fits
    text = " ".join(["the cat sat on the mat ."] * 20) + f" {tok.mask_token} ."
    assert len(bertfn.fill_mask(text, model, truncation=True, top_k=2)) == 2  # the window fits: no position error
    with pytest.raises(bertfn.InputError, match=f"reads at most {fits}; shorten it"):
        bertfn.fill_mask(text, model)
    with pytest.raises(bertfn.InputError, match=f"reads at most {fits}"):
        bertfn.score(text.replace(tok.mask_token, "dog"), model)
