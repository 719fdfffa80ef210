"""Pictures of ESM-2's contact maps: the probabilities as a heatmap, and beside one layer's attention maps.

:func:`bertfn.contacts` reads which residues touch from every layer's attention; these draw what it gives, with
:mod:`bertfn.inspect.plots`' conventions (matplotlib imported only when a figure is drawn, a new ``Figure`` on the Agg
canvas returned, :class:`~bertfn.errors.DependencyError` without matplotlib):

    contact_map(probs, sequence)                  the (r, r) map, 0..1, the residues' letters on a short protein's axes
    contacts_figure(rec, probs, layer=-1)         the map left, that layer's heads over the residues on a grid right
"""

from __future__ import annotations

import torch

from ..errors import InputError
from .plots import _matrix, color_limits, heatmap, new_figure
from .trace import Recording

Tensor = torch.Tensor


def contact_map(probs: Tensor, sequence: str | None = None, ax=None, *, title: str | None = "contact probabilities",
                colorbar: bool = True):
    """A protein's contact map (:func:`bertfn.contacts`) as a heatmap: cell (i, j) the probability that residues i and
    j touch, on the fixed 0..1 scale; the residues' letters label the axes of a short protein (at most 60).

    Args:
        probs: (r, r) probabilities, e.g. ``bertfn.contacts(sequence, model)``.
        sequence: the protein's r residues, one letter each, or None (the axes count residues from 0).
        ax (matplotlib.axes.Axes | None): draw into this ``Axes``, else on a new figure.
        title: the panel's title.
        colorbar: draw a colour bar beside it.

    Returns:
        (matplotlib.figure.Figure): The figure.

    Raises:
        InputError: a map that is not (r, r), or a sequence of another length.
    """
    m = _matrix(probs, "contact_map's probabilities")
    r = m.shape[0]
    if m.shape != (r, r) or sequence is not None and len(sequence) != r:
        raise InputError(f"contact_map takes an (r, r) map and the protein's r residues, got a map of shape "
                         f"{tuple(m.shape)}{f' and {len(sequence)} residues' if sequence is not None else ''}")
    labels = list(sequence) if sequence is not None and r <= 60 else None
    return heatmap(m, labels, labels, title=title, xlabel="residue", ylabel="residue", cmap="Greys", ax=ax,
                   colorbar=colorbar, vmin=0.0, vmax=1.0)


def contacts_figure(attentions: Recording | Tensor, probs: Tensor, layer: int = -1, *, sequence: str | None = None,
                    columns: int = 5, scale: str = "per_head"):
    """The contact map beside one layer's attention maps over the same residues: which heads see the contacts.

    Args:
        attentions: a recording of :func:`bertfn.trace` of the protein (its ``layer``'s probabilities are drawn), or
            one layer's probabilities (nh, S, S) with ``<cls>`` and ``<eos>`` (S = r + 2) or without them (r).
        probs: (r, r) the contact map (:func:`bertfn.contacts`).
        layer: the recording's layer (negative counts from the end); the title's, for a tensor.
        sequence: the protein's residues, to label a short map.
        columns: attention panels per row, at most.
        scale: the attention maps' colour scale (:data:`SCALES`).

    Returns:
        (matplotlib.figure.Figure): The figure: the contact map left, the layer's heads on a grid right.

    Raises:
        InputError: attention maps that do not fit the map's residues, or no such layer.
    """
    r = _matrix(probs, "contacts_figure's map").shape[0]
    heads = attentions.attention(layer) if isinstance(attentions, Recording) else torch.as_tensor(attentions)
    heads = heads.detach().float().cpu()
    if heads.dim() != 3 or heads.shape[1:] not in ((r, r), (r + 2, r + 2)):
        raise InputError(f"contacts_figure takes one layer's attention maps (heads, S, S) over the map's {r} residues "
                         f"(S = {r}, or {r + 2} with <cls> and <eos>), got shape {tuple(heads.shape)}")
    if heads.shape[1] == r + 2:
        heads = heads[:, 1:-1, 1:-1]  # (nh, r, r): the residues alone, as the contact head reads them
    if isinstance(attentions, Recording):
        layer %= attentions.config.num_hidden_layers
    nh, tops = heads.shape[0], color_limits(heads, scale)
    cols = min(columns, nh)
    rows = -(-nh // cols)  # ceil
    fig = new_figure(4.5 + 1.6 * cols, max(4.0, 1.6 * rows))
    left, right = fig.subfigures(1, 2, width_ratios=[4.5, 1.6 * cols])
    contact_map(probs, sequence, ax=left.add_subplot())
    for h, ax in enumerate(right.subplots(rows, cols, squeeze=False).flat):
        ax.set_axis_off()
        if h < nh:
            ax.imshow(heads[h].numpy(), cmap="Blues", vmin=0.0, vmax=tops[h], interpolation="nearest")
            ax.set_title(f"head {h}", fontsize=8)
    right.suptitle(f"attention probabilities, layer {layer} (residues)", fontsize=10)
    return fig
