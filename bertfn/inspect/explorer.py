"""The explorer: a traced forward pass as one self-contained HTML page.

    rec = bertfn.trace("When in Rome, do as the [MASK] do.", model)
    rec.save_html("view.html")          # or rec.to_html(); in Jupyter, displaying rec shows it
    bertfn view "When in Rome, do as the [MASK] do." --out view.html

The page has three views of the attention and two panels beside them:

* head view: the tokens in two columns, queries left and keys right, joined by lines as strong as
  the attention; pick a layer and a head (or the mean of the heads), hover a token to see only its lines,
  click it to keep them so; it opens on the first ``[MASK]``, with a strip of the whole text beside it;
* model view: every layer x head as a small map; click one to open it large. Colour is log p by default
  (white at a thousandth of the scale's top), so a diffuse head over hundreds of tokens still shows its
  structure; sqrt p and linear p are the other curves. The scale's top is each map's own largest value by
  default (as :mod:`bertfn.inspect.plots` draws), or each row's, one for all maps, or fixed 0..1;
* neuron view: for one query token, its query vector, every key vector, their elementwise product,
  the sum (``q.k``), the scaled score and the softmax, per head: the arithmetic of one row of attention;
* the MLM head's predictions at each ``[MASK]``, with probabilities;
* for a checkpoint with a task head (or ESM-2's contact head), the decision panel when one is given
  (:mod:`bertfn.inspect.decision_panel`, made by :func:`bertfn.interventions.decision`; ``bertfn view`` makes it):
  the prediction, the tokens shaded by their integrated-gradients attribution to one label at a time (a diverging
  scale), each head's direct part of that label's logit as a layer x head grid, and ESM-2's contact map;
* a per-layer strip for the chosen token: the entropy of its attention in each head, the norm of its
  hidden state, and the words the MLM head would predict from that layer's output (the "logit lens";
  in a pre-LN member, ESM-2 or ModernBERT, from that output after the final LayerNorm, as the model reads
  its last layer's).

A layer that attends within a window (ModernBERT's local layers: ``meta["windows"]``,
:func:`~bertfn.inspect.page_arrays.layer_windows`) is labelled "local (window W)", the others "global"; its
maps draw the keys out of the window's reach in hatched grey, not as white (a probability of 0 the model
computed), and the neuron view masks those keys as the model does. In a member with rotary positions the
neuron view's q and k are the turned vectors, whose products are the scores.

Every number is computed here, by bertfn's own functions, or read from the trace; the page's script
draws them and redoes only the neuron view's ``q.k`` from the stored vectors, to show the arithmetic.
Nothing is fetched at view time: script and style are inline (read from ``bertfn/inspect/explorer_page/``), and
the numbers sit in the file as one zlib-compressed base64 block that the browser's own
``DecompressionStream`` unpacks. Each view can be saved as SVG or PNG from the page.

What is stored, and how precisely, is :mod:`bertfn.inspect.page_arrays`'s table: attention as square-root
codes of 127 levels (no row loses more than 0.8% of its mass at 512 tokens), queries and
keys as 8-bit codes with a scale per vector, the per-layer predictions from the MLM head in bf16.
The data block is one zlib stream (Huffman codes and runs only, ``Z_RLE``: to string matching the codes
are noise, which took most of the time and made the file larger), written to the file in pieces as it
is compressed. At 512 tokens on bert-base's shape the page is up to 36 MB (bench/README.md).
"""

from __future__ import annotations

import base64
import html
import json
import re
import zlib
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..checkpoint.tokenizer_files import other_spelling
from ..errors import InputError, require_folder, syntax
from ..fast.kernels import made_from, versioned
from ..model.config import BertConfig
from ..model.family import family_of
from .decision_panel import Decision
from .page_arrays import LEVELS, PageArrays, layer_windows, score_vectors, top_k as _top_k


