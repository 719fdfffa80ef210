"""The explorer's decision panel, computed: a fine-tuned head's prediction on a text, and why.

    dec = bertfn.interventions.decision("A wonderful film.", classifier)
    bertfn.trace("A wonderful film.", classifier).save_html("view.html", decision=dec)

``bertfn view`` does both for a checkpoint with a task head or with ESM-2's contact head. What the page stores
of it and how precisely: :mod:`bertfn.inspect.decision_panel`. Here the numbers are the library's own:

* the prediction: :func:`bertfn.classify` (every label, best first, with the function the pipeline applies),
  :func:`bertfn.tag` (every token's label and score; the entities are the tokens not labelled "O"),
  :func:`bertfn.answer` (the span in the context's characters, and the tokens it covers);
* the targets, the outputs the page explains: a sequence classifier's :data:`MAX_TARGETS` most likely labels, a
  tagger's first :data:`MAX_TARGETS` entity tokens (``(position, label)``; none found: the first word's label), a
  reader's answer start (``("start", s)``) and end (``("end", e)``);
* for each target, integrated gradients to the word embeddings with a modest ``steps`` (:data:`STEPS`, so that a
  page builds in seconds; its ``delta`` says how far the sum is from complete;
  :func:`~bertfn.interventions.token_attributions.token_attributions`) and each head's direct part of the
  target's logit (:func:`~bertfn.interventions.logit_attribution.logit_attribution`'s ``heads``);
* ESM-2's contact map (:func:`bertfn.contacts`), where the checkpoint has the contact head.

With ``head=`` and ``labels=`` (:func:`bertfn.classify`'s) the panel explains a linear head the checkpoint stores beside
its own parts (:attr:`~bertfn.checkpoint.model.Model.extra_heads`: AntiBERTy's species head on the pooler's output)
as it explains a sequence classifier: its labels by :func:`bertfn.classify` with that head, integrated gradients and
the heads' parts of its logits with the same ``head=`` and ``labels=``. Otherwise a masked LM without a contact head,
a bare encoder and a multiple-choice head get no panel (:func:`has_decision`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..checkpoint.checks import count
from ..checkpoint.model import Model
from ..checkpoint.resolve import fits, one_text
from ..errors import InputError, MissingPartError
from ..inspect.decision_panel import Decision, contact_codes
from ..tasks.answer import answer
from ..tasks.classify import classify, default_function
from ..tasks.contacts import contacts
from ..tasks.runner import loaded
from ..tasks.tag import tag
from .head_metrics import head_labels
from .logit_attribution import logit_attribution
from .token_attributions import token_attributions

STEPS = 20
"""Integrated gradients' points on the page (captum's default is 50): a page of a few hundred tokens builds in
seconds; each target's ``delta`` on the page says how far its sum is from f(x) - f(baseline)."""

MAX_TARGETS = 8
"""At most this many outputs explained: a classifier's most likely labels, a tagger's first entity tokens."""

EXPLAINED = ("sequence-classification", "token-classification", "question-answering")
"""The heads whose outputs the panel explains (a multiple-choice head scores (text, choice) pairs: none)."""


def has_contact_head(m: Model) -> bool:
    """Whether ``m`` holds ESM-2's contact head.

    Args:
        m: a loaded model.
    """
    return "bert.contact_head.regression.weight" in m.params


def has_decision(m: Model) -> bool:
    """Whether the page of ``m`` gets a decision panel: a head of :data:`EXPLAINED`, or ESM-2's contact head.

    Args:
        m: a loaded model.
    """
    return m.head.task in EXPLAINED or has_contact_head(m)


