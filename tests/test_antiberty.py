"""bertfn on a real pretrained masked LM: AntiBERTy (pip install antiberty), against transformers.

AntiBERTy is a BERT masked LM trained on antibody sequences: 25 tokens (BERT's five specials and the 20
amino acids as capital letters), sequences written one residue per word. transformers reads the same
weights with ``BertForMaskedLM.from_pretrained`` (which leaves AntiBERTy's extra heads aside) and
``BertTokenizer(vocab, do_lower_case=False)``, as AntiBERTy's own code does. On the ten antibody chains
of ``tests/data/antibodies.tsv`` both must tokenize alike and give the same fill-mask answers; on a heavy and a light
chain, each residue masked alone, the same logits at the mask; over the ten, bertfn recovers the README's share of
the residues.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from conftest import antiberty_paths

import bertfn

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.needs_transformers, pytest.mark.slow]  # transformers is the reference of every test here; slow: real chains residue by residue

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data" / "antibodies.tsv"


def read_chains(path: Path = DATA) -> list[tuple[str, str, str]]:
    """(name, chain, sequence) of every row of the TSV file; lines starting with # are comments."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    return [tuple(line.split("\t")) for line in lines[1:]]


CHAINS = read_chains()


def spaced(sequence: str) -> str:
    """A chain as AntiBERTy reads it: one residue per word ("EVQL" -> "E V Q L")."""
    return " ".join(sequence)


@pytest.fixture(scope="module")
def hf():
    """transformers' BertForMaskedLM and BertTokenizer on the AntiBERTy files."""
    paths = antiberty_paths()
    if paths is None:
        pytest.skip("antiberty is not installed (pip install -e '.[test]' installs it)")
    model = transformers.BertForMaskedLM.from_pretrained(paths[0], attn_implementation="eager").eval()
    return model, transformers.BertTokenizer(str(paths[1]), do_lower_case=False)


def test_the_data_holds_ten_real_heavy_and_light_chains():
    assert len(CHAINS) >= 10
    assert {chain for _, chain, _ in CHAINS} == {"heavy", "light"}
    for name, chain, seq in CHAINS:
        assert re.fullmatch(r"[ACDEFGHIKLMNPQRSTVWY]{100,130}", seq), name
        # the conserved cysteine pair of the domain's disulfide bond, and the end of the J segment
        assert seq[21 if chain == "heavy" else 22] == "C" and "C" in seq[85:97], (name, chain)
        assert re.search(r"WG.G|FG.G", seq[-13:]), (name, chain)


def test_tokenization_is_transformers(antiberty, hf):
    _, tok = hf
    texts = [spaced(seq) for _, _, seq in CHAINS] + ["E V Q [MASK] V E S", "[MASK] I Q M T Q S P S S L [MASK] A S V"]
    ours = antiberty.tokenizer(texts)
    theirs = tok(texts, padding=True, return_tensors="pt")
    assert torch.equal(ours.input_ids, theirs["input_ids"])
    assert torch.equal(ours.attention_mask, theirs["attention_mask"])
    assert torch.equal(ours.token_type_ids, theirs["token_type_ids"])
    assert ours.tokens[0][:5] == tok.convert_ids_to_tokens(theirs["input_ids"][0][:5]) == ["[CLS]", "E", "V", "Q", "L"]
    assert antiberty.tokenizer.unk_token_id not in ours.input_ids


ORACLE_CHAINS = 2
"""The chains (the first heavy and the first light) whose every masked residue transformers computes too: the other
eight, bertfn alone, for the recovery the README gives (transformers on all ten doubled the file's three minutes)."""


@pytest.fixture(scope="module")
def each_residue_masked(antiberty, hf):
    """For every chain, every residue masked alone: bertfn's logits at the mask, and transformers' on the first heavy
    and the first light chain (None on the others).

    All masked copies of one chain run as one batch (L copies of L + 2 tokens, [MASK] on the diagonal).
    Returns a list of (name, chain, residue ids (L,), bertfn logits (L, V), transformers logits (L, V) or None).
    """
    model, _ = hf
    checked = {next(i for i, c in enumerate(CHAINS) if c[1] == kind) for kind in ("heavy", "light")}
    assert len(checked) == ORACLE_CHAINS
    out = []
    with torch.inference_mode():
        for i, (name, chain, seq) in enumerate(CHAINS):
            ids = antiberty.tokenizer(spaced(seq)).input_ids  # (1, L + 2): [CLS] residues [SEP]
            L = len(seq)
            copies = ids.repeat(L, 1)  # (L, L + 2)
            rows, at = torch.arange(L), torch.arange(L) + 1  # copy i masks residue i, which is token i + 1
            copies[rows, at] = antiberty.tokenizer.mask_token_id
            h = bertfn.encoder(antiberty, copies).last_hidden_state  # (L, L + 2, H)
            ours = bertfn.mlm_head(antiberty, h[rows, at])  # (L, V)
            theirs = model(input_ids=copies).logits[rows, at] if i in checked else None  # (L, V)
            out.append((name, chain, ids[0, at], ours, theirs))
    return out