class Recording(Protocol):
    """What the page is drawn from: a :class:`bertfn.inspect.trace.Recording` (``bertfn.trace(text, model)``).

    Or anything with its fields. Named here, not imported: trace.py imports this module
    (``Recording.to_html``), and the house has no cycles (tests/test_layout.py).

    Attributes:
        tokens: S tokens.
        input_ids: (1, S).
        mask_positions: the positions of the [MASK]s.
        tensors: name -> tensor, or a PageArrays store.
        config: the traced model's config.
        model: the Model traced, whose MLM head gives the predictions; None without one.
    """

    tokens: list[str]  # S tokens
    input_ids: Any  # (1, S)
    mask_positions: list[int]
    tensors: Mapping[str, Any]  # name -> tensor, or a PageArrays store
    config: BertConfig
    model: Any  # the Model traced, whose MLM head gives the predictions; None without one

PAGE_FILES = ("page.html", "explorer.css", "explorer.js")
"""The page's template, style and script, shipped in ``bertfn/inspect/explorer_page/``."""


def page_data(rec: Recording, top_k: int = 5, decision: Decision | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """What the page shows: a JSON-able ``meta`` dict and the named arrays of :mod:`bertfn.inspect.page_arrays`.

    The MLM predictions and the per-layer predictions need the model's MLM head (``rec.model``, as
    :func:`bertfn.trace` sets it); without one the page says why they are missing.

    Args:
        rec: the recording.
        top_k: predictions per position. A recording traced into a :class:`PageArrays` store (as
            ``bertfn view`` does) already holds the arrays, for its own top_k.
        decision: the decision panel's numbers (:func:`bertfn.interventions.decision` on the same text and model),
            or None for no panel: ``meta["decision"]`` and the arrays ``decision_*``
            (:mod:`bertfn.inspect.decision_panel`).

    Returns:
        meta: what the page's script reads: tokens, sizes, predictions, vocabulary, ...
        arrays: the named arrays.

    Raises:
        InputError: not a recording, a PageArrays store made for another ``top_k``, or a decision panel that is
            not one or was made for another text or model.
    """
    if decision is not None and not isinstance(decision, Decision):
        raise InputError(f"decision must be what bertfn.interventions.decision(text, model) returns, or None; got "
                         f"{type(decision).__name__}")
    if not all(hasattr(rec, part) for part in ("tokens", "tensors", "mask_positions", "config")):
        raise InputError(f"the explorer draws a Recording from bertfn.trace(text, model), got {type(rec).__name__}")
    changed = False
    if isinstance(rec.tensors, PageArrays):  # made as it was traced
        store = rec.tensors
        if top_k != store.top_k:
            raise InputError(f"this recording was traced into a PageArrays store for top_k={store.top_k}, not {top_k}; "
                             f"ask for top_k={store.top_k}, or trace again")
    else:  # its model's head as it is now makes the per-layer predictions: only if its weights are as traced
        changed = rec.model is not None and getattr(rec, "weights", None) is not None and \
            not made_from(rec.weights, versioned(rec.model.state))
        store = PageArrays(rec.config, None if changed else rec.model, top_k)
        for name, x in rec.tensors.items():
            store[name] = x
    arrays = dict(store.done())
    cfg = rec.config
    model = rec.model
    tok = model.tokenizer if model is not None else None
    spell = (lambda i: tok.id_to_token(i) or f"[{i}]") if tok else (lambda i: f"[{i}]")
    predictions, missing, vocab = None, None, {}
    if model is None:
        missing = "this recording carries no model (make it with bertfn.trace), so there are no word predictions"
    elif not store.lens and changed:
        missing = ("the model's weights changed since this recording was traced (in place, or replaced), so its MLM "
                   "head would not say what the traced model said: trace the text again to see the predictions")
    elif not store.lens:
        missing = ("the model has no masked-LM head (cls.predictions.*), so there are no word predictions; "
                   "trace a *ForMaskedLM or *ForPreTraining checkpoint to see them")
    else:
        vocab = {str(i): spell(i) for i in np.unique(arrays["lens_ids"]).tolist()}
        if "mlm.logits" in rec:
            p, ids = _top_k(rec["mlm.logits"], top_k)  # (N, k) each
            show = (lambda i: tok.decode([i])) if tok else spell  # as fill_mask's token_str
            predictions = [{"position": pos, "top": [[show(i), float(q)] for i, q in zip(ids[n].tolist(), p[n].tolist())]}
                           for n, pos in enumerate(rec.mask_positions)]
        else:
            predictions = []  # no [MASK] in the text
    text = _text(tok, rec.input_ids[0].tolist()) if tok else " ".join(rec.tokens)
    if predictions == [] and tok.mask_token:  # the page's note: the other spelling typed, whose it is
        missing = other_spelling(tok.mask_token, text) or None
    meta = {
        "format": 1,
        "levels": LEVELS,
        "model": _label(model.name) if model is not None else "",
        "text": text,
        "tokens": list(rec.tokens),
        "S": len(rec.tokens), "L": cfg.num_hidden_layers, "nh": cfg.num_attention_heads, "hd": cfg.head_dim,
        "causal": bool(cfg.is_decoder),
        "relative": cfg.relative_positions,
        "rotary": "q_rotated" in score_vectors(cfg),
        "windows": layer_windows(cfg),
        "final_norm": family_of(cfg).final_norm is not None,
        "mask_token": tok.mask_token if tok and tok.mask_token else "[MASK]",
        "masks": list(rec.mask_positions),
        "predictions": predictions,
        "no_predictions": missing,
        "top_k": arrays["lens_ids"].shape[-1] if "lens_ids" in arrays else top_k,  # at most the vocabulary's size
        "vocab": vocab,
        "decision": None if decision is None else decision.meta,
    }
    if decision is not None:
        decision.check(len(rec.tokens), cfg.num_hidden_layers, cfg.num_attention_heads)
        arrays.update({f"decision_{name}": a for name, a in decision.arrays.items()})
    return meta, arrays


def _text(tok, ids: list[int]) -> str:
    """The text as the model read it, for the page's header and title: its [MASK]s, [UNK]s and the [SEP] between
    a pair's segments kept (skipping every special token dropped the masks the page is about), the [CLS] and the
    closing [SEP] of the template left out.

    Args:
        tok: the model's tokenizer.
        ids: the text's token ids, [CLS] ... [SEP].
    """
    start = 1 if ids[:1] == [tok.cls_token_id] else 0
    end = len(ids) - 1 if len(ids) > start and ids[-1] == tok.sep_token_id else len(ids)
    return tok.decode(ids[start:end])


def _label(name: str) -> str:
    """A model's name for the page: a hub id as it is, a local path by its last two folders (not the whole disk layout).

    Args:
        name: the model's name.
    """
    path = Path(name)
    return "/".join(path.parts[-2:]) if path.is_absolute() or path.exists() else name


def _layout(arrays: dict[str, np.ndarray]) -> dict:
    """Where each array sits in the uncompressed data block: little-endian, one after another, each 4-byte aligned.

    Args:
        arrays: the named arrays, in order.
    """
    index, offset = {}, 0
    for name, a in arrays.items():
        index[name] = {"dtype": a.dtype.name, "shape": list(a.shape), "offset": offset}
        offset += a.nbytes + (-a.nbytes % 4)
    return index


_SLICE = 1 << 22  # bytes handed to zlib at a time


def _data_block(arrays: dict[str, np.ndarray]) -> Iterator[bytes]:
    """The arrays in :func:`_layout`'s order as one zlib stream, base64-encoded, in pieces (ASCII bytes).

    Yielded as it is compressed: the whole block is never in memory. zlib runs at level 1 with ``Z_RLE``
    (Huffman codes plus runs of one repeated byte, no string matching): the attention codes of diffuse rows are
    noise to string matching, so the default strategy spends several times the time for a larger result
    (bench/explorer.py).

    Args:
        arrays: the named arrays; emptied, each array freed once compressed.
    """
    z = zlib.compressobj(1, zlib.DEFLATED, 15, 8, zlib.Z_RLE)
    carry = b""
    for name in list(arrays):
        a = arrays.pop(name)
        raw = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).reshape(-1).view(np.uint8)
        del a
        for start in range(0, len(raw), _SLICE):
            carry += z.compress(raw[start:start + _SLICE])
            cut = len(carry) - len(carry) % 3  # base64 turns each 3 bytes into 4 characters: pieces join seamlessly
            if cut:
                yield base64.b64encode(carry[:cut])
                carry = carry[cut:]
        carry += z.compress(b"\0" * (-len(raw) % 4))
    yield base64.b64encode(carry + z.flush())


