"""The explorer's numbers: what the page stores of a traced pass, and how precisely.

:class:`PageArrays` turns the recorded tensors the page reads into the arrays it stores. It is also a
trace's store: ``bertfn.trace(text, model, store=PageArrays(model.config, model))`` hands it each
tensor as the pass computes it, and it keeps the stored form instead (a layer's probabilities become
8-bit codes and entropies before the next layer runs), so a 512-token page on bert-base's shape
never holds the 150 MB of fp32 probabilities, nor anything else of the trace (``bertfn view`` runs this way).

What is stored, and how precisely (S tokens, L layers, nh heads of width hd, k predictions):

==================================  ==============  ====================================================
what                                shape           stored as
==================================  ==============  ====================================================
attention probabilities             (L, nh, S, S)   uint8 ``round(127 sqrt(p))`` (:data:`LEVELS`), read back as
                                                    ``(c / 127)^2``: off by at most ``sqrt(p) / 127 +
                                                    1 / 254^2`` (0.008 at p = 1, 0.0008 at p = 0.01);
                                                    only entries below ``1 / 254^2`` (1.6e-5) read as 0,
                                                    at most 0.8% of a row's mass at 512 tokens
queries and keys, split into heads  (L, nh, S, hd)  int8 times one float32 scale per vector
                                                    (``max|x| / 127``): off by at most 1/254 of the
                                                    vector's largest entry; in a member with rotary
                                                    positions (ESM-2, ModernBERT) the turned ones
                                                    (``q_rotated``, ``k_rotated``), whose products
                                                    are the scores
attention entropy ``-sum p ln p``   (L, nh, S)      float32, from the full-precision probabilities
hidden-state norms                  (L + 1, S)      float32 (embeddings' output, then each layer's)
MLM head on each layer's output     (L + 1, S, k)   top-k token ids (int32) and probabilities (float32),
                                                    after the final LayerNorm in a pre-LN member (ESM-2,
                                                    ModernBERT: as the model does before its head), the
                                                    head run in bf16 on the fast path's kernels
                                                    (fill_mask's bf16 mode): the probabilities within
                                                    0.03 of fp32's (AntiBERTy, 68 tokens: 0.023 at most,
                                                    the same top-1 everywhere); in fp32 on a CPU
                                                    without fast bf16 (:func:`lens_dtype`)
MLM predictions at each [MASK]      (N, k)          kept as ``mlm.logits``; the page's meta holds what
                                                    :func:`~bertfn.tasks.fill_mask.fill_mask` would say
==================================  ==============  ====================================================

The page's meta says which layers attend within a window (:func:`layer_windows`: ModernBERT's local layers),
so that the page draws what lies outside it as out of reach rather than as attention that happens to be 0.

Why square roots: at S tokens a head that spreads its attention evenly gives each key 1/S, and
``round(255 p)`` would store every such entry as 0 (at 500 tokens up to half a row's mass vanished on
real MiniLM). The square root spends the codes where the small probabilities are:
``tests/test_explorer.py`` checks on real MiniLM weights and a 510-token text that no row loses more
than 1% of its mass. Why 127 levels and not 255: the codes are most of the file, and at 512 tokens on
bert-base's shape 255 levels made the page 29.0 MB, 127 make it 24.3 MB (the 25 MB bound of issue 25),
while every row still keeps 99.2% of its mass at 512 tokens (the bound: S / 254^2).
"""

from __future__ import annotations

import re

import numpy as np
import torch

from ..checkpoint.checks import count
from ..errors import InputError
from ..fast.kernels import ONEDNN_DTYPES, packed
from ..model.config import BertConfig
from ..model.family import family_of
from ..model.heads import mlm_head
from ..model.members.modernbert import window_mask
from ..model.params import Params
from ..model.point_names import layer_input, point_names

Tensor = torch.Tensor

READS = re.compile(r"embeddings\.(output|projected)|layer\.(\d+)\.(attention\.(q|k|q_rotated|k_rotated|probs)|output)"
                   r"|mlm\.logits")
