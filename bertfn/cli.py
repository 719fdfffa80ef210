"""The ``bertfn`` command (also ``python -m bertfn``): a thin layer over the Python API.

    bertfn fill-mask "When in Rome, do as the [MASK] do." [--top-k N] [--targets W ...] [--json] [--truncation]
    bertfn fill-mask "The [MASK] [MASK] barked." --joint [--beam-width N]
    bertfn score "When in Rome, do as the Romans do." [--method within_word_l2r] [--per-token] [--json]
    bertfn score --reference "E V Q L" "E V K L" ... [--pll-change|--wt-marginal] [--matrix subs.csv|.npy|.parquet]
    bertfn fill-mask --input cloze.txt --output answers.jsonl [--field NAME] [--resume [--retry-errors]]
                     [--flush-every SECONDS] [--no-echo] [--progress|--no-progress]
    bertfn attention "The cat sat on the mat." --layer 3 [--head H] [--scale per-head|shared|fixed] --out attn.png
    bertfn embed "A sentence." "Another one." [--pooling mean|cls|max] [--normalize] [--json]
    bertfn score|embed --input sentences.txt --output results.jsonl [...the same file options]
    bertfn view "When in Rome, do as the [MASK] do." --out view.html [--pair TEXT] [--top-k N]
    bertfn --version

Every subcommand that runs a model takes the same model options (:func:`add_model_options`):
``--model ID_OR_PATH --tokenizer PATH --cased|--lowercase --device cpu|cuda --dtype float32|bfloat16|... --quiet``.

Errors print one line on stderr and exit with the error's code (see :mod:`bertfn.errors`): bad
arguments 2 (as argparse), bad input 2, bad config 3, bad checkpoint 4, model not found 5, missing
optional library 6, an unexpected failure 1 (``BERTFN_DEBUG=1`` shows its traceback), Ctrl-C 130, SIGTERM 143,
a closed pipe 141 (``bertfn embed ... | head``: quietly, as other tools stop). Warnings are one line too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Callable

from .checkpoint.dtypes import DTYPES
from .checkpoint.state import as_stored
from .corpus.files import FLUSH_SECONDS
from .corpus.formats import FORMATS
from .errors import SURFACE, BertfnError, InputError
from .fast.choice import pack_state
from .tasks.embed import POOLINGS


def emit(text: str) -> None:
    """Print ``text`` on stdout; characters the terminal's encoding cannot show are written as escapes
    (``\\xe9``) instead of failing, as ``PYTHONIOENCODING=ascii`` or a C locale would make them."""
    encoding = sys.stdout.encoding or "utf-8"
    print(text.encode(encoding, errors="backslashreplace").decode(encoding))


# --- the model options, shared by every subcommand that runs a model ---------------------------------


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """``--model --tokenizer --cased/--lowercase --device --dtype`` (read back by :func:`model_from_args`)."""
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=None,
                       help="hub id, local folder or weights file (default: google-bert/bert-base-uncased)")
    group.add_argument("--tokenizer", default=None,
                       help="vocab.txt, tokenizer.json or a folder with one, when it is not beside the weights")
    case = group.add_mutually_exclusive_group()
    case.add_argument("--cased", dest="lowercase", action="store_false", default=None,
                      help="keep the text's case (a cased vocabulary without tokenizer_config.json)")
    case.add_argument("--lowercase", dest="lowercase", action="store_true", help="lowercase the text")
    group.add_argument("--device", default=None, help="e.g. cpu or cuda")
    group.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                       help="precision to run in (default: as stored); bfloat16 is the faster bf16 mode")
    group.add_argument("--quiet", action="store_true", help="print no warnings (a checkpoint's unused keys, [UNK]-heavy texts, ...)")


def model_from_args(args: argparse.Namespace, prepare: Callable[[dict], bool] | None = None):
    """The :class:`~bertfn.checkpoint.loading.Model` the model options name, loaded anew with ``load``'s ``prepare``."""
    from .corpus.runner import open_model

    return open_model(args.model, tokenizer=args.tokenizer, lowercase=args.lowercase, device=args.device,
                      dtype=args.dtype, prepare=prepare, fresh=True)


