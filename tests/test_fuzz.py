"""Arbitrary Unicode through fill_mask and the CLI: a right-shaped answer or a bertfn error, nothing else.

The texts mix every kind of code point (control characters, lone surrogates, emoji, odd spaces),
[MASK] in many spellings and numbers, and lengths up to thousands of characters. An oracle
computed from the tokenizer says, for each text, whether fill_mask must answer or refuse and why;
the library and the CLI must agree with it and with each other.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import bertfn
from bertfn.cli import counted_from_one, main
from bertfn.errors import SURFACE

P = 64  # max_position_embeddings of the test checkpoints

# Arbitrary Unicode against the test checkpoint's small vocabulary is mostly [UNK], on purpose: bertfn's note on it
# (from fill_mask and from the oracle's own tokenizer calls) is expected here, every example.
pytestmark = pytest.mark.filterwarnings(r"ignore:.*tokens are \[UNK\]:bertfn.UnknownTokensWarning")

PIECES = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=12),  # any code point, surrogates included
    st.text(st.characters(categories=["Cc", "Cf", "Zs", "Zl", "Zp"]), max_size=4),  # controls, odd spaces
    st.sampled_from(["[MASK]", "[mask]", "[MASK", "##s", "rome", "romans", "the cat sat", " ", "\x00", "\udcff",
                     "🙂", "é", "東京"]),
)
CONTEXT = st.lists(PIECES, max_size=6).map("".join)
MASKS = st.one_of(st.sampled_from(["", "[MASK]", " [MASK] ", "[MASK][MASK]", " [MASK] , [MASK] "]),
                  st.integers(2, 80).map(lambda n: " [MASK]" * n))  # none, a few, or many masks
TEXTS = st.builds(lambda before, masks, after, repeat: before * repeat + masks + after * repeat,
                  CONTEXT, MASKS, CONTEXT, st.sampled_from([1, 1, 1, 3, 30, 300]))  # up to very long
FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def model(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    return bertfn.load(folder)


def problem(model: bertfn.Model, text: str, truncation: bool) -> str | None:
    """What is wrong with ``text`` for fill_mask (the phrase its error must hold), or None if nothing."""
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return "which is not valid Unicode"
    if not text.strip():
        return "is empty"
    ids = model.tokenizer([text]).input_ids[0].tolist()
    masks = [i for i, t in enumerate(ids) if t == model.tokenizer.mask_token_id]
    if not masks:
        return "has no [MASK] token"
    if len(ids) > P and not truncation:
        return f"is {len(ids)} tokens long but the model reads at most {P}"
    if len(ids) > P and masks[-1] - masks[0] + 1 > P - 2:
        return "so no window holds them all"
    return None


def check_answers(model: bertfn.Model, texts: list[str], results: list, top_k: int) -> None:
    """Pipeline-shaped results: per text one list of top-k answers per [MASK] (unnested for one mask)."""
    V = model.config.vocab_size
    assert len(results) == len(texts)
    for text, result in zip(texts, results):
        n_masks = model.tokenizer([text]).input_ids[0].tolist().count(model.tokenizer.mask_token_id)
        per_mask = [result] if n_masks == 1 else result
        assert len(per_mask) == n_masks
        for answers in per_mask:
            assert len(answers) == min(top_k, V)
            scores = [a["score"] for a in answers]
            assert all(math.isfinite(s) and 0 <= s <= 1 for s in scores)
            assert scores == sorted(scores, reverse=True)
            assert all(0 <= a["token"] < V and isinstance(a["token_str"], str) and isinstance(a["sequence"], str)
                       for a in answers)


def check_refusal(model: bertfn.Model, texts: list[str], truncation: bool, error: bertfn.BertfnError) -> None:
    """The error is an InputError on one line, about a text that really has the problem it names."""
    message = str(error)
    assert isinstance(error, bertfn.InputError) and "\n" not in message
    which = re.match(r"text (\d+) ", message)
    assert which, message
    expected = problem(model, texts[int(which.group(1))], truncation)
    assert expected is not None and expected in message, (expected, message)


@FUZZ
@given(texts=st.lists(TEXTS, min_size=1, max_size=3), top_k=st.integers(1, 80), truncation=st.booleans())
def test_fill_mask_answers_or_refuses(model, texts, top_k, truncation):
    try:
        results = bertfn.fill_mask(texts, model, top_k=top_k, truncation=truncation)
    except bertfn.BertfnError as e:
        check_refusal(model, texts, truncation, e)
        event("refused: " + re.sub(r"\d+", "N", problem(model, texts[int(str(e).split()[1])], truncation)))
        return
    assert all(problem(model, t, truncation) is None for t in texts)
    event("answered" + (" (a text was cut to a window)" if any(len(model.tokenizer([t]).input_ids[0]) > P
                                                                   for t in texts) else ""))
    check_answers(model, texts, results, top_k)


@pytest.mark.slow
@FUZZ
@given(texts=st.lists(TEXTS, min_size=1, max_size=2), top_k=st.integers(1, 80), truncation=st.booleans())
def test_cli_answers_like_fill_mask_or_prints_one_line(model, mlm_checkpoint, texts, top_k, truncation):
    folder, _ = mlm_checkpoint
    argv = ["fill-mask", "--model", str(folder), "--top-k", str(top_k), "--json"]
    argv += ["--truncation"] * truncation + ["--", *texts]  # "--": a text may start with "-"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    lines = err.getvalue().splitlines(keepends=True)
    warned = [line for line in lines if line.startswith("bertfn: warning: ")]  # e.g. a text of [UNK]s, one line each
    rest = "".join(lines[len(warned):])
    surface = SURFACE.set("cli")  # the message as the command line words it (--truncation, not truncation=True)
    try:
        expected = bertfn.fill_mask(texts, model, top_k=top_k, truncation=truncation)
    except bertfn.BertfnError as e:
        assert code == e.exit_code == 2 and out.getvalue() == ""
        assert rest == f"bertfn: error: {counted_from_one(e)}\n"  # the command line counts its texts from 1
        return
    finally:
        SURFACE.reset(surface)
    assert code == 0 and rest == ""
    assert json.loads(out.getvalue()) == (expected[0] if len(texts) == 1 else expected)


NASTY = ("romans " * 150 + "Ce\u0301sar \u202e[MASK]\u202c said \x07\x1b[31m 🙂🙂 \u200b\u00a0東京 [MASK][MASK]\t\r\n"
         + "rome " * 150)  # three masks in combining marks, bidi and terminal controls, emoji; 300 words around


def test_cli_subprocess_nasty_text_with_truncation(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    done = subprocess.run([sys.executable, "-m", "bertfn", "fill-mask", NASTY, "--model", str(folder),
                           "--truncation", "--json", "--top-k", "2"], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.decode("utf-8"))
    assert len(result) == 3 and all(len(per_mask) == 2 for per_mask in result)


def test_cli_subprocess_undecodable_argv_is_one_line(mlm_checkpoint):
    """Latin-1 bytes in a UTF-8 argv reach Python as lone surrogates: refused in one line, exit 2."""
    folder, _ = mlm_checkpoint
    done = subprocess.run([sys.executable.encode(), b"-m", b"bertfn", b"fill-mask", b"caf\xe9 [MASK]",
                           b"--model", bytes(folder)], capture_output=True, timeout=120)
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr == b"bertfn: error: text 1 holds '\\udce9' at character 3, which is not valid Unicode; " \
                          b"decode the bytes with their real encoding (or errors='replace')\n"
