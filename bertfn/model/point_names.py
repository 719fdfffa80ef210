"""The names of a forward pass's points: those a model's pass has, in order, read from the code by a dry run; the
points above the layers; layer 0's input; the layer a name belongs to.

:mod:`bertfn.model.recorder` passes tensors through these points and edits them by these names. :func:`point_names`
lists a config's as a pass on the meta device records them (:mod:`bertfn.model.dry_run`, which sits above this
module and adds itself to :data:`DRY_RUN` when imported).

What :func:`bertfn.trace` records under these names, for one text of S tokens (B = 1), H hidden units, nh heads of
width hd, I = FFN width:

| name | shape | what it is |
|---|---|---|
| ``embeddings.word`` | (B, S, H) | rows of the word-embedding table |
| ``embeddings.token_type`` | (B, S, H) | rows of the segment table |
| ``embeddings.position`` | (B, S, H) | rows of the position table (absolute only) |
| ``embeddings.sum`` | (B, S, H) | their sum, before LayerNorm |
| ``embeddings.output`` | (B, S, H) | after LayerNorm: the input of layer 0 |
| ``embeddings.projected`` | (B, S, H) | ELECTRA's and ALBERT's: their E-wide tables' ``output`` mapped to H, the input of layer 0 |
| ``layer.{i}.attention.query|key|value`` | (B, S, nh*hd) | ``x W^T + b``, all heads side by side |
| ``layer.{i}.attention.q|k|v`` | (B, nh, S, hd) | the same, split into heads |
| ``layer.{i}.attention.relative_scores`` | (B, nh, S, S) | relative-position scores (if any) |
| ``layer.{i}.attention.position_bias`` | (B, nh, S, S) | MPNet's relative position bias (one table for every layer), added to ``scaled_scores`` |
| ``layer.{i}.attention.c2p_scores|p2c_scores`` | (B, nh, S, S) | DeBERTa's content-to-position and position-to-content terms, each divided by the scale (its ``scores``, the content term, is divided already; its ``scaled_scores`` is the three's sum) |
| ``layer.{i}.attention.scores`` | (B, nh, S, S) | ``q k^T`` |
| ``layer.{i}.attention.scaled_scores`` | (B, nh, S, S) | ``(scores [+ relative_scores]) / sqrt(hd)`` |
| ``layer.{i}.attention.masked_scores`` | (B, nh, S, S) | plus the additive padding mask |
| ``layer.{i}.attention.probs`` | (B, nh, S, S) | softmax over the keys (last axis) |
| ``layer.{i}.attention.context`` | (B, nh, S, hd) | ``probs @ v`` |
| ``layer.{i}.attention.merged`` | (B, S, nh*hd) | the heads side by side again |
| ``layer.{i}.attention.head_outputs`` | (B, nh, S, H) | each head's write into the residual stream, its context times its columns of the output projection (only with ``head_outputs=True``) |
| ``layer.{i}.attention.dense`` | (B, S, H) | the output projection |
| ``layer.{i}.attention.output`` | (B, S, H) | ``LayerNorm(dense + layer input)`` |
| ``layer.{i}.ffn.intermediate`` | (B, S, I) | ``act(W_1 a + b_1)``, a = attention output |
| ``layer.{i}.ffn.dense`` | (B, S, H) | ``W_2 intermediate + b_2`` |
| ``layer.{i}.ffn.output`` | (B, S, H) | ``LayerNorm(dense + a)``; with ``chunk_size_feed_forward`` the three ``ffn.*`` are per slice: ``ffn.chunk.{n}.*`` |
| ``layer.{i}.output`` | (B, S, H) | the layer's output (the FFN block's) |
| ``pooler`` | (B, H) | ``tanh(W h_[CLS] + b)``, if the model has one |
| ``mlm.transform`` | (N, H) | MLM transform at the N ``[MASK]`` positions |
| ``mlm.logits`` | (N, V) | vocabulary logits at those positions |
| ``classifier.input`` | (B, H) | a fine-tuned classifier's input: the first token's vector (ModernBERT's: pooled), where its head has a dense layer of its own |
| ``classifier.dense|activation`` | (B, H) | that layer, and its tanh, ReLU or GELU |
| ``classifier.norm`` | (B, H) | ModernBERT's heads' LayerNorm |
| ``classifier.logits`` | (B, num_labels) | the classifier's logits (a tagger's: (B, S, num_labels); multiple choice: (B, 1)) |
| ``qa.start_logits|end_logits`` | (B, S) | a reader's logits of the answer's start, end |
| ``contacts.maps`` | (B, L*nh, n, n) | ESM-2's attention maps of the residues (n = S - 2), made symmetric |
| ``contacts.apc`` | (B, L*nh, n, n) | after the average product correction |
| ``contacts.logits`` | (B, n, n) | the contact head's logits |
| ``discriminator.transform`` | (B, S, H) | ELECTRA's discriminator: ``act(W h + b)`` at every token |
| ``discriminator.logits`` | (B, S) | its logit per token: was it replaced? (a padding token's means nothing) |

The heads of a fine-tuned checkpoint (``model.head``: classifier, tagger, reader) run after the encoder and
record their points, the BERT classifier's being ``pooler`` and ``classifier.logits``
(:mod:`bertfn.model.task_heads`); an ESM-2 checkpoint with its contact head records ``contacts.*``, an ELECTRA
discriminator (``ElectraForPreTraining``) ``discriminator.*``.

The family's members record the same names (DistilBERT has no ``embeddings.token_type``; ELECTRA's and
ALBERT's embeddings are E wide up to ``embeddings.projected``, and their ``mlm.transform`` (N, E)): :func:`point_names`
lists a model's. ESM-2 and ModernBERT, pre-LN with rotary attention (:mod:`bertfn.model.members.prenorm`), have no
position, segment or sum points and add their own: ``embeddings.token_dropout`` (ESM-2: the masks' vectors
zeroed, the rest rescaled), ``layer.{i}.attention.norm`` and ``layer.{i}.ffn.norm`` (the LayerNorm before
each block; ModernBERT's layer 0 has none before attention), ``layer.{i}.attention.q_rotated|k_rotated``
(B, nh, S, hd: q and k turned by their positions, whose product is ``scores``), ``layer.{i}.ffn.gate``
(ModernBERT's GeGLU gate, (B, S, I)) and ``final_norm`` (B, S, H: the LayerNorm after the last layer, what
the heads read); their ``attention.output`` and ``ffn.output`` are the residual sums, not normalized.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Iterable

from .config import BertConfig

DRY_RUN: list[Callable[[BertConfig, bool], tuple[str, ...]]] = []
"""Who finds a config's points: :func:`bertfn.model.dry_run.recorded_points`, which runs the pass on the meta device
and keeps what it recorded; its module adds it when it is imported (the pass sits above this module)."""


def point_names(config: BertConfig, *, optional: bool = False) -> list[str]:
    """Every point a full pass of a model with ``config`` can pass through, in the order the pass records them.

    Read from the code: a pass on the meta device records them (:func:`bertfn.model.dry_run.dry_run`), once per
    config. That pass runs what :func:`bertfn.trace` runs: the embeddings (the member's own where it has them:
    ``embeddings.position`` only with absolute positions, ELECTRA's ``embeddings.projected``, ...), every layer
    (``relative_scores`` only with relative positions, ``crossattention.*`` only for decoders with cross-attention;
    ESM-2's and ModernBERT's pre-LN layers with their ``attention.norm``, ``attention.q_rotated``, ``ffn.gate``, ...),
    ``final_norm`` where the member has one, ``pooler`` and ``mlm.*`` where the member has those parts (whatever the
    weights hold), the task head the config's ``architectures`` names (``classifier.input`` ...
    ``classifier.logits``, ``qa.start_logits``, ...) and a member's own head (ESM-2's ``contacts.*``, ELECTRA's
    ``discriminator.*``).

    Args:
        config: the model's config.
        optional: list the :data:`~bertfn.model.recorder.OPTIONAL_POINTS` too (a pass computes them only when asked).
    """
    return list(DRY_RUN[0](config, optional))


def head_point_names(config: BertConfig) -> list[str]:
    """The points above the encoder's layers: ``pooler``, the MLM head's, the task head's, a member's own head's.

    Args:
        config: the model's config.
    """
    return [n for n in point_names(config) if n.split(".")[0] not in ("embeddings", "layer", "final_norm")]


def layer_input(config: BertConfig) -> str:
    """The point whose tensor is layer 0's input (B, S, H): the embeddings' last.

    ``embeddings.output`` in BERT, ``embeddings.projected`` in a member whose embeddings are narrower
    than H (ELECTRA, ALBERT).

    Args:
        config: the model's config.
    """
    return [n for n in point_names(config) if n.startswith("embeddings.")][-1]


def layer_of(name: str) -> int | None:
    """The layer a point belongs to: 3 for ``layer.3.attention.probs``, None for ``embeddings.sum``.

    Args:
        name: a point's full name.
    """
    parts = name.split(".")
    return int(parts[1]) if parts[0] == "layer" and len(parts) > 1 and parts[1].isdigit() else None


TRANSFORMER_LENS = {"attn.hook_q": "attention.q", "attn.hook_k": "attention.k", "attn.hook_v": "attention.v",
                    "attn.hook_attn_scores": "attention.masked_scores", "attn.hook_pattern": "attention.probs",
                    "attn.hook_z": "attention.context", "attn.hook_result": "attention.head_outputs",
                    "hook_attn_out": "attention.dense", "attn.o.hook_out": "attention.dense",
                    "hook_resid_mid": "attention.output", "ln1.hook_normalized": "attention.output",
                    "ln1.hook_out": "attention.output", "mlp.hook_post": "ffn.intermediate",
                    "hook_mlp_out": "ffn.dense", "hook_resid_post": "output", "hook_normalized_resid_post": "output",
                    "hook_out": "output"}
"""TransformerLens' hooks of block i (``blocks.{i}.attn.hook_z``; ``HookedEncoder``'s and the ``TransformerBridge``'s)
and bertfn's points of layer i (``layer.{i}.attention.context``), as the table of docs/guides/interventions.md gives
them; ``blocks.{i}.hook_resid_pre`` is the layer before's output (:func:`transformer_lens_point`)."""

