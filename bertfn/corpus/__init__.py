"""Corpora: texts that do not fit in a list, run through a task (fill-mask, score, embed) lazily, from files, or on Ray.

    stream(texts, model, top_k=3)              runner.py: an iterator, texts in, results out, in order
    run_file("in.txt", "out.jsonl", model)     files.py: files in, JSON Lines out, progress, resume
    FillMask(model), Score(model), Embed(model)  registry.py: callable classes for ray.data.Dataset.map_batches
                                               and datasets.Dataset.map(batched=True): rows in, rows + result out

The names above are importable from here (``bertfn.corpus.FillMask``); ``import bertfn`` does not load this room.
"""

from .files import run_file
from .registry import Embed, FillMask, Mapper, Score, register
from .runner import stream

__all__ = ["Embed", "FillMask", "Mapper", "Score", "register", "run_file", "stream"]
