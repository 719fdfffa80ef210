"""Contact maps of proteins: which residues touch, read by ESM-2's contact head from its attention maps.

    P(i and j touch) = sigmoid(sum over layers l and heads h of w_lh APC(A_lh + A_lh^T)_ij + b)

ESM-2 was trained only to fill in masked residues, yet some of its attention heads look at the residues that touch in
the folded protein; a logistic regression over every layer's and head's maps (Rao et al. 2021, "Transformer protein
language models are unsupervised structure learners") turns them into contact probabilities. :func:`contacts` is
``EsmForMaskedLM.predict_contacts(tokens, attention_mask)``: every layer's attention probabilities, stacked (B, L, nh,
S, S), and :func:`~bertfn.model.members.esm.contact_head` (which leaves out ``<cls>``, ``<eos>`` and padding,
symmetrizes, corrects by APC, and weighs the L * nh maps). The probabilities come from the runner
(:func:`~bertfn.tasks.runner.attention_maps`): the fast path (the proteins end to end, no padding, the products on the
kernels chosen for this machine, each protein's attention on its own slice), or with edits the encoder
(:func:`~bertfn.model.encoder.encoder` with ``output_attentions`` on padded batches).

A corpus of long proteins would write a million numbers a line for the whole maps of 1000-residue chains, so
``top=`` gives instead the most likely contacts as ``(i, j, probability)`` triples, the pairs that far apart in the
chain (``min_separation``) as ESM's evaluation counts them: its precision at L, L/2, L/5 reads the top L, L/2, L/5
pairs with ``|i - j| >= 6`` (``top="L/5"``). Memory: a batch holds its attention maps, b * L * nh * S^2 numbers
(33 layers x 20 heads of 1026 tokens: 2.8 GB a protein in float32 for esm2_t33_650M): lower ``batch_size`` for
long proteins. :mod:`bertfn.inspect.contact_plots` draws a map, and beside it the attention maps it was read from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import torch

from ..checkpoint.checks import count
from ..checkpoint.model import Model
from ..checkpoint.resolve import text_list, texts_and_model
from ..errors import InputError, MissingPartError
from ..model.family import longest_input, member_name
from ..model.members.esm import contact_head
from ..model.recorder import Edit
from .runner import attention_maps, finished, loaded
from .task import Task

Tensor = torch.Tensor

MIN_SEPARATION = 6
"""Pairs closer than this in the chain are left out of ``top``: ESM's evaluation (and CASP's short range) starts at
``|i - j| >= 6``; neighbours in the chain touch whatever the fold."""


def require_contact_head(m: Model) -> None:
    """Check that ``m`` holds ESM-2's contact head (``esm.contact_head.regression.*``).

    Args:
        m: the model.

    Raises:
        MissingPartError: it has none: not ESM-2, or an ESM-2 saved without the head.
    """
    if "bert.contact_head.regression.weight" not in m.params:
        kind = f"an {member_name(m.config)} without it" if m.family.model_type == "esm" else f"a {m.family.name} model"
        raise MissingPartError(
            f"contacts needs ESM's contact head (esm.contact_head.regression), and model {m.name!r} is {kind} "
            f"({m.head}); load an ESM-2 checkpoint that holds it, as facebook/esm2_t6_8M_UR50D and the other "
            "facebook/esm2_* do (EsmForMaskedLM, EsmModel)")


def top_count(top: int | str, r: int) -> int:
    """How many pairs ``top`` asks for in a protein of ``r`` residues: ``top`` itself, or ``"L"`` -> r,
    ``"L/5"`` -> r // 5 (at least 1).

    Args:
        top: a positive integer, or ``"L"`` or ``"L/k"`` with k a positive integer.
        r: the residues.
    """
    if isinstance(top, int):
        return top
    k = re.fullmatch(r"L(?:/(\d+))?", top).group(1)
    return max(1, r // int(k)) if k else r


def check_top(top: object, min_separation: object) -> None:
    """Raise :class:`InputError` unless ``top`` is None, a positive integer, ``"L"`` or ``"L/k"``, and
    ``min_separation`` a positive integer.

    Args:
        top: as :func:`contacts` takes it.
        min_separation: as :func:`contacts` takes it.
    """
    fine = top is None or (isinstance(top, int) and not isinstance(top, bool) and top >= 1) or \
        (isinstance(top, str) and re.fullmatch(r"L(/[1-9]\d*)?", top) is not None)
    if not fine:
        raise InputError(f"top must be a positive integer, or 'L' or 'L/k' (k a positive integer: 'L/5' is the L/5 "
                         f"most likely contacts of a protein of L residues), or None for the whole map; got {top!r}")
    count("min_separation", min_separation, why=f"pairs i, j with |i - j| >= it are kept; {MIN_SEPARATION} is usual")


def top_contacts(probs: Tensor, n: int, min_separation: int = MIN_SEPARATION) -> list[tuple[int, int, float]]:
    """The ``n`` most likely contacts of a map, at least ``min_separation`` apart in the chain.

    Args:
        probs: (r, r) symmetric contact probabilities.
        n: how many pairs at most (fewer when the protein has fewer that far apart).
        min_separation: keep pairs i < j with j - i >= it.

    Returns:
        ``[(i, j, probability), ...]`` most likely first, i < j, residues counted from 0.
    """
    i, j = torch.triu_indices(len(probs), len(probs), offset=min_separation)  # (2, pairs): j - i >= min_separation
    p = probs[i, j]  # (pairs,)
    best = p.topk(min(n, len(p))).indices
    return [(int(i[k]), int(j[k]), float(p[k])) for k in best.tolist()]


def contacts(
    sequences: str | list[str],
    model: Model | str | Path | None = None,
    *,
    top: int | str | None = None,
    min_separation: int = MIN_SEPARATION,
    batch_size: int = 8,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    edits: Mapping[str, Edit] | None = None,
) -> Tensor | list:
    """Contact maps of proteins from ESM-2's contact head (``EsmForMaskedLM.predict_contacts``).

    Sequences run ``batch_size`` at a time, sorted by length, laid end to end on the fast path (with ``edits``: as
    padded batches through the encoder); the contact head reads every layer's attention probabilities (see
    the module docstring). Each protein's map is its own: the same as run alone.

    Args:
        sequences: a protein (one letter a residue, as ESM's tokenizer reads it: ``"MKTAYIAKQR"``), or a list of them.
        model: an ESM-2 checkpoint with its contact head (the facebook/esm2_* ones have it): a loaded
            :class:`Model`, a local folder or a hub id (no default: one must be given).
        top: None: the whole (r, r) map. Else the most likely contacts only, as ``(i, j, probability)`` triples: a
            number of pairs, or ``"L"`` / ``"L/2"`` / ``"L/5"`` (a share of the protein's residues L), as ESM's
            evaluation counts them; what a corpus of long proteins should write (a 1000-residue map is 10^6 numbers).
        min_separation: with ``top``, keep only pairs i < j with ``j - i >= min_separation`` (default 6: closer
            residues touch in any fold).
        batch_size: proteins per encoder pass, at most (their attention maps are held together: see memory in the
            module docstring).
        device: where the model runs (:func:`~bertfn.checkpoint.resolve.get_model`).
        dtype: the precision it runs in (``"bfloat16"``: the maps come back as float32 all the same).
        edits: ``{point name: edit(tensor, point) -> tensor}``, as :func:`~bertfn.model.encoder.encoder` takes them
            (an attention edit of :mod:`bertfn.interventions`), and of the head's own points ``contacts.maps``,
            ``contacts.apc`` and ``contacts.logits``.

    Returns:
        For one sequence of r residues, its (r, r) float32 map of probabilities on the CPU (symmetric; residue i is
            row i, from 0), or with ``top`` its list of ``(i, j, probability)`` most likely first; for a list, a
            list of those in its order.

    Raises:
        InputError: an empty sequence, one longer than the model reads, bad top, min_separation or batch_size.
        MissingPartError: a model without a tokenizer or without the contact head (:func:`require_contact_head`).

    Warns:
        UnknownTokensWarning: sequences that are mostly ``<unk>`` (small letters, or not amino acids).
    """
    sequences, model = texts_and_model(sequences, model, "contacts")
    given = [sequences] if isinstance(sequences, str) else sequences if isinstance(sequences, list) else []
    for i, s in enumerate(given):
        if isinstance(s, str) and not s.strip():  # said here: text_list's message asks for a sentence
            raise InputError(f"text {i} is empty; write the protein's residues, one letter each (e.g. MKTAYIAKQR)")
    batch, single = text_list(sequences, "contacts")
    check_top(top, min_separation)
    count("batch_size", batch_size)

    m, tok, points = loaded(TASK, model, device, dtype, edits)
    require_contact_head(m)
    enc = tok(list(batch))  # (N, S): <cls> residues <eos>, padded
    lengths = enc.attention_mask.sum(dim=1).tolist()
    P = longest_input(m.config)  # ESM-2's positions; ESM-1b's learned ones hold 2 fewer (from padding_idx + 1)
    for i, n in enumerate(lengths):
        if n > P:
            raise InputError(f"text {i} has {n - 2} residues, but the model reads at most {P - 2} (with <cls> and "
                             f"<eos>, {P} tokens); cut it into overlapping pieces of at most {P - 2} residues")

    def step(ids: Tensor, attentions: Tensor, mask: Tensor) -> list[Tensor]:  # per row, its (r, r) map on the CPU
        probs = contact_head(m.params, ids, attentions, mask, points).float().cpu()  # (b, S - 2, S - 2)
        if len(probs) == 1:  # a row alone has no padding: its map is the whole
            return [probs[0]]
        return [p[:r, :r].clone() for p, r in zip(probs, (mask.sum(dim=1) - 2).tolist())]  # r: <cls>, <eos> left out

    maps = attention_maps(m, enc, lengths, step, batch_size=batch_size, points=points)
    if top is not None:
        maps = [top_contacts(p, top_count(top, len(p)), min_separation) for p in maps]
    return finished(maps, None, single)  # a map holds no "warning": the tokenizer's is the one said


TASK = Task("contacts", contacts, probe="MKTAYIAKQR", fast=True, model=None)
"""The task (:mod:`bertfn.tasks.task`) :func:`contacts` is: ``bertfn contacts``, the corpus's ``Contacts``."""
