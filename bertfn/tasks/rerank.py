"""Reranking: passages ordered by their relevance to a query, scored by a cross-encoder, as sentence-transformers'
``CrossEncoder.rank`` and ``CrossEncoder.predict`` score them.

A cross-encoder is a sequence classifier with one output (``num_labels`` 1) trained to score how well a passage
answers a query (cross-encoder/ms-marco-MiniLM-L6-v2, BAAI/bge-reranker-base). Each (query, passage) pair runs
through it (:func:`~bertfn.tasks.pairs.pair_logits`), and its one logit z, through the model's activation, is the
passage's score:

    score = activation(z)        sigmoid (a probability) or identity (the logit), the model's own choice

The activation is the one :class:`CrossEncoder` loads with the model (:func:`model_activation`): named in its
``config_sentence_transformers.json`` (``activation_fn``) or its config.json (``sentence_transformers.activation_fn``,
or ``sbert_ce_default_activation_function``, sentence-transformers' older key), else sigmoid. Pass ``activation=`` to
choose. A folder's prompt (``config_sentence_transformers.json``'s ``default_prompt_name``, or the one ``prompt_name=``
names; or ``prompt=``) goes before each query, as ``CrossEncoder.predict`` puts it before each pair's first text.

:func:`rerank` gives ``rank()``'s result: ``[{"corpus_id": i, "score": s}, ...]`` best first; with ``sort=False``
``predict()``'s, the scores in the passages' order. Long pairs are cut as CrossEncoder cuts them: tokens come off the
longer of query and passage (truncation "longest_first"), with a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from ..checkpoint.checks import count, flag, one_of
from ..checkpoint.model import Model
from ..checkpoint.resolve import fits, listed
from ..checkpoint.tokenizer import check_text
from ..errors import InputError, MissingPartError, clipped, syntax
from ..model.recorder import Edit
from .embed import chosen_prompt
from .pairs import beside_model, pair_logits
from .runner import finished, loaded
from .task import Task

Tensor = torch.Tensor

ACTIVATIONS = {"sigmoid": torch.sigmoid, "identity": lambda z: z}
"""The activations of a cross-encoder's logit: name -> function. sentence-transformers names them by the torch class,
``torch.nn.modules.activation.Sigmoid`` and ``torch.nn.modules.linear.Identity`` (the last part, lowercased, is the
key)."""


def model_activation(m: Model) -> str:
    """The activation :class:`CrossEncoder` applies to ``m``'s logit by default, a key of :data:`ACTIVATIONS`.

    Read as sentence-transformers reads it: ``config_sentence_transformers.json``'s ``activation_fn``, else
    config.json's ``sentence_transformers.activation_fn``, else its ``sbert_ce_default_activation_function``; a name
    that is no ``torch.`` class is passed over (sentence-transformers loads none without ``trust_remote_code``); else
    sigmoid.

    Args:
        m: the model.

    Raises:
        InputError: the model's files name an activation other than sigmoid and identity.
    """
    config = beside_model(m, "config.json")
    named = [beside_model(m, "config_sentence_transformers.json").get("activation_fn"),
             (config.get("sentence_transformers") or {}).get("activation_fn"),
             config.get("sbert_ce_default_activation_function")]
    path = next((p for p in named if isinstance(p, str) and p.startswith("torch.")), None)
    if path is None:
        return "sigmoid"
    name = path.rsplit(".", 1)[-1].lower()
    if name not in ACTIVATIONS:
        raise InputError(f"model {m.name!r} names the activation {path}, which bertfn does not apply; pass activation= "
                         f"one of {', '.join(map(repr, ACTIVATIONS))}")
    return name


def queries_and_passages(query, passages) -> tuple[list[tuple[str, list[str]]], bool]:
    """``([(query, passages), ...], single)``: the items of a call, given as ``(query, passages)`` or as dicts.

    Args:
        query (str | dict | list[dict]): a query, ``{"query": ..., "passages": [...]}``, or a list of such dicts (as a
            JSON Lines file's lines give them).
        passages (list[str] | str): the query's passages (one string is one passage); with dicts, None.

    Raises:
        InputError: a dict without its two keys, a query or passage that is no string (named by the item's and the
            passage's index), no passages; an empty or blank one is scored, as CrossEncoder scores it.
    """
    single = not isinstance(query, (list, tuple))
    items = [query] if single else list(query)
    if not items:
        raise InputError("rerank takes a query and its passages, or a non-empty list of {'query': ..., 'passages': "
                         "[...]}, got an empty list")
    if all(isinstance(item, Mapping) for item in items):
        missing = next((i for i, item in enumerate(items) if not {"query", "passages"} <= set(item)), None)
        if missing is not None:
            raise InputError(f"text {missing}: an item of rerank is {{'query': ..., 'passages': [...]}}, got the keys "
                             f"{', '.join(map(repr, items[missing])) or 'none'}")
        pairs = [(item["query"], item["passages"]) for item in items]
    elif single:
        pairs = [(query, passages)]
    else:
        raise InputError("rerank takes one query (a string) and its passages, or a list of {'query': ..., "
                         f"'passages': [...]}} dicts, got a {type(query).__name__} of {type(items[0]).__name__}")
    out = []
    for i, (q, ps) in enumerate(pairs):
        where = f"text {i}: " if not single else ""
        if ps is None:
            raise InputError(f"{where}rerank needs the passages to rank: rerank(query, passages, model)")
        check_text(q, f"{where}the query")  # "" and "   " are scored, as CrossEncoder scores them
        ps = [ps] if isinstance(ps, str) else listed(ps)
        if not isinstance(ps, (list, tuple)) or not ps:
            raise InputError(f"{where}the passages must be a non-empty list of strings, got {clipped(ps, 80)}")
        for j, passage in enumerate(ps):
            check_text(passage, f"{where}passage {j}")
        out.append((q, [str(p) for p in ps]))  # numpy's str_ -> str
    return out, single


def rerank(
    query: str | Mapping | list[Mapping],
    passages: list[str] | str | None = None,
    model: Model | str | Path | None = None,
    *,
    top_k: int | None = None,
    return_documents: bool = False,
    sort: bool = True,
    activation: str | None = None,
    prompt_name: str | None = None,
    prompt: str | None = None,
    batch_size: int = 32,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    edits: Mapping[str, Edit] | None = None,
) -> list:
    """Rank ``passages`` by their relevance to ``query`` with a cross-encoder (``CrossEncoder.rank``).

    ``rerank(query, passages, model)``; or, as transformers' pipelines take dicts (and a JSON Lines file gives them),
    ``rerank({"query": q, "passages": [...]}, model)`` and ``rerank([{...}, {...}], model)``: then the second argument
    is the model. Every (query, passage) pair runs ``batch_size`` at a time, sorted by length, laid end to end.

    Args:
        query: the query, or a dict ``{"query", "passages"}``, or a list of such dicts.
        passages: the P passages (one string: one passage); with dicts, the model.
        model: a cross-encoder (a sequence classifier with one output): a loaded :class:`Model`, a local folder
            or a hub id (no default: one must be given).
        top_k: the best ``top_k`` passages only (None: all).
        return_documents: each entry holds its passage too, as ``"text"``.
        sort: False gives ``CrossEncoder.predict``'s scores instead: a list of P floats in the passages' order
            (``top_k`` and ``return_documents`` then do not apply).
        activation: applied to the logit: "sigmoid" or "identity" (:data:`ACTIVATIONS`); None: the model's own
            (:func:`model_activation`).
        prompt_name: the folder's prompt of that name goes before each query (default: its ``default_prompt_name``'s,
            if it has one).
        prompt: this text goes before each query (instead of a ``prompt_name``; ``""``: none).
        batch_size: pairs per encoder pass, at most.
        device: where the model runs (:func:`~bertfn.checkpoint.resolve.get_model`).
        dtype: the precision it runs in (``"bfloat16"``: the bf16 mode).
        edits: ``{point name: edit(tensor, point) -> tensor}`` (:mod:`bertfn.interventions`), the head's points
            (``classifier.logits``, ...) included, each seeing its group's padded batch's shapes.

    Returns:
        For a query, ``rank()``'s list ``[{"corpus_id": i, "score": s[, "text": passage]}, ...]``, best first (ties in
            the passages' order), ``top_k`` of them; with ``sort=False`` the P scores. For a list of dicts, a list of
            those. A query whose pairs are mostly [UNK] has ``"warning"`` in each entry.

    Raises:
        InputError: a query or passage that is no string, no passages, bad options, an activation the model names
            that bertfn does not apply, a prompt_name its folder does not have, both prompt and prompt_name (an empty
            or blank query or passage is scored, as CrossEncoder scores it).
        MissingPartError: a model without a tokenizer, or that is no cross-encoder (another head, or several outputs).

    Warns:
        UserWarning: pairs cut to fit the model.
        UnknownTokensWarning: queries whose pairs are mostly [UNK].
    """
    if isinstance(query, Mapping) or isinstance(query, (list, tuple)) and query and isinstance(query[0], Mapping):
        if passages is not None and model is not None:
            raise InputError("rerank of dicts takes the model second: "
                             "rerank([{'query': ..., 'passages': [...]}], model)")
        passages, model = None, model if passages is None else passages
    items, single = queries_and_passages(query, passages)
    count("top_k", top_k, none="all passages")
    flag("return_documents", return_documents)
    flag("sort", sort)
    one_of("activation", activation, ACTIVATIONS, none="the model's own")
    count("batch_size", batch_size)

    m, _, points = loaded(TASK, model, device, dtype, edits, head="sequence-classification")
    if m.config.num_labels != 1:
        raise MissingPartError(f"rerank needs a cross-encoder, a sequence classifier with one output (a relevance "
                               f"score), and {fits(m)}; with an NLI model, "
                               f"{syntax(python='bertfn.zero_shot', cli='bertfn zero-shot')} scores labels")
    act = ACTIVATIONS[activation or model_activation(m)]

    before = chosen_prompt(m.sentence_folder, prompt, prompt_name)  # before each pair's first text, as CrossEncoder
    firsts = [before + q for q, ps in items for _ in ps]
    seconds = [p for _, ps in items for p in ps]
    owners = [i for i, (_, ps) in enumerate(items) for _ in ps]
    start = [0]
    for _, ps in items:
        start.append(start[-1] + len(ps))
    logits, unknown = pair_logits(m, firsts, seconds, owners, truncation="longest_first", batch_size=batch_size,
                                  points=points, named=lambda p: f"passage {p - start[owners[p]]}")
    scores = act(logits[:, 0]).tolist()  # (pairs,)
    results = []
    for i, (_, ps) in enumerate(items):
        mine = scores[start[i]:start[i + 1]]
        if not sort:
            results.append(mine)
            continue
        ranking = [{"corpus_id": j, "score": s, **({"text": ps[j]} if return_documents else {})}
                   for j, s in enumerate(mine)]
        results.append(sorted(ranking, key=lambda r: r["score"], reverse=True)[:top_k])  # stable: ties keep their order
    return finished(results, unknown, single)


TASK = Task("rerank", rerank, probe={"query": "a", "passages": ["a"]}, inputs=("query", "passages"), fast=True, model=None)
"""The task (:mod:`bertfn.tasks.task`) :func:`rerank` is: ``bertfn rerank``, the corpus's ``Rerank``."""
