"""A member's checkpoint names as one record (:class:`Names`), and the one function that renames by a key table.

Every member's module beside this one (roberta.py, albert.py, ...) fills a :class:`Names` and registers it in
:data:`bertfn.model.naming.NAMES`; :func:`renamed` reads every member's table, :func:`normalizer` makes the usual
``normalize`` (a bare base model's keys prefixed, a tied decoder named twice).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch.utils.weak import WeakIdKeyDictionary

from ...model.config import BertConfig
from ...model.naming import CheckpointNames
from ...model.shapes import expected_shapes

Tensor = torch.Tensor
Table = tuple[tuple[str, "str | Callable[[re.Match], str]"], ...]
r"""A table of checkpoint names: ``(regex of BERT's name, the member's)`` rules, read by :func:`renamed`; the member's
name a template (``\1`` for a group) or a function of the match, as :func:`re.sub` takes either."""


def renamed(name: str, table: Table) -> str:
    r"""``name`` rewritten by the first rule of ``table`` whose pattern matches its start, or unchanged.

    The one renaming function: every member's key table is read by it, top to bottom.

    Args:
        name: a BERT name.
        table: ``(regex, template)`` rules as :func:`re.sub` takes them (``\1`` for a group, or a function).
    """
    for pattern, template in table:
        new, n = re.subn(f"^{pattern}", template, name, count=1)
        if n:
            return new
    return name


_renamers: WeakIdKeyDictionary = WeakIdKeyDictionary()  # config -> its renaming function, gone with the config


@dataclass(frozen=True)
class Names(CheckpointNames):
    """How a member's checkpoints name BERT's weights (what :class:`~bertfn.model.naming.CheckpointNames` reads).

    Attributes:
        prefix: the base model's key prefix in its checkpoints: "roberta.".
        normalize: ``(state, config) -> state``: what loading does to a state read from a file (:func:`normalizer`).
        table: the key table (:data:`Table`), or ``config -> Table`` where the names depend on the config; () where
            the names are BERT's.
        shapes: ``(config, BERT's table, present weights) -> the member's table`` of keys and shapes by BERT's names;
            None: BERT's.
        heads: the member's own head parts a checkpoint may hold: ``{part name: a key that stands for it}``.
        tasks: the tasks transformers has a head for in this member (None: BERT's four).
    """

    prefix: str
    normalize: Callable[[dict[str, Tensor], BertConfig], dict[str, Tensor]]
    table: Table | Callable[[BertConfig], Table] = ()
    shapes: Callable[[BertConfig, dict[str, tuple[int, ...]], Mapping[str, Tensor]], dict[str, tuple[int, ...]]] | None = None
    heads: Mapping[str, str] | None = None
    tasks: tuple[str, ...] | None = None

    def table_of(self, config: BertConfig) -> Table:
        """The key table for a model of ``config``.

        Args:
            config: the model's config.
        """
        return self.table(config) if callable(self.table) else self.table

    def renamer(self, config: BertConfig) -> Callable[[str], str] | None:
        """``BERT name -> checkpoint key`` for a model of ``config``: :func:`renamed` by its table, the answers
        remembered (a pass asks for the same few hundred names again and again).

        Args:
            config: the model's config.

        Returns:
            None where the table is empty (BERT: the names are the keys), else the renaming function.
        """
        if not self.table:  # BERT's: the names are the keys
            return None
        found = _renamers.get(config)
        if found is not None:
            return found
        table = self.table_of(config)
        memo: dict[str, str] = {}

        def rename(name: str) -> str:
            k = memo.get(name)
            if k is None:
                k = memo[name] = renamed(name, table)
            return k

        _renamers[config] = rename
        return rename

    def named_shapes(self, config: BertConfig, present: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        """Every weight a model of ``config`` reads, by BERT's name, with its shape: BERT's table
        (:func:`~bertfn.model.shapes.expected_shapes`) with the member's :attr:`shapes` exceptions.

        Args:
            config: the model's config.
            present: the weights at hand: optional parts count as it holds them, asked by BERT's names.
        """
        table = expected_shapes(config, present)
        return self.shapes(config, table, present) if self.shapes is not None else table


def normalizer(prefix: str, bare: tuple[str, ...], ties: tuple[tuple[str, str], ...]) -> Callable:
    """A member's ``normalize``: what loading does to a state read from the member's checkpoint file.

    * a bare base model's keys (starting with one of ``bare``, e.g. ``embeddings.``) get ``prefix``;
    * buffers (``*.position_ids``, ``*.token_type_ids``) are dropped: bertfn computes them;
    * each ``(alias, source)`` of ``ties`` names a weight stored once under two names, as
      transformers' ``state_dict()`` shows it (``lm_head.decoder.weight`` is the word embeddings): where the
      file has the alias's head but not the alias, the alias is added for the same tensor.

    Args:
        prefix: the base model's key prefix, e.g. ``roberta.``.
        bare: the starts of a bare base model's keys.
        ties: ``(alias, source)`` pairs.

    Returns:
        ``normalize(state, config)``, which returns a new dict of the same tensors.
    """
    def normalize(state: dict[str, Tensor], config: BertConfig) -> dict[str, Tensor]:
        out = {}
        for k, t in state.items():
            k = prefix + k if k.startswith(bare) else k
            if not k.endswith((".position_ids", ".token_type_ids")):
                out[k] = t
        for alias, source in ties:
            head = alias.split(".")[0] + "."
            if alias not in out and source in out and any(k.startswith(head) for k in out):
                out[alias] = out[source]
        return out

    return normalize
