"""Checkpoints as they come: a vocabulary kept elsewhere, a cased vocab.txt, extra heads, unreadable files.

Most tests use the real AntiBERTy folder (tests/conftest.py's ``antiberty_paths``): config.json and
pytorch_model.bin with three heads BERT does not have (``cls.chain``, ``cls.graft``, ``cls.species``),
and its cased 25-token vocab.txt one folder up, with no tokenizer_config.json; transformers'
tokenizers are the reference for its tokens. The permission test runs the command as a user that file
permissions apply to, the encoding test with an ASCII-only stdout; both use conftest's ``tiny_folder``
(no transformers), so they also run on the plain install.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from conftest import antiberty_paths, require_transformers

import bertfn
from bertfn.cli import main

HEAVY = "E V Q L V E S G G G L V Q P G G S L R L S C A A S G F T F S S Y A M S"  # the start of a VH domain
MASKED = HEAVY.replace("G F T F", "G F [MASK] F")  # its answer is T (GFTFS, the usual start of CDR-H1)


@pytest.fixture(scope="module")
def paths() -> tuple[Path, Path]:
    found = antiberty_paths()
    if found is None:
        pytest.skip("antiberty is not installed (pip install -e '.[test]' installs it)")
    return found


def load_quietly(*args, **kwargs) -> bertfn.Model:
    """bertfn.load without the extra-heads warning (tested on its own below)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no BERT part reads")
        return bertfn.load(*args, **kwargs)


def reference_ids(vocab: Path, text: str) -> list[int]:
    """What AntiBERTy's own code feeds the model: transformers' BertTokenizer(vocab, do_lower_case=False)."""
    return require_transformers().BertTokenizer(str(vocab), do_lower_case=False)(text)["input_ids"]


def tokenizer_json(vocab: Path, folder: Path) -> Path:
    """A tokenizer.json (with its tokenizer_config.json) that transformers writes for the cased vocabulary."""
    require_transformers().BertTokenizerFast(vocab_file=str(vocab), do_lower_case=False).save_pretrained(folder)
    return folder / "tokenizer.json"


@pytest.mark.needs_transformers
@pytest.mark.parametrize("form", ["vocab.txt", "tokenizer.json", "folder", "Tokenizer"])
def test_every_form_of_tokenizer_reads_the_cased_vocabulary(form, paths, tmp_path):
    weights, vocab = paths
    given = {"vocab.txt": lambda: vocab, "folder": lambda: vocab.parent,
             "tokenizer.json": lambda: tokenizer_json(vocab, tmp_path),
             "Tokenizer": lambda: bertfn.Tokenizer.from_path(vocab, lowercase=False)}[form]()
    lowercase = None if form in ("tokenizer.json", "Tokenizer") else False  # those two carry their own casing
    model = load_quietly(weights, tokenizer=given, lowercase=lowercase)
    assert model.tokenizer.lowercase is False and model.tokenizer.vocab_size == 25
    assert model.tokenizer(MASKED).input_ids[0].tolist() == reference_ids(vocab, MASKED)
    assert bertfn.fill_mask(MASKED, model, top_k=1)[0]["token_str"] == "T"


@pytest.mark.needs_transformers
def test_lowercase_overrides_what_the_files_say(paths, tmp_path):
    weights, vocab = paths
    json_file = tokenizer_json(vocab, tmp_path)  # written cased
    model = load_quietly(weights, tokenizer=json_file, lowercase=True)
    assert model.tokenizer.lowercase is True
    with pytest.warns(UserWarning, match="35 of its 35 tokens are \\[UNK\\]"):
        model.tokenizer(HEAVY)
    with pytest.raises(bertfn.InputError, match="a Tokenizer object keeps its own settings"):
        load_quietly(weights, tokenizer=bertfn.Tokenizer.from_path(vocab), lowercase=False)


def test_extra_heads_are_listed_without_a_warning(paths):
    """Linear heads on the pooler beside the MLM head are parts bertfn.classify runs (tests/test_classify.py)."""
    weights, vocab = paths
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = bertfn.load(weights, tokenizer=vocab, lowercase=False)
    assert not caught, [str(w.message) for w in caught]
    assert model.extra_heads == {"cls.chain": 2, "cls.graft": 2, "cls.species": 6}
    assert "parts: encoder, MLM head, pooler, extra heads cls.chain (2), cls.graft (2), cls.species (6);" in repr(model)
    assert {k for k in model.state if k.startswith(("cls.chain", "cls.graft", "cls.species"))} == {
        f"cls.{head}.{p}" for head in ("chain", "graft", "species") for p in ("weight", "bias")}
    assert model.state["cls.species.weight"].shape[1] == model.config.hidden_size


