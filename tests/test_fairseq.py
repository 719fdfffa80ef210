"""bertfn.checkpoint.fairseq on a real fairseq RoBERTa: Sapiens' antibody heavy-chain masked LM, against transformers.

The PyPI wheel ``sapiens==1.0.5`` (MIT; ``pip download --no-deps``, never installed: it needs fairseq) carries two
fairseq RoBERTa checkpoints (``roberta_small``: 4 layers, hidden 128, 8 heads, heavy chains up to 144 tokens,
light chains up to 128) and their ``dict.txt`` (the 20 amino acids). The heavy-chain one is converted once per
session and read back with transformers' ``RobertaForMaskedLM`` and ``AutoTokenizer``: its weights are the .pt's
tensors exactly, it tokenizes as Sapiens does, it recovers masked residues of real antibodies far above chance,
and the folder records the checkpoint's sha256. A pickle naming code is refused unrun, and nothing is written.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest
import torch

from bertfn.checkpoint.fairseq import convert_fairseq_roberta, main
from bertfn.errors import CheckpointError

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.needs_transformers  # transformers is the reader of every converted folder here

DATA = Path(__file__).parent / "data" / "antibodies.tsv"
HEAVY_SHA256 = "43254666e9ac0d5aa8fc120f12ac02b6ff082cd1f107c389023c1b947f214825"  # sapiens/models/v1/checkpoint_vh.pt
AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
LAYER_NAMES = [("attention.self.query", "self_attn.q_proj"), ("attention.self.key", "self_attn.k_proj"),
               ("attention.self.value", "self_attn.v_proj"), ("attention.output.dense", "self_attn.out_proj"),
               ("attention.output.LayerNorm", "self_attn_layer_norm"), ("intermediate.dense", "fc1"),
               ("output.dense", "fc2"), ("output.LayerNorm", "final_layer_norm")]
"""Transformers' names in a layer and fairseq's (TransformerSentenceEncoderLayer), written out apart from bertfn's."""


@pytest.fixture(scope="session")
def sapiens(sapiens_wheel, tmp_path_factory) -> Path:
    """sapiens/models/v1 of the downloaded wheel (checkpoint_vh.pt, checkpoint_vl.pt, dict.txt); skip if offline."""
    root = tmp_path_factory.mktemp("sapiens-files")
    with zipfile.ZipFile(sapiens_wheel) as whl:
        whl.extractall(root, [n for n in whl.namelist() if n.startswith("sapiens/models/")])
    return root / "sapiens" / "models" / "v1"


@pytest.fixture(scope="session")
def converted(sapiens, tmp_path_factory) -> Path:
    return convert_fairseq_roberta(sapiens / "checkpoint_vh.pt", sapiens / "dict.txt",
                                   tmp_path_factory.mktemp("converted") / "sapiens-vh")


@pytest.fixture(scope="session")
def hf(converted):
    model = transformers.RobertaForMaskedLM.from_pretrained(converted, attn_implementation="eager").eval()  # fp32
    return model, transformers.AutoTokenizer.from_pretrained(converted)


def fairseq_tensors(path: Path) -> dict[str, torch.Tensor]:
    with torch.serialization.safe_globals([argparse.Namespace]):
        return torch.load(path, map_location="cpu", weights_only=True)["model"]


def heavy_chains() -> list[tuple[str, str]]:
    rows = [line.split("\t") for line in DATA.read_text(encoding="utf-8").splitlines() if line and line[0] != "#"]
    return [(name, seq) for name, chain, seq in rows[1:] if chain == "heavy"]


