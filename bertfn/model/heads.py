"""What sits on top of the encoder: the pooler and the task heads.

Each head reads its own HF keys from the root params and mirrors one transformers class. Every head
takes a loaded ``Model``, its ``Params``, or a flat HF-keyed state_dict with ``config=``:

| function                   | keys                                   | mirrors                                  |
|----------------------------|----------------------------------------|------------------------------------------|
| ``pooler``                 | ``bert.pooler.dense.*``                | ``BertPooler``                           |
| ``mlm_head``               | ``cls.predictions.*``                  | ``BertLMPredictionHead`` (MLM and causal LM) |
| ``nsp_head``               | ``cls.seq_relationship.*``             | ``BertOnlyNSPHead``                      |
| ``sequence_classification``| ``classifier.*`` on the pooled output  | ``BertForSequenceClassification``        |
| ``token_classification``   | ``classifier.*`` on every position     | ``BertForTokenClassification``           |
| ``question_answering``     | ``qa_outputs.*``                       | ``BertForQuestionAnswering``             |
| ``multiple_choice``        | ``classifier.*`` (1 logit per choice)  | ``BertForMultipleChoice``                |

These are BERT's last steps, each on the tensor it reads (the pooled vector, the hidden states). The heads of
fine-tuned checkpoints as whole functions of the hidden states, every member's included, are in
:mod:`bertfn.model.task_heads`.
"""

from __future__ import annotations

import torch

from .config import BertConfig
from .family import family_of
from .functional import dropout, layer_norm, linear
from .params import Params, as_params
from .recorder import NO_TRACE, Trace

Tensor = torch.Tensor


def pooler(params: Params, h: Tensor, trace: Trace = NO_TRACE, *, config: BertConfig | dict | None = None) -> Tensor:
    """``tanh(W h_[CLS] + b)``: the [CLS] vector through a dense layer (``BertPooler``).

    Args:
        params: a loaded ``Model``, its ``Params``, or a flat HF-keyed state_dict with ``config``
            (reads ``bert.pooler.dense.*``).
        h: (B, S, H) last hidden states.
        trace: records (and edits) ``pooler``.
        config: the config of a bare state_dict.

    Returns:
        (B, H).
    """
    params = as_params(params, config, "pooler")
    p = params.scope("bert.pooler")
    pooled = torch.tanh(linear(h[:, 0], p["dense.weight"], p["dense.bias"]))  # (B, H)
    pooled = trace("pooler", pooled)
    return pooled


def mlm_head(params: Params, h: Tensor, trace: Trace = NO_TRACE, *, config: BertConfig | dict | None = None) -> Tensor:
    """Vocabulary logits: dense + act + LayerNorm, then the decoder tied to the word embeddings.

    Mirrors ``BertLMPredictionHead`` (used by BertForMaskedLM, BertForPreTraining, BertLMHeadModel).
    A family member's head is the same function on its own keys (RoBERTa's ``lm_head.*``, ...; :func:`head_act`).
    Pass only the positions you need (e.g. the [MASK]s): the head treats each position alone, and the
    (V, H) decoder is most of its cost. ESM-2 and ModernBERT (pre-LN) read the last layer's output after
    ``final_norm`` (:func:`~bertfn.model.members.prenorm.final_norm`): a logit lens there normalizes each layer's
    output first.

    Args:
        params: a loaded ``Model``, its ``Params``, or a flat HF-keyed state_dict with ``config``. Reads
            ``cls.predictions.transform.dense.*``, ``cls.predictions.transform.LayerNorm.*``,
            ``cls.predictions.decoder.weight`` (V, H; the word embeddings when the checkpoint ties them)
            and ``cls.predictions.bias`` (V,); a bias the checkpoint lacks is left out (ModernBERT's dense and
            LayerNorm have none).
        h: (..., H) hidden states.
        trace: records (and edits) ``mlm.transform`` and ``mlm.logits``.
        config: the config of a bare state_dict.

    Returns:
        (..., V).
    """
    params = as_params(params, config, "mlm_head")
    cfg = params.config
    p = params.scope("cls.predictions")
    t = linear(h, p["transform.dense.weight"], p.get("transform.dense.bias"), head_act(cfg))  # act(h W^T + b): (..., H)
    t = layer_norm(t, p["transform.LayerNorm.weight"], p.get("transform.LayerNorm.bias"), cfg.layer_norm_eps)
    t = trace("mlm.transform", t)
    logits = linear(t, p["decoder.weight"], p.get("bias"))  # (..., V)
    logits = trace("mlm.logits", logits)
    return logits