# --- files in, files out, shared by every subcommand that runs a task of bertfn.corpus ----------------


def add_file_options(parser: argparse.ArgumentParser) -> None:
    """``--input --output --field --resume --retry-errors --flush-every --no-echo --progress/--no-progress``
    (read back by :func:`run_file_command`)."""
    group = parser.add_argument_group("files (instead of texts on the command line)")
    group.add_argument("--input", metavar="FILE",
                       help="read the texts from FILE: one a line, or JSON Lines with --field; - for stdin")
    group.add_argument("--output", metavar="FILE", default="-",
                       help="write one JSON line per input line to FILE (default -: stdout)")
    group.add_argument("--field", metavar="NAME", help="--input is JSON Lines whose field NAME holds the text")
    group.add_argument("--resume", action="store_true",
                       help="continue an interrupted run after the last complete line of --output, once the run "
                            "record beside it (FILE.run.json) and every written line agree with this run")
    group.add_argument("--retry-errors", action="store_true", help="with --resume: first run again, in place, the lines of --output that hold errors")
    group.add_argument("--flush-every", type=float, default=FLUSH_SECONDS, metavar="SECONDS", help="write results "
                       f"out at least this often (default {FLUSH_SECONDS:g}): a kill loses at most that much work")
    group.add_argument("--no-echo", dest="echo", action="store_false",
                       help="leave the text out of each output line (the input's other fields, e.g. an id, stay)")
    group.add_argument("--no-detail", dest="detail", action="store_false", help="leave per-token detail out (score)")
    group.add_argument("--format", nargs="+", choices=FORMATS, default=["jsonl"], help="also write the "
                       "output as it goes as FILE.npy (embed's vectors, float32) or FILE.parquet, beside the JSON Lines")
    group.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help="progress bar on stderr (default: when stderr is a terminal)")


def run_file_command(args: argparse.Namespace, task: str, **options) -> int:
    """``bertfn TASK --input ...``: :func:`bertfn.corpus.files.run_file`, then its one-line summary on stderr.

    Exit code 0 when every line of the output has a result, 2 (bad input) when any line holds an error
    instead, this run's or one kept from the run it resumed.
    """
    from .corpus.files import run_file

    if args.text:
        raise InputError("pass texts on the command line or --input FILE, not both")
    summary = run_file(args.input, args.output, args.model, task=task, field=args.field, resume=args.resume,
                       retry_errors=args.retry_errors, flush_every=args.flush_every, echo=args.echo,
                       detail=args.detail, formats=tuple(args.format),
                       progress=args.progress, tokenizer=args.tokenizer, lowercase=args.lowercase,
                       device=args.device, dtype=args.dtype, **options)
    _one_line("done", summary)
    return 0 if summary.errors + summary.kept_errors == 0 else InputError.exit_code


# --- the subcommands: each an _add_X(sub) / _run_X(args) pair listed in COMMANDS ---------------------


def _add_fill_mask(sub) -> None:
    fm = sub.add_parser("fill-mask", help="predict the words behind [MASK]")
    fm.add_argument("text", nargs="*", help="one or more texts, each with at least one [MASK] (or --input FILE)")
    fm.add_argument("--top-k", type=int, default=5, help="answers per mask (default 5)")
    fm.add_argument("--targets", nargs="+", default=None, help="only score these words")
    fm.add_argument("--json", action="store_true", help="print the pipeline-shaped results as JSON")
    fm.add_argument("--truncation", action="store_true",
                    help="cut a text longer than the model's max positions to a window around its masks")
    fm.add_argument("--joint", action="store_true",
                    help="fill all the masks of a text together: the best combinations, scored by their PLL")
    fm.add_argument("--beam-width", type=int, default=5, help="beam width of --joint's search (default 5; 1: greedy)")
    fm.add_argument("--batch-size", type=int, default=16, help="texts per encoder pass, at most (default 16)")
    add_model_options(fm)
    add_file_options(fm)


