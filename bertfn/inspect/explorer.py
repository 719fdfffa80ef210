"""The explorer: a traced forward pass as one self-contained HTML page.

    rec = bertfn.trace("When in Rome, do as the [MASK] do.", model)
    rec.save_html("view.html")          # or rec.to_html(); in Jupyter, displaying rec shows it
    bertfn view "When in Rome, do as the [MASK] do." --out view.html

The page has three views of the attention and two panels beside them:

* head view: the tokens in two columns, queries left and keys right, joined by lines as strong as
  the attention; pick a layer and a head (or the mean of the heads), hover a token to see only its lines,
  click it to keep them so; it opens on the first ``[MASK]``, with a strip of the whole text beside it;
* model view: every layer x head as a small map, each on its own colour scale (as :mod:`bertfn.inspect.plots`
  draws by default; a switch sets one scale for all, or fixed 0..1); click one to open it large;
* neuron view: for one query token, its query vector, every key vector, their elementwise product,
  the sum (``q.k``), the scaled score and the softmax, per head: the arithmetic of one row of attention;
* the MLM head's predictions at each ``[MASK]``, with probabilities;
* a per-layer strip for the chosen token: the entropy of its attention in each head, the norm of its
  hidden state, and the words the MLM head would predict from that layer's output (the "logit lens").

Every number is computed here, by bertfn's own functions, or read from the trace; the page's script
draws them and redoes only the neuron view's ``q.k`` from the stored vectors, to show the arithmetic.
Nothing is fetched at view time: script and style are inline (read from ``bertfn/inspect/explorer_page/``), and
the numbers sit in the file as one zlib-compressed base64 block that the browser's own
``DecompressionStream`` unpacks. Each view can be saved as SVG or PNG from the page.

What is stored, and how precisely (S tokens, L layers, nh heads of width hd, k predictions):

==================================  ==============  ====================================================
what                                shape           stored as
==================================  ==============  ====================================================
attention probabilities             (L, nh, S, S)   uint8 ``round(255 sqrt(p))``, read back as ``(c / 255)^2``:
                                                    off by at most ``sqrt(p) / 255 + 1 / 510^2`` (0.004 at
                                                    p = 1, 0.0004 at p = 0.01); only entries below
                                                    ``1 / 510^2`` (3.8e-6) read as 0, at most 0.2% of a
                                                    row's mass at 512 tokens
queries and keys, split into heads  (L, nh, S, hd)  int8 times one float32 scale per vector
                                                    (``max|x| / 127``): off by at most 1/254 of the
                                                    vector's largest entry
attention entropy ``-sum p ln p``   (L, nh, S)      float32, from the full-precision probabilities
hidden-state norms                  (L + 1, S)      float32 (embeddings' output, then each layer's)
MLM head on each layer's output     (L + 1, S, k)   top-k token ids (int32) and probabilities (float32),
                                                    the head run in bf16 (fill_mask's bf16 mode): the
                                                    probabilities within 0.03 of fp32's (AntiBERTy, 68
                                                    tokens: 0.024 at most, the same top-1 everywhere)
MLM predictions at each [MASK]      (N, k)          as :func:`~bertfn.tasks.fill_mask.fill_mask` computes them
==================================  ==============  ====================================================

Why square roots: at S tokens a head that spreads its attention evenly gives each key 1/S, and
``round(255 p)`` would store every such entry as 0 (at 500 tokens up to half a row's mass vanished on
real MiniLM). The square root keeps 8 bits but spends them where the small probabilities are:
``tests/test_explorer.py`` checks on real MiniLM weights and a 510-token text that no row loses more
than 1% of its mass (0.03% at most). The price is size: a diffuse row's codes are no longer mostly
zeros, so zlib shrinks them to 3-5 bits, not 1-2: at 512 tokens on bert-base's shape the page is up to
45 MB (bench/README.md).
"""

from __future__ import annotations

import base64
import html
import json
import re
import zlib
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..errors import InputError
from ..model.heads import mlm_head
from ..model.params import Params

if TYPE_CHECKING:  # for the annotations only: trace.py imports this module (Recording.to_html), not the reverse
    from .trace import Recording

Tensor = torch.Tensor

PAGE_FILES = ("page.html", "explorer.css", "explorer.js")
"""The page's template, style and script, shipped in ``bertfn/inspect/explorer_page/``."""

_CHUNK = 128  # rows per mlm_head call in the per-layer predictions: a (128, V) block of logits at a time

PAGE_READS = re.compile(r"embeddings\.output|layer\.\d+\.(attention\.(q|k|probs)|output)|mlm\.logits")
"""The recorded names the page reads; ``bertfn view`` traces with ``keep=PAGE_READS.fullmatch`` and so
never holds the rest (at 512 tokens on bert-base's shape, the scores alone are 450 MB)."""


def _numpy(x: Tensor) -> np.ndarray:
    return x.detach().to("cpu", torch.float32).numpy()


