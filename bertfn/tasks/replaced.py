"""Replaced-token detection: ELECTRA's discriminator says, for each token, whether it was replaced.

    P(token t was replaced) = sigmoid(dense_prediction(act(dense h_t)))       (Clark et al. 2020, sec. 2)

ELECTRA trains its discriminator to spot the tokens its generator put in place of the originals, so
the score reads as "how out of place is this token here": a word that does not fit its context
scores near 1. :func:`replaced_tokens` tokenizes, runs the encoder on the fast path (the texts end to
end, :func:`~bertfn.tasks.runner.per_text`) and applies the discriminator's head
(:func:`~bertfn.model.members.electra.discriminator_head`) at every token, as ``ElectraForPreTraining`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from ..checkpoint.checks import count, refuse_long
from ..checkpoint.model import Model
from ..errors import MissingPartError
from ..checkpoint.names.electra import DISCRIMINATOR
from ..model.members.electra import discriminator_head
from ..model.recorder import Edit
from ..model.family import longest_input
from .runner import finished, loaded, per_text, texts_in


def replaced_tokens(
    inputs: str | list[str],
    model: Model | str | Path,
    *,
    batch_size: int = 16,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    edits: Mapping[str, Edit] | None = None,
) -> list:
    """For each token of a text, the discriminator's probability that it was replaced.

    Mirrors ``ElectraForPreTraining``: the discriminator's head at every token.

    Args:
        inputs: one text, or a list of texts.
        model: an ELECTRA discriminator (``ElectraForPreTraining``): a loaded :class:`Model`, a folder or a
            hub id such as ``google/electra-small-discriminator``.
        batch_size: texts per encoder pass, at most.
        device: where the model runs (:func:`~bertfn.checkpoint.resolve.get_model`).
        dtype: the precision it runs in.
        edits: as in :func:`~bertfn.model.encoder.encoder`.

    Returns:
        For one text, a list of ``{"token", "index", "start", "end", "score", "replaced"}`` per
            token ([CLS] and [SEP] left out), in order: the word piece, its position in the tokenized text,
            its span in the text's characters, the probability (sigmoid of the logit ``ElectraForPreTraining``
            gives) and whether it is above 1/2. For a list of texts, a list of those.

    Raises:
        MissingPartError: a model without the discriminator's head (or without a tokenizer).
        InputError: a text longer than the model reads, or a bad batch_size.
    """
    texts, single, model = texts_in(inputs, model, "replaced_tokens")
    count("batch_size", batch_size)
    m, tok, points = loaded("replaced_tokens", model, device, dtype, edits)
    if DISCRIMINATOR[2] not in m.params:
        raise MissingPartError(f"replaced_tokens needs ELECTRA's discriminator head (discriminator_predictions.*), and "
                               f"model {m.name!r} ({m.family.name}) has none; load an ElectraForPreTraining checkpoint "
                               "such as google/electra-small-discriminator")
    P = longest_input(m.config)
    enc = tok(list(texts))
    lengths = enc.attention_mask.sum(dim=1).tolist()
    refuse_long(lengths, P)
    specials = {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id}
    def step(rows: list[int], _, h: torch.Tensor) -> list:  # h: (T, H), the group's texts end to end
        probs = torch.sigmoid(discriminator_head(m.params, h).float())  # (T,)
        found = []
        for i, p in zip(rows, probs.split([lengths[i] for i in rows])):  # text i's (n,)
            ids = enc.input_ids[i, :lengths[i]].tolist()
            found.append([{"token": enc.tokens[i][j], "index": j, "start": enc.offsets[i][j][0],
                           "end": enc.offsets[i][j][1], "score": float(p[j]), "replaced": bool(p[j] > 0.5)}
                          for j in range(len(ids)) if ids[j] not in specials])
        return found

    results = per_text(m, enc, lengths, step, batch_size=batch_size, points=points)
    return finished(results, enc.unknown, single)
