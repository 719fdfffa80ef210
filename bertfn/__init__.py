"""bertfn: BERT as stateless pure functions over a Hugging Face state_dict.

The house, one room per part a reader would name, each importing only the rooms listed above it:

    interrupts.py Ctrl-C in the ``bertfn`` command, at any moment: one line, and the process ends by SIGINT
    errors.py     the exceptions every room raises
    model/        the forward pass, read top to bottom: functional -> embeddings -> attention ->
                  encoder -> heads (config.py, params.py and recorder.py beside them; layout.py: padded batches
                  or texts laid end to end; members/: what each of BERT's family changes)
    checkpoint/   a hub id or a folder becomes a Model: loading, state checks, tokenizer; new Models
                  made by pruning or from scratch; sentence-transformers folders; names/: how each member's
                  checkpoints name BERT's weights, which model/ reads through the registry names/ fills on
                  import (model/naming.py), as fast/ installs its kernels beneath model/ without model/ importing it
    fast/         speed beneath that one pass: the kernel each product runs on (chosen per CPU), texts grouped
                  by length and laid end to end
    tasks/        the pipelines: fill-mask, scoring (PLL, mutation effects), joint filling, embeddings, and the
                  fine-tuned heads' (classify, tag, answer, zero_shot, rerank, choose, contacts)
    inspect/      trace (every intermediate of a pass), plots, the explorer page
    interventions/  edits by name: ablation of heads and neurons, steering, activation patching; attributions
    corpus/       tasks over texts of any number: streams, files, Ray (not imported here)
    cli/          the ``bertfn`` command, one module per subcommand, a thin layer over the above

Calls that read text take the texts first and the model second (``fill_mask(texts, model)``,
``trace(text, model)``); checkpoint/resolve.py turns what they are given into a Model.
"""

from . import interrupts  # first, before torch loads: Ctrl-C while it does ends the bertfn command in one line

interrupts.install()

from . import interventions  # edits by name: ablation, steering, activation patching
from .checkpoint.loading import load
from .checkpoint.model import Model
from .checkpoint.fresh_head import with_head
from .checkpoint.pruning import prune_heads
from .checkpoint.saving import save
from .checkpoint.scratch import init_model, parameter_count
from .checkpoint.tokenizer import Tokenizer
from .errors import (
    BertfnError,
    BertfnWarning,
    CheckpointError,
    ConfigError,
    DependencyError,
    InputError,
    MissingPartError,
    ModelLoadError,
    UnknownTokensWarning,
    UnusedWeightsWarning,
)
from .inspect import plots  # matplotlib itself is imported only when a plot is drawn
from .inspect.trace import Recording, Recordings, trace  # bertfn.trace is this function; the recorder class is bertfn.Trace
from .model.attention import attention, eager_attention, sdpa_attention
from .model.layout import Segments, extended_mask
from .model.config import BertConfig
from .model.embeddings import embeddings
from .model.encoder import Cache, EncoderOutput, encoder, layer
from .model.feed_forward import feed_forward
from .model.functional import gelu, layer_norm, linear
from .model.heads import (
    mlm_head,
    multiple_choice,
    nsp_head,
    pooler,
    question_answering,
    sequence_classification,
    token_classification,
)
from .model.params import Params
from .model.recorder import Trace
# every task's function (bertfn.tasks.TASKS; tests/test_task_list.py checks this list against it), and helpers beside
from .tasks.classify import classify
from .tasks.choose import choose
from .tasks.contacts import contacts
from .tasks.embed import embed, similarity
from .tasks.fill_mask import fill_mask
from .tasks.mutations import Substitutions, score_mutations, substitution_matrix
from .tasks.replaced import replaced_tokens
from .tasks.scoring import score
from .tasks.rerank import rerank
from .tasks.zero_shot import zero_shot
from .tasks.tag import tag
from .tasks.answer import answer

__version__ = "0.1.0"

__all__ = [
    "BertConfig", "BertfnError", "BertfnWarning", "Cache", "CheckpointError", "ConfigError", "DependencyError", "EncoderOutput",
    "InputError", "MissingPartError", "Model", "ModelLoadError", "Params", "Recording", "Recordings", "Segments", "Tokenizer", "Trace", "attention", "choose", "classify", "contacts", "eager_attention", "embeddings",
    "embed", "encoder", "extended_mask", "feed_forward", "fill_mask", "gelu", "init_model", "layer", "layer_norm", "linear", "load",
    "mlm_head", "multiple_choice", "nsp_head", "parameter_count", "pooler", "prune_heads", "question_answering", "replaced_tokens", "score", "score_mutations", "sdpa_attention",
    "sequence_classification", "similarity", "Substitutions", "substitution_matrix", "token_classification", "trace", "plots", "interventions",
    "UnknownTokensWarning", "UnusedWeightsWarning", "tag", "rerank", "zero_shot", "answer", "save", "with_head",
]
