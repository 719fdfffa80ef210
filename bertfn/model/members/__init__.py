"""BERT's family: each member is BERT except what its module says, and holds those exceptions as named pure functions.

    roberta.py           RoBERTa, XLM-RoBERTa and CamemBERT: positions from padding_idx + 1, the head's GELU, the
                         classifier on <s>
    distilbert.py        DistilBERT: no token types, config.json's own names, pre_classifier and ReLU
    electra.py           ELECTRA: narrower embeddings projected to H, the generator and discriminator heads
    albert.py            ALBERT: narrower embeddings projected to H, one layer's weights shared by every layer
    esm.py               ESM-2 and ESM-1b: pre-LN layers with rotary attention (or none), protein vocabularies, contacts
    esm_embeddings.py    ESM's embeddings: token dropout, ESM-1b's learned positions and LayerNorm
    modernbert.py        ModernBERT: pre-LN, rotary, local attention in two layers of three, GeGLU, no biases
    modernbert_heads.py  ModernBERT's task heads on its MLM prediction head
    mpnet.py             MPNet: no token types, RoBERTa's positions, a relative position bias shared by every layer
    deberta.py           DeBERTa-v2/v3: embeddings (mask, no token types), ContextPooler heads
    deberta_attention.py DeBERTa's disentangled attention (c2p, p2c, log buckets) and its layer
    deberta_conv.py      DeBERTa-v2's convolution after the first layer

and what only the members share: rotary.py (rotary positions) and prenorm.py (the pre-LN layer, rotary
attention). BERT's pass (the modules one folder up) reads a member through its record in ../family.py
(``family_of(config)``), never by name; importing this package registers every member there. Each member's
checkpoint names (key tables, shapes, what loading does) are beside the checkpoint code, in bertfn/checkpoint/names/
(one module per member, read through ../naming.py), and its heads on parts of the last hidden states (direct
attribution) beside the interventions, in bertfn/interventions/head_parts.py.
"""

from . import albert, deberta, distilbert, electra, esm, modernbert, mpnet, roberta  # noqa: F401  each registers its config and Family
