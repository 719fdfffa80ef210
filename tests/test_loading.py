"""Loading: every file layout gives the same model; bad weights give errors that name the keys."""

from __future__ import annotations

import json
import shutil
import weakref

import pytest
import torch
from conftest import build_hf, save_checkpoint
from safetensors.torch import save_file

import bertfn


@pytest.fixture(scope="module")
def reference(mlm_checkpoint):
    """Logits of the safetensors checkpoint on a padded batch: what every other layout must give."""
    folder, _ = mlm_checkpoint
    ids = torch.tensor([[5, 20, 21, 7, 22, 6], [5, 23, 7, 6, 0, 0]])
    return folder, ids, logits_of(bertfn.load(folder), ids)


def logits_of(model, ids):
    out = bertfn.encoder(model.params, ids, (ids != 0).long())
    return bertfn.mlm_head(model.params, out.last_hidden_state)


def copy_without_weights(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        if f.suffix not in (".safetensors", ".bin"):
            shutil.copy(f, dst / f.name)
    return dst


def state_of(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_bin_equals_safetensors(reference, tmp_path):
    folder, ids, expected = reference
    hf = build_hf("BertForMaskedLM", seed=1)  # the same seed as the mlm_checkpoint fixture
    bin_folder = save_checkpoint(hf, tmp_path / "bin", safe=False)
    assert (bin_folder / "pytorch_model.bin").is_file() and not (bin_folder / "model.safetensors").exists()
    torch.testing.assert_close(logits_of(bertfn.load(bin_folder), ids), expected, atol=0, rtol=0)


@pytest.mark.parametrize("safe", [True, False])
def test_sharded_checkpoint_equals_one_file(reference, tmp_path, safe):
    """save_pretrained with a max_shard_size writes shards and an index (as the hub holds larger models)."""
    folder, ids, expected = reference
    hf = build_hf("BertForMaskedLM", seed=1)  # the same seed as the mlm_checkpoint fixture
    dst = copy_without_weights(folder, tmp_path / "sharded")
    hf.save_pretrained(dst, safe_serialization=safe, max_shard_size="20KB")
    index = dst / ("model.safetensors.index.json" if safe else "pytorch_model.bin.index.json")
    assert index.is_file() and len(set(json.loads(index.read_text())["weight_map"].values())) > 1
    for name in (dst, index):  # the folder, or the index as the weights file
        torch.testing.assert_close(logits_of(bertfn.load(name), ids), expected, atol=0, rtol=0)


def test_sharded_checkpoint_missing_a_shard_or_its_map_is_named(reference, tmp_path):
    folder, _, _ = reference
    dst = copy_without_weights(folder, tmp_path / "sharded")
    build_hf("BertForMaskedLM", seed=1).save_pretrained(dst, max_shard_size="20KB")
    index = dst / "model.safetensors.index.json"
    shard = sorted(dst.glob("model-*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(bertfn.CheckpointError, match=f"names the shard '{shard.name}', which is not a file beside it"):
        bertfn.load(dst)
    index.write_text("[]")
    with pytest.raises(bertfn.CheckpointError, match="has no weight_map"):
        bertfn.load(dst)


def test_bare_keys_without_bert_prefix(reference, tmp_path):
    folder, ids, expected = reference
    state = {k.removeprefix("bert."): v.contiguous() for k, v in state_of(folder).items()}
    assert "embeddings.word_embeddings.weight" in state
    dst = copy_without_weights(folder, tmp_path / "bare")
    save_file(state, str(dst / "model.safetensors"))
    model = bertfn.load(dst)
    assert "bert.embeddings.word_embeddings.weight" in model.state
    torch.testing.assert_close(logits_of(model, ids), expected, atol=0, rtol=0)


def test_tied_decoder_keys_may_be_missing(reference, tmp_path):
    folder, ids, expected = reference
    state = state_of(folder)
    for k in ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias"):
        state.pop(k, None)
    dst = copy_without_weights(folder, tmp_path / "untied")
    save_file(state, str(dst / "model.safetensors"))
    model = bertfn.load(dst)
    assert model.state["cls.predictions.decoder.weight"] is model.state["bert.embeddings.word_embeddings.weight"]
    assert model.state["cls.predictions.decoder.bias"] is model.state["cls.predictions.bias"]
    torch.testing.assert_close(logits_of(model, ids), expected, atol=0, rtol=0)


def test_only_the_decoder_bias_is_there(reference, tmp_path):
    folder, ids, expected = reference
    state = state_of(folder)
    state["cls.predictions.decoder.bias"] = state.pop("cls.predictions.bias").clone()
    dst = copy_without_weights(folder, tmp_path / "old-bias")
    save_file(state, str(dst / "model.safetensors"))
    torch.testing.assert_close(logits_of(bertfn.load(dst), ids), expected, atol=0, rtol=0)


def test_tf_era_gamma_beta_names(reference, tmp_path):
    folder, ids, expected = reference
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in state_of(folder).items()}
    dst = copy_without_weights(folder, tmp_path / "gamma")
    save_file(state, str(dst / "model.safetensors"))
    torch.testing.assert_close(logits_of(bertfn.load(dst), ids), expected, atol=0, rtol=0)


def test_single_file_with_config_beside_it_or_given(reference, tmp_path):
    folder, ids, expected = reference
    torch.testing.assert_close(logits_of(bertfn.load(folder / "model.safetensors"), ids), expected, atol=0, rtol=0)
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(folder / "model.safetensors", alone / "weights.safetensors")
    config = json.loads((folder / "config.json").read_text())
    with pytest.warns(UserWarning, match="alone has no tokenizer.json, vocab.txt, spm.model, .* or vocab.json, so the model can read ids"):
        model = bertfn.load(alone / "weights.safetensors", config=config)
    assert not model.tokenizer  # a NoTokenizer: false, and any use says what is missing
    with pytest.raises(bertfn.MissingPartError, match="has no tokenizer, so it cannot read text; load it with"):
        model.tokenizer(["a text"])
    torch.testing.assert_close(logits_of(model, ids), expected, atol=0, rtol=0)


def test_a_config_path_under_home_is_expanded(reference, tmp_path, monkeypatch):
    folder, ids, expected = reference
    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copy(folder / "config.json", tmp_path / "other.json")
    model = bertfn.load(folder, config="~/other.json")  # as the weights' path, ~ is the home folder
    torch.testing.assert_close(logits_of(model, ids), expected, atol=0, rtol=0)


@pytest.mark.parametrize("name", [None, 3, ["a-folder"]])
def test_a_name_that_is_no_path_is_an_input_error(name):
    with pytest.raises(bertfn.InputError, match=f"takes a hub id, a folder or a weights file .*got {type(name).__name__}"):
        bertfn.load(name)


def test_vocab_txt_only_tokenizes_like_tokenizer_json(mlm_checkpoint, tmp_path):
    folder, _ = mlm_checkpoint
    dst = tmp_path / "vocab-only"
    shutil.copytree(folder, dst)
    (dst / "tokenizer.json").unlink()
    texts = ["When in Rome, do as the [MASK] do!", "hello world"]
    a, b = bertfn.load(folder).tokenizer(texts), bertfn.load(dst).tokenizer(texts)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.attention_mask, b.attention_mask)


def test_missing_key_is_named(mlm_checkpoint, tmp_path):
    folder, _ = mlm_checkpoint
    state = state_of(folder)
    del state["bert.encoder.layer.1.attention.self.key.bias"]
    dst = copy_without_weights(folder, tmp_path / "missing")
    save_file(state, str(dst / "model.safetensors"))
    with pytest.raises(bertfn.CheckpointError, match=r"missing 1 key\(s\): bert\.encoder\.layer\.1\.attention\.self\.key\.bias"):
        bertfn.load(dst)


def test_wrong_shape_is_named(mlm_checkpoint, tmp_path):
    folder, _ = mlm_checkpoint
    state = state_of(folder)
    state["bert.encoder.layer.0.intermediate.dense.weight"] = torch.zeros(81, 48)
    dst = copy_without_weights(folder, tmp_path / "shape")
    save_file(state, str(dst / "model.safetensors"))
    with pytest.raises(bertfn.CheckpointError,
                       match=r"bert\.encoder\.layer\.0\.intermediate\.dense\.weight: expected \(80, 48\), found \(81, 48\)"):
        bertfn.load(dst)


def test_keys_no_bert_part_reads_are_kept_unused_with_one_warning(reference, tmp_path):
    """Other heads (AntiBERTy's cls.species.*) stay in model.state; the forward pass never reads them."""
    folder, ids, expected = reference
    state = state_of(folder)
    state["cls.species.weight"], state["cls.species.bias"] = torch.ones(6, 48), torch.ones(6)
    state["optimizer.step"] = torch.tensor(3)
    dst = copy_without_weights(folder, tmp_path / "extra")
    save_file(state, str(dst / "model.safetensors"))
    with pytest.warns(UserWarning, match=r"3 key\(s\) that no BERT part reads \(cls\.species\.\*, optimizer\.\*\)"
                                         r": kept in model.state") as caught:
        model = bertfn.load(dst)
    assert len(caught) == 1
    assert model.state["cls.species.weight"].shape == (6, 48)
    torch.testing.assert_close(logits_of(model, ids), expected, atol=0, rtol=0)
    with pytest.raises(bertfn.CheckpointError, match=r"unexpected 3 key\(s\): cls\.species\.bias"):
        bertfn.load(dst, strict=True)


def test_unexpected_key_inside_the_encoder_is_named(reference, tmp_path):
    folder, _, _ = reference
    state = state_of(folder)
    state["bert.encoder.layer.9.something.weight"] = torch.zeros(2)
    dst = copy_without_weights(folder, tmp_path / "extra")
    save_file(state, str(dst / "model.safetensors"))
    with pytest.raises(bertfn.CheckpointError, match=r"unexpected 1 key\(s\): bert\.encoder\.layer\.9\.something\.weight"):
        bertfn.load(dst)


def test_to_keeps_ties_and_moves_dtype(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    half = bertfn.load(folder, dtype=torch.bfloat16)
    assert half.dtype == torch.bfloat16
    assert half.state["cls.predictions.decoder.weight"] is half.state["bert.embeddings.word_embeddings.weight"]


@pytest.mark.needs_transformers
@pytest.mark.parametrize("safe", [True, False])
def test_linear_weights_are_laid_out_in_out_with_the_files_values(safe, tmp_path):
    """``load`` stores each linear weight (in, out) in memory (``matmul_layout``): HF names, shapes and values."""
    hf = build_hf("BertForPreTraining", seed=3)
    folder = save_checkpoint(hf, tmp_path / "ckpt", safe=safe)
    model = bertfn.load(folder)
    expected = hf.state_dict()
    linear = [k for k in model.state if bertfn.checkpoint.state.LINEAR_WEIGHT.search(k)]
    assert len(linear) == 6 * hf.config.num_hidden_layers + 3  # q, k, v, out, ffn in, ffn out; pooler, transform, NSP
    for k, t in model.state.items():
        torch.testing.assert_close(t, expected[k], atol=0, rtol=0)  # same values under the same name
        laid_out = t.dim() == 2 and t.t().is_contiguous() and not t.is_contiguous()
        assert laid_out == (k in linear), k
    tied = model.state["cls.predictions.decoder.weight"], model.state["bert.embeddings.word_embeddings.weight"]
    assert tied[0].data_ptr() == tied[1].data_ptr()  # still one tensor
    moved = model.to(dtype=torch.float64)
    assert moved.state[linear[0]].t().is_contiguous()  # to() keeps the layout
    stored = bertfn.load(folder, prepare=bertfn.checkpoint.state.as_stored)  # as bertfn view and attention load
    assert all(t.is_contiguous() for t in stored.state.values())
    for k, t in stored.state.items():
        torch.testing.assert_close(t, expected[k], atol=0, rtol=0)
    stored.state[linear[0]].add_(1)  # a safetensors file is mapped then, privately: the edit stays in memory
    torch.testing.assert_close(bertfn.load(folder).state[linear[0]], expected[linear[0]], atol=0, rtol=0)


@pytest.mark.parametrize("move", [{"device": "cpu"}, {"dtype": torch.bfloat16}, {}])
def test_a_weight_that_prepare_replaces_is_freed_at_once(tiny_folder, move):
    """load(..., prepare=...) with or without a device or dtype: nothing but the model's state holds the weights
    while ``prepare`` runs, so each weight it replaces (pack_state: by its packed copy) is freed there and then,
    and the process never holds every weight twice (a cold fill-mask with device="cpu" had peaked at 989 MB
    instead of 767 on a bert-base-shaped model)."""
    freed = []

    def replace_one(state):
        k = "bert.encoder.layer.0.output.dense.weight"
        plain = weakref.ref(state[k])
        state[k] = state[k].clone()
        freed.append(plain() is None)
        return False

    bertfn.load(tiny_folder, prepare=replace_one, **move)
    assert freed == [True]


def test_a_prepared_model_gets_the_weights_as_stored_and_the_layout_if_it_declines(tiny_folder, monkeypatch):
    """get_model(prepare=...), which load runs: prepare sees each linear weight (out, in) as the file holds it;
    if it returns False (it did not lay them out, e.g. pack_state where oneDNN is not the kernel chosen), the layout follows."""
    import bertfn.checkpoint.resolve as resolve

    seen = {}

    def declines(state):
        seen.update({k: t.is_contiguous() for k, t in state.items() if bertfn.checkpoint.state.LINEAR_WEIGHT.search(k)})
        return False

    monkeypatch.setattr(resolve, "_models", {})
    model = resolve.get_model(str(tiny_folder), prepare=declines)
    assert seen and all(seen.values())
    assert all(model.state[k].t().is_contiguous() and not model.state[k].is_contiguous() for k in seen)


def test_a_weight_tied_in_a_bin_file_is_one_tensor_and_an_edit_through_it_is_seen(tiny_folder, tmp_path):
    """torch.save writes a tied decoder's storage once and torch.load makes a tensor per key, each with a version of
    its own: loaded as one tensor, an edit in place of the word embeddings reaches the decoder the fast path packed
    (it multiplied by the packed copy of the decoder as it was, silently: AntiBERTy's pseudo-log-likelihood stayed
    near the edit's -91 where the edited model's is -430)."""
    state = state_of(tiny_folder)
    words = "bert.embeddings.word_embeddings.weight"
    state["cls.predictions.decoder.weight"] = state[words].detach()  # tied, as BertForMaskedLM's state_dict holds it:
    # another tensor of the same storage
    folder = copy_without_weights(tiny_folder, tmp_path / "bin")
    torch.save(state, folder / "pytorch_model.bin")
    model = bertfn.load(folder)
    assert model.state["cls.predictions.decoder.weight"] is model.state[words]
    text = "the cat sat on the mat ."
    bertfn.score(text, model)  # packs the decoder
    edit = torch.randn(model.state[words].shape, generator=torch.Generator().manual_seed(0))
    model.state[words].add_(edit)
    fresh = bertfn.load(folder)
    fresh.state[words].add_(edit)
    assert bertfn.score(text, model)["pll"] == pytest.approx(bertfn.score(text, fresh)["pll"], abs=1e-4)


def test_a_file_of_several_precisions_runs_in_its_word_embeddings(tiny_folder, tmp_path):
    # a half-precision file holding one norm in fp32 (kept so by its writer) loaded each tensor as stored, and the
    # first LayerNorm met bf16 hidden states with an fp32 weight: torch's "mixed dtype (CPU)" RuntimeError
    import shutil

    from safetensors.torch import load_file, save_file

    folder = shutil.copytree(tiny_folder, tmp_path / "mixed")
    state = {k: t.to(torch.bfloat16) if t.is_floating_point() else t
             for k, t in load_file(folder / "model.safetensors").items()}
    norm = next(k for k in state if k.endswith("LayerNorm.weight"))
    state[norm] = state[norm].float()
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    model = bertfn.load(folder)
    assert model.dtype == torch.bfloat16
    assert {t.dtype for t in model.state.values() if t.is_floating_point()} == {torch.bfloat16}
    got = bertfn.fill_mask("the [MASK] sat .", model, top_k=3)
    assert got == bertfn.fill_mask("the [MASK] sat .", bertfn.load(folder, dtype="bfloat16"), top_k=3)
    assert bertfn.load(folder, dtype="float32").state[norm].dtype == torch.float32  # a dtype given still rules
