"""Speed beneath the forward pass: which kernel multiplies, and how many texts share a pass.

    kernels.py      the matrix products: F.linear, oneDNN on the weight as stored, oneDNN on a packed copy
    choice.py       which of them runs, measured on this machine per dtype and row band (cached per CPU), installed
                    beneath bertfn/model/functional.linear (use_products); python -m bertfn.fast prints it (__main__.py)
    batching.py     texts sorted by length, cut into groups of up to 2048 tokens and laid end to end, each group one
                    pass of bertfn's one encoder on that layout (bertfn/model/layout.py: Segments)
    attention_batches.py  how those texts attend: a call per run of one length, or padded batches of neighbours,
                    measured once per device and dtype

There is no second forward pass here: fill_mask, score, embed and the heads' pipelines run the functions of
bertfn/model/ on texts laid end to end. tests/test_fast_path.py checks the kernels against F.linear and the
segments layout against padded batches.
"""