def _table(text: str, result: list) -> str:
    per_mask = result if result and isinstance(result[0], list) else [result]
    lines = [text]
    for m, answers in enumerate(per_mask):
        if len(per_mask) > 1:
            lines.append(f"mask #{m + 1}")
        lines.append(f"  {'rank':>4}  {'score':>8}  {'token':<16} sequence")
        for r, a in enumerate(answers, 1):
            word = a["token_str"] + (f" ({a['pieces']} pieces)" if "pieces" in a else "")
            lines.append(f"  {r:>4}  {a['score']:>8.4f}  {word:<16} {a['sequence']}")
    return "\n".join(lines)


def _joint_table(text: str, fills: list) -> str:
    lines = [text, f"  {'rank':>4}  {'PLL':>8}  {'tokens':<24} sequence"]
    for r, f in enumerate(fills, 1):
        lines.append(f"  {r:>4}  {f['score']:>8.3f}  {' '.join(f['token_strs']):<24} {f['sequence']}")
    return "\n".join(lines)


def _run_fill_mask(args: argparse.Namespace) -> int:
    from .tasks.fill_mask import fill_mask

    options = dict(top_k=args.top_k, targets=args.targets, truncation=args.truncation, batch_size=args.batch_size,
                   joint=args.joint, beam_width=args.beam_width)
    if args.input is not None:
        return run_file_command(args, "fill-mask", **options)
    if not args.text:
        raise InputError("pass at least one text with the model's mask token ([MASK] or <mask>), or --input FILE; see 'bertfn fill-mask --help'")
    results = fill_mask(list(args.text), model_from_args(args, pack_state), **options)
    if args.json:
        emit(json.dumps(results[0] if len(results) == 1 else results, indent=2, ensure_ascii=False))
    else:
        emit("\n\n".join((_joint_table if args.joint else _table)(t, r) for t, r in zip(args.text, results)))
    return 0


def _add_score(sub) -> None:
    sc = sub.add_parser("score", help="pseudo-log-likelihood of whole texts (each token masked in turn)")
    sc.add_argument("text", nargs="*", help="one or more texts to score (or --input FILE)")
    sc.add_argument("--method", choices=("original", "within_word_l2r"), default="original",
                    help="original: each token masked alone; within_word_l2r: also the later pieces of its word")
    sc.add_argument("--per-token", action="store_true", help="list every token's log-probability")
    sc.add_argument("--json", action="store_true", help="print the results of bertfn.score as JSON")
    mut = sc.add_argument_group("mutations (the texts are variants of a reference)")
    mut.add_argument("--reference", metavar="TEXT",
                     help="score each text against TEXT by masked marginals: TEXT's positions masked once each, a "
                          "variant's score the sum of log P(its token) - log P(TEXT's token) where they differ")
    by = mut.add_mutually_exclusive_group()  # without either: masked marginals
    by.add_argument("--pll-change", action="store_true", help="with --reference: score by PLL minus TEXT's instead")
    by.add_argument("--wt-marginal", action="store_true", help="with --reference: by wild-type marginals (TEXT unmasked)")
    mut.add_argument("--matrix", metavar="FILE",
                     help="with --reference: write TEXT's substitution matrix (positions x vocabulary log-probabilities) "
                          "to FILE: .npy, .csv, .tsv or .parquet")
    add_model_options(sc)
    add_file_options(sc)


def _score_table(r: dict, per_token: bool) -> str:
    lines = [f"{r['pll']:.3f}  PLL ({r['num_tokens']} tokens, pseudo-perplexity {r['pseudo_perplexity']:.3f})  {r['text']}"]
    if per_token:
        lines.append(f"  {'token':<16} {'word':>4}  {'log-prob':>9}")
        lines += [f"  {t['token']:<16} {t['word']:>4}  {t['log_prob']:>9.4f}" for t in r["tokens"]]
    return "\n".join(lines)


