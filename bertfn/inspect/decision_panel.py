"""The explorer's decision panel: what a checkpoint with a task head decided on the text, and why, as the page stores it.

The numbers are made one room up, by :func:`bertfn.interventions.decision` (the pipelines, integrated gradients and
direct class attribution live there; this room may not import them), and handed to the page builder:

    dec = bertfn.interventions.decision("A wonderful film.", classifier)
    bertfn.trace("A wonderful film.", classifier).save_html("view.html", decision=dec)
    bertfn view "A wonderful film." --model my-classifier --out view.html      # does both

What the page stores of it (S tokens, L layers of nh heads, T targets: the labels, entities or span ends attributed;
r residues of an ESM-2 protein):

=====================  ==============  ===========================================================================
what                   shape           stored as
=====================  ==============  ===========================================================================
the prediction         (in the meta)   the pipeline's own answer: :func:`bertfn.classify`'s labels and
                                       probabilities, :func:`bertfn.tag`'s label of every token, :func:`bertfn.answer`'s
                                       span (with its tokens)
the targets            (in the meta)   each target's name, label, position, logit, f(x), f(baseline) and delta
token attributions     (T, S)          float32: integrated gradients to the word embeddings, one row per target
                                       (:func:`bertfn.interventions.token_attributions`)
per-head parts         (T, L, nh)      float32: each head's direct part of the target's logit
                                       (:func:`bertfn.interventions.logit_attribution`'s ``heads``)
ESM-2's contact map    (r, r)          uint8 ``round(255 p)`` (off by at most 1/510), :func:`bertfn.contacts`'s map
=====================  ==============  ===========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError

CONTACT_LEVELS = 255
"""The contact map's codes: a probability p is stored as ``round(255 p)`` and read back as ``c / 255``."""


def contact_codes(p) -> np.ndarray:
    """Contact probabilities in [0, 1] -> uint8 codes ``round(255 p)``.

    Args:
        p: (r, r) probabilities (a tensor or an array).
    """
    return np.rint(np.clip(np.asarray(p, dtype=np.float64), 0, 1) * CONTACT_LEVELS).astype(np.uint8)


@dataclass(frozen=True)
class Decision:
    """The decision panel's numbers for one text: a JSON-able ``meta`` and the named arrays (the module's table).

    Made by :func:`bertfn.interventions.decision`; the page builder (:func:`bertfn.inspect.explorer.page_data`) puts
    ``meta`` into the page's meta as ``decision`` and each array into the data block as ``decision_<name>``.

    Attributes:
        meta: task, prediction, targets, method and steps (JSON-able).
        arrays: ``tokens`` (T, S) and ``heads`` (T, L, nh) float32 where there are targets, ``contacts`` (r, r)
            uint8 where the model has ESM-2's contact head.
    """

    meta: dict
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def check(self, S: int, L: int, nh: int) -> None:
        """Check that the panel was made for a text of S tokens and a model of L layers of nh heads.

        Args:
            S: the page's tokens.
            L: the model's layers.
            nh: its heads per layer.

        Raises:
            InputError: it was made for another text or model.
        """
        T = len(self.meta.get("targets", []))
        want = {"tokens": (T, S), "heads": (T, L, nh)}
        if "contacts" in self.arrays:
            r = self.arrays["contacts"].shape[0]
            want["contacts"] = (r, r)
        for name, a in self.arrays.items():
            if name not in want or tuple(a.shape) != want[name]:
                raise InputError(f"this decision panel's {name} is {tuple(a.shape)}, where the page of {S} tokens and "
                                 f"{L} layers x {nh} heads needs {want.get(name, 'no such array')}; make it with "
                                 "bertfn.interventions.decision(text, model) for the text and model traced")
