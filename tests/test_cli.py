"""The bertfn command: a readable table, JSON shaped like the pipeline, one-line errors, and each
subcommand's help: a description, an example and its own options only."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest

import bertfn
from bertfn.cli import COMMANDS, build_parser, counted_from_one, main
from bertfn.cli.options import one_line


def test_table(mlm_checkpoint, capsys):
    folder, _ = mlm_checkpoint
    assert main(["fill-mask", "the cat sat on the [MASK] .", "--model", str(folder), "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    expected = bertfn.fill_mask("the cat sat on the [MASK] .", str(folder), top_k=3)
    assert "rank" in out and "score" in out
    for a in expected:
        assert a["sequence"] in out and f"{a['score']:.4f}" in out


def test_json_matches_fill_mask(mlm_checkpoint, capsys):
    folder, _ = mlm_checkpoint
    text = "i [MASK] you [MASK] well"
    assert main(["fill-mask", text, "--model", str(folder), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = bertfn.fill_mask(text, str(folder))
    assert [[a["token"] for a in m] for m in printed] == [[a["token"] for a in m] for m in expected]


def test_bad_input_is_one_line_and_exit_code(mlm_checkpoint, capsys):
    folder, _ = mlm_checkpoint
    assert main(["fill-mask", "the cat sat", "--model", str(folder)]) == bertfn.InputError.exit_code
    err = capsys.readouterr().err
    assert err.startswith("bertfn: error:") and err.count("\n") == 1 and "[MASK]" in err


def test_one_line_folds_line_breaks_but_keeps_a_quoted_texts_spaces(mlm_checkpoint, capsys):
    """The fuzz test found the error quoting '0 ' for the text '0  ': the line's folding collapsed every run of spaces."""
    folder, _ = mlm_checkpoint
    assert main(["fill-mask", "--model", str(folder), "--", "0  "]) == bertfn.InputError.exit_code
    assert "text 1 has no [MASK] token: '0  ';" in capsys.readouterr().err
    one_line("warning", "a message\n   written on\r\ntwo  lines\u2028")
    assert capsys.readouterr().err == "bertfn: warning: a message written on two  lines\n"


@pytest.mark.parametrize("command, option", [("fill-mask", "--targets"), ("classify", "--labels"),
                                             ("zero-shot", "--labels"), ("choose", "--choices")])
def test_a_list_option_that_took_the_text_is_named(command, option, capsys):
    """Tried as a user: ``bertfn classify --head cls.species --labels A B "Q V Q"`` said "pass at least one text", the
    text having become a third label; the error now says how. No model loads: the check comes first."""
    assert main([command, "--model", "unused", option, "a", "b", "the [MASK] text"]) == bertfn.InputError.exit_code
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"({option} takes every word after it, texts typed after included: put the texts first, or end the list with --" in err
    if command != "zero-shot":  # whose --labels are always there
        assert main([command, "--model", "unused"]) == bertfn.InputError.exit_code
        assert "every word" not in capsys.readouterr().err  # no list option given: no hint


def test_missing_model_folder(capsys, tmp_path):
    code = main(["fill-mask", "a [MASK]", "--model", str(tmp_path / "nope")])
    assert code == bertfn.ModelLoadError.exit_code
    assert "does not exist" in capsys.readouterr().err