@pytest.mark.needs_transformers
def test_strict_keeps_the_tokenizer_and_the_extra_heads(paths):
    weights, vocab = paths
    model = load_quietly(weights, tokenizer=vocab, lowercase=False, strict=False)
    assert model.tokenizer is not None and model.tokenizer(HEAVY).input_ids[0].tolist() == reference_ids(vocab, HEAVY)
    strict = bertfn.load(weights, tokenizer=vocab, lowercase=False, strict=True)  # every key is read: nothing refused
    assert strict.extra_heads == model.extra_heads and set(strict.state) == set(model.state)


def test_weights_without_a_tokenizer_say_where_the_vocabulary_is(paths):
    weights, vocab = paths
    with pytest.warns(UserWarning, match="has no tokenizer.json, vocab.txt, spm.model, ") as caught:
        model = load_quietly(weights)
    hint = next(str(w.message) for w in caught if "has no tokenizer" in str(w.message))
    assert "pass tokenizer=PATH" in hint and hint.endswith(f"e.g. {vocab} with lowercase=False")
    assert not model.tokenizer
    with pytest.raises(bertfn.MissingPartError, match="has no tokenizer"):
        model.tokenizer.mask_token_id
    with pytest.raises(bertfn.MissingPartError):
        bertfn.fill_mask(MASKED, model)


@pytest.fixture(scope="module")
def lowercased(paths) -> bertfn.Model:
    """AntiBERTy read the way a bare vocab.txt is read by default: lowercased, every residue [UNK]."""
    return load_quietly(paths[0], tokenizer=paths[1])


def test_unknown_tokens_warn_naming_the_fix(lowercased, antiberty):
    with pytest.warns(UserWarning, match=r"text 0: 35 of its 35 tokens are \[UNK\] \(e\.g\. 'E', 'V', 'Q'\).*"
                                         r"this vocabulary is cased: load it with lowercase=False"):
        lowercased.tokenizer(HEAVY)
    with pytest.warns(UserWarning, match=r"text 1: 2 of its 2 tokens are \[UNK\].*single characters, to be "
                                         r"separated by spaces: write 'E V Q L', not 'EVQL'"):
        antiberty.tokenizer([HEAVY, HEAVY.replace(" ", "").replace("GFTF", "GF [MASK] F")])
    with pytest.warns(UserWarning, match=r"this vocabulary holds capitals: write 'E', not 'e'"):
        bertfn.fill_mask(MASKED.lower().replace("[mask]", "[MASK]"), antiberty)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a well-written chain: no warning
        antiberty.tokenizer([HEAVY, MASKED])


# --- the command line ---------------------------------------------------------------------------------


def cli(capsys, *argv: str) -> tuple[int, str, list[str]]:
    """Run ``bertfn argv``: exit code, stdout, and the lines on stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def test_cli_fill_mask_with_tokenizer_and_cased(paths, capsys):
    weights, vocab = paths
    code, out, err = cli(capsys, "fill-mask", MASKED, "--model", str(weights), "--tokenizer", str(vocab), "--cased",
                         "--top-k", "3", "--json")
    assert code == 0
    answers = json.loads(out)
    assert answers[0]["token_str"] == "T" and answers[0]["sequence"] == HEAVY and answers[0]["score"] > 0.5
    assert err == []  # the extra heads are no unused weights


@pytest.mark.parametrize("case", [[], ["--lowercase"]])
def test_cli_names_cased_when_residues_are_lowercased(case, paths, capsys):
    weights, vocab = paths
    code, out, err = cli(capsys, "fill-mask", MASKED, "--model", str(weights), "--tokenizer", str(vocab), *case)
    assert code == 0 and "rank" in out
    assert len(err) == 1 and err[0].startswith("bertfn: warning: text 1: 34 of its 34 tokens are [UNK]")
    assert err[0].endswith("this vocabulary is cased: load it with --cased")


def test_cli_names_spacing_for_unspaced_residues(paths, capsys):
    weights, vocab = paths
    code, _, err = cli(capsys, "fill-mask", MASKED.replace(" ", ""), "--model", str(weights),
                       "--tokenizer", str(vocab), "--cased")
    assert code == 0 and len(err) == 1
    assert "separated by spaces: write 'E V Q L', not 'EVQL'" in err[0]


@pytest.mark.parametrize("tokenizer,case,warned", [("vocab.txt", "--cased", False), ("folder", "--lowercase", True)])
def test_cli_attention_with_tokenizer_options(tokenizer, case, warned, paths, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    weights, vocab = paths
    png = tmp_path / "attention.png"
    given = vocab if tokenizer == "vocab.txt" else vocab.parent
    code, out, err = cli(capsys, "attention", HEAVY, "--model", str(weights), "--tokenizer", str(given), case,
                         "--layer", "-1", "--head", "0", "--out", str(png))
    assert code == 0 and out.strip() == f"wrote {png}" and png.stat().st_size > 1000
    assert len(err) == warned
    assert not warned or err[0].endswith("load it with --cased")


# --- the two defects: unreadable folders and files, output the terminal cannot encode -----------------


def _without_permission_override() -> None:
    """In the child, before exec: drop the capabilities that let root read any file (CAP_DAC_OVERRIDE 1,
    CAP_DAC_READ_SEARCH 2) from the bounding set, so that root's new program obeys file permissions."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


