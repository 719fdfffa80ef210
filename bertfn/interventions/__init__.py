"""Changing one step of the model: edits by name, ablation, steering, patching studies, gradients.

Every point :func:`bertfn.trace` records can also be replaced during a pass, by the same name: an
*edit* is a function ``edit(tensor, point) -> tensor`` (:mod:`bertfn.model.recorder`), and a dict
``{name: edit or [edits]}`` is what ``bertfn.encoder``, ``fill_mask``, ``score``, ``embed`` and ``trace``
take as ``edits=`` (:func:`merge_edits` joins dicts without dropping any). This room makes the usual ones,
and measures what they change:

    points.py      where a position, a head or a neuron sits in each named tensor
    ablation.py    zero_heads, zero_neurons, mean_heads, mean_neurons (with head_means, neuron_means), steer
    patching.py    patch (a clean activation into a corrupted run); metrics of a run: logit_difference, at_masks
    study.py       sweep and attribution over one pair of texts or a dataset of them: per-example maps,
                   their mean and confidence interval; correlation
    pairs.py       a clean/corrupted pair made ready: its runs, and the points a metric reads
    copies.py      the engine under sweep: many patched copies of one run, reusing what does not change
    stats.py       the mean and Student's t interval
    gradients.py   d metric / d any point, with the points' values, in one call
    logit_attribution.py   direct logit attribution per head and per layer at a mask (logit_attribution)
    paths.py       path patching: a sender's clean output into chosen receivers only (path_patch)
"""

from ..model.recorder import merge_edits
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
from .gradients import Gradients, gradients
from .logit_attribution import Contributions, LogitAttribution, hidden_contributions, logit_attribution
from .paths import path_patch
from .patching import at_masks, logit_difference, patch
from .study import Sweep, attribution, correlation, sweep

__all__ = ["Contributions", "Gradients", "LogitAttribution", "Sweep", "activation_means", "at_masks", "attribution",
           "correlation", "gradients", "head_means", "hidden_contributions", "logit_attribution", "logit_difference",
           "mean_heads", "mean_neurons", "merge_edits", "neuron_means", "patch", "path_patch", "replace_with", "steer",
           "sweep", "zero_heads", "zero_neurons"]
