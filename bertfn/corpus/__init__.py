"""Corpora: texts that do not fit in a list, run through a task (fill-mask, score, embed, the heads' tasks) lazily,
from files, or on Ray.

    stream(texts, model, top_k=3)              runner.py: an iterator, texts in, results out, in order
    run_file("in.txt", "out.jsonl", model)     files.py: files in, JSON Lines out, progress, resume
    FillMask(model), Score(model), Embed(model)  registry.py: callable classes for ray.data.Dataset.map_batches
                                               and datasets.Dataset.map(batched=True): rows in, rows + result out;
    ScoreMutations, Classify, Tag, Answer,     the same for each task registered there (a task of several inputs
    ZeroShot, Rerank, Choose, Contacts         reads them from columns: Answer's question and context)

The names above are importable from here (``bertfn.corpus.FillMask``); ``import bertfn`` does not load this room.
"""

from .files import run_file
from .registry import (
    Answer,
    Choose,
    Classify,
    Contacts,
    Embed,
    FillMask,
    Mapper,
    Rerank,
    Score,
    ScoreMutations,
    Tag,
    ZeroShot,
    register,
)
from .runner import stream

__all__ = ["Answer", "Choose", "Classify", "Contacts", "Embed", "FillMask", "Mapper", "Rerank", "Score", "ScoreMutations",
           "Tag", "ZeroShot", "register", "run_file", "stream"]
