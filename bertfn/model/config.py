"""The model's hyper-parameters: ``config.json`` read into a small immutable record.

Mirrors ``transformers.BertConfig``: the same field names and the same defaults for fields a
file leaves out, so any BERT ``config.json`` from the hub reads as transformers reads it.

A family member's config is a subclass in the member's module (``RobertaConfig`` in roberta.py, ...)
with its own defaults and fields; :meth:`BertConfig.from_dict` reads ``model_type`` and builds the
member's class, so ``BertConfig.from_file("config.json")`` reads a RoBERTa folder as RoBERTa. A
``model_type`` no member claims is refused in one line (:class:`~bertfn.errors.CheckpointError`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from ..errors import CheckpointError, ConfigError, InputError, clipped, read_settings, unreadable
from .functional import ACTIVATIONS

POSITION_EMBEDDING_TYPES = ("absolute", "relative_key", "relative_key_query")
RELATIVE_POSITIONS = ("relative_key", "relative_key_query")
PROBLEM_TYPES = (None, "single_label_classification", "multi_label_classification", "regression")
"""What a sequence classifier's outputs mean (``config.problem_type``; None: decided by ``num_labels``)."""
"""The position types that add relative-position scores to attention (a ``distance_embedding`` table)."""

CONFIGS: dict[str, type["BertConfig"]] = {}
"""``model_type`` -> the config class that reads it: BertConfig and each member's subclass (registered
as the member's module defines it; bertfn/model/__init__.py imports them all)."""


@dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of one BERT model (``transformers.BertConfig``, same names and defaults).

    Attributes:
        vocab_size: V, the rows of the word embeddings.
        hidden_size: H, the width of every hidden state.
        num_hidden_layers: L, the layers of the encoder.
        num_attention_heads: nh, the heads of each attention block (H must be a multiple of it).
        intermediate_size: I, the feed-forward block's hidden width.
        hidden_act: the feed-forward block's activation, a key of
            :data:`~bertfn.model.functional.ACTIVATIONS`.
        hidden_dropout_prob: the dropout after the embeddings and each block's output dense.
        attention_probs_dropout_prob: the dropout of the attention probabilities.
        max_position_embeddings: P, the positions the model reads at most.
        type_vocab_size: the token types (segments).
        layer_norm_eps: the epsilon of every LayerNorm.
        initializer_range: the standard deviation of the weights :func:`~bertfn.init_model` draws.
        pad_token_id: the padding token's id (a row of the word embeddings), or None.
        position_embedding_type: "absolute", "relative_key" or "relative_key_query" (a member's config may
            allow others: ESM-2's and ModernBERT's "rotary", :attr:`POSITIONS`).
        is_decoder: a decoder: self-attention is causal.
        add_cross_attention: a decoder with cross-attention layers (needs ``is_decoder``).
        use_cache: transformers' default for returning the keys and values (kept as read; bertfn's
            :func:`~bertfn.model.encoder.encoder` takes ``use_cache=`` per call).
        chunk_size_feed_forward: positions per slice of the feed-forward block (0: one slice).
        classifier_dropout: the dropout of the classification heads (None: ``hidden_dropout_prob``).
        num_labels: the labels of a classification head (``id2label``'s number where the file has it).
        id2label: a head's output index -> its label's name (``{0: "NEGATIVE", 1: "POSITIVE"}``), as config.json
            says; None where it says nothing (transformers then names them ``LABEL_0``, ... : :attr:`labels`).
        label2id: the label's name -> its index, as config.json says (zero-shot reads its entailment id here).
        problem_type: "single_label_classification", "multi_label_classification" or "regression" (None: from
            ``num_labels``, as transformers decides).
        architectures: the transformers classes the checkpoint was saved from (``["BertForSequenceClassification"]``):
            which head it carries (:mod:`bertfn.model.task_heads`).
        pruned_heads: ``{layer: heads removed}``, as :func:`~bertfn.prune_heads` records them.
        model_type: which family member's functions and names read the weights (bertfn/model/family.py).

    Raises:
        ConfigError: a value the model cannot be built from (a size that is not a positive integer,
            H not divisible by nh, an unknown activation or position type, cross-attention without
            ``is_decoder``, a pad id outside the vocabulary, a non-positive epsilon).
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int | None = 0
    position_embedding_type: str = "absolute"
    is_decoder: bool = False
    add_cross_attention: bool = False
    use_cache: bool = True
    chunk_size_feed_forward: int = 0
    classifier_dropout: float | None = None
    num_labels: int = 2
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    problem_type: str | None = None
    architectures: tuple[str, ...] = ()
    pruned_heads: dict[int, tuple[int, ...]] = field(default_factory=dict)
    model_type: str = "bert"  # which family member's functions and names read the weights (bertfn/model/family.py)

    POSITIONS: ClassVar[tuple[str, ...]] = POSITION_EMBEDDING_TYPES  # the position types this class reads

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        CONFIGS[cls.model_type] = cls  # the subclass's default model_type (a dataclass field default)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"config {name} must be a positive integer, got {value!r}; fix config.json")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"config hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}) so every head gets the same width; fix config.json"
            )
        for f in fields(self):  # hidden_dropout_prob, classifier_dropout, a member's own (DeBERTa's pooler_dropout,
            value = getattr(self, f.name)  # ...), not ESM's token_dropout (a bool: rescale the embeddings)
            if "dropout" in f.name and "float" in str(f.type) and value is not None and not (
                    isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1):
                raise ConfigError(f"config {f.name} is a dropout probability, which lies in [0, 1] (as torch's "
                                  f"Dropout takes it), got {value!r}; fix config.json")
            if f.type in ("bool", "bool | None") and not isinstance(value, bool) and value is not None:
                raise ConfigError(f"config {f.name} must be true or false, got {value!r}; fix config.json (the string "
                                  f"\"false\" would read as true)")
        if self.hidden_act not in ACTIVATIONS:
            raise ConfigError(
                f"config hidden_act {self.hidden_act!r} is not an activation bertfn knows; "
                f"expected one of {sorted(ACTIVATIONS)}"
            )
        if self.position_embedding_type not in self.POSITIONS:
            raise ConfigError(
                f"config position_embedding_type {self.position_embedding_type!r} is not one bertfn reads for "
                f"model_type {self.model_type!r}; expected one of {list(self.POSITIONS)}"
            )
        if self.add_cross_attention and not self.is_decoder:
            raise ConfigError("config add_cross_attention=true needs is_decoder=true (as in transformers)")
        pad = self.pad_token_id
        if pad is not None and (not isinstance(pad, int) or isinstance(pad, bool) or not -self.vocab_size <= pad < self.vocab_size):
            raise ConfigError(f"config pad_token_id must be a row of the word embeddings (0..{self.vocab_size - 1}) "
                              f"or null, got {pad!r}; fix config.json")
        if not (isinstance(self.layer_norm_eps, (int, float)) and not isinstance(self.layer_norm_eps, bool)
                and self.layer_norm_eps > 0):
            raise ConfigError(f"config layer_norm_eps must be a positive number, got {self.layer_norm_eps!r}")
        if self.problem_type not in PROBLEM_TYPES:
            raise ConfigError(f"config problem_type must be one of {', '.join(map(repr, PROBLEM_TYPES[1:]))} or null, "
                              f"got {self.problem_type!r}; fix config.json")
        if self.id2label is not None and sorted(self.id2label) != list(range(len(self.id2label))):
            raise ConfigError(f"config id2label must number its labels 0 .. n-1, got the ids {sorted(self.id2label)}; "
                              "fix config.json")

    @property
    def labels(self) -> tuple[str, ...]:
        """The names of a head's outputs, by index: ``id2label``'s, else ``LABEL_0``, ``LABEL_1``, ... as transformers
        names them (``num_labels`` of them)."""
        if self.id2label is not None:
            return tuple(self.id2label[i] for i in range(len(self.id2label)))
        return tuple(f"LABEL_{i}" for i in range(self.num_labels))

    @property
    def relative_positions(self) -> bool:
        """Whether attention adds relative-position scores (``relative_key`` or ``relative_key_query``)."""
        return self.position_embedding_type in RELATIVE_POSITIONS

    @property
    def attention_output_dropout(self) -> float:
        """The dropout of an attention block's output, after its dense: ``hidden_dropout_prob`` (BERT's
        ``BertSelfOutput``, ESM-2's); a member whose config names another overrides it (ModernBERT's
        ``attention_dropout``)."""
        return self.hidden_dropout_prob

    @property
    def feed_forward_dropout(self) -> float:
        """The dropout of a post-LN layer's feed-forward output, before its residual: ``hidden_dropout_prob`` (BERT's
        ``BertOutput``); ALBERT's layer defines one and never applies it (0)."""
        return self.hidden_dropout_prob

    @property
    def choice_dropout(self) -> float:
        """The dropout of BERT's multiple-choice head, before its classifier: :attr:`head_dropout`
        (``BertForMultipleChoice``'s); RoBERTa's reads ``hidden_dropout_prob`` alone."""
        return self.head_dropout

    @property
    def head_dropout(self) -> float:
        """The dropout of a task head, before its classifier: ``classifier_dropout``, else ``hidden_dropout_prob``
        (BERT's heads); a member whose heads never read ``classifier_dropout`` overrides it (ESM-2's, MPNet's)."""
        return self.classifier_dropout if self.classifier_dropout is not None else self.hidden_dropout_prob

    @property
    def stored_layers(self) -> int:
        """The layers whose weights a checkpoint holds, each under keys of its own: ``num_hidden_layers`` (a member whose
        layers share weights says how many sets it stores: ALBERT's ``num_hidden_groups``)."""
        return self.num_hidden_layers

    @property
    def head_dim(self) -> int:
        """Width of one attention head, ``hidden_size / num_attention_heads`` (64 for bert-base)."""
        return self.hidden_size // self.num_attention_heads

    def heads_in_layer(self, layer: int) -> int:
        """Attention heads left in ``layer`` after the config's ``pruned_heads``.

        Args:
            layer: the layer's index.
        """
        return self.num_attention_heads - len(self.pruned_heads.get(layer, ()))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BertConfig:
        """Build from a ``config.json`` dict; unknown keys are ignored, absent keys take HF defaults.

        Reads ``model_type`` and builds that family member's class.

        Args:
            d: the parsed ``config.json``.

        Raises:
            ConfigError: not a dict, a value of the wrong kind, or a member's class given another
                member's config.
            CheckpointError: a ``model_type`` no member claims.
        """
        if not isinstance(d, dict):
            raise ConfigError(f"a config must be a JSON object, got {type(d).__name__}")
        model_type = d.get("model_type", cls.model_type)
        if not isinstance(model_type, str) or model_type not in CONFIGS:
            raise CheckpointError(f"model_type {model_type!r} is not a model bertfn reads; it reads BERT and its "
                                  f"family: {', '.join(sorted(CONFIGS))}")
        if CONFIGS[model_type] is not cls:
            if cls is not BertConfig:
                raise ConfigError(f"{cls.__name__} reads model_type {cls.model_type!r}, but the config says "
                                  f"{model_type!r}; read it with BertConfig.from_dict, which picks the class")
            return CONFIGS[model_type].from_dict(d)
        d = cls.renamed(d)
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        if isinstance(d.get("id2label"), dict):  # as transformers: id2label, when given, says how many labels
            kwargs["num_labels"] = len(d["id2label"])
        if kwargs.get("chunk_size_feed_forward") is None:
            kwargs.pop("chunk_size_feed_forward", None)
        labels = kwargs.get("id2label")
        if labels is not None:
            try:
                kwargs["id2label"] = {int(k): str(v) for k, v in labels.items()}  # JSON's keys are strings
            except (AttributeError, TypeError, ValueError) as e:
                raise ConfigError(f"config id2label must map label ids to names, got {clipped(labels, 80)}; fix config.json") from e
        if isinstance(kwargs.get("label2id"), dict):
            try:
                kwargs["label2id"] = {str(k): int(v) for k, v in kwargs["label2id"].items()}
            except (TypeError, ValueError) as e:
                raise ConfigError(f"config label2id must map label names to ids, got {clipped(kwargs['label2id'], 80)}; "
                                  "fix config.json") from e
        kwargs["architectures"] = tuple(kwargs.get("architectures") or ())
        pruned = kwargs.pop("pruned_heads", None) or {}
        try:
            kwargs["pruned_heads"] = {int(k): tuple(sorted(int(h) for h in v)) for k, v in pruned.items()}
        except (AttributeError, TypeError, ValueError) as e:
            raise ConfigError(f"config pruned_heads must map layer -> list of heads, got {pruned!r}") from e
        try:
            return cls(**kwargs)
        except TypeError as e:  # a field with a value of the wrong kind
            raise ConfigError(f"config.json has a field bertfn cannot read: {e}") from e

    @classmethod
    def renamed(cls, d: dict[str, Any]) -> dict[str, Any]:
        """``d`` with the fields of this model's own config.json named as BertConfig names them.

        BERT's are (a member whose config.json names them otherwise, DistilBERT, overrides this).

        Args:
            d: the parsed ``config.json``.
        """
        return d

    @classmethod
    def from_file(cls, path: str | Path) -> BertConfig:
        """Read ``config.json``.

        Args:
            path: the file.

        Raises:
            ConfigError: a missing or unreadable file (naming it), or a value the model cannot be built from.
            CheckpointError: a model of another architecture.
        """
        path = Path(path)
        try:
            d = read_settings(path, ConfigError)
        except FileNotFoundError:
            raise ConfigError(
                f"no {path.name} in {path.absolute().parent}; a BERT checkpoint folder needs a "
                "config.json next to its weights (transformers' save_pretrained writes it)"
            ) from None
        except PermissionError:
            raise unreadable(path, ConfigError) from None
        except OSError as e:  # a name too long, a loop of links
            raise ConfigError(f"cannot read {path} ({e}); re-download or fix it") from e
        try:
            return cls.from_dict(d)
        except ConfigError as e:  # a value the model cannot be built from: say which file holds it
            raise ConfigError(f"{path}: {e}") from None
        except CheckpointError as e:  # a model of another architecture
            raise CheckpointError(f"{path}: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        """The config as a ``config.json``-style dict."""
        d = asdict(self)
        d["pruned_heads"] = {str(k): list(v) for k, v in self.pruned_heads.items()}
        d["architectures"] = list(self.architectures)
        if self.id2label is not None:
            d["id2label"] = {str(k): v for k, v in self.id2label.items()}
        return d


def as_config(config: object) -> BertConfig:
    """``config`` as a :class:`BertConfig`: itself, or one read from a config.json's dict (:meth:`BertConfig.from_dict`)
    or from a transformers config (its ``to_dict()``).

    Args:
        config: a BertConfig, a dict, or a transformers config.

    Raises:
        InputError: anything else.
    """
    if isinstance(config, BertConfig):
        return config
    if not isinstance(config, dict) and callable(getattr(config, "to_dict", None)):  # transformers' config
        config = config.to_dict()
    if not isinstance(config, dict):
        raise InputError(f"a model is made from its config: a BertConfig (bertfn.BertConfig(...), "
                         f"bertfn.BertConfig.from_file('config.json')) or a config.json's dict, got {type(config).__name__}")
    return BertConfig.from_dict(config)


CONFIGS["bert"] = BertConfig
