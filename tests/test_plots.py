"""Plots and the `bertfn attention` command: real figures with token labels, bertfn errors otherwise."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import bertfn
from bertfn import plots
from bertfn.cli import main

pytest.importorskip("matplotlib")

TEXT = "the cat sat on the mat."


@pytest.fixture(scope="module")
def rec(mlm_checkpoint):
    return bertfn.trace(TEXT, bertfn.load(mlm_checkpoint[0]))


def tick_labels(axis) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels()]


def test_attention_heatmap_labels_both_axes_with_the_tokens(rec):
    fig = plots.attention_heatmap(rec.attention(1, head=2), rec.tokens, title="layer 1, head 2")
    ax = fig.axes[0]
    assert tick_labels(ax.xaxis) == rec.tokens and tick_labels(ax.yaxis) == rec.tokens
    torch.testing.assert_close(torch.as_tensor(ax.images[0].get_array()), rec["layer.1.attention.probs"][0, 2])


def test_attention_heads_draws_one_panel_per_head(rec):
    fig = plots.attention_figure(rec, layer=-1)
    titles = [ax.get_title() for ax in fig.axes if ax.images and ax.get_title()]
    assert titles == [f"head {h}" for h in range(rec.config.num_attention_heads)]
    assert fig.get_suptitle() == "attention probabilities, layer 1"


def test_histograms_and_activation_curves(rec):
    fig = plots.histograms({"scores": rec["layer.0.attention.scores"], "scaled": rec["layer.0.attention.scaled_scores"]})
    n = rec["layer.0.attention.scores"].numel()
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [f"scores (n={n})", f"scaled (n={n})"]
    fig = plots.activation_curves(["gelu", "relu"])
    gelu, relu = (torch.as_tensor(line.get_ydata()) for line in fig.axes[0].get_lines()[:2])
    assert relu.min() == 0 and -0.18 < gelu.min() < -0.16  # GELU dips below zero, ReLU does not


def test_bad_plot_input_raises_input_error(rec):
    with pytest.raises(bertfn.InputError, match="3 labels for 7"):
        plots.heatmap(torch.zeros(7, 7), ["a", "b", "c"])
    with pytest.raises(bertfn.InputError, match="2-D"):
        plots.attention_heatmap(rec.attention(0), rec.tokens)
    with pytest.raises(bertfn.InputError, match="unknown activation"):
        plots.activation_curves(["swishy"])
    with pytest.raises(bertfn.InputError, match="got 3 tokens for 9 rows/columns"):  # was drawn with 3 labels
        plots.attention_heads(rec.attention(0), rec.tokens[:3])
    with pytest.raises(bertfn.InputError, match=r"got shape \(3, 9, 4\)"):
        plots.attention_heads(rec.attention(0)[..., :4], rec.tokens)
    batch = bertfn.trace([TEXT, "a cat ."], rec.model)
    with pytest.raises(bertfn.InputError, match="got a batch of 2 texts' recordings; pick a text"):  # AttributeError
        plots.attention_figure(batch, 0)


def test_odd_plot_arguments_are_input_errors_or_read_as_meant(rec):
    """columns=0 divided by zero, a list or a tensor given to histograms met .items(), and one activation's name
    as a string was read letter by letter ('g', 'e', 'l', 'u')."""
    for columns in (0, -1, 2.5):
        with pytest.raises(bertfn.InputError, match="columns .* must be an integer from 1"):
            plots.attention_heads(rec.attention(0), rec.tokens, columns=columns)
    for values in ([rec["layer.0.attention.scores"]], rec["layer.0.attention.scores"]):
        with pytest.raises(bertfn.InputError, match=r"histograms takes a dict \{label: tensor\}"):
            plots.histograms(values)
    with pytest.raises(bertfn.InputError, match=r"keep the batch axis: pass rec.attention\(layer\)"):
        plots.attention_heads(rec["layer.0.attention.probs"], rec.tokens)  # (1, nh, S, S)
    lines = plots.activation_curves("gelu").axes[0].get_lines()
    assert [line.get_label() for line in lines][:1] == ["gelu"] and len(lines) == 3  # the curve and the two axes


def test_a_pruned_layers_title_names_the_heads_pruned(rec):
    """Heads 0 and 2 of layer 1 pruned: the one left is drawn as "head 0" (as transformers numbers it), and the title
    says it was not the first (it said nothing, so "head 0" read as the unpruned model's head 0)."""
    pruned = bertfn.prune_heads(rec.model, {1: [0, 2]})
    fig = plots.attention_figure(bertfn.trace(TEXT, pruned), 1, head=0)
    assert fig.axes[0].get_title() == ("attention probabilities, layer 1, heads 0, 2 pruned (the rest renumbered "
                                       "from 0), head 0")
    assert "pruned" not in plots.attention_figure(rec, 1, head=0).axes[0].get_title()


def test_missing_matplotlib_is_a_dependency_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # makes the import fail
    with pytest.raises(bertfn.DependencyError, match=r"pip install matplotlib"):
        plots.activation_curves()


def image_panels(fig) -> list:
    return [ax for ax in fig.axes if ax.images and ax.get_title().startswith("head")]


@pytest.mark.parametrize("scale", plots.SCALES)
def test_attention_heads_colour_scale(rec, scale):
    probs = rec.attention(-1)  # (nh, S, S)
    nh = probs.shape[0]
    fig = plots.attention_heads(probs, rec.tokens, scale=scale)
    panels = image_panels(fig)
    top = probs.flatten(1).amax(dim=1)  # (nh,) each head's largest probability
    expected = {"per_head": top.tolist(), "shared": [top.max().item()] * nh, "fixed": [1.0] * nh}[scale]
    assert [ax.images[0].get_clim() for ax in panels] == [(0.0, pytest.approx(t)) for t in expected]
    colorbars = [ax for ax in fig.axes if not ax.images]
    assert len(colorbars) == (nh if scale == "per_head" else 1)  # one per panel, or one for the grid


def test_attention_heatmap_scale_and_bad_scales(rec):
    probs = rec.attention(1, head=0)
    assert plots.attention_heatmap(probs, rec.tokens).axes[0].images[0].get_clim() == (0.0, pytest.approx(probs.max().item()))
    assert plots.attention_heatmap(probs, rec.tokens, scale="fixed").axes[0].images[0].get_clim() == (0.0, 1.0)
    for bad in ("log", "per-head", None):
        with pytest.raises(bertfn.InputError, match=f"scale must be one of 'per_head', 'shared', 'fixed', got {bad!r}"):
            plots.attention_heads(rec.attention(1), rec.tokens, scale=bad)


@pytest.mark.parametrize("scale", ["per-head", "shared", "fixed"])
def test_cli_attention_scale(mlm_checkpoint, tmp_path, capsys, monkeypatch, scale):
    seen = []
    draw = plots.attention_figure
    monkeypatch.setattr(plots, "attention_figure", lambda *a: seen.append(a[3]) or draw(*a))
    out = tmp_path / "attn.png"
    assert main(["attention", TEXT, "--model", str(mlm_checkpoint[0]), "--scale", scale, "--out", str(out)]) == 0
    assert seen == [scale.replace("-", "_")] and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_attention_out_dash_writes_a_png_on_stdout(mlm_checkpoint, tmp_path, capsysbinary, monkeypatch):
    """--out - is standard output (> attn.png, | display): a PNG there, 'wrote stdout' on stderr; no file named '-'."""
    monkeypatch.chdir(tmp_path)
    assert main(["attention", TEXT, "--model", str(mlm_checkpoint[0]), "--out", "-"]) == 0
    printed = capsysbinary.readouterr()
    assert printed.out[:8] == b"\x89PNG\r\n\x1a\n" and printed.err == b"bertfn: done: wrote stdout\n"
    assert list(tmp_path.iterdir()) == []
    assert main(["attention", TEXT, "--model", str(mlm_checkpoint[0]), "--out", "attn"]) == 0  # no ending: a PNG
    assert capsysbinary.readouterr().out == b"wrote attn.png\n" and [f.name for f in tmp_path.iterdir()] == ["attn.png"]


def test_import_bertfn_does_not_import_matplotlib():
    code = "import sys, bertfn; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("head", [None, 0])
def test_cli_attention_writes_a_png(mlm_checkpoint, tmp_path, capsys, head):
    out = tmp_path / "attn.png"
    args = ["attention", TEXT, "--layer", "1", "--model", str(mlm_checkpoint[0]), "--out", str(out)]
    assert main(args + (["--head", str(head)] if head is not None else [])) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


@pytest.mark.parametrize("command", ["attention", "view"])
def test_an_out_in_a_missing_folder_is_refused_before_the_model_loads(command, tmp_path, capsys):
    """``bertfn attention --out missing/a.png`` loaded the model, traced the text and drew the figure before the
    system's "No such file or directory"; the folder is named first (the model named here does not exist: not
    loaded)."""
    out = tmp_path / "missing" / "a.png"
    assert main([command, TEXT, "--model", str(tmp_path / "no-model"), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (f"bertfn: error: --out {out}: its folder {out.parent} does not exist; "
                                               f"create it (mkdir -p {out.parent}) or name a file in a folder that does")


def test_cli_attention_errors_are_one_line(mlm_checkpoint, tmp_path, capsys):
    model = str(mlm_checkpoint[0])
    assert main(["attention", TEXT, "--layer", "7", "--model", model, "--out", str(tmp_path / "a.png")]) == 2
    assert capsys.readouterr().err.strip() == (  # the option's name, and the negative layers it takes too
        "bertfn: error: --layer must be an integer from -2 to 1 (this model has 2 layers; negative counts from the "
        "end), got 7")
    assert main(["attention", TEXT, "--head", "-9", "--model", model, "--out", str(tmp_path / "a.png")]) == 2
    assert "error: --head must be an integer from -3 to 2 (layer 0 has 3 heads;" in capsys.readouterr().err
    assert main(["attention", TEXT, "--model", model, "--out", str(tmp_path / "missing" / "a.png")]) == 2
    assert f"its folder {tmp_path / 'missing'} does not exist; create it" in capsys.readouterr().err  # before loading
    assert not (tmp_path / "a.png").exists()


def test_a_figure_shows_itself_in_jupyter_without_pyplot(rec):
    """Jupyter draws a figure returned by a cell only if it has a PNG form: ``%matplotlib inline`` registers one,
    but only pyplot's import sets that up, which bertfn never makes; without it a cell showed '<Figure size ...>'.
    Once registered (pyplot imported), its own PNG form is used instead, so the figure is drawn once."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    formats, _ = shell.display_formatter.format(plots.attention_figure(rec, layer=0))
    assert formats["image/png"].startswith(b"\x89PNG") and "<Figure size" in formats["text/plain"]