def _script_json(value: object) -> str:
    """ASCII JSON safe inside a <script> element: no '<' can close it early.

    Args:
        value: a JSON-able value.
    """
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


def _ascii_script(code: str) -> str:
    r"""The page's script with its few non-ASCII characters (in strings and comments) written as \u escapes.

    So the page reads the same in a host page of any encoding (a notebook's iframe srcdoc).

    Args:
        code: the script.
    """
    return re.sub(r"[^\x00-\x7f]", lambda m: f"\\u{{{ord(m[0]):x}}}", code)


def _pieces(rec: Recording, top_k: int, title: str | None, decision: Decision | None = None) -> list[str | Iterator[bytes]]:
    """The page's template with its parts put in, as pieces.

    ASCII strings, and the data block as an iterator of ASCII bytes (:func:`_data_block`), so
    :func:`save_html` writes it as it is compressed.

    Args:
        rec: the recording.
        top_k: predictions per position.
        title: the page's title, or None for the text.
        decision: the decision panel's numbers, or None.
    """
    meta, arrays = page_data(rec, top_k, decision)
    meta["arrays"] = _layout(arrays)
    meta["title"] = title or meta["text"] or "bertfn explorer"
    page = resources.files("bertfn.inspect") / "explorer_page"
    parts = {
        "TITLE": html.escape(f"bertfn explorer: {meta['title']}"[:200]).encode("ascii", "xmlcharrefreplace").decode(),
        "CSS": (page / "explorer.css").read_text(encoding="utf-8"),
        "META": _script_json(meta),
        "DATA": _data_block(arrays),
        "JS": _ascii_script((page / "explorer.js").read_text(encoding="utf-8")),
    }
    # one pass over the template, so text put in is never scanned for markers again; the result is ASCII
    template = re.split(r"__BERTFN_(\w+)__", (page / "page.html").read_text(encoding="utf-8"))
    return [parts[piece] if n % 2 else piece for n, piece in enumerate(template)]


