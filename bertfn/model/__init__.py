"""The forward pass of BERT, one pure function per step, read top to bottom in this order:

    functional.py   linear, layer_norm, the activations, dropout: the building blocks
    embeddings.py   word + position + token-type embeddings, then LayerNorm; relative positions (BertEmbeddings)
    attention.py    the encoder's multi-head attention block step by step, its two paths (BertAttention)
    masks.py        the attention, cross-attention and head masks, checked       (get_extended_attention_mask, ...)
    stack.py        the layers run one after another: what a pass keeps, activation checkpointing
    decoding.py     a decoder's attention: over its cache of past keys and values, to encoder states (BertLMHeadModel)
    feed_forward.py the feed-forward block, whole or in slices of positions          (BertIntermediate, BertOutput)
    encoder.py      one layer, the whole pass in named steps, a decoder's layer (BertLayer, BertModel)
    heads.py        the pooler and the task heads on top: MLM, NSP, classification (BertPooler, BertLMPredictionHead, ...)

and beside them, read by every step:

    config.py       BertConfig: the sizes and settings of config.json
    params.py       Params: a read-only view of the flat HF-keyed state_dict, scoped to one part
    naming.py       how a member's checkpoint names BERT's weights: a registry that checkpoint/names/ fills
    recorder.py     Trace: where each step writes what it computes, under its name (bertfn.trace reads it)
    point_names.py  the points' names: those a config's pass has (dry_run.py finds them), the layer a name is in
    dry_run.py      the names of a config's points, read from its pass run on the meta device (no values)

Sizes are named by the same letters everywhere, in shapes and comments:

    B    texts in a batch                 S    tokens per text (padded to the longest)
    H    hidden size (768 in bert-base)   L    layers (12)
    nh   attention heads (12)             hd   width of one head, H / nh (64)
    I    feed-forward width (4H = 3072)   V    vocabulary entries (30522)
    S_q  query positions                  S_k  key positions (S_q plus any cached ones)
    S_e  positions of the encoder states a decoder's cross-attention reads
    N    selected positions (the [MASK]s the MLM head reads)
    T    tokens of several texts laid end to end (the fast path, bertfn/fast/)

BERT's family lives in members/, each member a small module of what it changes from BERT (``family.py``,
here, is the record of the kinds of change that BERT's pass reads): members/__init__.py lists them. A member's
checkpoint names (its key table, its shapes, what loading does to its file's keys) are checkpoint code, in
checkpoint/names/; this folder never imports it, and reads them through naming.py's registry, which the checkpoint
room fills on import (``import bertfn``, or any of its modules, imports it first).

Nothing here loads a file or tokenizes text (checkpoint/ does), and nothing here is tuned for speed
(fast/ is): this folder is the definition the rest of bertfn is tested against.
"""

from . import members  # noqa: E402,F401  each member registers its config and Family
from . import dry_run  # noqa: E402,F401  point_names runs it: the pass on the meta device that lists the points
