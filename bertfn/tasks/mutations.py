"""Variants of a reference text scored by masked (or wild-type) marginals: every substitution read off one matrix.

The cheap score of protein language models for point mutations (Meier et al. 2021, "Language models
enable zero-shot prediction of the effects of mutations on protein function"): mask each position
of the *reference* once, keep the log-probabilities the model gives every token of the vocabulary
there (:func:`substitution_matrix`, a (positions, vocabulary) matrix), and score a variant by the sum
over the positions where it differs from the reference::

    score(variant) = sum_{j changed} log P(variant_j | reference with j masked) - log P(reference_j | same)

(:func:`score_mutations`). n positions cost n masked copies of the reference, once, for any number
of variants. Meier et al.'s *wild-type marginal* (``method="wt_marginal"``) reads the same difference
off one pass of the reference with nothing masked:

    score(variant) = sum_{j changed} log P(variant_j | reference) - log P(reference_j | reference)

one pass for any number of variants, but the model sees the reference's own token at j. The PLL
change of each variant (``method="pll"``, :func:`~bertfn.tasks.scoring.score` of the variant minus
that of the reference) costs n copies per variant. They rank point mutants alike without being equal:
the marginals read every variant in the reference's context.
"""

from __future__ import annotations

import math
import re
import weakref
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import torch

from ..checkpoint.checks import count, one_of
from ..checkpoint.model import Model
from ..checkpoint.resolve import get_model, require_mlm_head, require_tokenizer, text_list, texts_and_model
from ..checkpoint.tokenizer import Encoding, Tokenizer
from ..errors import DependencyError, InputError, clipped, syntax
from ..fast.kernels import Stamp, made_from, stamp, versioned
from ..model.encoder import encoder
from ..model.heads import mlm_head
from ..model.family import longest_input
from .runner import finished
from .scoring import BATCH_SIZE, check_scorable, masked_copies, score, target_log_softmax
from .task import Task

MUTATION_METHODS = ("masked_marginal", "pll", "wt_marginal")
CODES = re.compile(r"(?:\w+:)?[A-Z]\d+[A-Z](?:[\s,:;]+(?:\w+:)?[A-Z]\d+[A-Z])*")
"""Mutation codes ("E1Q", "H:E1Q", "E1Q:V37P"): what a variant written as codes looks like, for the error that says so."""


@dataclass(frozen=True, repr=False)
class Substitutions:
    """The masked (or wild-type) marginals of one reference text.

    Position j is numbered j + 1 in mutation codes (``"S30A"``: S at the 30th scored token, to A).

    Attributes:
        text: the reference.
        tokens: (L,) its scored tokens ([CLS] and [SEP] left out).
        ids: (L,) their ids.
        log_probs: (L, V) float32 on the CPU, row j the log-softmax over the vocabulary at scored
            token j with that token masked (columns: token ids); with ``masked`` False, in the reference as it is.
        vocabulary: (V,) the token of each column.
        masked: each row from its own masked copy (masked marginals), or all from one unmasked pass
            (wild-type marginals).
    """

    text: str
    tokens: list[str]
    ids: list[int]
    log_probs: torch.Tensor
    vocabulary: list[str]
    masked: bool = True

    def __repr__(self) -> str:
        """A line, not the (L, V) matrix and the vocabulary (thousands of characters in a notebook's output)."""
        kind = "masked" if self.masked else "wild-type"
        return (f"Substitutions({clipped(self.text)}: {kind} marginals, {len(self.tokens)} scored tokens x "
                f"{len(self.vocabulary)} vocabulary tokens in .log_probs; .effects() scores each substitution)")

    def effects(self) -> torch.Tensor:
        """The score of every single substitution: log P(token) - log P(reference token) at each position.

        Returns:
            (L, V), rows positions and columns tokens as in :attr:`log_probs`.
        """
        return self.log_probs - self.log_probs.gather(1, torch.tensor(self.ids)[:, None])

    def save(self, path: str | Path) -> Path:
        """Write :attr:`log_probs` to ``path``, its format by its ending.

        Args:
            path: a file ending in ``.npy`` (the (L, V) float32 array alone), ``.csv`` / ``.tsv`` (a row per
                position: ``position``, ``token``, then a column per vocabulary token) or ``.parquet`` (the
                same table; needs pandas and pyarrow).

        Returns:
            ``path``, as a Path.

        Raises:
            InputError: another ending, or a path that cannot be written (a folder that does not exist, no
                permission).
            DependencyError: ``.parquet`` without pandas or pyarrow.
        """
        path = check_matrix_name(path)
        try:
            self._write(path)
        except OSError as e:
            raise InputError(f"cannot write {path} ({e.strerror or e}); pass a writable path (its folder must "
                             "exist)") from e
        return path

    def _write(self, path: Path) -> None:
        """Write :attr:`log_probs` to ``path`` as :meth:`save` says (its ending already checked)."""
        if path.suffix == ".npy":
            import numpy as np

            np.save(path, self.log_probs.numpy())
            return
        rows = [[j + 1, t, *row] for j, (t, row) in enumerate(zip(self.tokens, self.log_probs.tolist()))]
        header = ["position", "token", *self.vocabulary]
        if path.suffix == ".parquet":  # pandas and pyarrow found by check_matrix_name
            import pandas as pd

            pd.DataFrame(rows, columns=header).to_parquet(path, index=False)
            return
        import csv

        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, delimiter="\t" if path.suffix == ".tsv" else ",")
            writer.writerow(header)
            writer.writerows([*r[:2], *(f"{x:.7g}" for x in r[2:])] for r in rows)


