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


def test_missing_matplotlib_is_a_bertfn_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # makes the import fail
    with pytest.raises(bertfn.BertfnError, match=r'pip install "bertfn\[plot\]"'):
        plots.activation_curves()


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


def test_cli_attention_errors_are_one_line(mlm_checkpoint, tmp_path, capsys):
    model = str(mlm_checkpoint[0])
    assert main(["attention", TEXT, "--layer", "7", "--model", model, "--out", str(tmp_path / "a.png")]) == 2
    assert capsys.readouterr().err.strip() == (
        "bertfn: error: layer must be an integer from 0 to 1 (this model has 2 layers), got 7")
    assert main(["attention", TEXT, "--model", model, "--out", str(tmp_path / "missing" / "a.png")]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists()
