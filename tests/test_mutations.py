"""Mutation effects (bertfn/tasks/mutations.py): masked marginals of a reference against transformers on
AntiBERTy (and on the small random checkpoint, on BERTFN_TEST_DEVICE), the PLL change, the substitution matrix as
an API, a CLI output and a file task."""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import DEVICE, antiberty_paths, fp32_atol, on_device

import bertfn
from bertfn.cli import main
from bertfn.tasks.mutations import Substitutions, score_mutations, substitution_matrix

HEAVY = "E V Q L V E S G G G L V Q P G G S L R L S C A A S G F T F S S Y A M S W V R Q A P G K G L E W V S"
VARIANTS = [HEAVY.replace("S W V R", "S W P R"),  # V37P
            HEAVY.replace("E V Q L", "Q V Q L").replace("G F T F", "G Y T F"),  # E1Q F27Y
            HEAVY]



def hf_marginals(hf, tok, text: str) -> torch.Tensor:
    """(L, V): BertForMaskedLM's log-softmax at each residue of ``text`` with that residue masked, the plain way."""
    ids = tok(text, return_tensors="pt").input_ids[0]
    positions = range(1, len(ids) - 1)
    copies = ids.repeat(len(positions), 1)
    for c, j in enumerate(positions):
        copies[c, j] = tok.mask_token_id
    with torch.no_grad():
        lp = hf(input_ids=copies.to(hf.device)).logits.log_softmax(dim=-1).cpu()  # (L, S, V)
    return torch.stack([lp[c, j] for c, j in enumerate(positions)])


@pytest.mark.needs_transformers
def test_masked_marginals_equal_transformers_on_the_device(mlm_checkpoint):
    """The substitution matrix and a mutation's score on the small random checkpoint, run on BERTFN_TEST_DEVICE
    (AntiBERTy's tests run where its package is, on the CPU): each position's log-softmax with it masked."""
    from transformers import BertTokenizerFast

    folder, hf = mlm_checkpoint
    tok = BertTokenizerFast.from_pretrained(folder)
    reference, variant = "the big red dog sat on the mat and the cat sat .", "the small red dog sat on the mat and the cat sat ."
    model = bertfn.load(folder, device=DEVICE)
    expected = hf_marginals(on_device(hf), tok, reference)  # (13, V)
    subs = substitution_matrix(reference, model)
    assert subs.log_probs.device.type == "cpu" and subs.log_probs.shape == expected.shape == (13, len(tok))
    torch.testing.assert_close(subs.log_probs, expected, atol=fp32_atol(1e-5), rtol=1e-5)
    (r,) = score_mutations([variant], model, reference=reference)
    big, small = tok.convert_tokens_to_ids(["big", "small"])
    assert [m["code"] for m in r["mutations"]] == ["big2small"]
    assert r["score"] == pytest.approx(float(expected[1, small] - expected[1, big]), abs=1e-4)


@pytest.mark.slow
@pytest.mark.needs_transformers
def test_masked_marginals_equal_transformers(antiberty, antiberty_hf):
    hf, tok = antiberty_hf
    expected = hf_marginals(hf, tok, HEAVY)  # (49, 25)
    subs = substitution_matrix(HEAVY, antiberty)
    assert subs.log_probs.shape == expected.shape == (49, 25) and subs.tokens == HEAVY.split()
    # fp32; entries reach -40 (the special tokens), so 1e-5 relative is 4e-4 there: compared relative and absolute
    torch.testing.assert_close(subs.log_probs, expected, atol=1e-5, rtol=1e-5)
    assert subs.vocabulary[tok.convert_tokens_to_ids("P")] == "P"

    ref_ids = tok(HEAVY).input_ids[1:-1]
    results = score_mutations(VARIANTS, antiberty, reference=HEAVY)
    assert [[m["code"] for m in r["mutations"]] for r in results] == [["V37P"], ["E1Q", "F27Y"], []]
    for r in results:
        var_ids = tok(r["text"]).input_ids[1:-1]
        want = sum(expected[j, b] - expected[j, a] for j, (a, b) in enumerate(zip(ref_ids, var_ids)) if a != b)
        assert r["score"] == pytest.approx(float(want), abs=1e-4)
    assert results[2]["score"] == 0.0 and results[0]["score"] < -5  # a proline in a framework strand: costly
    effects = subs.effects()  # every single substitution at once; the reference's own residues score 0
    assert effects[36, tok.convert_tokens_to_ids("P")].item() == pytest.approx(results[0]["score"], abs=1e-6)
    assert effects.gather(1, torch.tensor(ref_ids)[:, None]).abs().max() == 0