def test_weights_are_fairseqs_tensors(sapiens, hf):
    """Every parameter of the transformers model is the .pt's tensor under the mapping (written out here anew)."""
    fs, (model, _) = fairseq_tensors(sapiens / "checkpoint_vh.pt"), hf
    P, D = "decoder.sentence_encoder.", "decoder.lm_head."  # fairseq 0.9/0.10 names the RoBERTa encoder "decoder"
    expect = {"roberta.embeddings.word_embeddings.weight": fs[P + "embed_tokens.weight"],
              "roberta.embeddings.position_embeddings.weight": fs[P + "embed_positions.weight"],
              "roberta.embeddings.token_type_embeddings.weight": torch.zeros(1, 128),
              "lm_head.decoder.weight": fs[D + "weight"], "lm_head.decoder.bias": fs[D + "bias"]}
    for wb in ("weight", "bias"):
        expect |= {f"roberta.embeddings.LayerNorm.{wb}": fs[f"{P}emb_layer_norm.{wb}"], "lm_head.bias": fs[D + "bias"],
                   f"lm_head.dense.{wb}": fs[f"{D}dense.{wb}"], f"lm_head.layer_norm.{wb}": fs[f"{D}layer_norm.{wb}"]}
        for i, (hf_name, fs_name) in itertools.product(range(4), LAYER_NAMES):
            expect[f"roberta.encoder.layer.{i}.{hf_name}.{wb}"] = fs[f"{P}layers.{i}.{fs_name}.{wb}"]
    ours = model.state_dict()
    assert set(ours) == set(expect)  # every parameter of RobertaForMaskedLM is checked
    for name, tensor in expect.items():
        assert ours[name].dtype == torch.float32 and torch.equal(ours[name], tensor), name
    assert torch.equal(fs[D + "weight"], fs[P + "embed_tokens.weight"])  # tied in fairseq, and so in the folder:
    assert model.lm_head.decoder.weight is model.roberta.embeddings.word_embeddings.weight
    assert model.config.max_position_embeddings == 144 + 2 and model.config.pad_token_id == 1
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.num_attention_heads) == (4, 128, 8)


def test_tokenizer_is_sapiens(sapiens, hf):
    """Sapiens' seq2tokens: '<s> ' + ' '.join(residues) + ' </s>' through fairseq's Dictionary (4 specials, dict.txt,
    <mask>); spaced or not, the converted tokenizer gives the same ids and decodes back to the residues."""
    _, tok = hf
    symbols = ["<s>", "<pad>", "</s>", "<unk>"] + [line.split()[0] for line in
                                                   (sapiens / "dict.txt").read_text().splitlines()] + ["<mask>"]
    assert tok.convert_ids_to_tokens(list(range(len(tok)))) == symbols and len(symbols) == 25
    for seq in [s for _, s in heavy_chains()] + ["EVQLV"]:
        fairseq_ids = [0] + [symbols.index(c) for c in seq] + [2]
        assert tok(seq)["input_ids"] == tok(" ".join(seq))["input_ids"] == fairseq_ids
        assert tok.decode(fairseq_ids, skip_special_tokens=True) == seq
    assert tok("EV<mask>LV")["input_ids"] == tok("E V <mask> L V")["input_ids"] == [0, 7, 21, 24, 13, 21, 2]
    assert (tok.mask_token_id, tok.pad_token_id, tok.model_max_length) == (24, 1, 144)


@pytest.mark.slow
def test_masked_residues_are_recovered_far_above_chance(hf):
    """Each residue of the five heavy chains masked alone (one batch per chain): the true residue comes first
    for 0.79 of them (471 of 595; chance is 1/20)."""
    model, tok = hf
    hits = total = 0
    for name, seq in heavy_chains():
        ids = torch.tensor(tok(seq)["input_ids"])
        rows, pos = torch.arange(len(seq)), torch.arange(len(seq)) + 1
        batch = ids.repeat(len(seq), 1)
        batch[rows, pos] = tok.mask_token_id
        with torch.no_grad():
            predicted = model(batch).logits[rows, pos].argmax(-1)
        assert set(tok.convert_ids_to_tokens(predicted.tolist())) <= set(AMINO_ACIDS), name
        hits, total = hits + int((predicted == ids[pos]).sum()), total + len(seq)
    rate = hits / total
    print(f"Sapiens VH, converted: {hits}/{total} = {rate:.3f} residues recovered (chance 0.05)")
    assert total > 550 and rate > 0.5


