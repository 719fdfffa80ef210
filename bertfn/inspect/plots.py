"""Pictures of a forward pass: attention heatmaps with token labels, histograms, activation curves.

matplotlib is an optional dependency (``pip install matplotlib``, or the ``plot`` extra from a
checkout), imported only when one of these functions runs, so ``import bertfn`` stays light. Each function draws on a new
``matplotlib.figure.Figure`` attached to the Agg canvas (no pyplot, no window, no global state)
and returns it: a notebook displays it, ``fig.savefig("attn.png")`` writes it to a file.
The tensors usually come from :func:`bertfn.trace`. Without matplotlib, every function raises
:class:`~bertfn.errors.DependencyError` naming the extra to install.

Attention maps choose their colour scale (``scale=``, :data:`SCALES`): each head from 0 to its own
largest probability (the default), every head of the layer on one scale, or the fixed 0..1. On the
fixed scale, the many heads of late layers that spread their attention thinly draw near-blank. A layer that
attends within a window (ModernBERT's local layers) draws the keys out of its reach grey, not as the white of
a probability near 0, and its title says "local (window W)".
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

import torch

from ..errors import DependencyError, InputError
from ..model.functional import ACTIVATIONS
from .page_arrays import layer_windows, out_of_reach
from .trace import Recording, one_recording

if TYPE_CHECKING:  # the annotations only: importing bertfn never imports matplotlib
    import matplotlib.figure

Tensor = torch.Tensor


OUT_OF_REACH = (0.88, 0.88, 0.88, 1.0)
"""The RGBA of a cell a layer cannot attend to (a key out of a local layer's window): neutral grey, no colour of Blues."""

SCALES = ("per_head", "shared", "fixed")
"""Colour scales of the attention maps: 0 to each head's own largest probability; 0 to the largest of
all heads drawn together; 0 to 1."""


def require_matplotlib():
    """matplotlib's ``Figure`` and Agg canvas classes.

    Returns:
        (tuple[type, type]): ``(Figure, FigureCanvasAgg)``, the classes.

    Raises:
        DependencyError: (exit 6) matplotlib cannot be imported, saying how to install it (``pip install matplotlib``).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise DependencyError(f"plotting needs matplotlib, which cannot be imported here ({e}); install it: "
                              'pip install matplotlib (or, in a checkout of bertfn, pip install -e ".[plot]")') from None
    return Figure, FigureCanvasAgg


def new_figure(width: float, height: float):
    """A new, empty matplotlib ``Figure`` on the Agg canvas (:func:`require_matplotlib`), which Jupyter shows.

    Args:
        width: inches.
        height: inches.
    """
    Figure, FigureCanvasAgg = require_matplotlib()
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    if "IPython" in sys.modules:  # as a PNG, as %matplotlib inline would: pyplot's import alone sets that up
        from IPython.core.pylabtools import print_figure
        fig._repr_png_ = partial(print_figure, fig)  # a partial, not a lambda: the figure still pickles
    return fig


def _matrix(x: Tensor, what: str) -> Tensor:
    x = torch.as_tensor(x).detach().float().cpu()
    if x.dim() != 2:
        raise InputError(f"{what} must be a 2-D (rows, columns) tensor, got shape {tuple(x.shape)}")
    return x


def heatmap(matrix: Tensor, row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None, *,
            title: str | None = None, xlabel: str | None = None, ylabel: str | None = None, cmap: str = "viridis",
            ax=None, colorbar: bool = True, vmin: float | None = None, vmax: float | None = None):
    """Draw a (R, C) matrix as colored cells, rows top to bottom, with optional tick labels.

    Args:
        matrix: (R, C).
        row_labels: R labels, or None for none.
        col_labels: C labels, or None for none.
        title: the panel's title.
        xlabel: the x axis' label.
        ylabel: the y axis' label.
        cmap: a matplotlib colour map's name.
        ax (matplotlib.axes.Axes | None): draw into this ``Axes`` (e.g. one panel of a grid), else on a new figure.
        colorbar: draw a colour bar beside it.
        vmin: the value at the bottom of the colour scale (default: the matrix's min).
        vmax: the value at its top (default: the matrix's max).

    Returns:
        (matplotlib.figure.Figure): The figure.

    Raises:
        InputError: a matrix that is not 2-D, or labels of another number than its rows or columns.
    """
    m = _matrix(matrix, "heatmap's matrix")
    R, C = m.shape
    if ax is None:
        side = min(max(3.0, 0.35 * max(R, C) + 1.5), 12.0)
        ax = new_figure(side + (1.0 if colorbar else 0.0), side).add_subplot()
    image = ax.imshow(m.numpy(), cmap=cmap, aspect="auto", interpolation="nearest", vmin=vmin, vmax=vmax)
    for labels, n, set_ticks, set_labels, rotation in (
        (row_labels, R, ax.set_yticks, ax.set_yticklabels, 0),
        (col_labels, C, ax.set_xticks, ax.set_xticklabels, 90),
    ):
        if labels is not None:
            if len(labels) != n:
                raise InputError(f"heatmap got {len(labels)} labels for {n} rows/columns; pass one label each")
            set_ticks(range(n))
            set_labels(list(labels), rotation=rotation, fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.8)
    return ax.figure


def color_limits(probs: Tensor, scale: str) -> list[float]:
    """The top of the colour scale of each head's map (the bottom is 0).

    Args:
        probs: (nh, S, S) probabilities.
        scale: each head's own largest probability ("per_head"), the largest of all ("shared"), or 1 ("fixed").

    Returns:
        nh numbers.

    Raises:
        InputError: an unknown scale.
    """
    if scale not in SCALES:
        raise InputError(f"scale must be one of {', '.join(map(repr, SCALES))}, got {scale!r}")
    if scale == "fixed":
        return [1.0] * probs.shape[0]
    top = probs.flatten(1).amax(dim=1)  # (nh,)
    if scale == "shared":
        top = top.max().expand(probs.shape[0])
    return [t if t > 0 else 1.0 for t in top.tolist()]  # an all-zero map still gets a scale


def _grey_out(ax, out: Tensor | None) -> None:
    """Cover the cells ``out`` (S_q, S_k) bool of one map in :data:`OUT_OF_REACH` grey (nothing where None).

    Args:
        ax (matplotlib.axes.Axes): the map's axes.
        out: the cells the layer cannot attend to, or None.
    """
    if out is not None:
        rgba = torch.zeros(*out.shape, 4)
        rgba[out] = torch.tensor(OUT_OF_REACH)
        ax.imshow(rgba.numpy(), aspect="auto", interpolation="nearest")


def attention_heatmap(probs: Tensor, tokens: Sequence[str], *, title: str | None = None, ax=None, colorbar: bool = True,
                      scale: str = "per_head", out: Tensor | None = None):
    """One head's attention probabilities (S_q, S_k): row i shows where query token i looks.

    Args:
        probs: (S_q, S_k), e.g. ``rec.attention(layer, head)``.
        tokens: the S token labels.
        title: the panel's title.
        ax (matplotlib.axes.Axes | None): draw into this ``Axes``, else on a new figure.
        colorbar: draw a colour bar beside it.
        scale: "per_head" or "shared" colour it from 0 to its largest probability, "fixed" from 0 to 1.
        out: (S_q, S_k) bool, the cells the layer cannot attend to, drawn grey
            (:func:`~bertfn.inspect.page_arrays.out_of_reach`); None: none.

    Returns:
        (matplotlib.figure.Figure): The figure.
    """
    (top,) = color_limits(_matrix(probs, "attention_heatmap's probabilities")[None], scale)
    fig = heatmap(probs, tokens, tokens, title=title, xlabel="key (attended to)", ylabel="query",
                  cmap="Blues", ax=ax, colorbar=colorbar, vmin=0.0, vmax=top)
    _grey_out(ax if ax is not None else fig.axes[0], out)
    return fig


def attention_heads(probs: Tensor, tokens: Sequence[str], *, title: str | None = None, columns: int = 4,
                    scale: str = "per_head", out: Tensor | None = None):
    """Every head of one layer, (nh, S, S), as a grid of heatmaps.

    Args:
        probs: (nh, S, S), e.g. ``rec.attention(layer)``.
        tokens: the S token labels.
        title: the figure's title.
        columns: panels per row, at most.
        scale: one of :data:`SCALES`. "per_head" colours each head from 0 to its own largest probability, with a
            colour bar per panel; "shared" puts every head on one scale, 0 to the largest of them all, and
            "fixed" on 0..1, each with one colour bar for the grid.
        out: (S, S) bool, the cells the layer cannot attend to, drawn grey
            (:func:`~bertfn.inspect.page_arrays.out_of_reach`); None: none.

    Returns:
        (matplotlib.figure.Figure): The figure.

    Raises:
        InputError: ``probs`` that are not (nh, S, S), tokens of another number than S, an unknown scale, or
            ``columns`` below 1.
    """
    probs = torch.as_tensor(probs).detach().float().cpu()
    if probs.dim() != 3 or probs.shape[1] != probs.shape[2]:
        batch = "; a recording's tensors keep the batch axis: pass rec.attention(layer) (recs[i]'s for a batch)" \
            if probs.dim() == 4 else ""
        raise InputError(f"attention_heads takes (heads, S, S) probabilities, got shape {tuple(probs.shape)}{batch}")
    if len(tokens) != probs.shape[1]:
        raise InputError(f"attention_heads got {len(tokens)} tokens for {probs.shape[1]} rows/columns; pass one label "
                         "each (rec.tokens of the recording the probabilities come from)")
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        raise InputError(f"attention_heads' columns (panels per row) must be an integer from 1, got {columns!r}")
    tops = color_limits(probs, scale)
    nh = probs.shape[0]
    cols = min(columns, nh)
    rows = -(-nh // cols)  # ceil
    panel = min(max(2.2, 0.22 * len(tokens) + 1.0), 5.0)
    fig = new_figure(cols * panel + 1.0, rows * panel + (0.4 if title else 0.0))
    axes = fig.subplots(rows, cols, squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h >= nh:
            ax.set_axis_off()
            continue
        image = ax.imshow(probs[h].numpy(), cmap="Blues", vmin=0.0, vmax=tops[h], aspect="auto", interpolation="nearest")
        _grey_out(ax, out)
        ax.set_title(f"head {h}", fontsize=9)
        ax.set_xticks(range(len(tokens)))
        ax.set_yticks(range(len(tokens)))
        ax.set_xticklabels(tokens if h + cols >= nh else [], rotation=90, fontsize=6)
        ax.set_yticklabels(tokens if h % cols == 0 else [], fontsize=6)
        if scale == "per_head":
            cbar = fig.colorbar(image, ax=ax, shrink=0.8)
            cbar.ax.tick_params(labelsize=6)
    if scale != "per_head":
        fig.colorbar(image, ax=axes, shrink=0.6, label="probability")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def attention_figure(rec: Recording, layer: int, head: int | None = None, scale: str = "per_head"):
    """The picture ``bertfn attention`` writes: one head of ``layer``, or all of its heads (on ``scale``).

    In a model with local layers (ModernBERT) the title says which kind ``layer`` is, and a local layer's keys out
    of its window are grey (:func:`~bertfn.inspect.page_arrays.out_of_reach`). A pruned layer's title names the heads
    pruned: those left are numbered from 0 (``head`` counts them), so its "head 1" may have been head 3.

    Args:
        rec: a recording of :func:`bertfn.trace`.
        layer: the layer (negative counts from the end).
        head: one head, or None for all of them.
        scale: as in :func:`attention_heads`.

    Returns:
        (matplotlib.figure.Figure): The figure.

    Raises:
        InputError: a batch's recordings (``bertfn.trace(list)``) or something else than a recording; no such layer
            or head.
    """
    one_recording(rec, "attention_figure draws one text's recording (bertfn.trace(text, model))")
    probs = rec.attention(layer, head)  # checks both indices
    layer %= rec.config.num_hidden_layers
    windows, out = layer_windows(rec.config), out_of_reach(rec.config, layer, len(rec.tokens))
    kind = "" if windows.count(None) == len(windows) else ", global" if out is None else \
        f", local (window {windows[layer]}): grey keys out of reach"
    if rec.config.pruned_heads.get(layer):  # the heads left are numbered from 0, as transformers' attentions are
        kind += f", heads {', '.join(map(str, rec.config.pruned_heads[layer]))} pruned (the rest renumbered from 0)"
    title = f"attention probabilities, layer {layer}{kind}"
    if head is None:
        return attention_heads(probs, rec.tokens, title=title, scale=scale, out=out)
    nh = rec.attention(layer).shape[0]
    return attention_heatmap(probs, rec.tokens, title=f"{title}, head {head % nh}", scale=scale, out=out)


def histograms(values: dict[str, Tensor], *, bins: int = 80, title: str | None = None, xlabel: str | None = None,
               log: bool = False, ax=None):
    """Overlaid histograms (outlines) of several tensors, one per label, e.g. scores before and after scaling.

    Args:
        values: ``{label: tensor}``, each tensor flattened.
        bins: bins per histogram.
        title: the panel's title.
        xlabel: the x axis' label.
        log: a logarithmic count axis.
        ax (matplotlib.axes.Axes | None): draw into this ``Axes``, else on a new figure.

    Returns:
        (matplotlib.figure.Figure): The figure.

    Raises:
        InputError: ``values`` that are not a dict.
    """
    if not isinstance(values, Mapping):
        raise InputError(f"histograms takes a dict {{label: tensor}}, one histogram each, got {type(values).__name__}; "
                         "e.g. histograms({'scores': rec['layer.0.attention.scores']})")
    if ax is None:
        ax = new_figure(6.0, 3.6).add_subplot()
    for label, v in values.items():
        flat = torch.as_tensor(v).detach().float().cpu().flatten()
        ax.hist(flat.numpy(), bins=bins, histtype="step", linewidth=1.5, label=f"{label} (n={flat.numel()})")
    if log:
        ax.set_yscale("log")
    ax.set_ylabel("count")
    if xlabel:
        ax.set_xlabel(xlabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return ax.figure


def activation_curves(names: Sequence[str] = ("gelu", "relu"), lo: float = -4.0, hi: float = 4.0, *, ax=None):
    """The activations BERT configs name (``config.hidden_act``), drawn over ``[lo, hi]``.

    Args:
        names: keys of :data:`~bertfn.model.functional.ACTIVATIONS` (one name, or several).
        lo: the left end of x.
        hi: the right end of x.
        ax (matplotlib.axes.Axes | None): draw into this ``Axes``, else on a new figure.

    Returns:
        (matplotlib.figure.Figure): The figure.

    Raises:
        InputError: an unknown activation.
    """
    names = [names] if isinstance(names, str) else list(names)  # "gelu" is one name, not four letters
    unknown = [n for n in names if n not in ACTIVATIONS]
    if unknown:
        raise InputError(f"unknown activation(s) {unknown}; expected names from {sorted(ACTIVATIONS)}")
    x = torch.linspace(lo, hi, 401)
    if ax is None:
        ax = new_figure(6.0, 3.6).add_subplot()
    for n in names:
        ax.plot(x.numpy(), ACTIVATIONS[n](x).numpy(), label=n, linewidth=1.8)
    ax.axhline(0.0, color="grey", linewidth=0.6)
    ax.axvline(0.0, color="grey", linewidth=0.6)
    ax.set_xlabel("x")
    ax.set_ylabel("act(x)")
    ax.legend()
    return ax.figure


PAGE_WIDTH = 5.7
"""Inches: the widest figure the documentation site shows at its natural size, at :data:`PAGE_STYLE`'s 100 dpi
(570 px: the output column beside a notebook's ``Out[n]:`` prompt is 572 CSS px wide in a 1400 px window)."""

PAGE_STYLE = {"figure.dpi": 100, "font.size": 9.0, "axes.titlesize": 9.5, "axes.labelsize": 9.0,
              "xtick.labelsize": 8.0, "ytick.labelsize": 8.0, "legend.fontsize": 8.0, "figure.titlesize": 10.0}
"""matplotlib settings for figures that are stored in a notebook and read on a page
(``matplotlib.rcParams.update(PAGE_STYLE)``): 100 dpi, and text from 8 points up, 11 px on the screen when
the figure is at most :data:`PAGE_WIDTH` wide."""


def fit_to_page(fig: matplotlib.figure.Figure, width: float = PAGE_WIDTH, height: float | None = None, *,
                min_fontsize: float = 7.0) -> matplotlib.figure.Figure:
    """Resize a figure for a page and raise its smallest texts.

    For figures whose sizes and fonts were chosen for a window of their own (:func:`attention_heads` picks
    6-point labels and a width from the number of tokens), before a notebook that is read on a page displays them.

    Args:
        fig: the figure, changed in place.
        width: inches; :data:`PAGE_WIDTH` at :data:`PAGE_STYLE`'s 100 dpi fills the site's column.
        height: inches, or None to scale the height with the width.
        min_fontsize: points; every text smaller, tick labels included, is raised to it (7 points at 100 dpi: 9.7 px).

    Returns:
        The figure.
    """
    from matplotlib.text import Text

    old_width, old_height = fig.get_size_inches()
    fig.set_size_inches(width, height if height is not None else old_height * width / old_width)
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = axis.get_ticklabels(which="both")
            if labels and min(t.get_fontsize() for t in labels) < min_fontsize:
                axis.set_tick_params(which="both", labelsize=min_fontsize)
    for text in fig.findobj(Text):
        if text.get_fontsize() < min_fontsize:
            text.set_fontsize(min_fontsize)
    return fig
