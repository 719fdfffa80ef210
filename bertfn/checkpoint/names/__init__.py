"""How each member's checkpoints name BERT's weights: its prefix, its key table, its shapes, what loading does.

The forward pass asks for BERT's names (``bert.encoder.layer.0.attention.self.query.weight``); a member's checkpoint
keeps its own, and the state stays as the file has it. One record per member
(:class:`~bertfn.checkpoint.names.record.Names`, in a small module of its own: roberta.py, distilbert.py,
electra.py, albert.py, esm.py, modernbert.py, mpnet.py, deberta.py; BERT's in bert.py) says how:

* **table**: ``(regex of BERT's name, the member's)`` rules, read top to bottom by the one renaming function,
  :func:`~bertfn.checkpoint.names.record.renamed`; where the names depend on the config, a rule that builds the
  table from it (ALBERT's layers read their layer group's weights, DeBERTa's MLM head has two sets of names);
* **shapes**: the keys and shapes the config implies, where they differ from BERT's table
  (:func:`~bertfn.model.shapes.expected_shapes`): ELECTRA's and ALBERT's narrower embeddings, DistilBERT's and
  MPNet's missing token types, ESM-2's and ModernBERT's pre-LN layers, DeBERTa's tables;
* **normalize**: what loading does to a state read from a file (a bare base model's keys get the member's prefix;
  a tied decoder stored once gets its second name, as transformers' state_dict shows it:
  :func:`~bertfn.checkpoint.names.record.normalizer`);
* **heads**, **tasks**: the member's own heads a checkpoint may hold beside the encoder (the model's summary names
  them), and the tasks transformers has a head class for in the member.

Importing this package registers every record in :data:`bertfn.model.naming.NAMES`, through which the model reads
them (model/ does not import the checkpoint room: :mod:`bertfn.model.naming` says why).
"""

from . import albert, bert, deberta, distilbert, electra, esm, modernbert, mpnet, roberta  # noqa: F401  each registers its record
