"""The fast path: the numbers of bertfn/model/ for many texts at once, with no padding and chosen kernels.

    kernels.py      the matrix products: F.linear, oneDNN on the weight as stored, oneDNN on a packed copy
    choice.py       which of them runs, measured on this machine per dtype and row band (cached per CPU);
                    python -m bertfn.fast prints it (__main__.py)
    unpadded.py     BERT's encoder over texts laid end to end (each text attends to itself only), the MLM head
    prenorm.py      the same layout for the pre-LN members' layers (ESM-2, ESM-1b, ModernBERT)
    disentangled.py the same layout for DeBERTa's layer
    encoders.py     which of the three a model's layer needs
    batching.py     texts sorted by length and cut into groups of up to 2048 tokens, through encoders.py

fill_mask, score (joint filling and whole-word targets included) and embed run here.
tests/test_fast_path.py checks every function against the reference it stands for.
"""