def _run_score(args: argparse.Namespace) -> int:
    from .tasks.scoring import score

    if args.reference is None and (given := next((f for f in ("pll_change", "wt_marginal", "matrix") if getattr(args, f)), 0)):
        raise InputError(f"--{given.replace('_', '-')} goes with --reference TEXT, the text the others are variants of")
    if args.reference is not None:
        return _run_mutations(args)
    if args.input is not None:
        return run_file_command(args, "score", method=args.method)
    if not args.text:
        raise InputError("pass at least one text to score, or --input FILE; see 'bertfn score --help'")
    results = score(list(args.text), model_from_args(args, pack_state), method=args.method)
    if args.json:
        emit(json.dumps(results[0] if len(results) == 1 else results, indent=2, ensure_ascii=False))
    else:
        emit(("\n\n" if args.per_token else "\n").join(_score_table(r, args.per_token) for r in results))
    return 0


def _run_mutations(args: argparse.Namespace) -> int:
    """``bertfn score --reference TEXT [variants | --input FILE] [--matrix FILE]``: :func:`bertfn.score_mutations`
    (and :func:`bertfn.substitution_matrix`'s ``save``)."""
    from .tasks.mutations import score_mutations, substitution_matrix

    if args.method != "original" or args.per_token or not (args.text or args.input or args.matrix):
        raise InputError("with --reference pass its variants (texts, or --input FILE) or --matrix FILE; --method and "
                         "--per-token are options of the PLL (for a variant's PLL change pass --pll-change)")
    model = model_from_args(args) if args.text or args.matrix else None
    if args.matrix:
        wrote = f"wrote {substitution_matrix(args.reference, model).save(args.matrix)}"
        _one_line("done", wrote) if args.input is not None else emit(wrote)  # stdout may be the JSON Lines
    method = "pll" if args.pll_change else "wt_marginal" if args.wt_marginal else "masked_marginal"
    if args.input is not None:
        return run_file_command(args, "score-mutations", reference=args.reference, method=method)
    if not args.text:  # the matrix alone
        return 0
    results = score_mutations(list(args.text), model, reference=args.reference, method=method)
    if args.json:
        emit(json.dumps(results[0] if len(results) == 1 else results, indent=2, ensure_ascii=False))
    else:
        emit("\n".join(f"{r['score']:9.3f}  {' '.join(x['code'] for x in r['mutations']) or '(the reference)'}  "
                       f"{r['text']}" for r in results))
    return 0


def _add_attention(sub) -> None:
    at = sub.add_parser("attention", help="draw one layer's attention probabilities as a heatmap (needs matplotlib)")
    at.add_argument("text", help="the text to run through the model")
    at.add_argument("--layer", type=int, default=0, help="layer index from 0, negative from the end (default 0)")
    at.add_argument("--head", type=int, default=None, help="one head's heatmap (default: a grid of every head)")
    at.add_argument("--scale", choices=("per-head", "shared", "fixed"), default="per-head",
                    help="colour scale: 0 to each head's own largest probability (default), one scale for "
                         "all heads of the layer, or 0 to 1")
    at.add_argument("--out", default="attention.png", help="image file to write (default attention.png)")
    add_model_options(at)


def _run_attention(args: argparse.Namespace) -> int:
    """Trace ``args.text`` and write the attention heatmap of one layer (all heads, or ``--head``)."""
    from .inspect.plots import attention_figure, require_matplotlib
    from .inspect.trace import trace

    require_matplotlib()  # before the model loads: a missing matplotlib is known at once
    fig = attention_figure(trace(args.text, model_from_args(args, as_stored)), args.layer, args.head, args.scale.replace("-", "_"))
    try:
        fig.savefig(args.out, dpi=150)
    except (OSError, ValueError) as e:  # ValueError: a file ending matplotlib cannot write
        raise InputError(f"cannot write {args.out} ({e}); pass --out with a writable .png, .svg or .pdf path") from e
    emit(f"wrote {args.out}")
    return 0


def _add_embed(sub) -> None:
    em = sub.add_parser("embed", help="one vector per text: the encoder's hidden states pooled (sentence embeddings)")
    em.add_argument("text", nargs="*", help="one or more texts (or --input FILE)")
    em.add_argument("--pooling", choices=POOLINGS, default="mean",
                    help="mean of the tokens' vectors (default), the [CLS] vector, or the largest value per dimension")
    em.add_argument("--normalize", action="store_true", help="scale each vector to length 1 (dot product = cosine)")
    em.add_argument("--max-length", type=int, default=None,
                    help="tokens per text at most; longer texts are cut (default: the model's max_seq_length or positions)")
    em.add_argument("--json", action="store_true",
                    help="print JSON: the vector of one text, or a list of vectors (default: one line of numbers per text)")
    add_model_options(em)
    add_file_options(em)


