"""What people call BERT for, built on bertfn/model/ and bertfn/fast/.

    scoring.py      score(): pseudo-log-likelihoods of texts; whole-word targets
    joint.py        all the masks of a text filled together (a beam search rescored by PLL)
    fill_mask.py    fill_mask(): the words behind [MASK], shaped like transformers' pipeline
    embed.py        embed(): sentence embeddings, pooled as sentence-transformers pools them
    replaced.py     replaced_tokens(): ELECTRA's discriminator, token by token
"""