TRANSFORMER_LENS_TOP = {"hook_embed": "embeddings.output", "embed.hook_out": "embeddings.word",
                        "embed.hook_embed": "embeddings.word", "hook_pos_embed": "embeddings.position",
                        "embed.hook_pos_embed": "embeddings.position", "pos_embed.hook_out": "embeddings.position",
                        "embed.hook_token_type_embed": "embeddings.token_type",
                        "token_type_embed.hook_out": "embeddings.token_type", "hook_full_embed": "embeddings.output",
                        "embed_ln.hook_out": "embeddings.output", "ln_final.hook_out": "mlm.transform",
                        "unembed.hook_in": "mlm.transform", "unembed.hook_out": "mlm.logits",
                        "hook_unembed": "mlm.logits", "pooler.hook_pooler_out": "pooler"}
"""TransformerLens' hooks outside the blocks and bertfn's points (the bridge's ``hook_embed`` is the embeddings after
their LayerNorm, ``HookedEncoder``'s ``embed.hook_embed`` the word vectors)."""

HEADS_FIRST = ("attention.q", "attention.k", "attention.v", "attention.context", "attention.head_outputs")
"""bertfn's points that hold heads before positions, (B, nh, S, ...), where TransformerLens' hooks hold (B, S, nh, ...)."""


