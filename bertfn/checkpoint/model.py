"""A loaded checkpoint: :class:`Model`, its config, its flat HF-keyed weights and its tokenizer, and the head it carries.

:func:`~bertfn.checkpoint.loading.load` makes one from a hub id, a folder or a file; every call that reads text
takes one (or loads one by name, :mod:`bertfn.checkpoint.resolve`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import torch

from ..errors import InputError, MissingPartError, syntax
from ..model.config import BertConfig
from ..model.family import family_of, member_name
from ..model.naming import names_of
from ..model.params import Params
from ..model.task_heads import Head, head_of
from .dtypes import names_dtype, resolve_dtype
from .sentence_folder import SentenceFolder, sentence_folder
from .state import extra_heads
from .tokenizer import Tokenizer


class NoTokenizer:
    """``model.tokenizer`` of a model that has none (its folder had no vocabulary): false in a test, and
    any use of it (``model.tokenizer(["a text"])``, ``.mask_token_id``, ...) raises
    :class:`MissingPartError` saying how to load one, instead of a bare TypeError on None."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"NoTokenizer({self.model_name!r})"

    def _missing(self) -> MissingPartError:
        return MissingPartError(
            f"model {self.model_name!r} has no tokenizer, so it cannot read text; load it with "
            f"{syntax(python='bertfn.load(..., tokenizer=PATH)', cli='--tokenizer PATH')} (a vocab.txt, tokenizer.json "
            "or a folder holding one), or pass token ids to the functions that take them (encoder, mlm_head)")

    def __call__(self, *args, **kwargs):
        raise self._missing()

    def __getattr__(self, name: str):
        if name.startswith("__"):  # copy, pickle and hasattr probes: no such attribute, as usual
            raise AttributeError(name)
        raise self._missing()


def source_folders(m: Model) -> list[Path]:
    """The folders the model's files came from, where its other files lie (a sentence-transformers folder's modules,
    tokenizer_config.json, ...): ``m.name`` as a folder or the folder of a weights file, then the folder of its
    tokenizer's file (for a hub id, the snapshot folder in the Hugging Face cache). A hub id names no folder here.

    Args:
        m: the model.
    """
    places = [Path(m.name)] + ([Path(m.tokenizer.source)] if m.tokenizer else [])
    folders = [p if p.is_dir() else p.parent for p in places if p.is_dir() or p.is_file()]
    return list(dict.fromkeys(folders))


