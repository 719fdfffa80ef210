"""One call that runs a text through BERT and keeps every intermediate: ``bertfn.trace(text, model)``.

Given a list of texts it runs them as one padded batch and returns :class:`Recordings`: the batch's tensors
by name, and each text's own :class:`Recording` (``recs[i]``), equal to tracing the text alone.

:func:`trace` tokenizes the text, runs :func:`~bertfn.model.encoder.encoder` and, at the ``[MASK]``
positions, :func:`~bertfn.model.heads.mlm_head`: the same functions, in the same order, that
:func:`~bertfn.tasks.fill_mask.fill_mask` runs. The only difference is the attention path: the eager
reference, because the fused one never forms the probabilities. Each function writes what it
computes into a :class:`bertfn.Trace` (bertfn/model/recorder.py); nothing here computes a number of its own.

The names it records and their shapes are listed in :mod:`bertfn.model.point_names` (its table); a model's own
names, in order: :func:`~bertfn.model.point_names.point_names`.
"""

from __future__ import annotations

import fnmatch
import operator
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..checkpoint.checks import refuse_long
from ..checkpoint.model import Model
from ..checkpoint.resolve import get_model, require_tokenizer, text_list, texts_and_model
from ..errors import InputError, clipped, syntax
from ..fast.kernels import Stamp, stamp, versioned
from ..model.config import BertConfig
from ..model.family import longest_input
from ..model.point_names import close_names, layer_of, point_names
from ..model.recorder import Edits, Trace, check_edits
from .batch import padded_batch, record_pass, text_tensors
from .decision_panel import Decision

Tensor = torch.Tensor

HEAD_OUTPUTS = "layer.*.head_outputs"
"""The optional point ``trace(..., head_outputs=True)`` asks for (attention and cross-attention)."""



@dataclass(frozen=True, repr=False)
class Recording:
    """What :func:`trace` returns: the tokens and every recorded tensor, keyed by name.

    ``rec["layer.0.attention.probs"]`` reads one tensor (:mod:`bertfn.model.point_names` lists the names);
    ``rec.keys()`` lists them all in the order they were computed; ``repr(rec)`` is a short summary.

    Attributes:
        tokens: S word pieces, [CLS] ... [SEP].
        input_ids: (1, S).
        mask_positions: positions of the [MASK]s: row n of ``mlm.*`` belongs to ``mask_positions[n]``.
        tensors: every recorded tensor by name, in the order computed (batch axis B = 1).
        config: the traced model's config.
        model: the model traced (the explorer reads its heads).
        weights: the model's weights as they were traced (:func:`~bertfn.fast.kernels.stamp`; None: made when the
            recording is): the explorer makes its per-layer predictions with the MLM head only while they are unchanged.
    """

    tokens: list[str]  # S word pieces, [CLS] ... [SEP]
    input_ids: Tensor  # (1, S)
    mask_positions: list[int]  # positions of the [MASK]s: row n of mlm.* belongs to mask_positions[n]
    tensors: dict[str, Tensor]
    config: BertConfig
    model: Model | None = field(default=None, repr=False, compare=False)  # the model traced (the explorer reads its heads)
    weights: Stamp | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.weights is None and self.model is not None:
            object.__setattr__(self, "weights", stamp(versioned(self.model.state)))

    def __getstate__(self) -> dict:
        return {**self.__dict__, "weights": None}  # weak references do not pickle; the copy's model is as traced

    def __getitem__(self, name: str) -> Tensor:
        return named(self.tensors, name, self.config)

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def keys(self) -> list[str]:
        return list(self.tensors)

    def __repr__(self) -> str:
        """The tokens and the recorded names grouped per layer, e.g. ``layer.{0..11}.attention.*``.

        A few hundred characters, not the tensors (``rec.keys()`` lists every name).
        """
        S, where = len(self.tokens), self.mask_positions
        shown = [t[:20] for t in self.tokens] if S <= 20 else \
            [*(t[:20] for t in self.tokens[:16]), f"... ({S - 17} more)", self.tokens[-1]]
        masks = f", [MASK] at {', '.join(map(str, where[:8]))}{' ...' if len(where) > 8 else ''}" if where else ""
        return (f"Recording({S} tokens: {' '.join(shown)}{masks}; {len(self.tensors)} tensors: "
                f"{', '.join(group_names(self.tensors))})")

    def attention(self, layer: int, head: int | None = None) -> Tensor:
        """Attention probabilities of one layer: rows are queries, columns keys.

        Args:
            layer: the layer; negative indices count from the end, as in Python.
            head: one head (negative counts from the end), or None for all.

        Returns:
            (nh, S, S), or (S, S) for one ``head``.

        Raises:
            InputError: no such layer or head.
        """
        L = self.config.num_hidden_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or not -L <= layer < L:
            raise InputError(f"{syntax(python='layer', cli='--layer')} must be an integer from {-L} to {L - 1} (this "
                             f"model has {L} layers; negative counts from the end), got {layer!r}")
        probs = self[f"layer.{layer % L}.attention.probs"][0]  # (nh, S, S)
        if head is None:
            return probs
        nh = probs.shape[0]
        if isinstance(head, bool) or not isinstance(head, int) or not -nh <= head < nh:
            raise InputError(f"{syntax(python='head', cli='--head')} must be an integer from {-nh} to {nh - 1} (layer "
                             f"{layer} has {nh} heads; negative counts from the end), got {head!r}")
        return probs[head]  # (S, S)

    def to_html(self, *, top_k: int = 5, title: str | None = None, decision: Decision | None = None) -> str:
        """This pass as one self-contained HTML page: the explorer.

        Head, model and neuron views, MLM predictions, a per-layer strip. See :mod:`bertfn.inspect.explorer`
        for what it stores and how precisely.

        Args:
            top_k: MLM predictions shown per position.
            title: the page's title (default: the text).
            decision: a fine-tuned head's decision panel, ``bertfn.interventions.decision(text, model)`` for the same
                text and model (:class:`~bertfn.inspect.decision_panel.Decision`), or None for none.
        """
        from .explorer import to_html  # here, not at the top: import bertfn does not need the page's code

        return to_html(self, top_k=top_k, title=title, decision=decision)

    def save_html(self, path: str | Path, *, top_k: int = 5, title: str | None = None,
                  decision: Decision | None = None) -> Path:
        """Write :meth:`to_html` to ``path`` (e.g. ``"view.html"``).

        Args:
            path: the HTML file to write.
            top_k: as in :meth:`to_html`.
            title: as in :meth:`to_html`.
            decision: as in :meth:`to_html`.

        Returns:
            The path.
        """
        from .explorer import save_html

        return save_html(self, path, top_k=top_k, title=title, decision=decision)

    def _repr_html_(self) -> str:
        """Jupyter shows a recording as the explorer, in an iframe of its own."""
        from .explorer import notebook_html

        return notebook_html(self)


