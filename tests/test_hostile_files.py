"""Files crafted to hurt the loaders: each is refused with bertfn's own error before it is read outside its folder,
before it fills memory or blocks, and before a forward pass meets it.

A shared service loads checkpoints and tokenizer folders downloaded from anyone. Each test here copies the session's
tiny folder (conftest, written without transformers) and breaks it in one way a hostile or broken upload would.
"""

from __future__ import annotations

import json
import os
import shutil
import threading

import pytest
import torch
from conftest import cached_on_hub

import bertfn

TRANSFORMER = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}


def copy(tiny_folder, tmp_path, name="model"):
    return shutil.copytree(tiny_folder, tmp_path / name)


# --- sentence-transformers folders: a module's files come from inside the folder ------------------------------


@pytest.mark.parametrize("kind, files", [
    ("Pooling", {"config.json": {"pooling_mode": "cls"}}),
    ("Dense", {"config.json": {"in_features": 48, "out_features": 4}}),
])
@pytest.mark.parametrize("where", ["../outside", "ABSOLUTE"])
def test_a_module_path_outside_the_folder_is_refused_unread(tiny_folder, tmp_path, kind, files, where):
    """modules.json naming ``../outside`` or an absolute path: that folder's files were read (a Pooling's modes, a
    Dense's weights from another folder changed the vectors); now refused, naming the module and the path."""
    from safetensors.torch import save_file

    outside = tmp_path / "outside"
    outside.mkdir()
    for name, content in files.items():
        (outside / name).write_text(json.dumps(content))
    save_file({"linear.weight": torch.ones(4, 48), "linear.bias": torch.zeros(4)}, str(outside / "model.safetensors"))
    folder = copy(tiny_folder, tmp_path)
    path = str(outside) if where == "ABSOLUTE" else where
    modules = [TRANSFORMER, {"idx": 1, "name": "1", "path": path, "type": f"sentence_transformers.models.{kind}"}]
    if kind == "Dense":  # a Dense after a Pooling of the folder's own
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode": "mean"}')
        modules.insert(1, {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(bertfn.ConfigError, match=rf"puts module \d \({kind}\) in '{path}', outside the folder"):
        bertfn.embed("a cat", bertfn.load(folder))


def test_a_hub_shard_index_naming_a_file_outside_the_snapshot_is_refused(tiny_folder, tmp_path, monkeypatch):
    """A hub model's model.safetensors.index.json naming ``../../../etc/passwd``: huggingface_hub's raw ValueError
    ("Invalid pointer path") came out of bertfn.load; now the index is refused in bertfn's words, nothing fetched."""
    folder = copy(tiny_folder, tmp_path)
    (folder / "model.safetensors").unlink()
    evil = "../" * 8 + "etc/passwd"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"bert.pooler.dense.weight": evil}}))
    asked = cached_on_hub(folder, "org/evil", tmp_path, monkeypatch)
    with pytest.raises(bertfn.CheckpointError, match=rf"names the shard '{evil}', which is not a file beside it"):
        bertfn.load("org/evil")
    assert evil not in asked


# --- settings files: read whole only when they are small regular files of JSON objects -------------------------


def test_a_fifo_in_place_of_config_json_is_refused_at_once(tiny_folder, tmp_path):
    """config.json a FIFO: the load blocked forever in its open (no writer ever comes); now refused unopened."""
    folder = copy(tiny_folder, tmp_path)
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")
    outcome = []

    def load():
        try:
            bertfn.load(folder)
        except bertfn.BertfnError as e:
            outcome.append(e)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(10)  # refused in milliseconds; a blocked open waits for a writer
    if thread.is_alive():  # unblock it: a writer that opens and closes gives the reader an end of file
        os.close(os.open(folder / "config.json", os.O_WRONLY | os.O_NONBLOCK))
        thread.join()
        pytest.fail("bertfn.load blocked on a FIFO named config.json")
    assert isinstance(outcome[0], bertfn.ConfigError) and "is not a regular file" in str(outcome[0])


def test_a_settings_file_over_the_limit_is_refused_unread(tiny_folder, tmp_path):
    """A config.json of SETTINGS_LIMIT + 1 bytes (sparse: it costs no disk): refused by its size before it is read,
    as one of gigabytes (or /dev/zero behind a link, which filled the memory) is."""
    from bertfn.errors import SETTINGS_LIMIT

    folder = copy(tiny_folder, tmp_path)
    with open(folder / "config.json", "r+b") as f:
        f.truncate(SETTINGS_LIMIT + 1)
    with pytest.raises(bertfn.ConfigError, match=rf"holds {SETTINGS_LIMIT + 1:,} bytes or more, and no settings file"):
        bertfn.load(folder)


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json"])
def test_json_nested_deeper_than_python_reads_is_refused(tiny_folder, tmp_path, name):
    """A hundred thousand nested arrays: Python's RecursionError came out of json.loads raw."""
    folder = copy(tiny_folder, tmp_path)
    (folder / name).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(bertfn.BertfnError, match=rf"{name} nests its JSON deeper than Python reads"):
        bertfn.load(folder)


