"""bertfn.contacts, ESM-2's contact maps, held to ``EsmForMaskedLM.predict_contacts``; its top pairs, plots, CLI, corpus.

The checkpoint is tests/family_checkpoints.py's ESM-2 (EsmForMaskedLM with its contact head; its ESM-1b, learned
positions, in the slow run), its weights drawn wider than transformers' init (std 0.2) so that the maps vary (at the
usual 0.02 every probability is sigmoid(bias), within 1e-3). Parity is at 1e-5 on a padded batch of real protein
fragments of 21-76 residues and on each alone.
"""

from __future__ import annotations

import json

import pytest
import torch

import bertfn
from bertfn import interventions as iv
from bertfn.cli import main
from bertfn.corpus.files import run_file
from bertfn.inspect.contact_plots import contact_map, contacts_figure
from bertfn.tasks.contacts import contacts, top_contacts
from family_checkpoints import ESM_KINDS, PROTEINS, kind_params, member_tokenizer, save_head, save_member

pytestmark = pytest.mark.needs_transformers


@pytest.fixture(scope="module", params=kind_params(ESM_KINDS, quick=ESM_KINDS))
def esm(request, tmp_path_factory):
    """ESM-2, and ESM-1b (its learned positions; in the slow run): its folder, transformers model, bertfn model."""
    folder = tmp_path_factory.mktemp(request.param)
    hf = save_member(request.param, folder, initializer_range=0.2)
    return folder, hf, bertfn.load(folder)


def predicted(hf, sequences: list[str]) -> torch.Tensor:
    """transformers' ``predict_contacts`` on the sequences as one padded batch: (B, n, n)."""
    enc = member_tokenizer("esm")(sequences, padding=True, return_tensors="pt")
    with torch.no_grad():
        return hf.predict_contacts(enc["input_ids"], enc["attention_mask"])