"""The recorded names the page reads (group 2: the layer; group 4: q, k, q_rotated, k_rotated or probs). Of the
embeddings' points it keeps the one that is layer 0's input (:func:`~bertfn.model.point_names.layer_input`), of the
queries and keys those whose products are the scores (:func:`score_vectors`)."""

_CHUNK_BYTES = 18 << 20
"""The per-layer predictions run the MLM head on as many positions at a time as keep that chunk's bf16 logits
and float32 probabilities (6 bytes a word of the vocabulary) within this many bytes, in multiples of 16: 96
positions on bert-base's vocabulary: a chunk that fits a CPU's last-level cache stays there from the product to the
top-k, instead of going out to memory and back."""


HEAD = tuple(f"cls.predictions.{n}" for n in ("transform.dense.weight", "transform.dense.bias", "transform.LayerNorm.weight",
                                                "transform.LayerNorm.bias", "decoder.weight", "bias"))
"""The weights :func:`~bertfn.model.heads.mlm_head` reads, by BERT's names (those the checkpoint holds:
ModernBERT's head has no biases but the decoder's)."""


def lens_dtype(device: torch.device) -> torch.dtype:
    """The dtype the per-layer predictions run the MLM head in: bf16, which takes a third of fp32's time on a CPU
    with AVX-512-bf16, wherever it is fast (an accelerator, a CPU whose oneDNN makes bf16 products:
    :data:`~bertfn.fast.kernels.ONEDNN_DTYPES`); fp32 on a CPU without (AVX2 alone), where a bf16 product is an fp32 one
    with its inputs widened first (:func:`~bertfn.fast.kernels.widened_linear`): slower than fp32 itself.

    Args:
        device: where the head's weights are.
    """
    return torch.bfloat16 if device.type != "cpu" or torch.bfloat16 in ONEDNN_DTYPES else torch.float32


