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
    head_metrics.py        metrics of a fine-tuned head: label_logit, label_probability, label_difference,
                           entity_score, span_score
    residual_parts.py      the last hidden state as a sum of parts: each head's write, each layer's, the biases
    linearized.py          a head's steps on such parts, its activations and LayerNorms frozen at one run; BERT's
                           heads on parts
    head_parts.py          each member's task head on parts, and which one a model's head has
    logit_attribution.py   direct logit attribution per head and per layer: a masked LM's logits at a mask, or
    class_attribution.py   a fine-tuned head's logits of its labels (ClassAttribution)
    paths.py       path patching: a sender's clean output into chosen receivers only (path_patch)
    token_attributions.py  each input token's attribution to one output: integrated gradients, gradient x input
    decision.py    the explorer's decision panel: a fine-tuned head's prediction, its token attributions and
                   per-head parts (bertfn view; the page: bertfn.inspect.decision_panel)
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
from .class_attribution import ClassAttribution
from .head_metrics import entity_score, label_difference, label_logit, label_probability, span_score
from .logit_attribution import LogitAttribution, logit_attribution
from .residual_parts import Contributions, hidden_contributions
from .paths import path_patch
from .patching import at_masks, logit_difference, patch
from .study import Sweep, attribution, correlation, sweep
from .token_attributions import TokenAttributions, token_attributions
from .decision import decision

__all__ = ["Contributions", "Gradients", "LogitAttribution", "Sweep", "activation_means", "at_masks", "attribution",
           "correlation", "gradients", "head_means", "hidden_contributions", "logit_attribution", "logit_difference",
           "mean_heads", "mean_neurons", "merge_edits", "neuron_means", "patch", "path_patch", "replace_with", "steer",
           "sweep", "zero_heads", "zero_neurons", "TokenAttributions", "token_attributions", "ClassAttribution",
           "entity_score", "label_difference", "label_logit", "label_probability", "span_score", "decision"]