def test_the_folder_records_the_checkpoints_sha256(sapiens, converted):
    source = json.loads((converted / "config.json").read_text())["bertfn_converted_from"]
    assert source["checkpoint_sha256"] == hashlib.sha256((sapiens / "checkpoint_vh.pt").read_bytes()).hexdigest()
    assert source["checkpoint_sha256"] == HEAVY_SHA256
    assert source["dictionary_sha256"] == hashlib.sha256((sapiens / "dict.txt").read_bytes()).hexdigest()
    assert (source["checkpoint"], source["fairseq_arch"]) == ("checkpoint_vh.pt", "roberta_small")
    assert sorted(p.name for p in converted.iterdir()) == [
        "config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]


class RunsOnLoad:
    """A class whose unpickling runs code: pickle calls its __setstate__, which writes the marker file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __setstate__(self, state):
        Path(state["marker"]).write_text("ran")


class System:
    """An object that pickles as a call of os.system (which touches the marker)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch '{self.marker}'",)


def as_pickle(obj, path: Path) -> None:
    path.write_bytes(pickle.dumps(obj, protocol=2))  # torch.save's protocol (5's frames stop torch's reader earlier)


@pytest.mark.parametrize("payload", [System, RunsOnLoad], ids=["os.system", "class"])
@pytest.mark.parametrize("save", [torch.save, as_pickle], ids=["torch.save", "pickle"])
def test_a_checkpoint_naming_code_is_refused_unrun(sapiens, tmp_path, capsys, payload, save):
    marker, evil = tmp_path / "code-ran", tmp_path / "checkpoint_evil.pt"
    save({"args": argparse.Namespace(arch="roberta_small"), "model": {}, "extra_state": payload(marker)}, evil)
    pickle.loads(evil.read_bytes()) if save is as_pickle else torch.load(evil, weights_only=False)
    assert marker.exists()  # the control: a plain unpickling runs the payload
    marker.unlink()
    with pytest.raises(CheckpointError, match=r"not plain data .*(system|RunsOnLoad).*weights_only"):
        convert_fairseq_roberta(evil, sapiens / "dict.txt", tmp_path / "out")
    assert main([str(evil), str(sapiens / "dict.txt"), str(tmp_path / "out")]) == CheckpointError.exit_code
    assert "never runs a pickle's code" in capsys.readouterr().err
    assert not marker.exists()  # the payload never ran ...
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_evil.pt"]  # ... and nothing was written


def test_a_failed_conversion_leaves_no_folder(sapiens, tmp_path, monkeypatch):
    import bertfn.checkpoint.fairseq as fairseq

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(fairseq, "_tokenizer_files", fail)  # after the weights are written
    with pytest.raises(OSError, match="disk full"):
        convert_fairseq_roberta(sapiens / "checkpoint_vh.pt", sapiens / "dict.txt", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_bertfn_reads_the_converted_roberta_as_transformers_does(converted, hf):
    """The real trained RoBERTa through bertfn: every layer and the logits equal transformers' (1e-5, fp32) on a padded
    batch of the five chains, fill-mask equals the pipeline, and the same residues are recovered."""
    import bertfn

    model, tok = hf
    ours = bertfn.load(converted)
    assert ours.family.name == "RoBERTa" and ours.tokenizer.mask_token == "<mask>"
    chains = [seq for _, seq in heavy_chains()]
    enc = tok(chains, padding=True, return_tensors="pt")
    with torch.no_grad():
        theirs = model(**enc, output_hidden_states=True)
        out = bertfn.encoder(ours, enc["input_ids"], enc["attention_mask"], output_hidden_states=True)
        logits = bertfn.mlm_head(ours, out.last_hidden_state)
    real = enc["attention_mask"].bool()
    for a, b in zip(out.hidden_states, theirs.hidden_states):
        torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[real], theirs.logits[real], atol=1e-5, rtol=0)
    pipe = transformers.pipeline("fill-mask", model=model, tokenizer=tok)
    text = chains[0][:27] + "<mask>" + chains[0][28:]
    for a, b in zip(bertfn.fill_mask(text, ours), pipe(text)):
        assert (a["token"], a["token_str"], a["sequence"]) == (b["token"], b["token_str"], b["sequence"])
        assert a["score"] == pytest.approx(b["score"], abs=1e-4)