@dataclass(frozen=True, repr=False)
class Recordings:
    """What :func:`trace` returns for a list of texts: one padded pass, read whole or a text at a time.

    ``recs["layer.0.attention.probs"]`` is the batch's tensor as the encoder computed it: batch axis first,
    padded to the longest text's S tokens (a padding position's rows mean nothing); ``mlm.*`` hold one row per
    [MASK] of every text, ``mask_rows`` says whose. ``recs[i]`` is text i as a :class:`Recording` cut to its own
    tokens, equal to ``trace(texts[i], model)``; ``len(recs)`` counts the texts and ``for rec in recs`` goes
    through them. ``recs.keys()`` lists the names, ``repr(recs)`` is a short summary.

    Attributes:
        tokens: each text's word pieces, [CLS] ... [SEP], without the padding.
        input_ids: (B, S), padded with the padding token.
        attention_mask: (B, S), 1 for a text's tokens, 0 for padding.
        mask_rows: (text, position) of every [MASK] of the texts, in order: row n of ``mlm.*`` is ``mask_rows[n]``.
        tensors: every recorded tensor by name, in the order computed (batch axis first: (B, ...); ``mlm.*``
            (N, ...) for the N [MASK]s).
        config: the traced model's config.
        model: the model traced.
        weights: the model's weights as they were traced, which each text's :class:`Recording` carries.
    """

    tokens: list[list[str]]
    input_ids: Tensor  # (B, S)
    attention_mask: Tensor  # (B, S)
    mask_rows: list[tuple[int, int]]
    tensors: dict[str, Tensor]
    config: BertConfig
    model: Model | None = field(default=None, repr=False, compare=False)
    weights: Stamp | None = field(default=None, repr=False, compare=False)

    __post_init__, __getstate__ = Recording.__post_init__, Recording.__getstate__

    @property
    def lengths(self) -> list[int]:
        """Each text's number of tokens, [CLS] and [SEP] included."""
        return [len(t) for t in self.tokens]

    def __len__(self) -> int:
        return len(self.tokens)

    def __iter__(self) -> Iterator[Recording]:
        return (self[i] for i in range(len(self)))

    def __getitem__(self, key: int | str) -> Recording | Tensor:
        """A tensor of the batch by name, or text ``key`` (negative counts from the end) cut to its tokens.

        Args:
            key: a recorded name, or a text's index.

        Returns:
            The batch's tensor (B, ...), or the text's :class:`Recording` (tensors (1, S_i, ...), ``mlm.*`` its
            own [MASK]s' rows).

        Raises:
            InputError: a name the trace does not hold, or an index out of range.
        """
        if isinstance(key, str):
            return named(self.tensors, key, self.config)
        B, index = len(self), None
        if not isinstance(key, bool):
            try:  # a Python int, or numpy's and torch's integers (np.argsort's indices, a 0-d tensor)
                index = operator.index(key)
            except TypeError:
                pass
        if index is None or not -B <= index < B:
            listed = "; for several texts, [recs[i] for i in ...]" if isinstance(key, slice) else ""
            raise InputError(f"recs[...] takes a text's index from 0 to {B - 1} (or -{B} to -1 from the end) or a "
                             f"recorded name, got {key!r}; the trace holds {B} texts{listed}")
        i, S = index % B, self.lengths[index]
        return Recording(self.tokens[i], self.input_ids[i:i + 1, :S], [p for t, p in self.mask_rows if t == i],
                         text_tensors(self.tensors, i, S, self.mask_rows, self.config.chunk_size_feed_forward),
                         self.config, self.model, self.weights)

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def keys(self) -> list[str]:
        return list(self.tensors)

    def __getattr__(self, name: str):
        if not name.startswith("_") and hasattr(Recording, name):  # rec.attention(3), rec.save_html(...): one text's
            raise AttributeError(f"Recordings has no {name!r}: that is one text's (a Recording's); pick a text as "
                                 f"recs[i], e.g. recs[0].{name}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        """The texts' lengths, where the [MASK]s are, and the recorded names grouped per layer; not the tensors."""
        lengths, masked = self.lengths, sorted({t for t, _ in self.mask_rows})
        shown = ", ".join(map(str, lengths[:8])) + (f", ... ({len(lengths) - 8} more)" if len(lengths) > 8 else "")
        masks = f", [MASK] in text{'s' * (len(masked) > 1)} {', '.join(map(str, masked[:8]))}" \
            f"{' ...' if len(masked) > 8 else ''}" if masked else ""
        return (f"Recordings({len(self)} texts of {shown} tokens, padded to {self.input_ids.shape[1]}{masks}; "
                f"{len(self.tensors)} tensors: {', '.join(group_names(self.tensors))})")


def one_recording(rec: object, does: str) -> None:
    """Refuse anything but one text's :class:`Recording`, for a call that reads one (a figure, a split of the logits).

    Args:
        rec: what the caller passed.
        does: the call and what it reads, for the message (``"attention_figure draws one text's recording
            (bertfn.trace(text, model))"``).

    Raises:
        InputError: a batch's :class:`Recordings` (pick ``recs[i]``) or something else.
    """
    if not isinstance(rec, Recording):
        what = f"a batch of {len(rec)} texts' recordings" if isinstance(rec, Recordings) else type(rec).__name__
        raise InputError(f"{does}, got {what}; pick a text of a batch as recs[i]")


def named(tensors: dict[str, Tensor], name: str, config: BertConfig) -> Tensor:
    """``tensors[name]``, or an :class:`InputError` saying why the recording lacks it, or naming the close names.

    Args:
        tensors: recorded tensors by name.
        name: the name asked for.
        config: the traced model's config (its layers and points).

    Raises:
        InputError: no tensor of that name.
    """
    try:
        held = name in tensors  # a study's run (interventions/pairs.py) notes the names asked, and refuses others
    except TypeError:  # unhashable: a list
        held = False
    if not held and not isinstance(name, str):
        raise InputError(f"a recording's tensors are read by name, e.g. rec['layer.0.attention.probs'] (.keys() lists "
                         f"them), got {type(name).__name__}: {clipped(name, 40)}; a batch's texts are recs[i]")
    if not held:
        L = config.num_hidden_layers
        if (layer_of(name) or 0) >= L:
            hint = f"the model has {L} layers, 0 to {L - 1}"
        elif fnmatch.fnmatchcase(name, HEAD_OUTPUTS):
            hint = "a pass computes each head's output only when asked: bertfn.trace(..., head_outputs=True)"
        elif name.startswith("mlm.") and name in point_names(config):
            hint = "the MLM head runs only at the text's mask tokens, and only where the checkpoint has one (a masked LM)"
        elif name in point_names(config):
            hint = "the model's pass has that point, but this recording did not keep it (a store= that keeps less, " \
                "or a part the checkpoint lacks, such as a pooler)"
        else:
            close = close_names(name, dict.fromkeys([*tensors, *point_names(config, optional=True)]), config)
            hint = f"did you mean {', '.join(close)}?" if close else "see .keys() for the names"
        raise InputError(f"the trace holds no {name!r}; {hint}")
    return tensors[name]


def group_names(names) -> list[str]:
    """Recorded names in groups, in order: ``embeddings.*``, ``layer.{0..11}.attention.*``, ``pooler``, ...

    Args:
        names (Iterable[str]): the recorded names, in order.
    """
    layers: list[int] = []
    groups: dict[str, None] = {}  # an ordered set
    for name in names:
        numbered = re.match(r"layer\.(\d+)\.(.*)", name)
        if numbered:
            layers.append(int(numbered[1]))
            name = "layer.{i}." + numbered[2]
        parts = name.split(".")
        depth = 3 if numbered else 1  # layer.{i}.attention.* / embeddings.*
        groups[".".join(parts[:depth]) + (".*" if len(parts) > depth else "")] = None
    span = f"{{{min(layers)}..{max(layers)}}}" if layers else ""
    return [g.replace("{i}", span) for g in groups]


def trace(text: str | list[str], model: Model | str | Path | None = None, pair: str | list[str | None] | None = None,
          *, edits: Edits | None = None, store: dict[str, Tensor] | None = None,
          head_outputs: bool = False) -> Recording | Recordings:
    """Run ``text`` (and an optional second segment ``pair``) through the model, recording every step.

    The MLM head runs at the ``[MASK]`` positions when the model has one and the text has masks;
    ``mlm.logits`` then holds the logits fill_mask turns into its scores. Given a list of texts, one padded
    batch runs (eager attention too, every point recorded) and the result is a :class:`Recordings`, whose
    ``recs[i]`` equals tracing text i alone. The old order ``trace(model, text)`` still works, with a
    DeprecationWarning.

    Args:
        text: one text, or a list (tuple, ...) of B texts.
        model: a loaded :class:`~bertfn.checkpoint.loading.Model`, a hub id or a local folder (None: the
            fill-mask default, google-bert/bert-base-uncased).
        pair: a second segment, or None; for a list of texts, a list of B second segments (None where a
            text has none).
        edits: ``{point name: edit(tensor, point) -> tensor}`` changes the pass at those points (the names
            above; see :mod:`bertfn.interventions`); the recording then holds what the edited pass computed.
            For a list the edits see the padded batch: (B, ...), ``mlm.*`` (N, ...) for every [MASK].
        store: the dict that receives each tensor by name as the pass computes it (default: a new one, which
            keeps them all); the Recording's (or Recordings') ``tensors``. A dict subclass may keep less (its
            ``__setitem__`` drops the names it does not want): ``bertfn view`` passes
            :class:`bertfn.inspect.page_arrays.PageArrays`, which keeps only the explorer's arrays, made as the
            layers come (at 512 tokens on bert-base's shape a whole trace is about 2 GB; 200 AntiBERTy texts of
            about 100 tokens, 7 GB). ``recs[i]`` cuts what the store kept.
        head_outputs: record each head's write into the residual stream too,
            ``layer.{i}.attention.head_outputs`` (B, nh, S, H), which a pass computes only when asked
            (the output projection is then their sum plus the bias: the same to about 1e-6).

    Returns:
        For one text, the recording (tensors with the batch axis, B = 1); for a list, the :class:`Recordings`.

    Raises:
        InputError: not a text or a list of them, an empty text or pair, a text longer than the model reads,
            pairs that are not one per text, a ``store`` that is no dict, or edits that name no point.
        MissingPartError: a model without a tokenizer.
    """
    text, model = texts_and_model(text, model, "trace", old_order=True)
    m = get_model(model)
    tok = require_tokenizer(m, "trace")
    if store is not None and not isinstance(store, dict):
        raise InputError(f"store= takes a dict (or a dict subclass) that receives each tensor by name, got "
                         f"{type(store).__name__}; leave it out to keep every tensor in the Recording")
    record = Trace(store, edits=check_edits(edits, m.config), optional=[HEAD_OUTPUTS] if head_outputs else [])
    if not isinstance(text, str):
        texts, _ = text_list(text, "trace")
        ids, types, mask, tokens = padded_batch(tok, texts, pair)
        refuse_long(mask.sum(dim=1).tolist(), longest_input(m.config), paired=pair is not None)
        ids, mask = ids.to(m.device), mask.to(m.device)  # (B, S)
        rows = record_pass(m, ids, types, mask, record)
        return Recordings(tokens, ids, mask, rows, record.store, m.config, m)
    for what, t in (("the text", text), ("the second segment (pair)", pair)):
        if isinstance(t, str) and not t.strip():
            raise InputError(f"{what} is empty; write a sentence to run through the model")
    enc = tok([text], [pair] if pair is not None else None)
    refuse_long([len(enc.tokens[0])], longest_input(m.config), named=lambda _: "the text", paired=pair is not None)
    ids = enc.input_ids.to(m.device)  # (1, S)
    rows = record_pass(m, ids, enc.token_type_ids, enc.attention_mask, record)
    return Recording(enc.tokens[0], ids, [position for _, position in rows], record.store, m.config, m)