@pytest.mark.slow
@pytest.mark.needs_transformers
def test_pll_change_equals_transformers(antiberty, antiberty_hf):
    from test_scoring import hf_pll

    hf, tok = antiberty_hf
    r = score_mutations(VARIANTS[0], antiberty, reference=HEAVY, method="pll")
    assert r["score"] == pytest.approx(hf_pll(hf, tok, VARIANTS[0])[0] - hf_pll(hf, tok, HEAVY)[0], abs=1e-4)
    assert r["mutations"][0]["code"] == "V37P"  # its masked marginal still listed


def test_mutation_errors(antiberty):
    with pytest.raises(bertfn.InputError, match="text 0 has 48 tokens to score and the reference 49; score_mutations scores substitutions only"):
        score_mutations(HEAVY[2:], antiberty, reference=HEAVY)
    with pytest.raises(bertfn.InputError, match="the reference holds \\[MASK\\]"):
        substitution_matrix(HEAVY.replace("E V Q", "[MASK] V Q"), antiberty)
    with pytest.raises(bertfn.InputError, match="needs the reference"):
        score_mutations(HEAVY, antiberty)
    with pytest.raises(bertfn.InputError, match="method must be one of 'masked_marginal', 'pll', 'wt_marginal'"):
        score_mutations(HEAVY, antiberty, reference=HEAVY, method="ppl")


def test_a_residue_outside_the_vocabulary_is_refused(antiberty, monkeypatch):
    """A variant that reads as [UNK] where it differs from the reference (a small letter, '*', 'B' for AntiBERTy's
    capitals) would score a mutation to [UNK] ("Q3[UNK]", -22.6): refused, naming the position and what it wrote,
    before any pass runs (a file's bad variant costs no matrix)."""
    from bertfn.tasks import mutations

    def no_pass(*args, **kwargs):
        raise AssertionError("a pass ran before the variants were checked")

    monkeypatch.setattr(mutations, "_substitutions", no_pass)
    monkeypatch.setattr(mutations, "_last", None)
    residues = HEAVY.split()
    for odd in ("q", "*", "B"):
        variant = " ".join(residues[:2] + [odd] + residues[3:])
        for method in ("masked_marginal", "wt_marginal", "pll"):
            with pytest.raises(bertfn.InputError, match=re.escape(f"text 1 differs from the reference at position 3, "
                                                                  f"where its '{odd}' reads as [UNK]")):
                score_mutations([VARIANTS[0], variant], antiberty, reference=HEAVY, method=method)
    with pytest.raises(bertfn.InputError, match="where the reference's token reads as \\[UNK\\]"):
        score_mutations(HEAVY, antiberty, reference=HEAVY.replace("E V Q", "E V q"))
    with pytest.raises(bertfn.InputError, match="text 0 has 48 tokens to score and the reference 49"):
        score_mutations(HEAVY[2:], antiberty, reference=HEAVY)
    monkeypatch.undo()
    assert score_mutations(HEAVY.replace("E V Q", "E V q"), antiberty, reference=HEAVY.replace("E V Q", "E V q"),
                           method="wt_marginal")["score"] == 0.0  # an [UNK] where nothing changed: no mutation of it


def test_mutation_codes_as_variants_are_named(antiberty):
    """score_mutations reads whole variants; a variant written as codes ("E1Q", "H:E1Q", "E1Q:V37P") is told so."""
    for codes in ("E1Q", "H:E1Q", "E1Q:V37P"):
        with pytest.raises(bertfn.InputError, match=f"'{codes}' looks like mutation codes, and score_mutations reads "
                                                    "each variant's whole text"), \
                pytest.warns(bertfn.UnknownTokensWarning):  # a code is no word of AntiBERTy's, which reads residues
            score_mutations(codes, antiberty, reference=HEAVY)
    with pytest.raises(bertfn.InputError, match="compare PLLs: bertfn.score of each text\\)$"):  # a deletion: no hint
        score_mutations(HEAVY[2:], antiberty, reference=HEAVY)