@dataclass(frozen=True, repr=False)
class Model:
    """A loaded BERT: the flat HF-keyed ``state`` is the model; ``params`` is its root view.

    Attributes:
        config: the model's hyper-parameters.
        state: the flat HF-keyed weights, as :func:`load` normalised them.
        tokenizer: a :class:`Tokenizer`, or for a model without one (None given) a :class:`NoTokenizer`, which is
            false (``if model.tokenizer:``) and raises :class:`MissingPartError` when used.
        name: the hub id, folder or file it was loaded from.
    """

    config: BertConfig
    state: dict[str, torch.Tensor]
    tokenizer: Tokenizer | NoTokenizer | None
    name: str

    def __post_init__(self) -> None:
        if self.tokenizer is None:
            object.__setattr__(self, "tokenizer", NoTokenizer(self.name))

    @property
    def params(self) -> Params:
        return Params(self.state, self.config)

    @property
    def device(self) -> torch.device:
        return self.params["bert.embeddings.word_embeddings.weight"].device

    @property
    def dtype(self) -> torch.dtype:
        return self.params["bert.embeddings.word_embeddings.weight"].dtype

    @property
    def family(self):
        """The family member this model is (:class:`~bertfn.model.family.Family`: BERT, RoBERTa, ...)."""
        return family_of(self.config)

    @cached_property
    def head(self) -> Head:
        """What the checkpoint carries on top of its encoder (:class:`~bertfn.model.task_heads.Head`): its task
        (``"sequence-classification"``, ``"masked-lm"``, ...), the transformers class it was saved from, and its
        labels; ``str(model.head)`` says it in a line."""
        return head_of(self.config, self.state)

    @cached_property
    def extra_heads(self) -> dict[str, int]:
        """The linear heads on the pooled output that the checkpoint holds beside its own parts, ``{key prefix:
        outputs}`` (:func:`~bertfn.checkpoint.state.extra_heads`): AntiBERTy's ``{"cls.chain": 2, "cls.graft": 2,
        "cls.species": 6}``; ``bertfn.classify(texts, model, head="cls.species", labels=[...])`` runs one."""
        return extra_heads(self.config, self.state)

    @cached_property
    def sentence_folder(self) -> SentenceFolder:
        """What the sentence-transformers folder the model came from says about its sentence vectors (its modules,
        prompts, truncate_dim: :class:`~bertfn.checkpoint.sentence_folder.SentenceFolder`), read once, as
        ``SentenceTransformer(folder)`` reads it when it is made."""
        return sentence_folder(source_folders(self))

    def __repr__(self) -> str:
        """A summary (the full state would print every weight): sizes, parts, precision, device, tokenizer."""
        c = self.config
        unique = {id(t): t for t in self.state.values()}  # tied weights count once
        root = self.params  # asked by BERT's names, whatever the family calls them
        parts = [name for name, key in (("MLM head", "cls.predictions.decoder.weight"), ("pooler", "bert.pooler.dense.weight"),
                                        ("NSP head", "cls.seq_relationship.weight"), *(names_of(c).heads or {}).items(),
                                        ("contact head", "bert.contact_head.regression.weight")) if key in root]
        if self.head.task not in ("masked-lm", "pretraining", "causal-lm", "encoder", "next-sentence"):
            parts.append(f"{self.head.task.replace('-', ' ')} head")
        parts += [f"extra heads {', '.join(f'{k} ({n})' for k, n in self.extra_heads.items())}"] if self.extra_heads else []
        tok = "none" if not self.tokenizer else \
            f"{self.tokenizer.vocab_size} tokens{', lowercased' if self.tokenizer.lowercase else ''}"
        return (f"Model({self.name!r}: {member_name(c)}, {c.num_hidden_layers} layers, {c.num_attention_heads} heads, hidden "
                f"{c.hidden_size}, FFN {c.intermediate_size}, vocab {c.vocab_size}, {c.max_position_embeddings} "
                f"positions ({c.position_embedding_type}); {len(self.state)} tensors, "
                f"{sum(t.numel() for t in unique.values()):,} parameters, {self.dtype} on {self.device}; "
                f"parts: encoder{''.join(', ' + p for p in parts)}; head: {self.head}; tokenizer: {tok})")

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | str | None = None) -> Model:
        """A copy of the model with its weights on ``device`` / in ``dtype``.

        Tied weights stay tied, and each weight keeps its memory layout, see :func:`matmul_layout`.

        Args:
            device: where the weights go (None: where they are); a dtype here, ``model.to(torch.bfloat16)`` as
                torch's ``.to`` takes it, is the dtype.
            dtype: the floating-point precision, a ``torch.dtype`` or a string such as ``"bfloat16"``
                (None: as they are; integer tensors keep theirs).

        Raises:
            InputError: a device this torch cannot use, a dtype that is not floating point, or two dtypes.
        """
        if names_dtype(device):  # model.to(torch.float32): a dtype in the device's place, as torch allows
            if dtype is not None:
                raise InputError(f"to() got two dtypes, {device!r} in the device's place and dtype={dtype!r}; pass "
                                 "one, as model.to(dtype) or model.to(device, dtype)")
            device, dtype = None, device
        dtype = resolve_dtype(dtype)
        if device is not None:
            device = usable_device(device)
        moved: dict[int, torch.Tensor] = {}
        state = {}
        for k, t in self.state.items():
            if id(t) not in moved:
                moved[id(t)] = t.to(device=device, dtype=dtype if t.is_floating_point() else None)
            state[k] = moved[id(t)]
        return replace(self, state=state)


def usable_device(device: str | torch.device | int) -> torch.device:
    """``device`` as the ``torch.device`` it names, once this torch has been seen to place a tensor there.

    Args:
        device: what ``torch.device`` takes: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``, ...

    Raises:
        InputError: a name torch does not know (``"gpu"``), a backend this torch lacks, or a GPU it cannot reach.
    """
    usable = f"pass 'cpu'{' or cuda' if torch.cuda.is_available() else ''}"
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise InputError(f"device {str(device)!r} cannot be used here (no device torch knows: cpu, cuda, "
                         f"cuda:1, mps, ...); {usable}") from None
    try:
        torch.empty(0, device=d)
    except (RuntimeError, AssertionError) as e:  # a backend this torch lacks, or a GPU it cannot reach
        why = str(e).splitlines()[0] if d.type == "cuda" else f"this torch, {torch.__version__}, has no {d.type} backend"
        raise InputError(f"device {str(device)!r} cannot be used here ({why}); {usable}") from None
    return d
