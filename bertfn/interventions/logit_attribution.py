"""Direct logit attribution: a head's logits as a sum of one part per attention head, per layer and per bias.

    dla = bertfn.interventions.logit_attribution(text, model, ["paris", "rome"])    # a masked LM, at a [MASK]
    dla = bertfn.interventions.logit_attribution(review, classifier, "positive")    # a classifier, a class
    dla.heads          # (L, nh, T): each head's write, through the frozen LayerNorms and the head
    dla.total          # (T,): their sum with the other parts, the model's logits

The last hidden state the head reads is a sum of parts (:mod:`bertfn.interventions.residual_parts`: the embeddings,
each head's write, each layer's attention bias and feed-forward write, the biases, through the LayerNorms frozen at
this run). The head pushes each part through alone once its own nonlinearities are frozen at this run too
(:mod:`bertfn.interventions.linearized`: an activation as a gate, a LayerNorm's 1/sigma fixed); its biases and the
activations' remainders go to the bias part.

For a masked LM (this module) the head is the MLM head at the position of a [MASK], ``BertLMPredictionHead``::

    logits = W_dec LN_T(act(W_T h + b_T)) + b_dec     (mlm_head, at width E for ELECTRA and ALBERT)

and the T numbers split are the logits of T vocabulary tokens there. For a fine-tuned checkpoint the head is its
task head and the T numbers its logits of T labels (:mod:`bertfn.interventions.class_attribution`); with ``head=``
(:func:`bertfn.classify`'s) it is a linear head the checkpoint stores beside its own parts, on the pooler's output
(AntiBERTy's species head: ``logit_attribution(chain, antiberty, "Mouse", head="cls.species", labels=SPECIES)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint.model import Model
from ..checkpoint.resolve import fits, one_text, require_mlm_head
from ..errors import InputError, clipped
from ..inspect.trace import trace
from ..model.heads import head_act
from ..model.task_heads import TASKS
from ..tasks.runner import loaded
from .class_attribution import class_attribution
from .head_metrics import head_labels
from .linearized import through_activation, through_linear, through_norm
from .residual_parts import Contributions, split, stream_parts

Tensor = torch.Tensor


@dataclass(frozen=True)
class LogitAttribution(Contributions):
    """What :func:`logit_attribution` returns on a masked LM: the logits of some tokens at a mask, split into parts.

    The parts are those of :class:`~bertfn.interventions.residual_parts.Contributions`, each a (..., T) row of logits;
    ``total`` equals ``logits``.

    Attributes:
        logits: (T,), the model's MLM logits of those tokens at that mask (``mlm.logits``).
        tokens: the T token ids.
        position: the mask's position in the text's tokens.
    """

    logits: Tensor
    tokens: list[int]
    position: int

    def __repr__(self) -> str:
        """The tokens, their logits and the parts' shapes, not the tensors."""
        L, nh, _ = self.heads.shape
        logits = ", ".join(f"{v:.3f}" for v in self.logits.tolist())
        return (f"LogitAttribution(token ids {self.tokens} at position {self.position}: logits [{logits}] = embeddings "
                f"+ {L}x{nh} heads + {L} attention biases + {L} FFN writes + bias)")


def token_ids(m: Model, tokens: int | str | Sequence[int | str]) -> list[int]:
    """``tokens`` (ids or vocabulary strings, one or a list) as a list of ids.

    Args:
        m: the model (its tokenizer and vocabulary size).
        tokens: an id, a token string (``"T"``, ``"paris"``), or a list of them.

    Raises:
        InputError: an id out of the vocabulary, a string the vocabulary lacks, or something else.
    """
    many = [tokens] if isinstance(tokens, (int, str)) else tokens
    if not isinstance(many, Sequence) or not many:
        raise InputError(f"tokens must be a token id, a token string or a non-empty list of them, got {clipped(tokens, 60)}")
    V = m.config.vocab_size
    ids = []
    for t in many:
        i = m.tokenizer.token_to_id(t) if isinstance(t, str) else t
        if isinstance(t, str) and i is None:
            raise InputError(f"the vocabulary has no token {t!r}; model {m.name!r} is a masked LM ({m.head}), whose "
                             "logits at a [MASK] are one per vocabulary token, not per label (labels are a fine-tuned "
                             "classifier's): pass one of its word pieces (model.tokenizer.token_to_id(...) finds them) "
                             "or a token id")
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < V:
            raise InputError(f"token ids must be integers from 0 to {V - 1}, got {t!r}")
        ids.append(i)
    return ids