def test_logits_at_every_masked_residue_match_transformers(each_residue_masked):
    checked = [r for r in each_residue_masked if r[4] is not None]
    assert {chain for _, chain, *_ in checked} == {"heavy", "light"}
    for name, chain, _, ours, theirs in checked:
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0, msg=lambda m: f"{name} {chain}: {m}")


def test_masked_residue_recovery_is_transformers_and_far_above_chance(each_residue_masked):
    """Where transformers ran, it picks the residue bertfn picks at every mask; over the ten chains bertfn recovers
    what the README says, far above chance."""
    for name, chain, _, ours, theirs in each_residue_masked:
        if theirs is not None:
            assert torch.equal(ours.argmax(-1), theirs.argmax(-1)), f"{name} {chain}: a different residue predicted"
    n = sum(len(r[2]) for r in each_residue_masked)
    accuracy = sum((r[3].argmax(-1) == r[2]).sum().item() for r in each_residue_masked) / n
    assert 0.7 < accuracy < 1.0  # chance is 1/20: the weights are read right, not merely run
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"{accuracy:.3f} of the {n} residues" in readme, f"README should report {accuracy:.3f} of the {n} residues"


def test_fill_mask_is_the_transformers_pipeline(antiberty, hf):
    model, tok = hf
    texts = []
    for _, chain, seq in CHAINS:
        residues = list(seq)
        j = 100 if chain == "heavy" else 90  # in CDR3, the loop that varies most
        residues[j] = "[MASK]"
        if chain == "light":
            residues[10] = "[MASK]"  # and a framework residue: two masks in one text
        texts.append(" ".join(residues))
    pipe = transformers.pipeline("fill-mask", model=model, tokenizer=tok, device="cpu")
    theirs = pipe(texts, top_k=5)
    ours = bertfn.fill_mask(texts, antiberty, top_k=5)
    assert len(ours) == len(theirs) == len(CHAINS)
    for o, t in zip(ours, theirs):
        if isinstance(t[0], dict):  # one mask: a list of answers (several masks: one list per mask)
            o, t = [o], [t]
        for o_answers, t_answers in zip(o, t, strict=True):
            assert [a["token_str"] for a in o_answers] == [a["token_str"] for a in t_answers]
            assert [a["token"] for a in o_answers] == [a["token"] for a in t_answers]
            assert [a["sequence"] for a in o_answers] == [a["sequence"] for a in t_answers]
            for a, b in zip(o_answers, t_answers):
                assert a["score"] == pytest.approx(b["score"], abs=1e-5)


def test_pll_per_residue_is_antibertys_own_pseudo_log_likelihood(antiberty):
    """``AntiBERTyRunner.pseudo_log_likelihood`` (AntiBERTy's own code) gives the *mean* log-probability per residue,
    its special tokens' logits set to -inf first, of chains written without spaces: bertfn's ``pll / num_tokens`` of
    the spaced chain (the special tokens hold next to nothing of the softmax). A residue the vocabulary lacks ('J') is
    -inf there (log P of [UNK] with [UNK] ruled out); bertfn scores it and says so (docs/guides/scoring.md)."""
    import warnings

    from antiberty import AntiBERTyRunner

    chains = [seq[:24] for _, chain, seq in CHAINS if chain == "heavy"]  # the start of each: seconds, not minutes
    theirs = AntiBERTyRunner().pseudo_log_likelihood(chains + ["EVQLJESGGGLV"], batch_size=64)
    ours = bertfn.score([spaced(c) for c in chains], antiberty)
    assert [r["pll"] / r["num_tokens"] for r in ours] == pytest.approx(theirs[:-1].tolist(), abs=1e-5)
    assert theirs[-1] == -float("inf")
    with pytest.warns(bertfn.UnknownTokensWarning, match=r"1 of its 12 scored tokens read as \[UNK\] \(e.g. 'J'\)"):
        assert bertfn.score(spaced("EVQLJESGGGLV"), antiberty)["pll"] > -float("inf")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        bertfn.score("EVQLVESGGG", antiberty)  # unspaced: one [UNK] word, and the fix said
    assert "this vocabulary holds single characters, to be separated by spaces: write 'E V Q L'" in str(said[0].message)
