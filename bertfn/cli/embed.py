"""``bertfn embed``: :func:`bertfn.embed`, one vector per text."""

from __future__ import annotations

import argparse
import json

from ..checkpoint.sentence_folder import POOLINGS
from ..tasks.runner import packing
from .options import add_file_options, add_model_options, emit, model_from_args, no_texts, run_file_command, subcommand


def add(sub) -> None:
    em = subcommand(sub, "embed", "one vector per text (sentence embeddings), made as the model's sentence-transformers "
                    "folder says", 'bertfn embed "how do I bake bread?" --prompt-name query --model ./bge-small-en-v1.5')
    em.add_argument("text", nargs="*", help="one or more texts (or --input FILE)")
    em.add_argument("--pooling", type=pooling_modes, default=None, metavar="MODE",
                    help=f"instead of the folder's Pooling module (default; mean without one): {', '.join(POOLINGS)}; "
                         "several joined by + are concatenated, as a Pooling module of several modes does (cls+mean)")
    em.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                    help="scale each vector to length 1 at the end (dot product = cosine), or leave out the folder's "
                         "Normalize module (default: as the folder says)")
    em.add_argument("--prompt-name", metavar="NAME", help="put the folder's prompt NAME before each text (query, passage, "
                    "...; default: its default_prompt_name, if any)")
    em.add_argument("--prompt", metavar="TEXT", help="put TEXT before each text (instead of --prompt-name)")
    em.add_argument("--truncate-dim", type=int, default=None, metavar="D",
                    help="cut each vector to its first D values (Matryoshka models; default: the folder's, else none)")
    em.add_argument("--max-length", type=int, default=None,
                    help="tokens per text at most; longer texts are cut (default: the model's max_seq_length or positions)")
    em.add_argument("--batch-size", type=int, default=32, metavar="N",
                    help="texts per encoder pass, at most (default 32)")
    em.add_argument("--json", action="store_true",
                    help="print JSON: the vector of one text, or a list of vectors (default: one line of numbers per text)")
    add_model_options(em)
    add_file_options(em, vectors=True)


def pooling_modes(given: str) -> str | tuple[str, ...]:
    """``--pooling``'s value: one mode of :data:`POOLINGS`, or several joined by ``+`` (a tuple, concatenated).

    Args:
        given: the value on the command line.

    Raises:
        ArgumentTypeError: a mode bertfn does not know (argparse says it as its own error).
    """
    modes = tuple(given.split("+"))
    unknown = [m for m in modes if m not in POOLINGS]
    if unknown:
        raise argparse.ArgumentTypeError(f"{given!r} names no pooling mode ({', '.join(map(repr, unknown))}); use one "
                                         f"of {', '.join(POOLINGS)}, or several joined by + (cls+mean)")
    return modes[0] if len(modes) == 1 else modes


def run(args: argparse.Namespace) -> int:
    """Print the embeddings of ``args.text``: one line of H numbers per text, or JSON as bertfn.embed(...).tolist()."""
    from ..tasks.embed import TASK, embed

    options = dict(pooling=args.pooling, normalize=args.normalize,
                   prompt_name=args.prompt_name, prompt=args.prompt, truncate_dim=args.truncate_dim,
                   max_length=args.max_length, batch_size=args.batch_size)
    if args.input is not None:
        return run_file_command(args, "embed", **options)
    if not args.text:
        raise no_texts(args, "pass at least one text, or --input FILE; see 'bertfn embed --help'")
    texts = list(args.text)
    vectors = embed(texts, model_from_args(args, packing(TASK)), **options).cpu()  # (N, H)
    if args.json:
        emit(json.dumps(vectors[0].tolist() if len(texts) == 1 else vectors.tolist()))
    else:
        emit("\n".join(" ".join(f"{v:.6g}" for v in row) for row in vectors.tolist()))
    return 0