def mlm_parts(m: Model, parts: Tensor, ids: list[int]) -> Tensor:
    """The MLM head (:func:`~bertfn.model.heads.mlm_head`) on parts of the last hidden state at a mask, its activation
    and LayerNorm frozen at the parts' sum: the logits of the tokens ``ids``, part by part.

    Args:
        m: the model (reads ``cls.predictions.*``).
        parts: (K, H), the last the bias part.
        ids: the T token ids.

    Returns:
        (K, T).
    """
    p = m.params.scope("cls.predictions")
    x = through_linear(parts, p["transform.dense.weight"], p.get("transform.dense.bias"))  # (K, E)
    x = through_activation(x, head_act(m.config))
    x = through_norm(x, p["transform.LayerNorm.weight"], p.get("transform.LayerNorm.bias"), m.config.layer_norm_eps)
    bias = p.get("bias")
    return through_linear(x, p["decoder.weight"][ids], None if bias is None else bias[ids])  # (K, T)


def logit_attribution(text: str, model: Model | str | Path, tokens: int | str | Sequence[int | str], *,
                      mask: int = 0, position: int | None = None, pair: str | None = None, head: str | None = None,
                      labels: Sequence[str] | None = None):
    """A head's logits split into per-head, per-layer and bias parts: a masked LM's at a [MASK], a classifier's of a class.

    Direct logit attribution (Elhage et al. 2021) for a post-LN or pre-LN model: the parts of the last hidden state
    (:mod:`bertfn.interventions.residual_parts`) through the head with its nonlinearities frozen at this run (module
    docstring). On a masked LM the head is the MLM head (``BertLMPredictionHead``) at one [MASK] and ``tokens`` are
    vocabulary tokens; on a fine-tuned checkpoint it is the task head and ``tokens`` are its labels
    (:func:`~bertfn.interventions.class_attribution.class_attribution`: a sequence classifier's, a tagger's at
    ``position``, a reader's "start" and "end" at ``position``); with ``head`` it is that extra head on the pooler's
    output, split as BERT's sequence classifier is. ``total`` equals ``logits`` to the pass's rounding.

    Args:
        text: one text; for a masked LM with at least one [MASK] (the model's mask token).
        model: a loaded :class:`Model` with an MLM head or a task head, a folder or a hub id.
        tokens: a masked LM's tokens whose logits to split (ids or vocabulary strings), or a fine-tuned head's labels
            (names of ``config.id2label`` or ids; a reader's "start", "end"): one or a list of T.
        mask: a masked LM's: which of the text's masks, from 0.
        position: a tagger's or a reader's: the token whose logits to split.
        pair: the text's second segment (a classifier of text pairs, a reader's context), or None.
        head: None: the checkpoint's head; a key prefix of :attr:`~bertfn.checkpoint.model.Model.extra_heads`
            (``"cls.species"``): that linear head on the pooler's output, whose labels ``tokens`` are; as
            :func:`bertfn.classify` takes it.
        labels: the names of the head's outputs, in order (default: the config's ``id2label``; for an extra head
            ``LABEL_0``, ``LABEL_1``, ...), as :func:`bertfn.classify` takes them.

    Returns:
        On a masked LM a :class:`LogitAttribution`, on a fine-tuned head a
        :class:`~bertfn.interventions.class_attribution.ClassAttribution`; every part (..., T) float64 on the CPU.

    Raises:
        InputError: a text that is not a string (a list: one text a call), a masked LM's text without a mask, a
            ``mask`` out of range, tokens the vocabulary lacks; a label the head lacks; a ``position`` or ``pair``
            where the head takes none; ``head`` and ``labels`` as :func:`bertfn.classify` refuses them.
        MissingPartError: a model without a tokenizer, with neither an MLM head nor a task head, or without ``head``.
    """
    one_text(text, "logit_attribution splits the logits of")
    m = loaded("logit_attribution", model).model
    names = None if head is None and labels is None else head_labels(m, head, labels, "logit_attribution")
    if head is not None or m.head.task in TASKS:
        return class_attribution(m, text, tokens, position=position, pair=pair, head=head, names=names)
    require_mlm_head(m, "logit_attribution")
    if position is not None or pair is not None:
        raise InputError(f"position= and pair= are a fine-tuned head's (a tagger's token, a reader's context); {fits(m)}, "
                         "so logit_attribution splits the logits at a [MASK] of the text: choose it with mask=")
    ids = token_ids(m, tokens)
    rec = trace(text, m, head_outputs=True)
    n = len(rec.mask_positions)
    if not n:
        raise InputError(f"the text has no {m.tokenizer.mask_token}; logit_attribution splits the logits at a mask, "
                         f"so write one where the token to predict goes")
    if isinstance(mask, bool) or not isinstance(mask, int) or not 0 <= mask < n:
        raise InputError(f"mask must be an integer from 0 to {n - 1} (the text has {n} masks), got {mask!r}")
    at = rec.mask_positions[mask]
    cfg = m.config
    logits = mlm_parts(m, stream_parts(rec, m.params, [at])[:, 0], ids)  # (K, T)
    rows = torch.tensor(ids, device=rec["mlm.logits"].device)
    actual = rec["mlm.logits"][mask, rows].detach().to("cpu", torch.float64)
    return LogitAttribution(**split(logits, cfg.num_hidden_layers, cfg.num_attention_heads), logits=actual,
                            tokens=ids, position=at)