def transformer_lens_point(name: str, config: BertConfig) -> str | None:
    """bertfn's point for a TransformerLens hook name (``blocks.3.attn.hook_z`` -> ``layer.3.attention.context``), or
    None where ``name`` is none of them (or has no point in bertfn).

    Args:
        name: a name as TransformerLens spells it; ``*`` may stand for the block.
        config: the model's config (layer 0's input for ``blocks.0.hook_resid_pre``).
    """
    if name in TRANSFORMER_LENS_TOP:
        return TRANSFORMER_LENS_TOP[name]
    block = re.fullmatch(r"blocks\.(\d+|\*)\.(.+)", name)
    if block is None:
        return None
    i, hook = block.groups()
    if hook == "hook_resid_pre":
        return None if i == "*" else layer_input(config) if i == "0" else f"layer.{int(i) - 1}.output"
    return f"layer.{i}.{TRANSFORMER_LENS[hook]}" if hook in TRANSFORMER_LENS else None


def close_names(name: str, names: Iterable[str], config: BertConfig, cutoff: float = 0.6) -> list[str]:
    """Up to three of ``names`` that ``name`` was likely meant to be: bertfn's point for a TransformerLens hook name
    (``blocks.3.attn.hook_z``: ``layer.3.attention.context``, said so), else those it begins (a name cut short,
    ``layer.0.attention.c2p``), else difflib's closest.

    Args:
        name: the name asked for.
        names: the names there are.
        config: the model's config.
        cutoff: difflib's least similarity, 0..1.
    """
    names = list(names)
    ours = transformer_lens_point(name, config)
    if ours is not None and any(fnmatch.fnmatchcase(n, ours) for n in names):
        axes = "; its heads before its positions, (B, nh, S, ...)" if ours.endswith(HEADS_FIRST) else ""
        return [f"{ours} (bertfn's name for TransformerLens' {name}{axes})"]
    return [n for n in names if n.startswith(name)][:3] or difflib.get_close_matches(name, names, n=3, cutoff=cutoff)