def check_matrix_name(path: str | Path) -> Path:
    """``path`` as a Path, if its ending names a format :meth:`Substitutions.save` writes and the packages it needs are
    installed (checked before a matrix is made: ``bertfn score --matrix`` says so before the model loads).

    Raises:
        InputError: another ending.
        DependencyError: ``.parquet`` without pandas or pyarrow (the parquet engine pandas looks for).
    """
    path = Path(path)
    if path.suffix not in (".npy", ".csv", ".tsv", ".parquet"):
        raise InputError(f"cannot write the substitution matrix as {path.name}: its name must end in .npy, .csv, "
                         ".tsv or .parquet")
    if path.suffix == ".parquet" and not all(find_spec(name) for name in ("pandas", "pyarrow")):
        raise DependencyError("writing .parquet needs pandas and pyarrow: pip install pandas pyarrow, or write .npy "
                              "or .csv")
    return path


def substitution_matrix(
    reference: str,
    model: Model | str | Path | None = None,
    *,
    batch_size: int = BATCH_SIZE,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
) -> Substitutions:
    """The masked marginals of ``reference``: each scored token masked once, the whole log-softmax kept.

    One masked copy per token, as :func:`~bertfn.tasks.scoring.score` makes with ``method="original"``.
    Mirrors, per position j: ``BertForMaskedLM(ids with j masked).logits[0, j].log_softmax(-1)``.

    Args:
        reference: one text.
        model: as in :func:`~bertfn.tasks.scoring.score`.
        batch_size: as in :func:`~bertfn.tasks.scoring.score`.
        device: as in :func:`~bertfn.tasks.scoring.score`.
        dtype: as in :func:`~bertfn.tasks.scoring.score`.

    Returns:
        The matrix, its ``.log_probs`` (L, V).

    Raises:
        InputError: a reference that is not one text or cannot be scored, or a bad batch_size.
        MissingPartError: a model without a tokenizer or without the masked-LM head.
    """
    reference, model = texts_and_model(reference, model, "substitution_matrix")
    if not isinstance(reference, str):
        raise InputError(f"substitution_matrix takes one reference text, got {type(reference).__name__}; "
                         "call it once per reference")
    text_list(reference, "score")
    count("batch_size", batch_size)
    m = get_model(model, device, dtype)
    return _cached_substitutions(m, reference, batch_size)  # score_mutations of its variants then reads it again


def _checked_reference(m: Model, reference: str) -> tuple[Encoding, int]:
    """The reference's encoding (one row) and its number of tokens, checked as :func:`score` checks a text.

    Raises:
        InputError: a reference that cannot be scored (named "the reference").
        MissingPartError: a model without a tokenizer or without the masked-LM head.
    """
    tok = require_tokenizer(m, "substitution_matrix")
    require_mlm_head(m, syntax("substitution_matrix", "score --reference"))
    enc = tok([reference])
    n = int(enc.attention_mask[0].sum())
    try:
        check_scorable(tok, enc, [n], [reference], longest_input(m.config))
    except InputError as e:
        raise InputError(re.sub(r"\btext 0\b", "the reference", str(e), count=1)) from None
    return enc, n


