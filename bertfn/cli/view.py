"""``bertfn view`` and ``bertfn attention``: the explorer page and one layer's attention heatmap."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..checkpoint.state import as_stored
from ..errors import InputError, require_folder
from .options import (add_head_options, add_model_options, model_from_args, out_file, picture_name, subcommand,
                      wrote)


def add_view(sub) -> None:
    vw = subcommand(sub, "view", "write the explorer: one self-contained HTML page to look inside the forward pass",
                    'bertfn view "When in Rome, do as the [MASK] do." --out view.html')
    vw.add_argument("text", help="the text to run through the model (put in [MASK]s to see the predictions)")
    vw.add_argument("--pair", default=None, help="a second segment, as in BERT's sentence pairs")
    vw.add_argument("--top-k", type=int, default=5, metavar="N",
                    help="predictions kept per [MASK] and per layer (default 5)")
    vw.add_argument("--out", default="view.html", help="HTML file to write (default view.html; - for stdout)")
    vw.add_argument("--steps", type=int, default=20,
                    help="integrated gradients' points for the decision panel of a checkpoint with a task head (default 20)")
    vw.add_argument("--no-decision", dest="decision", action="store_false",
                    help="leave out the decision panel (a fine-tuned head's prediction, attributions and per-head parts)")
    add_head_options(vw, "explain")
    add_model_options(vw)


def run_view(args: argparse.Namespace) -> int:
    """Trace ``args.text`` and write the explorer page (see :mod:`bertfn.inspect.explorer`); for a checkpoint with a
    task head or ESM-2's contact head, or with ``--head`` (``--labels``), with the decision panel
    (:func:`bertfn.interventions.decision`)."""
    from ..inspect.page_arrays import PageArrays
    from ..inspect.trace import trace
    from ..interventions.decision import decision, has_decision

    require_folder(Path(args.out), "--out")  # before the model loads
    rec = trace(args.text, m := model_from_args(args, as_stored), pair=args.pair, store=PageArrays(m.config, m, args.top_k))  # the page only
    chosen = args.head is not None or args.labels is not None  # a head (or its labels) named: explain it or say why not
    panel = decision(args.text, m, pair=args.pair, steps=args.steps, head=args.head, labels=args.labels) \
        if args.decision and (chosen or has_decision(m)) else None
    if args.out == "-":
        page = memoryview(rec.to_html(top_k=args.top_k, decision=panel).encode("ascii"))
        size = len(page)
        while page:  # a write that stdout's reader cut short (| head) returns what went; the next one raises
            page = page[sys.stdout.buffer.write(page):]
    else:
        size = rec.save_html(args.out, top_k=args.top_k, decision=panel).stat().st_size
    wrote(args.out, f" ({len(rec.tokens)} tokens, {f'{size / 1e6:.1f} MB' if size >= 1e6 else f'{size / 1e3:.0f} kB'}); "
                    "open it in a browser")
    return 0


def add_attention(sub) -> None:
    at = subcommand(sub, "attention", "draw one layer's attention probabilities as a heatmap (needs matplotlib)",
                    'bertfn attention "The cat sat on the mat." --layer 3 --out attn.png')
    at.add_argument("text", help="the text to run through the model")
    at.add_argument("--layer", type=int, default=0, help="layer index from 0, negative from the end (default 0)")
    at.add_argument("--head", type=int, default=None, help="one head's heatmap (default: a grid of every head)")
    at.add_argument("--scale", choices=("per-head", "shared", "fixed"), default="per-head",
                    help="colour scale: 0 to each head's own largest probability (default), one scale for "
                         "all heads of the layer, or 0 to 1")
    at.add_argument("--out", default="attention.png", help="image file to write (default attention.png; - for stdout, as PNG)")
    add_model_options(at)


def run_attention(args: argparse.Namespace) -> int:
    """Trace ``args.text`` and write the attention heatmap of one layer (all heads, or ``--head``)."""
    from ..inspect.plots import attention_figure, require_matplotlib
    from ..inspect.trace import trace

    require_matplotlib()  # before the model loads: a missing matplotlib is known at once
    args.out = picture_name(args.out)
    require_folder(Path(args.out), "--out")
    fig = attention_figure(trace(args.text, model_from_args(args, as_stored)), args.layer, args.head, args.scale.replace("-", "_"))
    try:
        fig.savefig(out_file(args.out), dpi=150)
    except (OSError, ValueError) as e:  # ValueError: a file ending matplotlib cannot write
        if isinstance(e, BrokenPipeError):  # stdout's reader went away (--out - | head): the CLI's quiet stop
            raise
        raise InputError(f"cannot write {args.out} ({e}); pass --out with a writable .png, .svg or .pdf path") from e
    wrote(args.out)
    return 0
