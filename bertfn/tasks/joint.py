"""Filling the masks of a text together: the best combinations, not the best word at each mask alone.

``fill_mask`` answers each [MASK] on its own, from a text where every other mask is still hidden, so
"The [MASK] [MASK] barked." may pair a first word and a second word that never go together.
``fill_mask(text, joint=True)`` calls :func:`joint_fill`, which searches and then rescores:

1. **Beam search, left to right.** The masks are filled in the order they appear. A beam is a
   partial fill (tokens for the first s masks) with its search score: the sum of
   log P(token | the text with the earlier masks filled by the beam's tokens and this and every
   later mask still [MASK]). Each beam is extended by its ``width`` most likely tokens at the next
   mask, and the ``width`` best extensions of all beams are kept (``width`` = max(beam_width, top_k)).
2. **Rescoring.** Each complete fill is scored by the pseudo-log-likelihood of its masked positions,

       score = sum over the masks i of log P(t_i | the filled text with position i alone masked),

   i.e. :func:`bertfn.score`'s "original" PLL restricted to the positions that were masks (natural
   log; the other tokens of the text are context, not scored). The fills come back best first by
   that score.

Greedy left to right is a beam of width 1. The two differ when the token that looks best at an
early mask, seen with every later mask hidden, leaves the later masks only poor choices: greedy has
committed to it, while a wider beam still holds the runner-up and finds that it makes a better whole.
Neither is exhaustive (there are V^M combinations of M masks), and the search favours the masks that
come first; the rescoring ranks what it found by a score that treats every mask alike, so the
best-scored fill need not be the one the search ranked first.
"""

from __future__ import annotations

import math

import torch

from ..checkpoint.model import Model
from ..checkpoint.tokenizer import Encoding
from ..model.recorder import NO_TRACE, Trace
from .scoring import copies_of, log_probs, target_log_softmax


def filled(row: list[int], masks: list[int], tokens: tuple[int, ...]) -> list[int]:
    """``row`` with the first ``len(tokens)`` of its mask positions ``masks`` replaced by ``tokens``.

    Args:
        row: a text's token ids.
        masks: its [MASK] positions, in order.
        tokens: the tokens for the first masks.
    """
    out = list(row)
    for pos, t in zip(masks, tokens):
        out[pos] = t
    return out


def beam_search(m: Model, rows: list[list[int]], types: list[list[int]], masks: list[list[int]],
                width: int, batch_size: int, points: Trace = NO_TRACE) -> list[list[tuple[tuple[int, ...], float]]]:
    """Step 1 of the module docstring for every text at once.

    Args:
        m: the model (with its masked-LM head and tokenizer).
        rows: each text's ids.
        types: each text's token types.
        masks: each text's [MASK] positions, in order.
        width: beams kept per text.
        batch_size: masked copies per encoder pass, at most.
        points: a Trace with edits (each seeing its group of copies as a padded batch's shapes).

    Returns:
        Per text, ``width`` complete fills ``(tokens, search score)``, best first.
    """
    mask_id, pad_id = m.tokenizer.mask_token_id, m.tokenizer.pad_token_id
    beams: list[list[tuple[tuple[int, ...], float]]] = [[((), 0.0)] for _ in rows]

    def best(group: list[int], lp: torch.Tensor) -> list:  # per copy: its width best (log P, token ids)
        values, picks = lp.topk(min(width, lp.shape[-1]), dim=-1)  # (n, width) each
        return list(zip(values.tolist(), picks.tolist()))

    for step in range(max(len(ms) for ms in masks)):
        owners, copy_rows, copy_types, target = [], [], [], []  # one copy per (text, beam) still going
        for i, ms in enumerate(masks):
            if step < len(ms):
                for tokens, s in beams[i]:
                    owners.append((i, tokens, s))
                    copy_rows.append(filled(rows[i], ms, tokens)), copy_types.append(types[i]), target.append(ms[step])
        copies = copies_of(copy_rows, copy_types, target, [mask_id] * len(target), pad_id)
        grown: dict[int, list] = {i: [] for i, _, _ in owners}
        for (i, tokens, s), (values, ids) in zip(owners, target_log_softmax(m, copies, best, batch_size, points)):
            grown[i] += [(tokens + (t,), s + v) for v, t in zip(values, ids)]
        for i, extensions in grown.items():
            beams[i] = sorted(extensions, key=lambda b: -b[1])[:width]
    return beams


def joint_fill(m: Model, enc: Encoding, lengths: list[int], top_k: int, beam_width: int,
               batch_size: int, points: Trace = NO_TRACE) -> list[list[dict]]:
    """The ``top_k`` best fills of all the masks of each text of ``enc`` (see the module docstring).

    Args:
        m: the model (with its masked-LM head and tokenizer).
        enc: the texts as a padded batch.
        lengths: real tokens per text.
        top_k: fills per text.
        beam_width: the beam's width; the search keeps ``max(beam_width, top_k)`` fills.
        batch_size: masked copies per encoder pass, at most.
        points: a Trace with edits (each seeing its group of copies as a padded batch's shapes).

    Returns:
        Per text a list of dicts, best first: ``{"score": PLL of the masked positions,
            "tokens": [id per mask], "token_strs": [str per mask], "sequence": the filled text}``.
    """
    tok = m.tokenizer
    rows = [enc.input_ids[i, :n].tolist() for i, n in enumerate(lengths)]
    types = [enc.token_type_ids[i, :n].tolist() for i, n in enumerate(lengths)]
    masks = [[j for j, t in enumerate(r) if t == tok.mask_token_id] for r in rows]
    beams = beam_search(m, rows, types, masks, max(beam_width, top_k), batch_size, points)

    # step 2: each complete fill's PLL at its masked positions, one copy per (text, fill, mask)
    copy_rows, copy_types, target, truth = [], [], [], []
    for i, ms in enumerate(masks):
        for tokens, _ in beams[i]:
            full = filled(rows[i], ms, tokens)
            for pos, t in zip(ms, tokens):
                copy_rows.append(filled(full, [pos], (tok.mask_token_id,)))
                copy_types.append(types[i]), target.append(pos), truth.append(t)
    lp = log_probs(m, copies_of(copy_rows, copy_types, target, truth, tok.pad_token_id), batch_size, points).tolist()

    results, c = [], 0
    for i, ms in enumerate(masks):
        fills = []
        for tokens, _ in beams[i]:
            fills.append({"score": math.fsum(lp[c:c + len(ms)]), "tokens": list(tokens),
                          "token_strs": [tok.decode([t]) for t in tokens],
                          "sequence": tok.decode(filled(rows[i], ms, tokens), skip_special_tokens=True)})
            c += len(ms)
        results.append(sorted(fills, key=lambda f: -f["score"])[:top_k])
    return results
