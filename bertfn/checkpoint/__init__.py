"""From a hub id or a folder to a :class:`~bertfn.checkpoint.loading.Model`, and new Models made from one.

    names/          how each member's checkpoints name BERT's weights: key tables, shapes, what loading does to a
                    state (filling bertfn.model.naming's registry, through which the model reads them)
    dtypes.py       the precisions a model runs in, as Python and the CLI spell them
    tokenizer.py    text -> ids: vocab.txt or tokenizer.json through the tokenizers library
    weights.py      one weights file read safely: safetensors, or torch.load(weights_only=True)
    state.py        the checkpoint's tensors checked against the shapes the config implies, laid out for products
    loading.py      load(): weights (safetensors, never pickled code), config and tokenizer -> Model
    resolve.py      what the text-reading calls accept (a Model, a folder, a hub id; one text or many)
    checks.py       the checks of what callers pass (a positive integer, True or False, one of a set) and the refusal
                    of a text longer than the model reads, written once for the tasks, the traces and the corpus
    pruning.py      prune_heads(): a Model without some attention heads
    scratch.py      init_model(): a Model from a config alone, weights drawn as BERT initialises them
    saving.py       save(): a Model written as transformers' save_pretrained writes one
    fresh_head.py   with_head(): a pretrained Model with a new task head, to fine-tune
    fairseq.py      convert_fairseq_roberta(): a fairseq RoBERTa (Sapiens' antibody models) -> an HF folder

Each module imports only those above it (and bertfn/model/, errors.py).
"""

from . import names  # noqa: F401  fills bertfn.model.naming's registry: every member's checkpoint names
