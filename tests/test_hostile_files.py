"""Files crafted to hurt the loaders: each is refused with bertfn's own error before it is read outside its folder,
before it fills memory or blocks, and before a forward pass meets it.

A shared service loads checkpoints and tokenizer folders downloaded from anyone. Each test here copies the session's
tiny folder (conftest, written without transformers) and breaks it in one way a hostile or broken upload would.
"""

from __future__ import annotations

import json
import shutil

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