def _quantise_vectors(x: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(..., hd) floats -> int8 codes (..., hd) and one float32 scale per vector (...,): x ~ code * scale."""
    x = x.detach().to("cpu", torch.float32)
    scale = x.abs().amax(dim=-1) / 127  # (...,)
    codes = torch.round(x / scale.clamp_min(torch.finfo(torch.float32).tiny)[..., None])
    return codes.to(torch.int8).numpy(), scale.numpy()


def _quantise_probs(p: Tensor) -> np.ndarray:
    """Probabilities in [0, 1] -> uint8 codes ``round(255 sqrt(p))``, any shape; the page reads ``(c / 255)^2``."""
    return torch.round(p.sqrt() * 255).to(torch.uint8).numpy()


def _entropy(p: Tensor) -> Tensor:
    """-sum_j p_j ln p_j over the last axis, in nats (0 for one key, ln S for all S alike)."""
    return -(p * torch.log(p.clamp_min(1e-12))).sum(dim=-1)


def _top_k(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Softmax over the vocabulary, then the k best: (probabilities, ids), each (..., k)."""
    return logits.float().softmax(dim=-1).topk(min(k, logits.shape[-1]), dim=-1)


def _layer_predictions(rec: Recording, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The MLM head applied to the embeddings' output and to each layer's output, at every position.

    Returns top-k ids (L + 1, S, k) int32 and probabilities (L + 1, S, k) float32. The last row at a
    [MASK] is the model's own prediction there (as fill_mask's bf16 mode gives it). The head runs in
    bf16, on a bf16 copy of its weights: (L + 1) x S products with the (V, H) decoder are most of the
    page's cost, and bf16 takes a third of fp32's time on a CPU with AVX-512-bf16.
    """
    L = rec.config.num_hidden_layers
    state = rec.model.state
    params = Params({name: state[name].to(torch.bfloat16) for name in state if name.startswith("cls.predictions.")},
                    rec.config)
    ids, probs = [], []
    with torch.inference_mode():
        for name in ["embeddings.output"] + [f"layer.{i}.output" for i in range(L)]:
            h = rec[name][0].to(torch.bfloat16)  # (S, H)
            top = [_top_k(mlm_head(params, h[s:s + _CHUNK]), k) for s in range(0, h.shape[0], _CHUNK)]
            probs.append(torch.cat([p for p, _ in top]))  # (S, k)
            ids.append(torch.cat([i for _, i in top]))
    return (torch.stack(ids).to(torch.int32).cpu().numpy(), torch.stack(probs).float().cpu().numpy())


def page_data(rec: Recording, top_k: int = 5) -> tuple[dict, dict[str, np.ndarray]]:
    """What the page shows: a JSON-able ``meta`` dict and the named arrays of the table in the module docstring.

    The MLM predictions and the per-layer predictions need the model's MLM head (``rec.model``, as
    :func:`bertfn.trace` sets it); without one the page says why they are missing.
    """
    if not all(hasattr(rec, part) for part in ("tokens", "tensors", "mask_positions", "config")):
        raise InputError(f"the explorer draws a Recording from bertfn.trace(text, model), got {type(rec).__name__}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise InputError(f"top_k must be an integer of at least 1, got {top_k!r}")
    cfg = rec.config
    L, nh, hd = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.head_dim
    S = len(rec.tokens)
    arrays = {"attention": np.empty((L, nh, S, S), np.uint8), "entropy": np.empty((L, nh, S), np.float32)}
    for i in range(L):  # a layer at a time: at 512 tokens the (L, nh, S, S) floats would be 150 MB a copy
        probs = rec.attention(i).detach().to("cpu", torch.float32)  # (nh, S, S)
        arrays["attention"][i], arrays["entropy"][i] = _quantise_probs(probs), _entropy(probs).numpy()
    for name in ("q", "k"):
        codes, scale = _quantise_vectors(torch.stack([rec[f"layer.{i}.attention.{name}"][0] for i in range(L)]))
        arrays[name], arrays[f"{name}_scale"] = codes, scale  # (L, nh, S, hd), (L, nh, S)
    hidden = [rec["embeddings.output"]] + [rec[f"layer.{i}.output"] for i in range(L)]
    arrays["norms"] = np.stack([_numpy(torch.linalg.vector_norm(h[0].float(), dim=-1)) for h in hidden])  # (L+1, S)

    model = rec.model
    tok = model.tokenizer if model is not None else None
    spell = (lambda i: tok.id_to_token(i) or f"[{i}]") if tok else (lambda i: f"[{i}]")
    predictions, missing, vocab = None, None, {}
    if model is None:
        missing = "this recording carries no model (make it with bertfn.trace), so there are no word predictions"
    elif "cls.predictions.decoder.weight" not in model.state:
        missing = ("the model has no masked-LM head (cls.predictions.*), so there are no word predictions; "
                   "trace a *ForMaskedLM or *ForPreTraining checkpoint to see them")
    else:
        arrays["lens_ids"], arrays["lens_probs"] = _layer_predictions(rec, top_k)
        vocab = {str(i): spell(i) for i in np.unique(arrays["lens_ids"]).tolist()}
        if "mlm.logits" in rec:
            p, ids = _top_k(rec["mlm.logits"], top_k)  # (N, k) each
            show = (lambda i: tok.decode([i])) if tok else spell  # as fill_mask's token_str
            predictions = [{"position": pos, "top": [[show(i), float(q)] for i, q in zip(ids[n].tolist(), p[n].tolist())]}
                           for n, pos in enumerate(rec.mask_positions)]
        else:
            predictions = []  # no [MASK] in the text
    text = tok.decode(rec.input_ids[0].tolist(), skip_special_tokens=True) if tok else " ".join(rec.tokens)
    meta = {
        "format": 1,
        "model": _label(model.name) if model is not None else "",
        "text": text,
        "tokens": list(rec.tokens),
        "S": S, "L": L, "nh": nh, "hd": hd,
        "causal": bool(cfg.is_decoder),
        "relative": cfg.position_embedding_type != "absolute",
        "masks": list(rec.mask_positions),
        "predictions": predictions,
        "no_predictions": missing,
        "top_k": top_k,
        "vocab": vocab,
    }
    return meta, {name: np.ascontiguousarray(a) for name, a in arrays.items()}


def _label(name: str) -> str:
    """A model's name for the page: a hub id as it is, a local path by its last two folders (not the whole disk layout)."""
    path = Path(name)
    return "/".join(path.parts[-2:]) if path.is_absolute() or path.exists() else name


