"""The command line: every subcommand's --help is written for users (its text of
fp8rl.commands.usage: what it reads and writes, an example, no internal module names) and ends with
the exit codes; every command names its config `--config FILE`, and the older positional forms still
work with a deprecation notice; a bad `--set` override is named in the error."""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path

import pytest

from fp8rl.cli import build_parser, main
from fp8rl.commands.common import EXIT_CODES
from fp8rl.commands.usage import USAGE

SMOKE = str(Path(__file__).resolve().parents[2] / "config" / "smoke.yaml")


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) of every subcommand, groups and leaves."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from commands(sub, (*path, name))


ALL = list(commands(build_parser()))
# What a user's help must not name: the package's modules (`fp8rl.stats.intervals`, `fp8rl/rl/x.py`),
# Python files and the workflow's internals.
INTERNAL = re.compile(r"\bfp8rl\.[a-z_]+|fp8rl/[\w/]*|\b\w+\.py\b|workflows/")


@pytest.mark.parametrize(
    "path,parser", [((), build_parser()), *ALL], ids=["fp8rl", *(" ".join(p) for p, _ in ALL)]
)
def test_every_help_is_for_users_with_an_example_and_the_exit_codes(path, parser):
    text = parser.format_help()
    assert inspect.cleandoc(USAGE[" ".join(path)]) in text
    assert not INTERNAL.findall(text), (
        f"fp8rl {' '.join(path)} --help names internals: {INTERNAL.findall(text)}"
    )
    assert f"\n    fp8rl {' '.join(path)}".rstrip() in text or not path, f"fp8rl {' '.join(path)}: no example"
    assert " ".join(text.split()).endswith(EXIT_CODES)


def test_every_command_has_one_help_text_and_every_text_a_command():
    assert set(USAGE) == {"", *(" ".join(p) for p, _ in ALL)}


@pytest.mark.parametrize("path,parser", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_a_config_is_named_with_config_everywhere(path, parser):
    dests = {a.dest: a for a in parser._actions}
    if "file" in dests:
        assert dests["file"].option_strings == ["--config"]


def test_every_command_of_the_cli_is_covered():
    assert {"config validate", "matrix", "train", "report", "publish", "eval lm-eval"} <= {
        " ".join(p) for p, _ in ALL
    }


@pytest.mark.parametrize("command", [["config", "validate"], ["config", "show"], ["matrix"]])
def test_the_older_positional_config_still_works_with_a_deprecation_notice(command, capsys):
    assert main([*command, "--config", SMOKE]) == 0
    new = capsys.readouterr()
    assert "deprecated" not in new.err
    assert main([*command, SMOKE]) == 0
    old = capsys.readouterr()
    assert old.out == new.out
    assert f"`fp8rl {' '.join(command)} FILE` is deprecated; use" in old.err


def test_a_config_given_twice_or_not_at_all_is_a_usage_error(capsys):
    assert main(["matrix", SMOKE, "--config", SMOKE]) == 2
    assert "the config is given twice" in capsys.readouterr().err
    assert main(["config", "validate"]) == 2
    assert "--config FILE is required" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # argparse: a required option is missing
        main(["train", "--run", "x", "--base", "b", "--data", "d", "--out", "o"])
    assert exc.value.code == 2


@pytest.mark.parametrize(
    "override,message",
    [
        ("algorithms.grpo.clip_low=2", "algorithms.grpo.clip_low: Input should be less than 1 (got 2)"),
        ("algorithms.grpo.clip_lo=2", "algorithms.grpo.clip_lo: unknown key"),
        ("schedule=3", "schedule: Input should be a valid dictionary"),
    ],
)
def test_an_error_in_a_set_override_names_the_override(override, message, capsys):
    assert main(["config", "validate", "--config", SMOKE, "--set", override]) == 2
    err = capsys.readouterr().err
    assert f"  - --set {override}: {message}" in err
    assert "line " not in err  # the override, not the file's line, is where the value came from


def test_an_error_in_the_file_still_names_its_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(SMOKE).read_text().replace("clip_low: 0.2", "clip_low: 2", 1))
    assert main(["config", "validate", "--config", str(bad), "--set", "schedule.steps=3"]) == 2
    err = capsys.readouterr().err
    assert "algorithms.grpo.clip_low: Input should be less than 1" in err
    assert "--set" not in err and "  - line " in err
