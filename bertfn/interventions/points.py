"""Where in a named tensor a head, a position or a neuron sits: the selection every intervention shares.

The points of a pass (:func:`~bertfn.model.point_names.point_names`) come in a few shapes:

=================================================  =================  =================  ========  =========
points                                             shape              positions          heads     neurons
=================================================  =================  =================  ========  =========
``layer.{i}.attention.q|k|v|context``,             (B, nh, S, hd)     axis 2             axis 1
``layer.{i}.attention.q_rotated|k_rotated``
``layer.{i}.attention.head_outputs``               (B, nh, S, H)      axis 2             axis 1
``layer.{i}.attention.scores|...|probs``           (B, nh, S_q, S_k)  axis 2 (queries)   axis 1
``embeddings.*``, ``layer.{i}.attention.query|``   (B, S, X)          axis 1                       last axis
``key|value|merged|dense|output``,
``layer.{i}.ffn.*``, ``layer.{i}.output``,
``final_norm``
``mlm.transform``, ``mlm.logits``                  (N, X)             axis 0 (the N                last axis
                                                                      [MASK]s)
``pooler``                                         (B, H)                                          last axis
=================================================  =================  =================  ========  =========

(The same for ``crossattention``.) Heads are picked where they are split: ``q|k|v|context`` and the
attention weights; ``query|key|value|merged`` hold them side by side, nh*hd columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..errors import InputError

PER_HEAD = ("q", "k", "v", "q_rotated", "k_rotated", "context", "relative_scores", "scores", "scaled_scores",
            "masked_scores", "probs", "head_outputs")


def per_head(name: str) -> bool:
    """Whether the tensor at point ``name`` is split into heads, (B, nh, S, ...).

    Args:
        name: a point's full name.
    """
    block = name.split(".")[2] if name.startswith("layer.") and name.count(".") >= 3 else ""
    return block in ("attention", "crossattention") and name.rpartition(".")[2] in PER_HEAD


def axes(name: str) -> dict[str, int | None]:
    """The axis of positions, heads and neurons in the tensor at point ``name`` (None: it has none).

    Args:
        name: a point's full name.

    Returns:
        ``{"positions": axis, "heads": axis, "neurons": axis}``.
    """
    if per_head(name):
        return {"positions": 2, "heads": 1, "neurons": None}
    if name.startswith("mlm."):
        return {"positions": 0, "heads": None, "neurons": -1}
    if name == "pooler":
        return {"positions": None, "heads": None, "neurons": -1}
    return {"positions": 1, "heads": None, "neurons": -1}


def as_list(values: int | Sequence[int] | None, what: str) -> list[int] | None:
    """None, or ``values`` (an integer or a sequence of them) as a list.

    Args:
        values: an integer, a sequence of integers, or None.
        what: what they are, for the message.

    Raises:
        InputError: anything else.
    """
    if values is None:
        return None
    values = [values] if isinstance(values, int) and not isinstance(values, bool) else values
    if not isinstance(values, Sequence) or isinstance(values, str) or \
            not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise InputError(f"{what} must be an integer or a list of integers, got {values!r}")
    return list(values)


def select(x: torch.Tensor, name: str, positions: int | Sequence[int] | None = None,
           heads: int | Sequence[int] | None = None, neurons: int | Sequence[int] | None = None,
           lengths: Sequence[int] | None = None) -> torch.Tensor:
    """A boolean tensor that broadcasts to ``x``'s shape, True at ``positions`` x ``heads`` x ``neurons``.

    Args:
        x: the tensor at point ``name``.
        name: the point's full name.
        positions: the positions to pick (None: all of that axis); a negative one counts from the axis' end, or
            given ``lengths``, from each text's own end (-1: its last token, not the padded batch's).
        heads: the heads to pick (None: all).
        neurons: the neurons to pick (None: all).
        lengths: (B,) each text's tokens where ``x`` is a padded batch of B texts (:attr:`~bertfn.model.recorder.
            Point.lengths`), or None.

    Raises:
        InputError: an axis the point does not have, or an index out of its range (naming the range; a negative
            position before a text's first token).
    """
    keep = torch.ones([1] * x.dim(), dtype=torch.bool, device=x.device)
    where = axes(name)
    for what, values in (("positions", positions), ("heads", heads), ("neurons", neurons)):
        values = as_list(values, what)
        if values is None:
            continue
        axis = where[what]
        if axis is None:
            hint = {"heads": "pick heads at layer.{i}.attention.q|k|v|scores|probs|context",
                    "neurons": "pick neurons of (B, S, X) points such as layer.{i}.ffn.intermediate",
                    "positions": "it has one vector per text"}[what]
            raise InputError(f"{name} has no {what} to pick ({hint})")
        n = x.shape[axis]
        bad = [v for v in values if not -n <= v < n]
        if bad:
            raise InputError(f"{what} {bad} out of range at {name}, which has {n} {what} (0 to {n - 1})")
        shape = [1] * x.dim()
        shape[axis] = n
        if what == "positions" and lengths is not None and axis > 0 and len(lengths) == len(x):
            past_an_end(values, lengths, name)
            if min(values) < 0:
                shape[0] = len(x)
                keep = keep & from_each_end(values, lengths, n, name, x.device).view(shape)
                continue
        picked = torch.zeros(n, dtype=torch.bool, device=x.device)
        picked[values] = True
        keep = keep & picked.view(shape)
    return keep


def past_an_end(positions: list[int], lengths: Sequence[int], name: str) -> None:
    """Refuse a position that is padding in a text of a padded batch: past that text's last token, though within
    the longest text's (editing it would change nothing of that text, in silence).

    Args:
        positions: the positions, each in -n .. n-1 (n: the batch's positions); negative ones are not checked here.
        lengths: (B,) each text's tokens.
        name: the point's full name, for the message.

    Raises:
        InputError: naming the first such position, the text and its length.
    """
    for b, length in enumerate(lengths):
        past = [p for p in positions if p >= length]
        if past:
            raise InputError(f"position {past[0]} is past the last token of text {b} at {name}, which has {length} "
                             f"tokens (in a padded batch the positions after a text's end are padding): pick "
                             f"positions below each text's length, or negative ones, which count from each text's end")


def from_each_end(positions: list[int], lengths: Sequence[int], n: int, name: str, device: torch.device) -> torch.Tensor:
    """Each text's positions in a padded batch, a negative one counted from that text's end (-1: its last token).

    Args:
        positions: the positions, each in -n .. n-1.
        lengths: (B,) each text's tokens.
        n: the batch's positions (the longest text's).
        name: the point's full name, for the message.
        device: where the selection goes.

    Returns:
        (B, n): True at each text's picked positions.

    Raises:
        InputError: a negative position before a text's first token.
    """
    ends = torch.tensor(list(lengths), device=device)  # (B,)
    wanted = torch.tensor(positions, device=device)  # (k,)
    at = torch.where(wanted < 0, ends[:, None] + wanted, wanted)  # (B, k): each text's own position
    if (at < 0).any():
        b, j = (int(i) for i in (at < 0).nonzero()[0])
        raise InputError(f"position {positions[j]} is before the first token of text {b} at {name}, which has "
                         f"{lengths[b]} tokens; a negative position counts from each text's end")
    return torch.zeros(len(ends), n, dtype=torch.bool, device=device).scatter_(1, at, True)  # (B, n)