def _pack(arrays: dict[str, np.ndarray]) -> tuple[dict, bytes]:
    """One zlib-compressed, base64 block (ASCII bytes) of little-endian arrays, each 4-byte aligned, and
    where each one sits. Empties ``arrays`` as it goes, so each array is freed once compressed."""
    index, offset = {}, 0
    z = zlib.compressobj(3)  # level 3: at 512 tokens on bert-base's shape a quarter of level 6's time, 3% larger
    packed = bytearray()
    for name in list(arrays):
        a = arrays.pop(name)
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        index[name] = {"dtype": a.dtype.name, "shape": list(a.shape), "offset": offset}
        pad = -a.nbytes % 4
        packed += z.compress(a.reshape(-1).view(np.uint8)) + z.compress(b"\0" * pad)
        offset += a.nbytes + pad
    packed += z.flush()
    return index, base64.b64encode(packed)


def _script_json(value: object) -> str:
    """ASCII JSON safe inside a <script> element: no '<' can close it early."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


def _ascii_script(code: str) -> str:
    """The page's script with its few non-ASCII characters (in strings and comments) written as \\u escapes,
    so the page reads the same in a host page of any encoding (a notebook's iframe srcdoc)."""
    return re.sub(r"[^\x00-\x7f]", lambda m: f"\\u{{{ord(m[0]):x}}}", code)


def _pieces(rec: Recording, top_k: int, title: str | None) -> list[str | bytes]:
    """The page's template with its parts put in, as pieces (the data block as ASCII bytes, the rest as
    ASCII strings), so :func:`save_html` can write them without joining a copy of the whole page."""
    meta, arrays = page_data(rec, top_k)
    meta["arrays"], blob = _pack(arrays)
    meta["title"] = title or meta["text"] or "bertfn explorer"
    page = resources.files("bertfn.inspect") / "explorer_page"
    parts = {
        "TITLE": html.escape(f"bertfn explorer: {meta['title']}"[:200]).encode("ascii", "xmlcharrefreplace").decode(),
        "CSS": (page / "explorer.css").read_text(encoding="utf-8"),
        "META": _script_json(meta),
        "DATA": blob,
        "JS": _ascii_script((page / "explorer.js").read_text(encoding="utf-8")),
    }
    # one pass over the template, so text put in is never scanned for markers again; the result is ASCII
    template = re.split(r"__BERTFN_(\w+)__", (page / "page.html").read_text(encoding="utf-8"))
    return [parts[piece] if n % 2 else piece for n, piece in enumerate(template)]


def to_html(rec: Recording, *, top_k: int = 5, title: str | None = None) -> str:
    """The explorer page for ``rec`` as one HTML document (a string); nothing in it is fetched at view time."""
    return "".join(p.decode("ascii") if isinstance(p, bytes) else p for p in _pieces(rec, top_k, title))


def save_html(rec: Recording, path: str | Path, *, top_k: int = 5, title: str | None = None) -> Path:
    """Write the explorer page for ``rec`` to ``path`` (the bytes of :func:`to_html`, piece by piece) and return it."""
    path = Path(path)
    pieces = _pieces(rec, top_k, title)
    try:
        with path.open("wb") as f:
            for p in pieces:
                f.write(p if isinstance(p, bytes) else p.encode("ascii"))
    except OSError as e:
        raise InputError(f"cannot write {path} ({e.strerror or e}); pass a writable .html path") from e
    return path


def notebook_html(rec: Recording, height: int = 860) -> str:
    """The page inside an ``<iframe srcdoc>``, so its script and style keep to themselves in a notebook."""
    doc = html.escape(to_html(rec), quote=True)
    return (f'<iframe srcdoc="{doc}" title="bertfn explorer" style="width:100%;height:{height}px;border:1px solid #ddd" '
            'sandbox="allow-scripts allow-downloads"></iframe>')
