"""A prefix-scoped, read-only view of the flat HF-keyed state_dict.

The checkpoint *is* the model: one flat ``dict[str, Tensor]`` keyed by Hugging Face names such as
``bert.encoder.layer.0.attention.self.query.weight``. Functions receive a :class:`Params` view
scoped to the part they mirror, so ``attention(p, x, mask)`` reads ``p["self.query.weight"]`` and
the full key it touched is ``p.key("self.query.weight")`` (candle's ``vb.pp(...)`` idea).
The view also carries the model's :class:`~bertfn.model.config.BertConfig`.

Functions always ask for BERT's names. A family member's checkpoint keeps its own
(``roberta.encoder.layer.0...``): its view turns each name into the member's key as it reads, so the state is never
renamed. The member's key tables are checkpoint code (:mod:`bertfn.checkpoint.names`, a room above this one); the view
reads them through the registry the checkpoint room fills on import (:func:`~bertfn.model.naming.names_of`: the seam
:mod:`bertfn.model.naming` describes), so this module imports nothing from it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from ..errors import CheckpointError, InputError
from .config import BertConfig, as_config
from .naming import names_of

HOLDERS = {  # BERT's name of a head's weights -> the checkpoints saved with that head, for a missing key's message
    "cls.predictions.": "the MLM head: a *ForMaskedLM or BertForPreTraining checkpoint",
    "cls.seq_relationship.": "the next-sentence head: a BertForPreTraining or BertForNextSentencePrediction checkpoint",
    "classifier.": "a fine-tuned head: a *ForSequenceClassification, *ForTokenClassification or *ForMultipleChoice "
                   "checkpoint",
    "qa_outputs.": "the question-answering head: a *ForQuestionAnswering checkpoint",
    "bert.pooler.": "the pooler: a checkpoint saved with it, e.g. BertModel's or BertForPreTraining's",
}


class Params(Mapping):
    """``params["a.b"]`` reads ``state[prefix + "a.b"]``; ``params.scope("a")`` narrows the prefix.

    A mapping over the keys below its prefix (relative names), so ``dict(p)`` or ``len(p)`` work.
    A key that is not there raises :class:`CheckpointError` naming the full HF key.

    Args:
        state: the flat HF-keyed state_dict, as loading leaves it.
        config: the model's config, or its config.json dict (a family member's view reads the member's key names).
        prefix: the scope, e.g. ``bert.encoder.layer.0.`` ("" for the root).
    """

    __slots__ = ("state", "config", "prefix", "rename")

    def __init__(self, state: Mapping[str, torch.Tensor], config: BertConfig, prefix: str = ""):
        self.state = state
        self.config = config = as_config(config)  # a config.json dict too, as encoder(..., config=) takes
        self.prefix = prefix
        self.rename = names_of(config).renamer(config)  # None for BERT: the names are the keys

    def key(self, name: str) -> str:
        """Full HF key of a name relative to this scope, as the checkpoint names it.

        Args:
            name: a name relative to this scope.
        """
        full = self.prefix + name
        return full if self.rename is None else self.rename(full)

    def scope(self, name: str) -> Params:
        """A view one level down: ``p.scope("attention")["self.query.weight"]``.

        Args:
            name: the part, relative to this scope.
        """
        return self.at(f"{self.prefix}{name}.")

    def at(self, prefix: str) -> Params:
        """The view of the same weights at another scope, from the root: ``p.at("bert.")``.

        It shares this view's renaming, looked up once for the root: a pass makes hundreds of views, and
        ``torch.compile`` traces this without the lookup (a weak dictionary), so its graph does not break at each.

        Args:
            prefix: the full prefix, e.g. ``bert.encoder.layer.0.`` ("" for the root).
        """
        view = object.__new__(Params)
        view.state, view.config, view.prefix, view.rename = self.state, self.config, prefix, self.rename
        return view

    def layer(self, i: int) -> Params:
        """Layer ``i``'s weights (``bert.encoder.layer.{i}.``), what :func:`~bertfn.model.encoder.layer` reads.

        Args:
            i: the layer, from 0 (negative counts from the last).

        Raises:
            InputError: no such layer.
        """
        L = self.config.num_hidden_layers
        if isinstance(i, bool) or not isinstance(i, int) or not -L <= i < L:
            raise InputError(f"layer must be an integer from 0 to {L - 1} (this model has {L} layers), got {i!r}")
        return self.at(f"{self.prefix}bert.encoder.layer.{i % L}.")

    def __getitem__(self, name: str) -> torch.Tensor:
        full = self.prefix + name
        key = full if self.rename is None else self.rename(full)
        try:
            return self.state[key]
        except KeyError:
            named = f"{key!r}" if key == full else f"{key!r} (BERT's {full!r})"
            parts = self.prefix.split(".")[:-1]  # the scopes around this one, nearest first: where the name may sit
            around = next((p for p in (".".join(parts[:n]) + "." if n else "" for n in range(len(parts) - 1, -1, -1))
                           if name in self.at(p)), None)
            if around is not None:  # a view of another part than the step reads: the caller's slip, not the file's
                raise InputError(f"the weights have no {named}: this view is scoped to {self.prefix!r}, and {name!r} "
                                 f"sits under {around!r}; pass that part's view, model.params.at({around!r}) (a "
                                 f"layer's: model.params.layer(i))") from None
            holder = next((h for prefix, h in HOLDERS.items() if full.startswith(prefix)), "this part")
            raise CheckpointError(f"the weights have no {named}; this step of the model needs it (load a checkpoint "
                                  f"that contains {holder})") from None

    def get(self, name: str, default: torch.Tensor | None = None) -> torch.Tensor | None:
        """``self[name]`` where the weights hold it, else ``default``: for the parts a model may lack (ModernBERT's
        biases when its config turns them off, ``norm_bias`` / ``mlp_bias`` ...).

        Args:
            name: a name relative to this scope.
            default: what to return when the weights lack it.
        """
        return self[name] if name in self else default

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        full = self.prefix + name
        return (full if self.rename is None else self.rename(full)) in self.state

    def __iter__(self) -> Iterator[str]:
        n = len(self.prefix)
        if self.rename is None:
            return (k[n:] for k in self.state if k.startswith(self.prefix))
        root = self.at("")  # a member's keys, by the BERT names that read them
        names = names_of(self.config).named_shapes(self.config, root)
        return (k[n:] for k in names if k.startswith(self.prefix) and k in root)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"Params(prefix={self.prefix!r}, {len(self)} tensors)"


def as_params(model: object, config: BertConfig | dict | None = None, what: str = "this function") -> Params:
    """The root :class:`Params` of what a caller passes as the model.

    Args:
        model: a loaded ``Model``, its ``Params``, or a bare flat state_dict keyed by HF names.
        config: the state_dict's config (a BertConfig or a config.json dict); its keys are normalised as
            at load (``bert.`` prefix, gamma/beta, tied decoder: the member's ``normalize``).
        what: the calling function, for the message.

    Raises:
        InputError: ``model`` is none of these (saying how to pass one).
    """
    if isinstance(model, Params):
        if model.prefix:
            raise InputError(f"{what} reads the model's own keys from its root, so it takes the whole model (the Model "
                             f"from bertfn.load, or model.params), not the view of one part ({model.prefix!r})")
        return model
    if isinstance(getattr(model, "params", None), Params):  # a loaded Model (imported lazily: loading imports this)
        return model.params
    if isinstance(model, Mapping) and all(isinstance(k, str) for k in model):
        if config is None:
            raise InputError(f"{what} got a bare state_dict without its config; pass config=BertConfig.from_file("
                             "'config.json') (or the dict), or wrap both as bertfn.Params(state, config), or pass "
                             "the Model from bertfn.load(...)")
        config = as_config(config)
        return Params(names_of(config).normalize(dict(model), config), config)
    raise InputError(f"{what} takes a Model from bertfn.load(...), its .params, or a state_dict with config=...; "
                     f"got {type(model).__name__}")


def scoped(p: object, what: str, example: str) -> Params:
    """``p`` if it is a :class:`Params` view of one part of the model.

    Args:
        p: what the caller passed.
        what: the calling function, for the message.
        example: the view to pass, e.g. ``model.params.layer(0)`` for :func:`~bertfn.model.encoder.layer`.

    Raises:
        InputError: ``p`` is not such a view (naming ``example``).
    """
    if isinstance(p, Params) and p.prefix:
        return p
    got = "the whole model" if isinstance(p, (Params, Mapping)) or hasattr(p, "params") else type(p).__name__
    raise InputError(f"{what} reads one part of the weights, so it takes the Params of that part, e.g. {example}; "
                     f"got {got}")