@pytest.mark.parametrize("name", ["tokenizer_config.json", "special_tokens_map.json", "sentence_bert_config.json"])
def test_a_settings_file_holding_a_list_is_refused_by_name(tiny_folder, tmp_path, name):
    """A list where the settings' object goes: ``{**[1]}`` and ``[1].get`` were raw TypeError / AttributeError."""
    folder = copy(tiny_folder, tmp_path)
    (folder / name).write_text("[1]")
    with pytest.raises(bertfn.CheckpointError, match=rf"{name} should hold a JSON object of settings.*got a list"):
        bertfn.embed("a cat", bertfn.load(folder))


# --- config.json: absurd values are refused before anything is built from them --------------------------------


def test_a_config_of_a_billion_layers_is_refused_before_its_table_of_keys_is_built(tiny_folder, tmp_path):
    """num_hidden_layers 10**9: the table of the keys such a model reads took 7 GB and 100 s before a raw MemoryError
    (or the kernel's OOM killer); each layer holds keys of its own, so a file of fewer tensors than layers is refused
    at once."""
    folder = copy(tiny_folder, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 10**9}))
    with pytest.raises(bertfn.CheckpointError, match=r"config.json contradicts the weights in .*: it gives the model "
                                                     r"1000000000 layers of weights, and the file holds \d+ tensors"):
        bertfn.load(folder)


# --- weights: what the model reads must be numbers it computes in --------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64, torch.float8_e4m3fn])
def test_a_weight_of_a_type_bertfn_does_not_compute_in_is_refused_at_load(tiny_folder, tmp_path, dtype):
    """A LayerNorm weight stored as int64, bool, complex or float8 loaded, and the first pass met torch's raw
    "expected scalar type Float" / "not implemented for 'Float8_e4m3fn'"; now the load names the key and its type."""
    from safetensors.torch import load_file, save_file

    folder = copy(tiny_folder, tmp_path)
    state = load_file(folder / "model.safetensors")
    key = "bert.embeddings.LayerNorm.weight"
    state[key] = state[key].to(dtype)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(bertfn.CheckpointError, match=rf"hold 1 weight\(s\) in a type bertfn does not compute in: "
                                                     rf"{key} \({str(dtype).removeprefix('torch.')}\)"):
        bertfn.load(folder)


@pytest.mark.parametrize("changes, match", [
    ({"label2id": {"POSITIVE": "x"}}, r"config label2id must map label names to ids"),  # was int()'s ValueError
    ({"model_type": ["bert"]}, r"model_type \['bert'\] is not a model bertfn reads"),  # was 'unhashable type: list'
    ({"is_decoder": "false"}, r"config is_decoder must be true or false, got 'false'"),  # silently causal: "false" is truthy
    ({"layer_norm_eps": True}, r"config layer_norm_eps must be a positive number, got True"),  # silently eps 1.0
])
def test_config_values_of_the_wrong_kind_are_refused_by_name(tiny_folder, tmp_path, changes, match):
    folder = copy(tiny_folder, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    with pytest.raises(bertfn.BertfnError, match=match):
        bertfn.load(folder)


def test_a_bin_keyed_by_numbers_is_refused(tiny_folder, tmp_path):
    """A pytorch_model.bin of {1: tensor}: normalize met 1.startswith, a raw AttributeError."""
    folder = copy(tiny_folder, tmp_path)
    (folder / "model.safetensors").unlink()
    torch.save({1: torch.zeros(1)}, folder / "pytorch_model.bin")
    with pytest.raises(bertfn.CheckpointError, match="does not hold a flat state_dict of tensors by name"):
        bertfn.load(folder)


def test_a_name_longer_than_the_file_system_takes_is_refused_by_load():
    """os.stat's raw 'File name too long' (OSError) came out of bertfn.load('aaaa...')."""
    with pytest.raises(bertfn.ModelLoadError, match=r"cannot be looked up here \(File name too long\)"):
        bertfn.load("a" * 500)


def test_a_tokenizer_config_setting_that_is_no_bool_is_refused(tiny_folder, tmp_path):
    """do_lower_case "no" reached the tokenizers library: its raw TypeError "'str' object cannot be converted"."""
    folder = copy(tiny_folder, tmp_path)
    (folder / "tokenizer_config.json").write_text('{"do_lower_case": "no"}')
    with pytest.raises(bertfn.CheckpointError, match=r"tokenizer_config.json: do_lower_case must be true or false, "
                                                     r"got 'no'"):
        bertfn.load(folder)


def test_albert_key_table_holds_a_rule_per_name_whatever_its_layers():
    """ALBERT's table held a rule per layer and name, each rename reading all of them (recompiled past re's cache of
    512): a config.json of 300 layers (one shared group, as every ALBERT) took minutes to load. Now a rule per name,
    the group found from the layer's number."""
    from bertfn.checkpoint.names.albert import ALBERT

    small, deep = (bertfn.BertConfig.from_dict({"model_type": "albert", "num_hidden_layers": n, "num_hidden_groups": 2})
                   for n in (12, 3000))
    assert len(ALBERT.table_of(deep)) == len(ALBERT.table_of(small))
    rename = ALBERT.renamer(deep)
    group = "albert.encoder.albert_layer_groups.{}.albert_layers.0."
    assert rename("bert.encoder.layer.2999.attention.self.query.weight") == group.format(1) + "attention.query.weight"
    assert rename("bert.encoder.layer.1499.output.LayerNorm.bias") == group.format(0) + "full_layer_layer_norm.bias"