def _chunk_rows(vocab_size: int) -> int:
    """Positions per call of the MLM head in the per-layer predictions (:data:`_CHUNK_BYTES`).

    Args:
        vocab_size: V.
    """
    return max(16, _CHUNK_BYTES // (6 * vocab_size) // 16 * 16)


def score_vectors(config: BertConfig) -> dict[str, str]:
    """The recorded queries and keys whose products are the attention scores, by the page's names (q, k):
    ``attention.q``, ``attention.k`` in BERT; the rotated ones where the model turns them by their positions
    (ESM-2's and ModernBERT's rotary attention, :mod:`bertfn.model.members.rotary`).

    Args:
        config: the model's config.

    Returns:
        ``{recorded point under attention.: page name}``.
    """
    rotary = "layer.0.attention.q_rotated" in point_names(config)
    return {"q_rotated": "q", "k_rotated": "k"} if rotary else {"q": "q", "k": "k"}


def layer_windows(config: BertConfig) -> list[int | None]:
    """Each layer's attention window, or None where the layer attends to every token.

    The family member says (:attr:`~bertfn.model.family.Family.window`): a ModernBERT local layer has
    ``config.local_attention``, and a query sees the keys at most ``local_attention // 2`` positions away
    (:func:`~bertfn.model.members.modernbert.window_mask`).

    Args:
        config: the model's config.

    Returns:
        L entries.
    """
    window = family_of(config).window
    return [None if window is None else window(config, i) for i in range(config.num_hidden_layers)]


def out_of_reach(config: BertConfig, layer: int, seq: int) -> Tensor | None:
    """The (query, key) pairs layer ``layer`` cannot attend to: a local layer's keys out of its window
    (:func:`~bertfn.model.members.modernbert.window_mask`), or None for a layer that attends to every token.

    Args:
        config: the model's config.
        layer: the layer, from 0.
        seq: S.

    Returns:
        (S, S) bool, or None.
    """
    window = layer_windows(config)[layer]
    return None if window is None else window_mask(None, seq, window, torch.float32, torch.device("cpu"))[0, 0] != 0


LEVELS = 127
"""The attention codes' top: a probability p is stored as ``round(LEVELS sqrt(p))`` (the page's meta says so)."""


def quantise_probs(p: Tensor) -> np.ndarray:
    """Probabilities in [0, 1] -> uint8 codes ``round(LEVELS sqrt(p))``; the page reads ``(c / LEVELS)^2``.

    Args:
        p: probabilities, any shape.

    Returns:
        The codes, the same shape.
    """
    return torch.sqrt(p).mul_(LEVELS).round_().to(torch.uint8).cpu().numpy()


def quantise_vectors(x: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(..., hd) floats -> int8 codes and one float32 scale per vector: x ~ code * scale.

    Args:
        x: (..., hd).

    Returns:
        codes: (..., hd) int8.
        scale: (...,) float32.
    """
    scale = x.abs().amax(dim=-1) / 127  # (...,)
    codes = torch.round(x / scale.clamp_min(torch.finfo(torch.float32).tiny)[..., None])
    return codes.to(torch.int8).cpu().numpy(), scale.cpu().numpy()


def entropy(p: Tensor) -> Tensor:
    """-sum_j p_j ln p_j over the last axis, in nats (0 for one key, ln S for all S alike).

    Args:
        p: probabilities, (..., S).

    Returns:
        (...,).
    """
    return torch.special.entr(p).sum(dim=-1)


def top_k(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Softmax over the vocabulary (in float32, whatever the logits' dtype), then the k best.

    Args:
        logits: (..., V).
        k: how many (at most V).

    Returns:
        probabilities: (..., k) float32.
        ids: (..., k).
    """
    return torch.softmax(logits, dim=-1, dtype=torch.float32).topk(min(k, logits.shape[-1]), dim=-1)


class PageArrays(dict):
    """The arrays of the page (the table of the module docstring), filled tensor by tensor.

    As a trace's store it receives each ``name -> tensor`` of the pass (``store[name] = tensor``),
    turns those the page reads into their stored form and keeps only ``mlm.logits`` as a tensor:
    ``dict(store)`` is ``{"mlm.logits": ...}`` at most, ``store.arrays`` the page's arrays.

    Args:
        config: the traced model's.
        model (Model | None): the :class:`~bertfn.checkpoint.loading.Model` whose MLM head makes the
            per-layer predictions (None, or one without the head: the page has none).
        top_k: predictions kept per position.

    Raises:
        InputError: a ``top_k`` that is not a positive integer.
    """

    def __init__(self, config: BertConfig, model=None, top_k: int = 5):
        super().__init__()
        count("top_k", top_k)
        self.config, self.top_k = config, top_k
        self.first = layer_input(config)  # the embeddings' point that is layer 0's input
        self.vectors = score_vectors(config)  # recorded q / k point -> the page's q / k
        self._root = model.params if model is not None else None  # read by BERT's names, whatever the family's
        self.lens = self._root is not None and "cls.predictions.decoder.weight" in self._root
        self.final_norm = family_of(config).final_norm  # a pre-LN member's LayerNorm after the last layer, or None
        self.head = None  # the MLM head's weights in self.dtype (lens_dtype), made when the first hidden state comes
        self.dtype = torch.float32
        self.arrays: dict[str, np.ndarray] = {}
        self.seen: set[str] = set()

    def _array(self, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        if name not in self.arrays:
            self.arrays[name] = np.zeros(shape, dtype)
        return self.arrays[name]

    def __setitem__(self, name: str, x: Tensor) -> None:
        found = READS.fullmatch(name)
        if found is None or (found[1] and name != self.first) or (found[4] not in (None, "probs", *self.vectors)):
            return
        if name == "mlm.logits":
            super().__setitem__(name, x)
            return
        self.seen.add(name)
        L = self.config.num_hidden_layers
        with torch.no_grad():
            x = x[0].detach()
            if found[4] == "probs":  # (nh, S, S)
                i, (nh, S, _) = int(found[2]), x.shape
                p = x.to(torch.float32)
                self._array("attention", (L, nh, S, S), np.uint8)[i] = quantise_probs(p)
                self._array("entropy", (L, nh, S), np.float32)[i] = entropy(p).cpu().numpy()
            elif found[4]:  # q or k (rotated, where the model turns them): (nh, S, hd)
                i, (nh, S, hd), kind = int(found[2]), x.shape, self.vectors[found[4]]
                codes, scale = quantise_vectors(x.to(torch.float32))
                self._array(kind, (L, nh, S, hd), np.int8)[i] = codes
                self._array(f"{kind}_scale", (L, nh, S), np.float32)[i] = scale
            else:  # a hidden state (S, H): layer 0's input (row 0) or layer i's output (row i + 1)
                row = 0 if found[2] is None else int(found[2]) + 1
                S = x.shape[0]
                self._array("norms", (L + 1, S), np.float32)[row] = torch.linalg.vector_norm(x.float(), dim=-1).cpu().numpy()
                if self.lens:
                    ids, probs = self._predictions(x)
                    self._array("lens_ids", (L + 1, S, ids.shape[-1]), np.int32)[row] = ids
                    self._array("lens_probs", (L + 1, S, ids.shape[-1]), np.float32)[row] = probs

    def _predictions(self, h: Tensor) -> tuple[np.ndarray, np.ndarray]:
        """The MLM head at every position of one hidden state: top-k ids and probabilities, each (S, k).

        A pre-LN member's hidden state is first put through the final LayerNorm (in float32, by its own
        function, ``Family.final_norm``), as the model does to its last layer's output before the head: the
        residual stream of ESM-2 or ModernBERT is never normalized in between, and the head's dense layer
        expects a normalized input. Then in bf16 (fp32 where bf16 is slow: :func:`lens_dtype`), on a copy of the
        head's weights (of the decoder only its copy packed for oneDNN), through the fast path's kernels
        (:func:`~bertfn.model.heads.mlm_head`): (L + 1) x S products with the (V, H) decoder are most of the page's
        cost.

        Args:
            h: (S, H), one layer's hidden state.
        """
        if self.head is None:
            root = self._root
            decoder = root.key("cls.predictions.decoder.weight")
            self.dtype = dtype = lens_dtype(root.state[decoder].device)
            head = {root.key(n): root[n].to(dtype) for n in HEAD if n in root}  # under the checkpoint's own names
            if dtype in ONEDNN_DTYPES and head[decoder].device.type == "cpu":  # where mlm_head multiplies on oneDNN: keep that copy alone
                head[decoder] = packed(head[decoder])
            self.head = Params(head, self.config)
        probs, ids = [], []
        with torch.inference_mode():
            if self.final_norm is not None:
                h = self.final_norm(self._root.scope("bert"), h.float())  # (S, H)
            h = h.to(self.dtype)
            rows = _chunk_rows(self.config.vocab_size)
            for s in range(0, h.shape[0], rows):
                p, i = top_k(mlm_head(self.head, h[s:s + rows]), self.top_k)
                probs.append(p)
                ids.append(i)
        return torch.cat(ids).to(torch.int32).cpu().numpy(), torch.cat(probs).cpu().numpy()

    def missing(self) -> list[str]:
        """The names the page reads that this store has not been given (empty once a whole pass went through)."""
        reads = [f"attention.{n}" for n in self.vectors] + ["attention.probs", "output"]
        names = [self.first] + [f"layer.{i}.{n}" for i in range(self.config.num_hidden_layers) for n in reads]
        return [n for n in names if n not in self.seen]

    def done(self) -> dict[str, np.ndarray]:
        """The page's arrays (and the head's copy let go).

        Raises:
            InputError: naming what the pass did not record.
        """
        self.head = None
        lost = self.missing()
        if lost:
            raise InputError(f"the explorer reads {', '.join(lost[:4])}{' ...' if len(lost) > 4 else ''}, which this "
                             "recording does not hold; draw a Recording of a whole pass (bertfn.trace(text, model))")
        return self.arrays