def _substitutions(m: Model, reference: str, batch_size: int, masked: bool = True) -> Substitutions:
    """The :class:`Substitutions` of ``reference``: masked marginals, or with ``masked`` False the wild-type ones."""
    enc, n = _checked_reference(m, reference)
    tok = m.tokenizer
    copies, _ = masked_copies(enc, [n], tok.mask_token_id, "original", tok.pad_token_id)
    if masked:
        out = target_log_softmax(m, copies, lambda rows, lp: lp.cpu(), batch_size)  # (L, V)
    else:  # one pass of the reference as it is, read at every scored token
        out = torch.empty(len(copies.target), m.config.vocab_size)
        with torch.inference_mode():
            ids, mask, types = (t.to(m.device) for t in (enc.input_ids, enc.attention_mask, enc.token_type_ids))
            h = encoder(m.params, ids, mask, types).last_hidden_state[0, copies.target]  # (L, H)
            out[:] = mlm_head(m.params, h).float().log_softmax(dim=-1).cpu()  # (L, V)
    vocab = tok.backend.get_vocab()
    columns = [""] * m.config.vocab_size
    for token, i in vocab.items():
        if i < len(columns):
            columns[i] = token
    return Substitutions(reference, [enc.tokens[0][j] for j in copies.target], list(copies.truth), out, columns,
                         masked)


_last: tuple[weakref.ref, Stamp, str, Substitutions] | None = None  # the last matrix: (model, its weights' stamp,
# reference, matrix)


def _cached_substitutions(m: Model, reference: str, batch_size: int, masked: bool = True) -> Substitutions:
    """:func:`_substitutions`, kept for the next call with the same model, reference and kind of marginal.

    A file run scores its variants a piece at a time, and the reference's matrix is the costly part (``bertfn score
    --reference R --matrix FILE --input variants`` writes it and scores the file on one). The model is held by a weak
    reference: the cache never keeps a model alive that its caller let go; a weight changed in place since (its
    version counter moved) or replaced by another tensor makes the matrix anew (:func:`~bertfn.fast.kernels.made_from`).

    Args:
        m: the model.
        reference: the reference text.
        batch_size: masked copies per encoder pass, at most.
        masked: masked marginals (else wild-type ones).
    """
    global _last
    weights = versioned(m.state)
    last = _last  # read once: another thread may put its own matrix there meanwhile
    if last is None or last[0]() is not m or last[2] != reference or last[3].masked != masked \
            or not made_from(last[1], weights):
        last = _last = (weakref.ref(m), stamp(weights), reference, _substitutions(m, reference, batch_size, masked))
    return last[3]


