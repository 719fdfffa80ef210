"""What the pipeline-level calls accept, turned into what the functions need.

Every call that reads text (``fill_mask``, ``trace``, ``score``, ``embed``, the explorer, the plots)
takes the texts first and the model second, and the model as a loaded :class:`~bertfn.checkpoint.loading.Model`,
a local folder or a hub id (:func:`get_model`). A dtype may be a ``torch.dtype`` or the string a
user would type (:func:`~bertfn.checkpoint.dtypes.resolve_dtype`). When a model lacks a part the call needs, the error is
always a :class:`~bertfn.errors.MissingPartError` saying which part and what to load instead.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..errors import InputError, MissingPartError, clipped, syntax
from ..model.params import Params
from .dtypes import resolve_dtype
from .loading import load
from .model import Model, usable_device
from .tokenizer import Tokenizer, check_text

DEFAULT_MODEL = "google-bert/bert-base-uncased"

_models: dict[tuple, tuple[tuple, Model]] = {}  # (name or folder, device, dtype, prepare) -> (its files' stamp, model)
_models_lock = threading.Lock()


def get_model(model: Model | str | Path | None, device: str | torch.device | None = None,
              dtype: torch.dtype | str | None = None,
              prepare: Callable[[dict[str, torch.Tensor]], object] | None = None) -> Model:
    """A loaded model on ``device`` in ``dtype``: given, or loaded once per process by name, device and dtype (a local
    folder's again when its files change: :func:`on_disk`).

    A given :class:`Model` on another device or in another dtype is converted for this call only; load it
    with ``device=`` / ``dtype=`` to avoid that. A given :class:`Model` is never changed.

    Args:
        model: a loaded :class:`Model`, a local folder or a hub id (default: bert-base-uncased, as stored).
        device: where the model runs (None: where it is, or the CPU).
        dtype: its precision, a ``torch.dtype`` or a string (:func:`~bertfn.checkpoint.dtypes.resolve_dtype`).
        prepare: a change made once to the state of a model loaded by name, which is then kept apart
            from the plain one under the same name. The calls that run on the fast path alone pass
            :func:`~bertfn.fast.choice.pack_state`, so such a model holds its linear weights once, in the
            layout the fast path reads (``load``'s ``prepare``).

    Raises:
        InputError: ``Params`` or a state_dict (no tokenizer), anything else that is no model, or a device that
            cannot be used (:func:`~bertfn.checkpoint.model.usable_device`).
    """
    dtype = resolve_dtype(dtype)
    if isinstance(model, Model):
        want = None if device is None else usable_device(device)
        if want is not None and want.type == "cuda" and want.index is None and torch.cuda.is_available():
            want = torch.device("cuda", torch.cuda.current_device())  # "cuda" is the current GPU: cuda:0 is already there
        same_device = want is None or model.device == want
        return model if same_device and dtype in (None, model.dtype) else model.to(device, dtype)
    if isinstance(model, (Params, dict)):
        raise InputError(f"this call reads text, so it needs a loaded model with its tokenizer, got {type(model).__name__}; "
                         "pass the Model from bertfn.load(...), a local folder or a hub id")
    if model is not None and not isinstance(model, (str, Path)):
        raise InputError(f"model must be a Model from bertfn.load, a local folder or a hub id, got {type(model).__name__}")
    name = str(model) if model is not None else DEFAULT_MODEL
    where, stamp = on_disk(name)
    key = (where, None if device is None else str(device), dtype, prepare)
    with _models_lock:
        kept = _models.get(key)
        if kept is None or kept[0] != stamp:  # new, or its files changed since (saved again, fine-tuned further)
            kept = _models[key] = (stamp, load(name, device=device, dtype=dtype, prepare=prepare))
        return kept[1]


def on_disk(name: str) -> tuple[str, tuple]:
    """Where a model named ``name`` lies and a stamp of its files, for :func:`get_model`'s cache: a local folder or
    file by its absolute path (``./tuned`` names another folder after ``os.chdir``) and each file's name, size and
    modification time (a folder saved again loads again); a hub id as it is, with no stamp (the hub's cache holds a
    revision's files unchanged).

    Args:
        name: a local folder, a weights file or a hub id.
    """
    path = Path(name).expanduser()
    try:
        if path.is_file():
            st = path.stat()
            return os.path.abspath(path), ((path.name, st.st_mtime_ns, st.st_size),)
        if not path.is_dir():
            return name, ()
        stamp, folders = [], [str(path)]
        for folder in folders:  # the folder's files, and its subfolders' (a sentence-transformers folder's modules)
            with os.scandir(folder) as entries:
                for e in entries:
                    if e.is_dir() and folder == folders[0]:
                        folders.append(e.path)
                    elif e.is_file():
                        st = e.stat()
                        stamp.append((e.path, st.st_mtime_ns, st.st_size))
        return os.path.abspath(path), tuple(sorted(stamp))
    except OSError:  # unreadable: load says so
        return name, ()


def require_tokenizer(m: Model, what: str) -> Tokenizer:
    """``m.tokenizer``, or :class:`MissingPartError` saying that ``what`` needs one and how to give it.

    Args:
        m: the model.
        what: the call that needs it, for the message.

    Raises:
        MissingPartError: the model has no tokenizer.
    """
    if not m.tokenizer:  # a NoTokenizer
        raise MissingPartError(
            f"{what} needs a tokenizer, and model {m.name!r} has none; load it with "
            f"{syntax(python='bertfn.load(..., tokenizer=PATH)', cli='--tokenizer PATH')} "
            "(a vocab.txt, tokenizer.json or a folder holding one)")
    return m.tokenizer


def fits(m: Model) -> str:
    """What model ``m`` is and which call runs it, for the message of a call that does not fit it:
    ``"model 'sst2' is a DistilBertForSequenceClassification (2 labels: NEGATIVE, POSITIVE): use bertfn.classify"``.

    Args:
        m: the model.
    """
    python, cli = m.head.call
    named = str(m.head)
    return f"model {m.name!r} is a{'n' * (named[:1] in 'AEIOU')} {named}: use {syntax(python=python, cli=cli)}"


def require_mlm_head(m: Model, what: str) -> None:
    """Check that ``m`` has the masked-LM head (``cls.predictions.*``) that ``what`` needs.

    Args:
        m: the model.
        what: the call that needs it, for the message.

    Raises:
        MissingPartError: the model has no masked-LM head: a fine-tuned checkpoint (naming the call that runs it,
            :func:`fits`) or an encoder alone.
    """
    root = m.params
    if "cls.predictions.decoder.weight" not in root:
        if m.head.task != "encoder":
            raise MissingPartError(f"{what} needs a masked-LM head, and {fits(m)}")
        head = root.key("cls.predictions.decoder.weight").rsplit(".", 2)[0]  # lm_head, generator_lm_head, ...
        raise MissingPartError(
            f"{what} needs the masked-LM head ({head}.*), and model {m.name!r} has none (an encoder-only "
            "checkpoint); load a *ForMaskedLM or *ForPreTraining checkpoint")


def require_head(m: Model, task: str, what: str) -> None:
    """Check that ``m`` carries ``task``'s head (:attr:`Model.head`), which ``what`` runs.

    Args:
        m: the model.
        task: one of :data:`~bertfn.model.task_heads.TASKS`.
        what: the call that needs it, for the message.

    Raises:
        MissingPartError: the model carries another head or none, naming the call that runs it (:func:`fits`).
    """
    if m.head.task != task:
        raise MissingPartError(f"{what} needs a {task} head, and {fits(m)}")


def head_labels(m: Model, head: str | None, labels: Sequence[str] | None, what: str) -> tuple[str, ...]:
    """The names of the outputs of the head that ``head`` and ``labels`` choose, checked as :func:`bertfn.classify`
    checks its ``head=`` and ``labels=`` (the same errors, naming ``what``).

    Args:
        m: the model.
        head: None: the checkpoint's sequence classifier; a key prefix of
            :attr:`~bertfn.checkpoint.model.Model.extra_heads` (``"cls.species"``): that linear head on the pooler's
            output, ``{head}.weight`` (n, H) and ``{head}.bias`` (n,).
        labels: the names of the head's n outputs, in order; None: the config's ``id2label`` (an extra head's
            ``LABEL_0``, ``LABEL_1``, ...).
        what: the call that runs the head, for the messages (``"token_attributions"``).

    Returns:
        The n names.

    Raises:
        InputError: a ``head`` that is no string, ``labels`` that are not one name per output.
        MissingPartError: no sequence classifier (``head`` None; naming the extra heads where there are some), or no
            extra head ``head``.
    """
    if head is not None and not isinstance(head, str):
        raise InputError(f"head must be the key prefix of a linear head (e.g. 'cls.species'), got {head!r}")
    if head is None:
        try:
            require_head(m, "sequence-classification", what)
        except MissingPartError as e:
            if not m.extra_heads:
                raise
            raise MissingPartError(f"{e}; or run one of the linear heads it holds beside its own parts with "
                                   f"{syntax(python='head=', cli='--head ')}{', '.join(m.extra_heads)}") from None
        names = m.head.labels
    elif head in m.extra_heads:
        names = tuple(f"LABEL_{i}" for i in range(m.extra_heads[head]))
    else:
        found = f"its extra heads are {', '.join(m.extra_heads)}" if m.extra_heads else "it holds none"
        raise MissingPartError(
            f"{what} with head={head!r} needs a linear head on the pooler's output stored as {head}.weight (n, H) "
            f"and {head}.bias (n,), and model {m.name!r} has no such head ({found}); pass one of its extra heads, or "
            f"leave {syntax(python='head', cli='--head')} out to run the checkpoint's own classifier")
    if labels is not None:
        if isinstance(labels, str) or len(labels) != len(names) or not all(isinstance(x, str) for x in labels):
            commas = len(labels) == 1 and "," in labels[0] and len(labels[0].split(",")) == len(names)
            hint = f"; {syntax(python='pass a list of names', cli='separate them by spaces')}, not commas" if commas else ""
            raise InputError(f"{syntax(python='labels', cli='--labels')} must be {len(names)} names, one per output "
                             f"of the head, got {labels!r}{hint}")
        names = tuple(labels)
    return names


def _looks_like_text(s: object) -> bool:
    """A string with inner spaces or a [MASK] that names no file or folder here.

    Args:
        s: what was passed.
    """
    if not (isinstance(s, str) and (any(c.isspace() for c in s.strip()) or "[MASK]" in s or "<mask>" in s)):
        return False
    try:
        return not Path(s).exists()
    except (OSError, ValueError):  # too long for a file name, or a NUL in it: text
        return True


def texts_and_model(texts, model, what: str, *, old_order: bool = False):
    """``(texts, model)`` of a call written ``what(texts, model)``, checking the order.

    A model first and texts second is the old order of ``trace(model, text)``. Two strings are taken as
    swapped when the second reads like text (spaces or a [MASK]) and is no path here.

    Args:
        texts (object): what was passed first.
        model (object): what was passed second.
        what: the call, for the messages.
        old_order: the old order still works, with a DeprecationWarning; elsewhere it is an :class:`InputError`.

    Raises:
        InputError: the model first, without ``old_order``.

    Warns:
        DeprecationWarning: the model first, with ``old_order``.
    """
    swapped = isinstance(texts, (Model, Params)) or (texts is None and isinstance(model, str)) or (
        _looks_like_text(model) and isinstance(texts, (str, Path)) and not _looks_like_text(str(texts)))
    if not swapped:
        return texts, model
    if old_order:
        warnings.warn(f"{what}(model, text) is the old argument order and will stop working in the next release; "
                      f"write {what}(text, model): texts first, model second, as in every bertfn call",
                      DeprecationWarning, stacklevel=3)
        return model, texts
    name = texts.name if isinstance(texts, Model) else str(texts)[:80] if isinstance(texts, (str, Path)) else "Params"
    raise InputError(f"{what} takes the texts first and the model second: {what}(texts, model); "
                     f"got the model ({name!r}) first")


def one_text(text: object, does: str) -> None:
    """Refuse anything but one string, for a call that reads one text (a page, an attribution).

    Args:
        text: what the caller passed.
        does: what the call does with it, for the message (``"logit_attribution splits the logits of"``).

    Raises:
        InputError: a list (call once per text) or another type.
    """
    if not isinstance(text, str):
        many = f"a list of {len(text)} texts" if isinstance(text, (list, tuple)) else type(text).__name__
        raise InputError(f"{does} one text, got {many}; call it once per text")


def text_list(inputs, what: str, *, blank: bool = False) -> tuple[list[str], bool]:
    """``(texts, single)``: the texts of a call given one text or a sequence of them, and whether it was one.

    A sequence is anything with a length and an order: a list, a tuple, a pandas Series (its values),
    a numpy array of strings (its ``str_`` become ``str``).

    Args:
        inputs (str | Sequence[str]): one text or a sequence of them.
        what: the call, for the messages.
        blank: take an empty or blank text (``""``, ``"   "``), as the task's transformers pipeline answers one
            (classify, tag, embed: the tokenizer makes it ``[CLS] [SEP]``); False: refuse it, where the task has
            nothing to run on one (fill_mask's mask, score's tokens).

    Raises:
        InputError: anything else (a set has no order, a generator no length: pass ``list(...)``), an
            empty sequence, an item that is not a string, or (without ``blank``) a blank one.
    """
    single = isinstance(inputs, str)
    if single:
        texts = [inputs]
    elif isinstance(inputs, (set, frozenset, dict, bytes)) or not hasattr(inputs, "__len__") \
            or not hasattr(inputs, "__iter__") or getattr(inputs, "ndim", 1) != 1:
        raise InputError(f"{what} takes a string or a non-empty list of strings (or another sequence: tuple, pandas "
                         f"Series, numpy array), got {type(inputs).__name__}: {clipped(inputs, 80)}"
                         f"{'; pass list(...) of it' if hasattr(inputs, '__iter__') and getattr(inputs, 'ndim', 1) == 1 else ''}")
    else:
        texts = [str(t) if isinstance(t, str) else t for t in inputs]  # numpy's str_ -> str
    if not texts:
        raise InputError(f"{what} takes a string or a non-empty list of strings, got an empty {type(inputs).__name__}")
    for i, t in enumerate(texts):
        check_text(t, f"text {i}")
        if not blank and not t.strip():
            goal = " with the mask token ([MASK], or <mask> as RoBERTa and ESM-2 spell it) where the word to predict " \
                "goes" if what == "fill_mask" else f" to {syntax(python=what, cli=what.replace('_', '-'))}"
            raise InputError(f"text {i} is empty; write a sentence{goal}")
    return texts, single


def listed(values: object) -> object:
    """``values`` as a list when it is a numpy array or a pandas Series (its items as Python's: numpy's ``str_`` ->
    ``str``), else as it is: where a call takes a list of strings (passages, choices, labels), it takes those too.

    Args:
        values: what the caller passed.
    """
    return values.tolist() if hasattr(values, "tolist") else values


def refuse_empty(text: str, which: str, pipeline: str, write: str) -> None:
    """Raise :class:`InputError` for the empty string, as transformers' ``pipeline`` raises ValueError for it.

    Mirrors the question-answering pipeline (``"`question` cannot be empty"``, ``"`context` cannot be empty"``) and
    the zero-shot one (``"You must include at least one label and at least one sequence."``), which test ``len(...)
    == 0``: a blank text (``"   "``) passes, and they answer it.

    Args:
        text: a string (:func:`~bertfn.checkpoint.tokenizer.check_text` checked).
        which: how the message names it, e.g. ``"text 3's question"``.
        pipeline: the transformers pipeline that refuses it too, e.g. ``"question-answering"``.
        write: what to do instead, e.g. ``"write the question to answer"``.

    Raises:
        InputError: ``text`` is ``""``.
    """
    if text == "":
        raise InputError(f"{which} is empty (''), which transformers' {pipeline} pipeline refuses too; {write}")


def flag_unknown(results: list, unknown: dict[int, str] | None) -> list:
    """``results`` with ``"warning": ...`` set in each dict of text i's result for every text i that ``unknown`` names.

    As a file run flags its lines: fill_mask's answers and score's dicts say so themselves, not only the warning.

    Args:
        results: one per text, as a task returns them (changed in place).
        unknown: the texts that are mostly [UNK] (:attr:`Encoding.unknown`), ``{index: message}``.

    Returns:
        ``results``.
    """
    def add(result: object, message: str) -> None:
        if isinstance(result, dict):
            result["warning"] = message
        elif isinstance(result, list):
            for r in result:
                add(r, message)

    for i, message in (unknown or {}).items():
        add(results[i], message)
    return results
