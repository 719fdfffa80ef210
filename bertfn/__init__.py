"""bertfn: BERT as stateless pure functions over a Hugging Face state_dict.

Read it top to bottom: functional.py (linear, layer_norm, gelu) -> embeddings.py -> attention.py
-> encoder.py (feed-forward, layer, the stack) -> heads.py -> pipelines.py (fill-mask), pooling.py (embed),
scoring.py and joint.py (sentence scores, joint filling).
loading.py turns a hub id or a folder into a :class:`Model` (state.py checks and lays out its weights);
tokenizer.py turns text into ids. Calls that read text take the texts first and the model second
(``fill_mask(texts, model)``, ``trace(text, model)``); resolve.py turns what they are given into a Model.
"""

from .attention import attention, eager_attention, extended_mask, sdpa_attention
from .config import BertConfig
from .embeddings import embeddings
from .encoder import Cache, EncoderOutput, encoder, feed_forward, layer
from .errors import (
    BertfnError,
    CheckpointError,
    ConfigError,
    DependencyError,
    InputError,
    MissingPartError,
    ModelLoadError,
)
from .functional import gelu, layer_norm, linear
from .heads import (
    mlm_head,
    multiple_choice,
    nsp_head,
    pooler,
    question_answering,
    sequence_classification,
    token_classification,
)
from .loading import Model, load
from .params import Params
from .pipelines import fill_mask
from .pooling import embed
from .scoring import score
from .pruning import prune_heads
from .scratch import init_model, parameter_count
from .tokenizer import Tokenizer
from .trace import Trace
from .inspect import Recording, trace  # bertfn.trace is this function; the recorder class is bertfn.Trace
from . import plots  # matplotlib itself is imported only when a plot is drawn

__version__ = "0.1.0"

__all__ = [
    "BertConfig", "BertfnError", "Cache", "CheckpointError", "ConfigError", "DependencyError", "EncoderOutput",
    "InputError", "MissingPartError", "Model", "ModelLoadError", "Params", "Recording", "Tokenizer", "Trace", "attention", "eager_attention", "embeddings",
    "embed", "encoder", "extended_mask", "feed_forward", "fill_mask", "gelu", "init_model", "layer", "layer_norm", "linear", "load",
    "mlm_head", "multiple_choice", "nsp_head", "parameter_count", "pooler", "prune_heads", "question_answering", "score", "sdpa_attention",
    "sequence_classification", "token_classification", "trace", "plots",
]