def test_the_matrix_is_made_once_for_a_reference_and_anew_after_a_weight_changes(tiny_folder, monkeypatch):
    """substitution_matrix and score_mutations of one model and reference share one matrix (a file run with --matrix
    makes it once); a weight changed in place since makes it anew, as the changed model computes it."""
    from bertfn.tasks import mutations

    m = bertfn.load(tiny_folder)  # its own: a weight of it is changed below
    made = []
    monkeypatch.setattr(mutations, "_substitutions", lambda *a, _made=mutations._substitutions: made.append(1) or _made(*a))
    reference = "the cat sat on the mat ."
    first = substitution_matrix(reference, m)
    score_mutations("the dog sat on the mat .", m, reference=reference)
    assert len(made) == 1 and substitution_matrix(reference, m) is first
    with torch.no_grad():
        m.state["cls.predictions.bias"].add_(1.0 + torch.arange(m.config.vocab_size, dtype=torch.float32))
    changed = substitution_matrix(reference, m)
    assert len(made) == 2 and not torch.allclose(changed.log_probs, first.log_probs)


def test_the_matrix_is_made_anew_after_a_weight_is_replaced(tiny_folder):
    """A weight replaced by another tensor (``state[k] = state[k] + d``, an optimizer's out-of-place step) makes the
    matrix anew too: the new tensor's version is 0, as the old one's was, so a sum of versions kept the old matrix."""
    m = bertfn.load(tiny_folder)  # its own: a weight of it is replaced below
    reference = "the cat sat on the mat ."
    first = substitution_matrix(reference, m)
    m.state["cls.predictions.bias"] = m.state["cls.predictions.bias"] + torch.arange(m.config.vocab_size) / 4.0
    changed = substitution_matrix(reference, m)
    fresh = substitution_matrix(reference, m.to(None, torch.float64)).log_probs.float()  # a model of new tensors
    assert not torch.allclose(changed.log_probs, first.log_probs)
    torch.testing.assert_close(changed.log_probs, fresh, atol=1e-5, rtol=1e-5)


def test_the_matrix_to_a_folder_that_does_not_exist(tmp_path, capsys, monkeypatch):
    """save() where it cannot write is an InputError (was a FileNotFoundError, which the CLI called a bug); the CLI's
    --matrix with a folder that does not exist, an ending it cannot write or a .parquet without pandas and pyarrow is
    refused before the model loads."""
    from importlib.util import find_spec

    from bertfn.cli import score as score_command

    parquet = all(find_spec(name) for name in ("pandas", "pyarrow"))  # the plain install has neither
    subs = Substitutions("A C", ["A", "C"], [5, 6], torch.randn(2, 8).log_softmax(-1), [f"t{k}" for k in range(8)])
    for name in ("subs.npy", "subs.csv", "subs.tsv", "subs.parquet"):
        if name == "subs.parquet" and not parquet:
            error, said = bertfn.DependencyError, "writing .parquet needs pandas and pyarrow"
        else:
            error, said = bertfn.InputError, f"cannot write {tmp_path / 'none' / name} ("
        with pytest.raises(error, match=re.escape(said)):
            subs.save(tmp_path / "none" / name)

    def no_model(*args, **kwargs):
        raise AssertionError("the model loaded before --matrix was checked")

    monkeypatch.setattr(score_command, "model_from_args", no_model)
    refused = [(tmp_path / "none" / "m.csv", bertfn.InputError, f"--matrix {tmp_path / 'none' / 'm.csv'}: its folder "),
               (tmp_path / "m.txt", bertfn.InputError,
                "cannot write the substitution matrix as m.txt: its name must end in .npy")]
    if not parquet:
        refused.append((tmp_path / "m.parquet", bertfn.DependencyError,
                        "writing .parquet needs pandas and pyarrow: pip install pandas pyarrow"))
    for path, error, said in refused:
        code = main(["score", "--reference", HEAVY, "--matrix", str(path), "--model", str(tmp_path), "--quiet"])
        assert code == error.exit_code
        err = capsys.readouterr().err
        assert said in err and "a bug in bertfn" not in err and err.count("\n") == 1