def to_html(rec: Recording, *, top_k: int = 5, title: str | None = None, decision: Decision | None = None) -> str:
    """The explorer page for ``rec`` as one HTML document (a string); nothing in it is fetched at view time.

    Args:
        rec: the recording.
        top_k: predictions per position.
        title: the page's title, or None for the text.
        decision: the decision panel (:func:`bertfn.interventions.decision`), or None for none.
    """
    return "".join(p if isinstance(p, str) else b"".join(p).decode("ascii") for p in _pieces(rec, top_k, title, decision))


def save_html(rec: Recording, path: str | Path, *, top_k: int = 5, title: str | None = None,
              decision: Decision | None = None) -> Path:
    """Write the explorer page for ``rec`` to ``path``: the bytes of :func:`to_html`, the data block as compressed.

    Args:
        rec: the recording.
        path: the HTML file.
        top_k: predictions per position.
        title: the page's title, or None for the text.
        decision: the decision panel (:func:`bertfn.interventions.decision`), or None for none.

    Returns:
        ``path``, as a Path.

    Raises:
        InputError: the file cannot be written.
    """
    path = Path(path)
    require_folder(path, syntax(python="path", cli="--out"))  # before the page is made
    pieces = _pieces(rec, top_k, title, decision)
    try:
        with path.open("wb") as f:
            for p in pieces:
                if isinstance(p, str):
                    f.write(p.encode("ascii"))
                else:
                    for chunk in p:
                        f.write(chunk)
    except OSError as e:
        raise InputError(f"cannot write {path} ({e.strerror or e}); pass a writable .html path") from e
    return path


def notebook_html(rec: Recording, height: int = 860, decision: Decision | None = None) -> str:
    """The page inside an ``<iframe srcdoc>``, so its script and style keep to themselves in a notebook.

    Args:
        rec: the recording.
        height: the frame's height in pixels.
        decision: the decision panel, or None.
    """
    doc = html.escape(to_html(rec, decision=decision), quote=True)
    return (f'<iframe srcdoc="{doc}" title="bertfn explorer" style="width:100%;height:{height}px;border:1px solid #ddd" '
            'sandbox="allow-scripts allow-downloads"></iframe>')