def test_python_dash_m_entry_point(mlm_checkpoint):
    folder, _ = mlm_checkpoint
    done = subprocess.run([sys.executable, "-m", "bertfn", "fill-mask", "hello [MASK] !", "--model", str(folder),
                           "--top-k", "1", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 1


def test_dtype_runs_the_bf16_mode(mlm_checkpoint, capsys):
    import torch

    folder, _ = mlm_checkpoint
    text = "i [MASK] you [MASK] well"
    assert main(["fill-mask", text, "--model", str(folder), "--json", "--dtype", "bfloat16"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = bertfn.fill_mask(text, str(folder), dtype=torch.bfloat16)
    assert [[a["token"] for a in m] for m in printed] == [[a["token"] for a in m] for m in expected]
    assert main(["fill-mask", text, "--model", str(folder), "--dtype", "int8"]) == bertfn.InputError.exit_code
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.slow
def test_a_closed_pipe_stops_quietly(mlm_checkpoint):
    """``bertfn embed ... | head``: when the reader goes away, bertfn stops with the shell's code for a closed
    pipe (141) and prints nothing, not an 'unexpected BrokenPipeError'."""
    folder, _ = mlm_checkpoint
    texts = [f"sentence {i} of many" for i in range(400)]  # far more output than a pipe's buffer holds
    proc = subprocess.Popen([sys.executable, "-m", "bertfn", "embed", *texts, "--model", str(folder), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(10)  # the reader takes a little, then leaves
    proc.stdout.close()
    assert proc.wait(timeout=120) == 141
    assert proc.stderr.read() == b""


# Options that belong to one subcommand's task (the model options and the file options are shared, and --pair,
# --top-k, --head, ... mean something in several): the help of every other subcommand must not list them
# (issue 49: fill-mask's listed --per-token, --pooling, --no-detail).
OWN_OPTIONS = {
    "fill-mask": ["--targets", "--joint", "--beam-width"],
    "score": ["--method", "--per-token", "--reference", "--pll-change", "--wt-marginal", "--matrix", "--no-detail"],
    "embed": ["--pooling", "--normalize", "--max-length"],
    "attention": ["--layer", "--scale"],
}


def help_of(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_subcommands_help_has_a_description_an_example_and_only_its_own_options(command, capsys):
    text = help_of(command, capsys)
    usage, description = text.split("\n\n")[:2]  # the usage, then the description: a sentence or more
    assert description[0].isupper() and description.endswith(".") and not description.startswith("positional"), text
    assert f"\nexample:\n  bertfn {command} " in text, text
    listed = set(re.findall(r"--[a-z][\w-]*", usage))  # the usage line names every option, and nothing else does
    for other, options in OWN_OPTIONS.items():
        for option in options:
            assert (option in listed) == (other == command), f"bertfn {command} --help, {option} ({other}'s option)"
    formats = re.search(r"--format \{([\w,]+)\}", usage)
    if formats:  # only embed's results are vectors, which --format npy writes as one array
        assert set(formats.group(1).split(",")) == ({"jsonl", "npy", "parquet"} if command == "embed" else {"jsonl", "parquet"})
    parser = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    undescribed = [a.option_strings or a.dest for a in parser._actions if not a.help]
    assert not undescribed, f"bertfn {command}: options with no description: {undescribed}"


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in ("view", "attention")])
def test_the_help_of_input_and_field_says_a_table_is_read_too(command, capsys):
    """docs/guides/corpora.md's tables (--input probes.csv --field sequence): the help said lines or JSON Lines only."""
    text = " ".join(help_of(command, capsys).split())
    assert "--input FILE read the texts from FILE: one a line, JSON Lines with --field, or a table (FILE.csv, FILE.tsv: " \
           "the column --field names, default text)" in text
    assert "--input is JSON Lines (or a table's column) whose field NAME holds the text" in text


def test_fill_masks_help_names_the_models_own_mask_token_and_shows_it(capsys):
    """Issue 57: a RoBERTa user reads that <mask> is the mask token there, and sees a line that uses it."""
    text = " ".join(help_of("fill-mask", capsys).split())  # argparse wraps the argument's help
    assert "at least one [MASK], or the model's own mask token: <mask> for RoBERTa's kind" in text
    example = help_of("fill-mask", capsys).split("\nexample:\n")[1]
    assert 'bertfn fill-mask "When in Rome, do as the [MASK] do."' in example
    assert 'bertfn fill-mask "The capital of France is <mask>." --model FacebookAI/roberta-base' in example


@pytest.mark.parametrize("api, cli", [
    ("text 0 is empty; write a sentence to embed", "text 1 is empty; write a sentence to embed"),
    ("text 0 (and texts 7, 9, +12 more like it): 3 of its 3 tokens are [UNK]",
     "text 1 (and texts 8, 10, +12 more like it): 3 of its 3 tokens are [UNK]"),
    ("text 0's choice 1 is empty", "text 1's choice 2 is empty"),
    ("text 2: with passage 3 it is 90 tokens", "text 3: with passage 4 it is 90 tokens"),
    ("label 1 is empty; each candidate label is a word", "label 2 is empty; each candidate label is a word"),
    ("text 0 has no [MASK] token: 'see text 3, it\\'s choice 2'; put [MASK] where",  # a quoted text stays as it came
     "text 1 has no [MASK] token: 'see text 3, it\\'s choice 2'; put [MASK] where"),
    ('text 1 has no [MASK] token: "it\'s text 3"', 'text 2 has no [MASK] token: "it\'s text 3"'),
    ("2 text(s) longer than 6 tokens (text 1: 23) were cut", "2 text(s) longer than 6 tokens (text 2: 23) were cut"),
    ("text 0 holds '\\udce9' at character 3", "text 1 holds '\\udce9' at character 3"),  # a position is no count
])
def test_messages_count_the_texts_typed_from_one(api, cli):
    """Issue 57: the command line's second text is "text 2", as a file's second line is "line 2"."""
    assert counted_from_one(api) == cli


def test_the_cli_counts_texts_from_one_and_a_file_run_by_its_lines(mlm_checkpoint, tmp_path, capsys):
    folder, _ = mlm_checkpoint
    assert main(["score", "the cat sat", " ", "--model", str(folder)]) == bertfn.InputError.exit_code
    assert capsys.readouterr().err == "bertfn: error: text 2 is empty; write a sentence to score\n"
    with pytest.raises(bertfn.InputError, match=r"^text 1 is empty; write a sentence to score$"):  # Python: from 0
        bertfn.score(["the cat sat", " "], str(folder))
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("the [MASK] sat\nno mask\n", encoding="utf-8")
    assert main(["fill-mask", "--input", str(src), "--output", str(out), "--model", str(folder), "--no-progress"]) == 2
    assert json.loads(out.read_text(encoding="utf-8").splitlines()[1])["error"].startswith("line 2 has no [MASK]")



def test_every_subcommand_whose_pipeline_batches_takes_batch_size(mlm_checkpoint, capsys):
    """A task whose function takes ``batch_size`` offers ``--batch-size`` on its subcommand, and the option reaches the
    function (``bertfn embed`` and ``bertfn score`` had none): a memory-bound user can make each pass smaller."""
    import inspect

    import torch

    from bertfn.tasks import TASKS

    choices = next(a for a in build_parser()._actions if a.dest == "command").choices
    for task in TASKS:
        if task.command and "batch_size" in inspect.signature(task.function).parameters:
            assert any("--batch-size" in a.option_strings for a in choices[task.name]._actions), task.name
    folder, _ = mlm_checkpoint
    texts = ["the cat sat on the mat .", "a big red dog", "when in rome do as the romans do"]
    assert main(["embed", *texts, "--model", str(folder), "--json", "--batch-size", "1"]) == 0
    printed = torch.tensor(json.loads(capsys.readouterr().out))
    torch.testing.assert_close(printed, bertfn.embed(texts, str(folder)), atol=1e-5, rtol=0)
    assert main(["score", *texts, "--model", str(folder), "--json", "--batch-size", "2"]) == 0
    assert [r["pll"] for r in json.loads(capsys.readouterr().out)] == pytest.approx(
        [r["pll"] for r in bertfn.score(texts, str(folder))], abs=1e-4)
    assert main(["embed", "a", "--model", str(folder), "--batch-size", "0"]) == bertfn.InputError.exit_code
    assert "--batch-size must be a positive integer, got 0" in capsys.readouterr().err
    assert main(["score", "a b", "--reference", "a c", "--batch-size", "2", "--model", str(folder)]) == bertfn.InputError.exit_code
    assert "--batch-size are options of the PLL" in capsys.readouterr().err


def test_the_help_lists_the_subcommands_as_the_docs_present_them_and_says_the_exit_codes(capsys):
    """Tried as a shell user: ``bertfn --help`` listed answer, choose, classify, ... (the task modules' names)
    before fill-mask, and said nothing of the exit codes a script tests."""
    assert list(COMMANDS)[:5] == ["fill-mask", "score", "embed", "view", "attention"]
    assert list(COMMANDS)[-1] == "contacts"
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    listed = re.findall(r"^    (\S+)", out, re.M)
    assert listed == list(COMMANDS)
    codes = " ".join(out.split("exit codes:")[1].split())
    for error, said in ((bertfn.InputError, "bad arguments"), (bertfn.ConfigError, "bad config.json"),
                        (bertfn.CheckpointError, "bad checkpoint"), (bertfn.ModelLoadError, "model not found"),
                        (bertfn.DependencyError, "optional library missing")):
        assert f"{error.exit_code} {said}" in codes
    assert "--input -" in out and "141" in out


@pytest.mark.parametrize("argv, meant", [
    (["fill-mak", "x"], "did you mean fill-mask?"),
    (["zeroshot", "x"], "did you mean zero-shot?"),
    (["fill-mask", "a [MASK]", "--dtype", "bf17"], "did you mean bf16?"),
    (["fill-mask", "a [MASK]", "--topk", "3"], "(did you mean --top-k?); see 'bertfn fill-mask --help'"),
    (["embed", "-x", "--model", "unused"], "goes after --, which ends the options: bertfn embed [OPTIONS] -- -x); "
                                           "see 'bertfn embed --help'"),
])
def test_a_mistyped_word_is_met_with_the_one_meant(argv, meant, capsys):
    """Tried as a shell user: ``bertfn fill-mak``, ``--topk``, ``--dtype bf17`` listed the choices with no hint, and
    ``bertfn embed -x`` (a text that starts with -) said "unrecognized arguments" and pointed at ``bertfn --help``,
    not the subcommand's, without saying how to pass such a text. No model loads: the command line fails first."""
    assert main(argv) == bertfn.InputError.exit_code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and meant in err


def test_a_text_piped_in_is_pointed_at_input_dash(monkeypatch, capsys):
    """Tried as a shell user: ``echo TEXT | bertfn embed`` said "pass at least one text", and ``... | bertfn embed -``
    embedded the text "-"; standard input is read with ``--input -`` alone, which both now say."""
    monkeypatch.setattr("sys.stdin", io.StringIO("a text\n"))
    assert main(["embed", "--model", "unused"]) == bertfn.InputError.exit_code
    assert "standard input is read only with --input -" in capsys.readouterr().err
    for argv in (["embed", "-"], ["score", "a b", "-"], ["rerank", "a query", "-"]):
        assert main([*argv, "--model", "unused"]) == bertfn.InputError.exit_code
        assert "a text '-' is no standard input here; to read the texts from standard input pass --input -" \
            in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["zero-shot", "x", "--labels", "a", "b"], ["rerank", "q", "p"],
                                  ["choose", "x", "--choices", "a", "b"], ["contacts", "MKT"]])
def test_a_fine_tuned_heads_subcommand_requires_its_model(argv, capsys):
    """Tried as a shell user: ``bertfn classify TEXT`` without --model went for bert-base-uncased, the help's default,
    which has no classifier (with the hub up: a 440 MB download, then the refusal); the head subcommands without a
    default of transformers' require --model, and its help says what it must be; classify and tag default to
    transformers' pipelines' own (SST-2's DistilBERT, CoNLL-03's BERT), as answer to its reader."""
    assert main(argv) == bertfn.InputError.exit_code
    assert "the following arguments are required: --model" in capsys.readouterr().err
    assert "(required)" in help_of(argv[0], capsys) and "bert-base-uncased" not in help_of(argv[0], capsys)
    for command, default in (("classify", "distilbert-base-uncased-finetuned-sst-2-english"),
                             ("tag", "bert-large-cased-finetuned-conll03-english"),
                             ("answer", "distilbert-base-cased-distilled-squad")):
        assert default in "".join(help_of(command, capsys).split())  # argparse wraps a long id at its hyphens


def test_a_model_without_the_mlm_head_is_refused_in_the_commands_words(tiny_folder, tmp_path, capsys):
    """Tried as a user: ``bertfn fill-mask`` on a classifier said "fill_mask needs a masked-LM head", and ``bertfn score
    --reference`` "substitution_matrix needs ...": Python's names, not the command's."""
    classifier = bertfn.with_head(bertfn.load(tiny_folder), "sequence-classification", labels=["no", "yes"])
    folder = str(bertfn.save(classifier, tmp_path / "classifier"))
    assert main(["fill-mask", "the [MASK]", "--model", folder, "--quiet"]) == bertfn.MissingPartError.exit_code
    assert "error: fill-mask needs a masked-LM head" in capsys.readouterr().err
    assert main(["score", "--reference", "the cat", "the dog", "--model", folder, "--quiet"]) == 2
    assert "error: score --reference needs a masked-LM head" in capsys.readouterr().err


def test_a_tasks_refusal_names_the_commands_option(tiny_folder, tmp_path, capsys):
    """Tried as a user: ``bertfn tag --stride 2`` without --aggregation said "stride reads ...", and ``bertfn score
    --reference R SHORTER`` "masked marginals score substitutions only (...: bertfn.score of each text)", also with
    --pll-change: Python's words on the command line."""
    tagger = bertfn.with_head(bertfn.load(tiny_folder), "token-classification", labels=["O", "B-X"])
    assert main(["tag", "the cat", "--stride", "2", "--model", str(bertfn.save(tagger, tmp_path / "tagger"))]) == 2
    assert "error: --stride reads a long text" in capsys.readouterr().err
    for method in ([], ["--pll-change"]):
        assert main(["score", "--reference", "the cat sat", "the cat", "--model", str(tiny_folder), *method]) == 2
        err = capsys.readouterr().err
        assert "score --reference scores substitutions only, whatever its method" in err
        assert "bertfn score TEXT ... alone" in err and "bertfn.score" not in err


def test_a_model_folder_given_as_a_text_is_named(mlm_checkpoint, capsys, tmp_path, monkeypatch):
    """Tried as a user: ``bertfn embed ./tuned "text"`` read the folder as a first text and failed on the default
    model (google-bert/bert-base-uncased, not reachable offline); the error now says to pass --model, and names the
    default the command would read (classify's SST-2 classifier). A long text (no path can be that long) is a text,
    and no model loads before the check. A subcommand without a default model (zero-shot, rerank) names the folder
    too, where it said only that --model is required."""
    folder, _ = mlm_checkpoint
    monkeypatch.chdir(folder.parent)
    assert main(["embed", folder.name, "A fine day."]) == bertfn.InputError.exit_code
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"'{folder.name}' is a model's folder, given as a text; name the model with --model {folder.name}" in err
    assert main(["classify", folder.name, "A fine day."]) == bertfn.InputError.exit_code
    assert (f"name the model with --model {folder.name} (without --model the command reads "
            "distilbert/distilbert-base-uncased-finetuned-sst-2-english)") in capsys.readouterr().err
    assert main(["fill-mask", "--model", str(folder), "a [MASK] " + "x" * 5000]) == 0  # a text, not a path
    for command in (["zero-shot", folder.name, "A fine day.", "--labels", "a", "b"], ["rerank", folder.name, "q"]):
        assert main(command) == bertfn.InputError.exit_code  # no default model: --model is required
        assert (f"'{folder.name}' is a model's folder, given as a text; name the model with --model {folder.name}\n"
                == capsys.readouterr().err.split("error: ", 1)[1])
