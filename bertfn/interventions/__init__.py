"""Changing one step of the model: edits by name, ablation, steering and activation patching.

Every point :func:`bertfn.trace` records can also be replaced during a pass, by the same name: an
*edit* is a function ``edit(tensor, point) -> tensor`` (:mod:`bertfn.model.recorder`), and a dict
``{name: edit}`` is what ``bertfn.encoder``, ``fill_mask``, ``score``, ``embed`` and ``trace`` take as
``edits=``. This room makes the usual ones:

    points.py      where a position, a head or a neuron sits in each named tensor
    ablation.py    zero_heads, zero_neurons, mean_heads, mean_neurons (with head_means, neuron_means), steer
    patching.py    patch (a clean activation into a corrupted run), sweep (layers x positions or heads),
                   attribution (the same map from one backward pass), logit_difference, correlation
"""

from .ablation import (
    activation_means,
    head_means,
    mean_heads,
    mean_neurons,
    neuron_means,
    replace_with,
    steer,
    zero_heads,
    zero_neurons,
)
from .patching import Sweep, attribution, correlation, logit_difference, patch, sweep

__all__ = ["Sweep", "activation_means", "attribution", "correlation", "head_means", "logit_difference", "mean_heads",
           "mean_neurons", "neuron_means", "patch", "replace_with", "steer", "sweep", "zero_heads", "zero_neurons"]
