"""The checks of options every pipeline, trace and corpus run makes, written once, and the one refusal of a text the
model cannot read.

    count("batch_size", batch_size)                    a positive integer (a bool is none), else InputError
    count("top_k", top_k, none="every label")          ... or None, which the message says what it means
    count("doc_stride", doc_stride, least=0)           a non-negative integer
    flag("truncation", truncation)                     True or False
    one_of("method", method, METHODS)                  one of a set of names
    too_long(f"text {i}", n, limit, TRUNCATE)          the InputError of a text longer than the model reads
    refuse_long(lengths, limit, TRUNCATE)              ... raised for the first of the texts that is

Each raises (or, for :func:`too_long`, returns) :class:`~bertfn.errors.InputError` with the message the caller's
option names: ``batch_size must be a positive integer, got 0``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from ..errors import InputError, syntax


def count(name: str, value: object, *, least: int = 1, none: str | None = None, why: str | None = None) -> None:
    """Refuse ``value`` unless it is an integer of at least ``least`` (a bool is no integer here), or None where
    ``none`` says what None means.

    Args:
        name: the option as Python names it (``"batch_size"``); the message names the command line's flag there
            (``--batch-size``).
        value: what was passed.
        least: 1: a positive integer; 0: a non-negative one (no other).
        none: None is allowed, and means this (``"every label"``: the message says "or None (every label)").
        why: what the number means, said after "integer" in parentheses.

    Raises:
        InputError: ``"batch_size must be a positive integer, got 0"``.
    """
    if value is None and none is not None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        kind = "a non-negative" if least == 0 else "a positive"
        name = syntax(python=name, cli="--" + name.replace("_", "-"))  # on the command line its flag: --batch-size
        raise InputError(f"{name} must be {kind} integer{f' ({why})' if why else ''}"
                         f"{f' or None ({none})' if none is not None else ''}, got {value!r}")


def flag(name: str, value: object) -> None:
    """Refuse ``value`` unless it is True or False.

    Args:
        name: the option, as the message names it.
        value: what was passed.

    Raises:
        InputError: ``"truncation must be True or False, got 'yes'"``.
    """
    if not isinstance(value, bool):
        raise InputError(f"{name} must be True or False, got {value!r}")


def one_of(name: str, value: object, choices: Collection[str], *, none: str | None = None) -> None:
    """Refuse ``value`` unless it is one of ``choices``, or None where ``none`` says what None means.

    Args:
        name: the option, as the message names it.
        value: what was passed.
        choices: the names it may be, in the order the message lists them.
        none: None is allowed, and means this (``"the model's own"``).

    Raises:
        InputError: ``"method must be one of 'original', 'within_word_l2r', got 'l2r'"``.
    """
    if value is None and none is not None:
        return
    if not isinstance(value, str) or value not in choices:
        listed = ", ".join(map(repr, choices))
        raise InputError(f"{name} must be one of {listed}{f' or None ({none})' if none is not None else ''}, "
                         f"got {value!r}")


def truncate(does: str) -> str:
    """The advice of :func:`too_long` for a task that cuts long texts when asked: shorten the text, or pass
    ``truncation=True`` (``--truncation`` on the command line), which ``does`` this.

    Args:
        does: what the truncation does, e.g. "to cut it as transformers' pipeline does".
    """
    return f"shorten it, or pass {syntax(python='truncation=True', cli='--truncation')} {does}"


def too_long(what: str, n: int, limit: int, advice: str = "shorten it", *, paired: bool = False) -> InputError:
    """The error for a text longer than the model reads: ``"text 3 is 70 tokens long but the model reads at most 64;
    shorten it"``.

    Args:
        what: the text, as the message names it (``"text 3"``).
        n: its tokens, the template's special tokens included.
        limit: the tokens the model reads at most.
        advice: what to do about it (:func:`truncate` where the task can cut it).
        paired: the text was read with its pair ("text 3 is 70 tokens long with its pair but ...").

    Returns:
        The :class:`~bertfn.errors.InputError` to raise.
    """
    return InputError(f"{what} is {n} tokens long{' with its pair' if paired else ''} but the model reads at most "
                      f"{limit}; {advice}")


def refuse_long(lengths: Sequence[int], limit: int, advice: str = "shorten it", *,
                named: Callable[[int], str] = lambda i: f"text {i}", paired: bool = False) -> None:
    """Raise :func:`too_long`'s error for the first of the texts longer than ``limit`` tokens, if any.

    Args:
        lengths: each text's tokens, the template's special tokens included.
        limit: the tokens the model reads at most.
        advice: what to do about it.
        named: the i-th text as the message names it (``"text 3"``; choose's ``"text 3 with choice 1"``).
        paired: the texts were read with their pairs.

    Raises:
        InputError: ``"text 3 is 70 tokens long but the model reads at most 64; shorten it"``.
    """
    for i, n in enumerate(lengths):
        if n > limit:
            raise too_long(named(i), n, limit, advice, paired=paired)