def test_maps_equal_predict_contacts_in_a_batch_and_alone(esm):
    _, hf, model = esm
    proteins = list(PROTEINS)
    got = contacts(proteins, model, batch_size=4)  # two batches, sorted by length
    batch = predicted(hf, proteins)
    for i, protein in enumerate(proteins):
        r = len(protein)
        assert got[i].shape == (r, r) and got[i].dtype == torch.float32 and got[i].device.type == "cpu"
        torch.testing.assert_close(got[i], batch[i, :r, :r], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got[i], predicted(hf, [protein])[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got[i], got[i].T)  # symmetric
    assert got[0].std() > 1e-3  # the maps vary: the comparison means something
    one = contacts(proteins[3], model)
    assert isinstance(one, torch.Tensor)
    torch.testing.assert_close(one, got[3], atol=1e-6, rtol=1e-6)


def test_the_fast_path_equals_the_reference_encoders_maps(esm):
    """Without edits the maps come from the fast path (the proteins end to end, chosen kernels; a model loaded by
    name holds packed weights); an edit that changes nothing runs the padded reference encoder instead: the same
    maps, in groups of every size."""
    folder, _, model = esm
    proteins = list(PROTEINS)
    reference = contacts(proteins, model, batch_size=3, edits={"contacts.maps": lambda t, point: t})
    for batch_size in (1, 4, len(proteins)):
        for fast, ref in zip(contacts(proteins, model, batch_size=batch_size), reference):
            torch.testing.assert_close(fast, ref, atol=1e-6, rtol=1e-5)
    for fast, ref in zip(contacts(proteins, str(folder)), reference):  # loaded by name: packed where oneDNN is chosen
        torch.testing.assert_close(fast, ref, atol=1e-6, rtol=1e-5)


def test_a_masked_residue_counts_over_the_real_tokens(esm):
    """Token dropout scales by the share of <mask>: bertfn counts it over the protein's own tokens, so its map in a
    padded batch is its map alone, which is transformers'. transformers 4.57 counts over the padded length, so its map
    of a masked protein changes with the padding (proteins without <mask> are unaffected: the test above)."""
    _, hf, model = esm
    masked = PROTEINS[5][:8] + "<mask>" + PROTEINS[5][9:]  # 21 residues, the ninth masked
    alone = contacts(masked, model)
    assert alone.shape == (21, 21)
    torch.testing.assert_close(alone, predicted(hf, [masked])[0], atol=1e-5, rtol=1e-5)
    in_batch = contacts([PROTEINS[2], masked], model)[1]
    torch.testing.assert_close(in_batch, alone, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(predicted(hf, [PROTEINS[2], masked])[1, :21, :21], alone, atol=1e-5)


def test_top_gives_the_most_likely_pairs_far_enough_apart(esm):
    _, _, model = esm
    protein = PROTEINS[3]  # 30 residues
    whole = contacts(protein, model)
    pairs = contacts(protein, model, top=10)
    assert len(pairs) == 10 and all(j - i >= 6 for i, j, _ in pairs)
    assert [p for _, _, p in pairs] == sorted((p for _, _, p in pairs), reverse=True)
    everything = sorted(((whole[i, j].item(), i, j) for i in range(30) for j in range(i + 6, 30)), reverse=True)
    assert [(i, j) for i, j, _ in pairs] == [(i, j) for _, i, j in everything[:10]]
    assert all(p == pytest.approx(whole[i, j].item()) for i, j, p in pairs)
    assert len(contacts(protein, model, top="L")) == 30 and len(contacts(protein, model, top="L/5")) == 6
    assert all(j - i >= 20 for i, j, _ in contacts(protein, model, top="L", min_separation=20))
    assert len(contacts(protein, model, top=1000)) == 24 * 25 // 2  # every pair that far apart, no more


def test_top_contacts_of_a_made_up_map():
    probs = torch.zeros(8, 8)
    probs[0, 7] = probs[7, 0] = 0.9
    probs[1, 2] = probs[2, 1] = 0.99  # neighbours: left out
    probs[2, 6] = probs[6, 2] = 0.5
    assert top_contacts(probs, 2, min_separation=3) == [(0, 7, pytest.approx(0.9)), (2, 6, 0.5)]


@pytest.mark.parametrize("call, message", [
    (lambda m: contacts("", m), "text 0 is empty; write the protein's residues"),
    (lambda m: contacts(["MKT", " "], m), "text 1 is empty"),
    (lambda m: contacts("A" * 127, m), "text 0 has 127 residues, but the model reads at most 126"),
    (lambda m: contacts("MKT", m, top=0), "top must be a positive integer, or 'L' or 'L/k'"),
    (lambda m: contacts("MKT", m, top="L/0"), "top must be"),
    (lambda m: contacts("MKT", m, top="all"), "top must be"),
    (lambda m: contacts("MKT", m, min_separation=0), "min_separation must be a positive integer"),
    (lambda m: contacts("MKT", m, batch_size=0), "batch_size must be a positive integer"),
])
def test_bad_inputs_are_refused_with_what_to_do(esm, call, message):
    with pytest.raises(bertfn.InputError) as e:
        call(esm[2])
    assert message in str(e.value)


def test_a_model_without_the_contact_head_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    save_member("esm", tmp_path / "esm")
    weights = tmp_path / "esm" / "model.safetensors"
    kept = {k: v for k, v in load_file(weights).items() if "contact_head" not in k}
    save_file(kept, weights, metadata={"format": "pt"})
    with pytest.raises(bertfn.MissingPartError, match=r"contacts needs ESM's contact head .* is an ESM-2 without it"):
        contacts("MKT", bertfn.load(tmp_path / "esm"))
    save_head("roberta", "sequence-classification", tmp_path / "rob", num_labels=2)
    with pytest.raises(bertfn.MissingPartError, match=r"is a RoBERTa model \(RobertaForSequenceClassification"):
        contacts("MKT", bertfn.load(tmp_path / "rob"))


def test_bf16_maps_are_close(esm):
    _, _, model = esm
    exact, half = contacts(list(PROTEINS[3:]), model), contacts(list(PROTEINS[3:]), model, dtype="bfloat16")
    for a, b in zip(exact, half):
        assert b.dtype == torch.float32
        torch.testing.assert_close(b, a, atol=1e-2, rtol=0)
    best, second = contacts(PROTEINS[3], model, top=2)  # its top pair leads by more than bf16 can move two maps' values
    assert best[2] - second[2] > 2 * (exact[0] - half[0]).abs().max()  # (PROTEINS[5]'s leads by less than that)
    assert contacts(PROTEINS[3], model, top=1) == [(i, j, pytest.approx(p, abs=1e-2)) for i, j, p in
                                                  contacts(PROTEINS[3], model, top=1, dtype="bfloat16")]


def test_edits_of_the_encoder_and_of_the_head_apply(esm):
    _, _, model = esm
    protein = PROTEINS[3]
    plain = contacts(protein, model)
    shifted = contacts(protein, model, edits={"contacts.logits": lambda t, point: t + 2.0})
    torch.testing.assert_close(shifted, torch.sigmoid(torch.logit(plain.double()) + 2.0).float(), atol=1e-5, rtol=1e-5)
    ablated = contacts(protein, model, edits=iv.zero_heads({0: [0, 1]}))
    assert (ablated - plain).abs().max() > 1e-3


def test_plots_draw_the_map_and_the_layer_beside_it(esm):
    pytest.importorskip("matplotlib")
    _, _, model = esm
    protein = PROTEINS[5]
    probs = contacts(protein, model)
    fig = contact_map(probs, protein)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list(protein)
    torch.testing.assert_close(torch.as_tensor(ax.images[0].get_array()), probs)
    assert ax.images[0].get_clim() == (0.0, 1.0)
    rec = bertfn.trace(protein, model)
    fig = contacts_figure(rec, probs, layer=-1, sequence=protein)
    heads = [ax for ax in fig.axes if ax.get_title().startswith("head ")]
    assert len(heads) == model.config.num_attention_heads
    torch.testing.assert_close(torch.as_tensor(heads[2].images[0].get_array()), rec.attention(1, 2)[1:-1, 1:-1])
    assert len(contacts_figure(rec.attention(0)[:, 1:-1, 1:-1], probs, layer=0).axes) >= 5
    with pytest.raises(bertfn.InputError, match=r"over the map's 21 residues .* got shape \(4, 30, 30\)"):
        contacts_figure(torch.rand(4, 30, 30), probs)
    with pytest.raises(bertfn.InputError, match="an \\(r, r\\) map and the protein's r residues"):
        contact_map(probs, protein[:-1])


def test_cli_out_dash_writes_the_map_on_stdout(esm, tmp_path, capsysbinary, monkeypatch):
    """--out - is standard output (> map.png), as --output - is: the PNG there, not a file named '-'."""
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    assert main(["contacts", PROTEINS[3], "--model", str(esm[0]), "--out", "-"]) == 0
    printed = capsysbinary.readouterr()
    assert printed.out[:8] == b"\x89PNG\r\n\x1a\n" and printed.err.startswith(b"bertfn: done: wrote stdout (")
    assert list(tmp_path.iterdir()) == []
    assert main(["contacts", PROTEINS[3], "--model", str(esm[0]), "--out", "map"]) == 0  # no ending: a PNG, named
    assert capsysbinary.readouterr().out.startswith(b"wrote map.png (") and (tmp_path / "map.png").is_file()


def test_cli_table_json_and_out(esm, tmp_path, capsys):
    folder, _, model = esm
    protein = PROTEINS[3]
    assert main(["contacts", protein, "--model", str(folder)]) == 0
    out = capsys.readouterr().out
    pairs = contacts(protein, model, top="L/5")
    assert out.splitlines()[0] == protein and len(out.splitlines()) == 2 + len(pairs)
    i, j, p = pairs[0]
    assert f"     1  {i:>5}  {j:>5}  {protein[i] + '-' + protein[j]:<4}  {p:>6.3f}" in out
    assert main(["contacts", protein, "--model", str(folder), "--top", "3", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [(a, b) for a, b, _ in printed] == [(a, b) for a, b, _ in contacts(protein, model, top=3)]
    assert main(["contacts", protein, PROTEINS[5], "--model", str(folder), "--json"]) == 0
    maps = json.loads(capsys.readouterr().out)
    assert len(maps) == 2 and len(maps[1]) == 21
    assert maps[1][0][5] == pytest.approx(contacts(PROTEINS[5], model)[0, 5].item())
    assert main(["contacts", protein, "--model", str(folder), "--out", str(tmp_path / "map.npy")]) == 0
    import numpy

    torch.testing.assert_close(torch.from_numpy(numpy.load(tmp_path / "map.npy")), contacts(protein, model))
    if pytest.importorskip("matplotlib"):
        assert main(["contacts", protein, "--model", str(folder), "--out", str(tmp_path / "map.png")]) == 0
        assert (tmp_path / "map.png").stat().st_size > 1000 and "wrote" in capsys.readouterr().out
    assert main(["contacts", protein, PROTEINS[5], "--model", str(folder), "--out", str(tmp_path / "m.npy")]) == 2
    assert "--out writes the whole map of one protein" in capsys.readouterr().err
    assert main(["contacts", protein, "--model", str(folder), "--top", "some"]) == 2  # before the model loads
    assert "top must be" in capsys.readouterr().err


def test_corpus_file_runs_and_resumes(esm, tmp_path, capsys):
    folder, _, model = esm
    lines = list(PROTEINS) + ["", *PROTEINS[:3]]  # line 7 is empty: an error line
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary = run_file(src, out, model, task="contacts", top="L/2", min_separation=6, progress=False)  # as the CLI
    assert summary.errors == 1
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows[0]["text"] == PROTEINS[0] and "line 7 is empty" in rows[6]["error"]
    for row in rows[:6]:
        want = contacts(row["text"], model, top="L/2")
        assert [tuple(t[:2]) for t in row["result"]] == [(i, j) for i, j, _ in want]
    whole = out.read_bytes()
    out.write_bytes(b"".join(whole.splitlines(keepends=True)[:4]))
    assert main(["contacts", "--input", str(src), "--output", str(out), "--model", str(folder), "--top", "L/2",
                 "--resume"]) == 2
    assert "resumed after line 4" in capsys.readouterr().err
    resumed = [json.loads(x) for x in out.read_bytes().splitlines()]
    assert [r.get("error") for r in resumed] == [r.get("error") for r in rows]
    pairs = [[t[:2] for t in r.get("result", [])] for r in rows]
    assert [[t[:2] for t in r.get("result", [])] for r in resumed] == pairs
    whole_maps = tmp_path / "maps.jsonl"
    assert main(["contacts", "--input", str(src), "--output", str(whole_maps), "--model", str(folder)]) == 2
    first = json.loads(whole_maps.read_text().splitlines()[0])["result"]
    assert len(first) == len(PROTEINS[0]) == len(first[0])  # the (r, r) map as nested lists
