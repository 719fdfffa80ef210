"""The stack of layers run one after another (``BertEncoder.forward``): what each pass keeps of them and activation
checkpointing.

:func:`run_layers` runs L layers, each given as ``run(i, h)`` (:func:`~bertfn.model.encoder.layer_runner` makes it:
BERT's layer, a decoder's or a member's), and keeps only what the pass returns (:class:`Stack`): every layer's output,
its attention probabilities, its keys and values (a decoder's :class:`~bertfn.model.decoding.Cache` for the next
step). With activation checkpointing (:func:`checkpointed`) only each layer's input is kept for backward and the layer
runs again when the gradient reaches it, drawing the same dropout masks (:func:`rewound`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, NamedTuple

import torch
from torch.utils.checkpoint import checkpoint as activation_checkpoint

from ..errors import InputError
from .attention import KV

Tensor = torch.Tensor
LayerRun = Callable[[Tensor], Any]
"""One layer, ``h (B, S, H) -> LayerOutput`` (:class:`~bertfn.model.encoder.LayerOutput`: ``hidden``, ``probs``,
``cross_probs``, ``self_kv``, ``cross_kv``)."""


@contextmanager
def rewound(generator: torch.Generator, state: Tensor) -> Iterator[None]:
    """Run a block with ``generator`` set back to ``state``, then return it to where it was."""
    resume = generator.get_state()
    generator.set_state(state)
    try:
        yield
    finally:
        generator.set_state(resume)


def checkpointed(run: LayerRun, x: Tensor, generator: torch.Generator | None) -> Any:
    """``run(x)`` under activation checkpointing (``torch.utils.checkpoint``, as HF's ``gradient_checkpointing``).

    Only ``x`` is kept for backward; the layer's activations are recomputed when the gradient reaches
    it. torch restores its own global RNG for that recomputation but knows nothing of the dropout
    ``generator`` bertfn draws from, so the recomputation rewinds it to where it stood before the
    layer: it draws the same dropout masks, and the gradients equal those without checkpointing.

    Args:
        run: one layer, ``x -> LayerOutput``.
        x: (B, S, H), the layer's input.
        generator: the dropout generator, or None.

    Raises:
        InputError: under ``torch.func.grad``, ``vjp``, ``jacrev`` or ``hessian``, which cannot run torch's checkpoint.
    """
    options = {}
    if generator is not None:
        start = generator.get_state()
        options["context_fn"] = lambda: (nullcontext(), rewound(generator, start))
    try:
        return activation_checkpoint(run, x, use_reentrant=False, **options)
    except RuntimeError as e:
        if "saved tensor hooks" not in str(e):
            raise
        raise InputError("checkpoint=True runs torch.utils.checkpoint, which torch.func's grad, vjp, jacrev and "
                         "hessian cannot run (torch: they do not support saved tensor hooks); drop checkpoint=True "
                         "under them, or take the gradient with loss.backward() or torch.autograd.grad, where it works"
                         ) from None


class Stack(NamedTuple):
    """What :func:`run_layers` keeps of the layers' outputs (empty lists where not asked for).

    Attributes:
        last: (B, S, H), the last layer's output.
        hidden: the embeddings and every layer's output, L+1 of (B, S, H).
        attentions: L of (B, nh, S, S_k).
        cross_attentions: L of (B, nh, S, S_e) or None.
        self_kvs: L self-attention (k, v) pairs, cache included.
        cross_kvs: L cross-attention (k, v) pairs or None.
    """

    last: Tensor
    hidden: list[Tensor]
    attentions: list[Tensor]
    cross_attentions: list[Tensor | None]
    self_kvs: list[KV]
    cross_kvs: list[KV | None]


def run_layers(run: Callable[[int, Tensor], Any], x: Tensor, L: int, *, checkpoint: bool,
               generator: torch.Generator | None, keep_hidden: bool, keep_probs: bool, keep_cache: bool) -> Stack:
    """The L layers one after another (``BertEncoder.forward``), each under activation checkpointing where asked
    (:func:`checkpointed`), keeping only what the output returns.

    At 512 tokens on bert-base's shape every layer's probabilities (eager path) would hold 150 MB until the last
    layer has run: what is not returned is let go layer by layer.

    Args:
        run: ``run(i, h) -> LayerOutput``, layer i (:func:`~bertfn.model.encoder.layer_runner`).
        x: (B, S, H), the embeddings.
        L: the number of layers.
        checkpoint: recompute each layer in backward.
        generator: the dropout generator, or None.
        keep_hidden: keep every layer's output.
        keep_probs: keep every layer's probabilities.
        keep_cache: keep every layer's keys and values.

    Returns:
        :class:`Stack`.
    """
    stack = Stack(x, [x], [], [], [], [])
    for i in range(L):
        def one(h: Tensor, i: int = i) -> Any:
            return run(i, h)
        out = checkpointed(one, x, generator) if checkpoint else one(x)
        x = out.hidden
        if keep_hidden:
            stack.hidden.append(x)
        if keep_probs:
            stack.attentions.append(out.probs)
            stack.cross_attentions.append(out.cross_probs)
        if keep_cache:
            stack.self_kvs.append(out.self_kv)
            stack.cross_kvs.append(out.cross_kv)
    return stack._replace(last=x)