DRIVER = """
import contextlib, io, json, sys
from pathlib import Path
from bertfn.cli import main
try:
    Path(sys.argv[1]).read_bytes()
    print(json.dumps("permissions do not apply to this user"))
    sys.exit()
except PermissionError:
    pass
for argv in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    print(json.dumps([code, err.getvalue()]))
"""


def test_unreadable_folders_and_files_are_one_line_errors(tiny_folder, tmp_path):
    """The permission defect: a bare PermissionError (exit 1) before; now one line naming the path, and exit 5
    for a folder that cannot be searched, 4 for a weights or tokenizer file that cannot be read, 3 for config.json."""
    from safetensors.torch import load_file

    source = tiny_folder  # config.json, model.safetensors, vocab.txt, tokenizer_config.json
    cases = {}  # what is taken away -> (command-line arguments, exit code, the path the message names)

    def copy(name: str) -> Path:
        return Path(shutil.copytree(source, tmp_path / name))

    locked = tmp_path / "locked"  # a folder this user may not search, holding a complete model
    shutil.copytree(source, locked / "model")
    cases[locked] = (["--model", str(locked / "model")], 5, locked / "model")
    folder = copy("unlisted")
    cases[folder] = (["--model", str(folder)], 5, folder)
    for name, exit_code in (("model.safetensors", 4), ("config.json", 3), ("vocab.txt", 4), ("tokenizer_config.json", 4)):
        folder = copy(f"no-{name}")
        cases[folder / name] = (["--model", str(folder)], exit_code, folder / name)
    folder = copy("json")  # with a tokenizer.json, which is read first
    bertfn.Tokenizer.from_path(folder / "vocab.txt").backend.save(str(folder / "tokenizer.json"))
    cases[folder / "tokenizer.json"] = (["--model", str(folder)], 4, folder / "tokenizer.json")
    folder = copy("bin")  # the same weights as a pytorch_model.bin
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    cases[folder / "pytorch_model.bin"] = (["--model", str(folder)], 4, folder / "pytorch_model.bin")
    vocab = Path(shutil.copytree(source, tmp_path / "vocab")) / "vocab.txt"
    cases[vocab] = (["--model", str(source), "--tokenizer", str(vocab)], 4, vocab)
    argvs = [["fill-mask", "the [MASK] sat", *args] for args, _, _ in cases.values()]
    argvs.append(["fill-mask", "the [MASK] sat", "--model", str(source), "--tokenizer", str(locked / "model")])

    for path in cases:
        path.chmod(0)  # no rights, for the owner too
    try:
        done = subprocess.run([sys.executable, "-c", DRIVER, str(vocab), json.dumps(argvs)], capture_output=True,
                              text=True, timeout=300, preexec_fn=_without_permission_override if os.geteuid() == 0 else None)
    finally:
        for path in cases:
            path.chmod(0o755)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    if results == ["permissions do not apply to this user"]:
        pytest.skip("file permissions do not apply to this user here")
    expected = [(code, path) for _, code, path in cases.values()] + [(4, locked / "model")]  # --tokenizer in a locked folder
    for argv, (exit_code, path), (code, err) in zip(argvs, expected, results, strict=True):
        assert code == exit_code and err.startswith("bertfn: error: ") and err.count("\n") == 1, (argv, err)
        assert f"cannot read {path}: permission denied for this user" in err, (argv, err)


def test_output_the_terminal_cannot_encode_is_escaped(tiny_folder):
    folder = tiny_folder
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    done = subprocess.run([sys.executable, "-m", "bertfn", "fill-mask", "café [MASK]", "--model", str(folder)],
                          capture_output=True, text=True, encoding="utf-8", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.isascii() and done.stdout.startswith("caf\\xe9 [MASK]\n")
    assert "Traceback" not in done.stderr and "UnicodeEncodeError" not in done.stderr