def head_act(config: BertConfig) -> str:
    """The MLM head's activation: ``config.hidden_act`` as in BERT, or a family member's own.

    RoBERTa's and ELECTRA's generator's heads use exact GELU whatever the encoder uses; ModernBERT's config
    names its head's (``classifier_activation``).

    Args:
        config: the model's config.

    Returns:
        An activation's name (a key of :data:`~bertfn.model.functional.ACTIVATIONS`).
    """
    act = family_of(config).head_act
    return act(config) if callable(act) else act or config.hidden_act


def nsp_head(params: Params, pooled: Tensor, *, config: BertConfig | dict | None = None) -> Tensor:
    """Is sentence B the continuation of A? (``BertOnlyNSPHead``).

    Args:
        params: a loaded ``Model``, its ``Params``, or a flat HF-keyed state_dict with ``config``
            (reads ``cls.seq_relationship.*``).
        pooled: (B, H), the pooler's output.
        config: the config of a bare state_dict.

    Returns:
        (B, 2), index 0 = yes.
    """
    params = as_params(params, config, "nsp_head")
    p = params.scope("cls.seq_relationship")
    return linear(pooled, p["weight"], p["bias"])


def sequence_classification(params: Params, pooled: Tensor, generator: torch.Generator | None = None, *,
                            config: BertConfig | dict | None = None) -> Tensor:
    """One label per text (``BertForSequenceClassification``).

    Args:
        params: a loaded ``Model``, its ``Params``, or a flat HF-keyed state_dict with ``config``
            (reads ``classifier.*``).
        pooled: (B, H), the pooler's output.
        generator: turns dropout on (training; ``config.classifier_dropout``, else ``hidden_dropout_prob``).
        config: the config of a bare state_dict.

    Returns:
        (B, num_labels).
    """
    params = as_params(params, config, "sequence_classification")
    x = dropout(pooled, params.config.head_dropout, generator)
    return linear(x, params["classifier.weight"], params["classifier.bias"])


def token_classification(params: Params, h: Tensor, generator: torch.Generator | None = None, *,
                         config: BertConfig | dict | None = None) -> Tensor:
    """One label per token (``BertForTokenClassification``).

    Args:
        params: a loaded ``Model``, its ``Params``, or a flat HF-keyed state_dict with ``config``
            (reads ``classifier.*``).
        h: (B, S, H) last hidden states.
        generator: turns dropout on (training; ``config.classifier_dropout``, else ``hidden_dropout_prob``).
        config: the config of a bare state_dict.

    Returns:
        (B, S, num_labels).
    """
    params = as_params(params, config, "token_classification")
    x = dropout(h, params.config.head_dropout, generator)
    return linear(x, params["classifier.weight"], params["classifier.bias"])


def question_answering(params: Params, h: Tensor, *, config: BertConfig | dict | None = None) -> tuple[Tensor, Tensor]:
    """Answer-span start and end logits (``BertForQuestionAnswering``).

    Args:
        params: a loaded ``Model``, its ``Params``, or a flat HF-keyed state_dict with ``config``
            (reads ``qa_outputs.*``).
        h: (B, S, H) last hidden states.
        config: the config of a bare state_dict.

    Returns:
        start: (B, S) logits of the span's start.
        end: (B, S) logits of its end.
    """
    params = as_params(params, config, "question_answering")
    logits = linear(h, params["qa_outputs.weight"], params["qa_outputs.bias"])  # (B, S, 2)
    start, end = logits.unbind(dim=-1)
    return start, end


def multiple_choice(params: Params, pooled: Tensor, num_choices: int,
                    generator: torch.Generator | None = None, *, config: BertConfig | dict | None = None) -> Tensor:
    """Score each choice (``BertForMultipleChoice``).

    Args:
        params: a loaded ``Model``, its ``Params``, or a flat HF-keyed state_dict with ``config``
            (reads ``classifier.*``, one logit per choice).
        pooled: (B*C, H), the pooled outputs of the B*C flattened (text, choice) pairs.
        num_choices: C.
        generator: turns dropout on (training; ``config.choice_dropout``: ``classifier_dropout``, else
            ``hidden_dropout_prob``, in BERT).
        config: the config of a bare state_dict.

    Returns:
        (B, C).
    """
    params = as_params(params, config, "multiple_choice")
    x = dropout(pooled, params.config.choice_dropout, generator)
    scores = linear(x, params["classifier.weight"], params["classifier.bias"])  # (B*C, 1)
    return scores.view(-1, num_choices)  # (B, C)
