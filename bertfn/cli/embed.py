"""``bertfn embed``: :func:`bertfn.embed`, one vector per text."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError
from ..tasks.embed import POOLINGS
from .options import add_file_options, add_model_options, emit, model_from_args, run_file_command, subcommand


def add(sub) -> None:
    em = subcommand(sub, "embed", "one vector per text: the encoder's hidden states pooled (sentence embeddings)",
                    'bertfn embed "A sentence." "Another one." --normalize --model ./all-MiniLM-L6-v2')
    em.add_argument("text", nargs="*", help="one or more texts (or --input FILE)")
    em.add_argument("--pooling", choices=POOLINGS, default="mean",
                    help="mean of the tokens' vectors (default), the [CLS] vector, or the largest value per dimension")
    em.add_argument("--normalize", action="store_true", help="scale each vector to length 1 (dot product = cosine)")
    em.add_argument("--max-length", type=int, default=None,
                    help="tokens per text at most; longer texts are cut (default: the model's max_seq_length or positions)")
    em.add_argument("--json", action="store_true",
                    help="print JSON: the vector of one text, or a list of vectors (default: one line of numbers per text)")
    add_model_options(em)
    add_file_options(em, vectors=True)


def run(args: argparse.Namespace) -> int:
    """Print the embeddings of ``args.text``: one line of H numbers per text, or JSON as bertfn.embed(...).tolist()."""
    from ..tasks.embed import embed

    options = dict(pooling=args.pooling, normalize=args.normalize, max_length=args.max_length)
    if args.input is not None:
        return run_file_command(args, "embed", **options)
    if not args.text:
        raise InputError("pass at least one text, or --input FILE; see 'bertfn embed --help'")
    texts = list(args.text)
    vectors = embed(texts, model_from_args(args), **options).cpu()  # (N, H)
    if args.json:
        emit(json.dumps(vectors[0].tolist() if len(texts) == 1 else vectors.tolist()))
    else:
        emit("\n".join(" ".join(f"{v:.6g}" for v in row) for row in vectors.tolist()))
    return 0