@pytest.mark.slow
def test_cli_variants_matrix_and_file(antiberty, tmp_path, capsys, monkeypatch):
    """--reference scores the texts as its variants; --matrix writes the matrix (.npy, .csv, .parquet);
    --input runs a file of variants with the matrix computed once."""
    import numpy as np

    weights, vocab = antiberty_paths()
    model = ["--model", str(weights), "--tokenizer", str(vocab), "--cased", "--quiet"]
    assert main(["score", "--reference", HEAVY, *VARIANTS[:2], "--json", *model]) == 0
    rows = json.loads(capsys.readouterr().out)
    expected = score_mutations(VARIANTS[:2], antiberty, reference=HEAVY)
    assert [r["score"] for r in rows] == pytest.approx([r["score"] for r in expected], abs=1e-6)
    subs = substitution_matrix(HEAVY, antiberty)
    for name in ("subs.npy", "subs.csv", "subs.parquet"):
        assert main(["score", "--reference", HEAVY, "--matrix", str(tmp_path / name), *model]) == 0
    assert capsys.readouterr().out.count("wrote ") == 3
    np.testing.assert_allclose(np.load(tmp_path / "subs.npy"), subs.log_probs.numpy(), atol=1e-6)
    pd = pytest.importorskip("pandas")
    table = pd.read_parquet(tmp_path / "subs.parquet")
    assert list(table.columns[:2]) == ["position", "token"] and table.shape == (49, 27)
    assert table["token"].tolist() == HEAVY.split()
    np.testing.assert_allclose(table[subs.vocabulary].to_numpy(), subs.log_probs.numpy(), atol=1e-6)
    csv = pd.read_csv(tmp_path / "subs.csv")
    np.testing.assert_allclose(csv[subs.vocabulary].to_numpy(), subs.log_probs.numpy(), rtol=1e-6)

    src, out = tmp_path / "variants.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join([*VARIANTS, HEAVY[2:]]) + "\n", encoding="utf-8")
    assert main(["score", "--reference", HEAVY, "--input", str(src), "--output", str(out), *model]) == 2
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["result"]["score"] for r in lines[:3]] == pytest.approx([r["score"] for r in expected] + [0.0], abs=1e-5)
    assert lines[3]["error"].startswith("line 4 has 48 tokens to score and the reference 49")
    assert main(["score", "--matrix", "x.npy", HEAVY, *model]) == 2
    assert "--matrix goes with --reference" in capsys.readouterr().err

    from bertfn.tasks import mutations

    made = []  # --matrix with --input: the matrix once, the file run reading it again (one model, not two)
    monkeypatch.setattr(mutations, "_substitutions", lambda *a, _made=mutations._substitutions: made.append(1) or _made(*a))
    both = tmp_path / "both.jsonl"
    assert main(["score", "--reference", HEAVY, "--input", str(src), "--output", str(both),
                 "--matrix", str(tmp_path / "again.npy"), *model]) == 2
    assert len(made) == 1 and both.read_bytes() == out.read_bytes()


@pytest.mark.needs_transformers
def test_wild_type_marginals_equal_transformers_and_the_cli(antiberty, antiberty_hf, capsys):
    """Meier et al.'s wild-type marginal: log P(variant_j) - log P(reference_j) from one pass of the reference with
    nothing masked; ``bertfn score --reference ... --wt-marginal`` gives the same, and takes no --pll-change beside it."""
    hf, tok = antiberty_hf
    ids = tok(HEAVY, return_tensors="pt").input_ids
    with torch.no_grad():
        lp = hf(input_ids=ids).logits.log_softmax(dim=-1)[0, 1:-1]  # (49, V): the reference as it is
    ref_ids = ids[0, 1:-1].tolist()
    results = score_mutations(VARIANTS, antiberty, reference=HEAVY, method="wt_marginal")
    for r in results:
        var_ids = tok(r["text"]).input_ids[1:-1]
        want = sum(lp[j, b] - lp[j, a] for j, (a, b) in enumerate(zip(ref_ids, var_ids)) if a != b)
        assert r["score"] == pytest.approx(float(want), abs=1e-4)
    assert [[m["code"] for m in r["mutations"]] for r in results] == [["V37P"], ["E1Q", "F27Y"], []]
    weights, vocab = antiberty_paths()
    model = ["--model", str(weights), "--tokenizer", str(vocab), "--cased", "--quiet"]
    assert main(["score", "--reference", HEAVY, *VARIANTS[:2], "--wt-marginal", "--json", *model]) == 0
    assert [r["score"] for r in json.loads(capsys.readouterr().out)] == \
        pytest.approx([r["score"] for r in results[:2]], abs=1e-6)
    assert main(["score", "--reference", HEAVY, VARIANTS[0], "--wt-marginal", "--pll-change", *model]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_matrix_shows_itself_in_a_line(tiny_folder):
    """A notebook cell ending in the matrix shows a line saying what it holds, not the (L, V) tensor and the
    vocabulary (a 36-residue chain printed 14,000 characters)."""
    reference = "the cat sat on the mat . " * 8
    subs = substitution_matrix(reference, bertfn.load(tiny_folder))
    shown = repr(subs)
    L, V = subs.log_probs.shape
    assert len(shown) < 300 and "tensor(" not in shown
    assert f"{L} scored tokens x {V} vocabulary tokens" in shown and shown.startswith("Substitutions('the cat sat")