def _run_embed(args: argparse.Namespace) -> int:
    """Print the embeddings of ``args.text``: one line of H numbers per text, or JSON as bertfn.embed(...).tolist()."""
    from .tasks.embed import embed

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


def _add_view(sub) -> None:
    vw = sub.add_parser("view", help="write the explorer: one self-contained HTML page to look inside the forward pass")
    vw.add_argument("text", help="the text to run through the model (put in [MASK]s to see the predictions)")
    vw.add_argument("--pair", default=None, help="a second segment, as in BERT's sentence pairs")
    vw.add_argument("--top-k", type=int, default=5, help="predictions kept per [MASK] and per layer (default 5)")
    vw.add_argument("--out", default="view.html", help="HTML file to write (default view.html)")
    add_model_options(vw)


def _run_view(args: argparse.Namespace) -> int:
    """Trace ``args.text`` and write the explorer page (see :mod:`bertfn.inspect.explorer`)."""
    from .inspect.page_arrays import PageArrays
    from .inspect.trace import trace

    rec = trace(args.text, m := model_from_args(args, as_stored), pair=args.pair, store=PageArrays(m.config, m, args.top_k))  # the page only
    path = rec.save_html(args.out, top_k=args.top_k)
    size = path.stat().st_size
    emit(f"wrote {path} ({len(rec.tokens)} tokens, "
         f"{f'{size / 1e6:.1f} MB' if size >= 1e6 else f'{size / 1e3:.0f} kB'}); open it in a browser")
    return 0


COMMANDS: dict[str, tuple[Callable, Callable[[argparse.Namespace], int]]] = {
    "fill-mask": (_add_fill_mask, _run_fill_mask),
    "score": (_add_score, _run_score),
    "attention": (_add_attention, _run_attention),
    "embed": (_add_embed, _run_embed),
    "view": (_add_view, _run_view),
}
"""Subcommand name -> (add its parser to the subparsers, run it on the parsed arguments)."""


class _Parser(argparse.ArgumentParser):
    """argparse, except that a bad command line raises :class:`InputError` (one line, exit 2) instead of
    printing the usage and exiting. Subcommand parsers are of this class too."""

    def error(self, message: str) -> None:
        raise InputError(f"{message}; see '{self.prog} --help'")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(prog="bertfn", description="BERT as pure functions over a Hugging Face checkpoint.")
    parser.add_argument("--version", action="version", version=f"bertfn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add, _ in COMMANDS.values():
        add(sub)
    return parser


def _one_line(kind: str, message: object) -> None:
    print(f"bertfn: {kind}: {' '.join(str(message).split())}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return its exit code.

    Every failure ends here as one line on stderr and an exit code (see the module docstring),
    never a traceback. Messages spell options the CLI way (``--cased``, not ``lowercase=False``).
    """
    surface = SURFACE.set("cli")
    try:
        with warnings.catch_warnings():
            warnings.showwarning = lambda message, *_, **__: _one_line("warning", message)
            args = build_parser().parse_args(argv)
            if getattr(args, "quiet", False):
                warnings.simplefilter("ignore")
            return COMMANDS[args.command][1](args)
    except BertfnError as e:
        _one_line("error", e)
        return e.exit_code
    except BrokenPipeError:  # the reader of stdout went away: stop quietly, with the shell's code for it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM during a file run (bertfn.corpus.files.Terminated)
        _one_line("error", str(e) or "interrupted")
        return getattr(e, "exit_code", 130)
    except Exception as e:
        if os.environ.get("BERTFN_DEBUG"):
            raise
        _one_line("error", f"unexpected {type(e).__name__}: {e} (a bug in bertfn: please report it; "
                           "BERTFN_DEBUG=1 shows the traceback)")
        return 1
    finally:
        SURFACE.reset(surface)


if __name__ == "__main__":
    sys.exit(main())
