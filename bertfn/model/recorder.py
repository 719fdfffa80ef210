"""Recording the intermediates of a forward pass.

Every model function takes ``trace=`` and writes the tensors it computes into it under short
names (``trace["scores"] = scores``). By default that is :data:`NO_TRACE`, which keeps nothing.
A :class:`Trace` keeps them in one flat dict keyed by dotted names such as
``layer.0.attention.probs``, so what a notebook shows is exactly what the model computed.
:func:`bertfn.trace` (bertfn/inspect/trace.py) records a whole forward pass this way; its docstring lists every name.
"""

from __future__ import annotations

import torch


class Trace:
    """Collects named tensors; ``trace.scope("layer.0")`` writes below ``layer.0.``."""

    def __init__(self, store: dict[str, torch.Tensor] | None = None, prefix: str = ""):
        self.store = {} if store is None else store
        self.prefix = prefix

    def scope(self, name: str) -> Trace:
        return Trace(self.store, f"{self.prefix}{name}.")

    def __setitem__(self, name: str, tensor: torch.Tensor) -> None:
        self.store[self.prefix + name] = tensor

    def __bool__(self) -> bool:
        return True


class _NoTrace(Trace):
    """The default trace: drops everything, costs one method call per step."""

    def scope(self, name: str) -> Trace:
        return self

    def __setitem__(self, name: str, tensor: torch.Tensor) -> None:
        pass

    def __bool__(self) -> bool:
        return False


NO_TRACE: Trace = _NoTrace()
