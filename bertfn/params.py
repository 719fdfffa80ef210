"""A prefix-scoped, read-only view of the flat HF-keyed state_dict.

The checkpoint *is* the model: one flat ``dict[str, Tensor]`` keyed by Hugging Face names such as
``bert.encoder.layer.0.attention.self.query.weight``. Functions receive a :class:`Params` view
scoped to the part they mirror, so ``attention(p, x, mask)`` reads ``p["self.query.weight"]`` and
the full key it touched is ``p.key("self.query.weight")`` (candle's ``vb.pp(...)`` idea).
The view also carries the model's :class:`~bertfn.config.BertConfig`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from .config import BertConfig
from .errors import CheckpointError


class Params(Mapping):
    """``params["a.b"]`` reads ``state[prefix + "a.b"]``; ``params.scope("a")`` narrows the prefix.

    A mapping over the keys below its prefix (relative names), so ``dict(p)`` or ``len(p)`` work.
    A key that is not there raises :class:`CheckpointError` naming the full HF key.
    """

    __slots__ = ("state", "config", "prefix")

    def __init__(self, state: Mapping[str, torch.Tensor], config: BertConfig, prefix: str = ""):
        self.state = state
        self.config = config
        self.prefix = prefix

    def key(self, name: str) -> str:
        """Full HF key of a name relative to this scope."""
        return self.prefix + name

    def scope(self, name: str) -> Params:
        """A view one level down: ``p.scope("attention")["self.query.weight"]``."""
        return Params(self.state, self.config, f"{self.prefix}{name}.")

    def __getitem__(self, name: str) -> torch.Tensor:
        try:
            return self.state[self.prefix + name]
        except KeyError:
            raise CheckpointError(
                f"the weights have no {self.prefix + name!r}; this step of the model needs it "
                "(load a checkpoint that contains this part, e.g. a *ForMaskedLM one for the MLM head)"
            ) from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (self.prefix + name) in self.state

    def __iter__(self) -> Iterator[str]:
        n = len(self.prefix)
        return (k[n:] for k in self.state if k.startswith(self.prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"Params(prefix={self.prefix!r}, {len(self)} tensors)"