def score_mutations(
    variants: str | list[str],
    model: Model | str | Path | None = None,
    *,
    reference: str | None = None,
    method: str = "masked_marginal",
    batch_size: int = BATCH_SIZE,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
) -> dict | list[dict]:
    """How much a masked LM prefers each variant of ``reference`` to the reference (natural log).

    A variant's dict:

        {"text": variant, "method": "masked_marginal", "score": -1.93,
         "mutations": [{"code": "S30A", "position": 30, "from": "S", "to": "A", "delta": -1.93}]}

    A variant tokenizes to as many tokens as the reference and differs from it by substitutions
    only; ``position`` counts scored tokens from 1 (for a chain written one residue per word, the
    residue number). The reference itself scores 0.

    Args:
        variants: one variant, or a list of them.
        model: as in :func:`~bertfn.tasks.scoring.score`.
        reference: the text the variants are variants of (required).
        method: "masked_marginal": ``score`` is the sum of the ``delta``s read off
            :func:`substitution_matrix` (one pass over the reference for all variants); "wt_marginal": the
            ``delta``s are read off one pass of the unmasked reference (wild-type marginals); "pll": ``score`` is
            the variant's PLL minus the reference's (:func:`~bertfn.tasks.scoring.score`, n passes per variant),
            and each mutation's ``delta`` is still its masked marginal.
        batch_size: as in :func:`~bertfn.tasks.scoring.score`.
        device: as in :func:`~bertfn.tasks.scoring.score`.
        dtype: as in :func:`~bertfn.tasks.scoring.score`.

    Returns:
        Per variant, a dict as above; a list of variants gives a list of dicts, in order.

    Raises:
        InputError: no reference, an unknown method, a variant with another number of tokens than the
            reference (insertions and deletions: compare PLLs), or one that differs from it where either reads as
            the unknown token ([UNK], <unk>: not in the vocabulary, as small letters are in a vocabulary of capitals).
    """
    variants, model = texts_and_model(variants, model, "score_mutations")
    variants, single = text_list(variants, "score")
    if not isinstance(reference, str):
        raise InputError(f"score_mutations needs the reference the variants are variants of: reference= one text "
                         f"(--reference TEXT), got {type(reference).__name__}")
    one_of("method", method, MUTATION_METHODS)
    count("batch_size", batch_size)
    m = get_model(model, device, dtype)
    reference = text_list(reference, "score")[0][0]
    ref, n_ref = _checked_reference(m, reference)
    tok = m.tokenizer
    enc = tok(variants)
    lengths = enc.attention_mask.sum(dim=1).tolist()
    check_scorable(tok, enc, lengths, variants, longest_input(m.config))
    reference_ids = _scored_ids(ref, 0, n_ref)[1]
    changes = [_changes(tok, enc, i, n, variants[i], reference_ids) for i, n in enumerate(lengths)]  # before any pass
    subs = _cached_substitutions(m, reference, batch_size, masked=method != "wt_marginal")
    results = []
    for text, changed in zip(variants, changes):
        mutations = []
        for j, old, new in changed:
            delta = float(subs.log_probs[j, new] - subs.log_probs[j, old])
            source, target = subs.vocabulary[old], subs.vocabulary[new]
            mutations.append({"code": f"{source}{j + 1}{target}", "position": j + 1, "from": source, "to": target,
                              "delta": delta})
        results.append({"text": text, "method": method, "score": math.fsum(x["delta"] for x in mutations),
                        "mutations": mutations})
    if method == "pll":
        base = score(subs.text, m, batch_size=batch_size)["pll"]
        for r, s in zip(results, score(variants, m, batch_size=batch_size)):
            r["score"] = s["pll"] - base
    return finished(results, enc.unknown, single)


def _scored_ids(enc: Encoding, i: int, n: int) -> tuple[list[int], list[int]]:
    """Row ``i``'s scored positions (its words' tokens: not [CLS], [SEP]) among its ``n`` tokens, and their ids."""
    scored = [k for k, w in enumerate(enc.word_ids[i][:n]) if w is not None]
    row = enc.input_ids[i, :n].tolist()  # one copy to Python, not an element at a time
    return scored, [row[k] for k in scored]


def _changes(tok: Tokenizer, enc: Encoding, i: int, n: int, text: str, reference: list[int]) -> list[tuple[int, int, int]]:
    """Where variant ``i`` (``text``, ``n`` tokens) differs from the reference's scored ids: ``(j, old id, new id)``.

    Raises:
        InputError: another number of scored tokens than the reference's, or a difference where either reads as the
            unknown token.
    """
    scored, ids = _scored_ids(enc, i, n)
    if len(ids) != len(reference):
        hint = (f"; {clipped(text, 40)} looks like mutation codes, and "
                f"{syntax(python='score_mutations', cli='score --reference')} reads each variant's whole text "
                "(the reference with its substitutions made)" if CODES.fullmatch(text.strip()) else "")
        raise InputError(f"text {i} has {len(ids)} tokens to score and the reference {len(reference)}; "
                         f"{syntax(python='score_mutations', cli='score --reference')} scores substitutions only, "
                         "whatever its method (for insertions or deletions compare PLLs: "
                         f"{syntax(python='bertfn.score of each text', cli='bertfn score TEXT ... alone')}){hint}")
    changed = []
    for j, (old, new) in enumerate(zip(reference, ids)):
        if old != new:
            if tok.unk_token_id in (old, new):
                start, end = enc.offsets[i][scored[j]]
                which = f"its {text[start:end]!r}" if new == tok.unk_token_id else "the reference's token"
                raise InputError(f"text {i} differs from the reference at position {j + 1}, where {which} reads as "
                                 f"{tok.unk_token} (not in the model's vocabulary), so its score would mean "
                                 "nothing; write it in tokens the vocabulary holds (a protein model's: capital "
                                 "one-letter residues)")
            changed.append((j, old, new))
    return changed


TASK = Task("score-mutations", score_mutations, probe=lambda m, options: options.get("reference") or "a",
            command=False)  # bertfn score --reference runs it
"""The task (:mod:`bertfn.tasks.task`) :func:`score_mutations` is: ``bertfn score --reference``, the corpus's
``ScoreMutations``."""
