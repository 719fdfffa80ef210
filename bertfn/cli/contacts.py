"""``bertfn contacts``: :func:`bertfn.contacts`, ESM-2's contact map of a protein: a table, JSON, a picture, an array."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError
from ..tasks.runner import packing
from .options import (add_file_options, add_model_options, emit, model_from_args, no_texts, out_file, picture_name,
                      run_file_command, subcommand, wrote)


def add(sub) -> None:
    ct = subcommand(sub, "contacts", "predict which residues of a protein touch, from ESM-2's attention (contact head)",
                    "bertfn contacts MKTAYIAKQRQISFVKSHFSRQ --model facebook/esm2_t6_8M_UR50D --out map.png")
    ct.add_argument("text", nargs="*", metavar="SEQUENCE",
                    help="one or more proteins, one letter a residue (or --input FILE, one a line)")
    ct.add_argument("--top", default=None, metavar="N|L|L/k",
                    help="only the N (or L, L/2, L/5 for a protein of L residues) most likely contacts, as (i, j, "
                         "probability) from residue 0 (default: the whole map in --json and --output; the table "
                         "shows the top L/5)")
    ct.add_argument("--min-separation", type=int, default=6,
                    help="with --top and in the table: pairs at least this far apart in the chain (default 6)")
    ct.add_argument("--out", default=None, metavar="FILE",
                    help="write one protein's whole map: a picture (.png, .svg, .pdf; needs matplotlib) or .npy "
                         "(float32); - for stdout, as PNG")
    ct.add_argument("--json", action="store_true", help="print the map (or --top's contacts) as JSON")
    ct.add_argument("--batch-size", type=int, default=8, metavar="N",
                    help="proteins per encoder pass, at most (default 8)")
    add_model_options(ct, needs="ESM-2 with its contact head (e.g. facebook/esm2_t6_8M_UR50D)")
    add_file_options(ct)


def top_option(value: str | None) -> int | str | None:
    """``--top``'s value as :func:`bertfn.contacts` takes it: digits as a number, else as written ("L/5")."""
    return int(value) if value is not None and value.isdigit() else value


def table(sequence: str, pairs: list) -> str:
    """A protein's most likely contacts as a table: a row per pair, residues numbered from 0 (with their letters when
    the sequence is written one letter a residue)."""
    letters = sequence.isalpha()  # no spaces, no <mask>: character i is residue i
    lines = [sequence, f"  {'rank':>4}  {'i':>5}  {'j':>5}  {'pair' if letters else '':<4}  {'p':>6}"]
    for r, (i, j, p) in enumerate(pairs, 1):
        pair = f"{sequence[i]}-{sequence[j]}" if letters else ""
        lines.append(f"  {r:>4}  {i:>5}  {j:>5}  {pair:<4}  {p:>6.3f}")
    return "\n".join(lines)


def write(path: str, probs, sequence: str) -> None:
    """Write one map to ``path``: an array for ``.npy``, else a picture
    (:func:`~bertfn.inspect.contact_plots.contact_map`)."""
    if path.endswith(".npy"):
        import numpy

        try:
            numpy.save(path, probs.numpy())
        except OSError as e:
            raise InputError(f"cannot write {path} ({e}); pass --out with a writable path") from e
        return
    from ..inspect.contact_plots import contact_map

    fig = contact_map(probs, sequence if len(sequence) == len(probs) else None)
    try:
        fig.savefig(out_file(path), dpi=150)
    except (OSError, ValueError) as e:  # ValueError: a file ending matplotlib cannot write
        if isinstance(e, BrokenPipeError):  # stdout's reader went away (--out - | head): the CLI's quiet stop
            raise
        raise InputError(f"cannot write {path} ({e}); pass --out with a writable .png, .svg, .pdf or .npy path") from e


def run(args: argparse.Namespace) -> int:
    """Print each protein's most likely contacts (a table), its map or contacts as JSON, or write its map to --out."""
    from ..tasks.contacts import TASK, check_top, contacts

    top = top_option(args.top)
    check_top(top, args.min_separation)  # before the model loads
    options = dict(top=top, min_separation=args.min_separation, batch_size=args.batch_size)
    if args.input is not None:
        if args.out is not None:
            raise InputError("--out writes one protein's map; with --input the maps go to --output")
        return run_file_command(args, "contacts", **options)
    if not args.text:
        raise no_texts(args, "pass a protein sequence (e.g. MKTAYIAKQR), or --input FILE; see 'bertfn contacts --help'")
    if args.out is not None and (len(args.text) > 1 or top is not None or args.json):
        raise InputError("--out writes the whole map of one protein; pass one sequence, without --top and --json")
    texts = list(args.text)
    if args.out is not None:
        args.out = picture_name(args.out)
        if not args.out.endswith(".npy"):
            from ..inspect.plots import require_matplotlib

            require_matplotlib()  # before the model loads: a missing matplotlib is known at once
        probs = contacts(texts[0], model_from_args(args, packing(TASK)), batch_size=args.batch_size)  # (r, r)
        write(args.out, probs, texts[0])
        wrote(args.out, f" ({len(probs)} x {len(probs)} residues)")
        return 0
    if args.json:
        from ..corpus.runner import jsonable

        results = contacts(texts, model_from_args(args, packing(TASK)), **options)
        emit(json.dumps(jsonable(results[0] if len(texts) == 1 else results)))  # floats at float32 precision
        return 0
    pairs = contacts(texts, model_from_args(args, packing(TASK)), **{**options, "top": top or "L/5"})
    emit("\n\n".join(table(t, p) for t, p in zip(texts, pairs)))
    return 0