def decision(text: str, model: Model | str | Path, *, pair: str | None = None, steps: int = STEPS,
             max_targets: int = MAX_TARGETS, head: str | None = None, labels: Sequence[str] | None = None) -> Decision:
    """The decision panel of the explorer for ``text``: the prediction, and for each target its token attributions
    and per-head parts (module docstring).

    Args:
        text: one text (a reader's question; an ESM-2 protein).
        model: a loaded :class:`Model` with a task head of :data:`EXPLAINED`, ESM-2's contact head or the extra head
            ``head``, a folder or a hub id.
        pair: the second segment: a reader's context (required there), a classifier's second text; a tagger takes none.
        steps: integrated gradients' points (:data:`STEPS`).
        max_targets: the most outputs explained (:data:`MAX_TARGETS`).
        head: None: the checkpoint's head; a key prefix of :attr:`~bertfn.checkpoint.model.Model.extra_heads`
            (``"cls.species"``): that linear head on the pooler's output, explained as a sequence classifier; as
            :func:`bertfn.classify` takes it.
        labels: the names of the head's outputs, in order (default: the config's ``id2label``; for an extra head
            ``LABEL_0``, ``LABEL_1``, ...), as :func:`bertfn.classify` takes them.

    Returns:
        A :class:`~bertfn.inspect.decision_panel.Decision`, for ``Recording.save_html(..., decision=)``.

    Raises:
        InputError: a text that is not a string (a list: the page shows one text), a bad ``steps`` or ``max_targets``,
            a pair given to a tagger or missing for a reader; ``head`` and ``labels`` as :func:`bertfn.classify`
            refuses them.
        MissingPartError: a model without a tokenizer, with none of the heads the panel explains, or without ``head``.
    """
    one_text(text, "decision explains")
    m, tok, _ = loaded("decision", model)
    count("steps", steps)
    count("max_targets", max_targets)
    names = None if head is None and labels is None else head_labels(m, head, labels, "decision")
    if head is None and not has_decision(m):
        raise MissingPartError(f"the decision panel explains a sequence classifier, a tagger, a reader or ESM-2's contact "
                               f"head, and {fits(m)}; the explorer's page of this model has no panel")
    task = m.head.task if head is None else "sequence-classification"  # an extra head: a label per text
    meta: dict = {"task": task, "steps": steps, "method": "integrated_gradients", "baseline": tok.pad_token,
                  "targets": [], "classes": None, "entities": None, "span": None, "contacts": None}
    arrays: dict[str, np.ndarray] = {}
    targets: list[tuple] = []  # token_attributions' targets, one per explained output
    if task == "sequence-classification":
        scores = classify({"text": text, "text_pair": pair} if pair is not None else text, m, top_k=None, head=head,
                          labels=names)
        function = default_function(m.config.problem_type, m.config.num_labels) if head is None else \
            default_function(None, len(names))
        meta["classes"] = {"function": function, "scores": [[d["label"], float(d["score"])] for d in scores]}
        targets = [d["label"] for d in scores[:max_targets]]
        dla = logit_attribution(text, m, targets, pair=pair, head=head, labels=names)
        heads = [dla.heads[..., t] for t in range(len(targets))]
        meta["targets"] = [{"name": f"{label}", "label": label, "position": None, "logit": float(v)}
                           for label, v in zip(targets, dla.logits.tolist())]
    elif task == "token-classification":
        if pair is not None:
            raise InputError("a tagger reads one text, so its decision panel takes no pair; leave --pair (pair=) out")
        found = tag(text, m, ignore_labels=())  # every token's label
        meta["entities"] = [{"index": e["index"], "entity": e["entity"], "score": float(e["score"]), "word": e["word"]}
                            for e in found]
        chosen = [e for e in found if e["entity"] != "O"][:max_targets] or found[:1]
        heads = []
        for e in chosen:
            dla = logit_attribution(text, m, e["entity"], position=e["index"])
            heads.append(dla.heads[..., 0])
            meta["targets"].append({"name": f"{e['word']} ({e['index']}): {e['entity']}", "label": e["entity"],
                                    "position": e["index"], "logit": float(dla.logits[0])})
            targets.append((e["index"], e["entity"]))
    elif task == "question-answering":
        if pair is None:
            raise InputError("a reader answers a question from a context: give the question as the text and the context "
                             "as the pair (bertfn view QUESTION --pair CONTEXT)")
        best = answer(text, pair, m)
        first, last = span_tokens(tok, text, pair, best["start"], best["end"])
        meta["span"] = {"answer": best["answer"], "score": float(best["score"]), "start": best["start"], "end": best["end"],
                        "tokens": [first, last]}
        heads = []
        for end, position in (("start", first), ("end", last)):
            dla = logit_attribution(text, m, end, position=position, pair=pair)
            heads.append(dla.heads[..., 0])
            meta["targets"].append({"name": f"answer {end} ({position})", "label": end, "position": position,
                                    "logit": float(dla.logits[0])})
            targets.append((end, position))
    if targets:
        ig = token_attributions([text] * len(targets), m, list(targets), pair=None if pair is None else [pair] * len(targets),
                                steps=steps, head=head, labels=names)
        for row, a in zip(meta["targets"], ig):
            row.update(value=float(a.value), baseline_value=float(a.baseline_value), delta=float(a.delta))
        arrays["tokens"] = np.stack([a.attributions.float().cpu().numpy() for a in ig]).astype(np.float32)  # (T, S)
        arrays["heads"] = np.stack([h.float().cpu().numpy() for h in heads]).astype(np.float32)  # (T, L, nh)
    if has_contact_head(m):
        if pair is not None:
            raise InputError("ESM-2's contact head reads one protein, so its panel takes no pair; leave --pair out")
        probs = contacts(text, m)  # (r, r)
        arrays["contacts"] = contact_codes(probs)
        meta["contacts"] = {"residues": int(probs.shape[0]), "levels": 255, "max": float(probs.max()),
                            "offset": 1}  # residue i is token i + 1 (after <cls>)
    return Decision(meta, arrays)


def span_tokens(tok, question: str, context: str, start: int, end: int) -> list[int]:
    """The first and last token (positions in the question-and-context input, from 0) of the context's characters
    ``start:end``.

    Args:
        tok: the model's tokenizer.
        question: the question (first segment).
        context: the context (second segment).
        start: the answer's first character in the context.
        end: one past its last.
    """
    enc = tok([question], [context])
    types = enc.token_type_ids[0].tolist()
    second = [i for i, s in enumerate(sequence_ids(tok, question, context)) if s == 1] or \
        [i for i, t in enumerate(types) if t == 1]
    inside = [i for i in second if enc.offsets[0][i][0] < end and enc.offsets[0][i][1] > start]
    if not inside:
        raise InputError(f"the answer {context[start:end]!r} covers no token of the context; the explorer cannot mark it")
    return [inside[0], inside[-1]]


def sequence_ids(tok, question: str, context: str) -> list[int | None]:
    """Which segment each token of the pair belongs to (None: the template's own), as the backend says.

    Args:
        tok: the model's tokenizer.
        question: the first segment.
        context: the second.
    """
    return tok.backend.encode(question, context).sequence_ids
