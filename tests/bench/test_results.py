"""The command a results file records: the arguments the run was given, a machine's own
values replaced by a placeholder."""

from __future__ import annotations

from bench import results


def test_the_arguments_given_are_recorded_not_a_default_line() -> None:
    line = results.command_line(
        "bench/routing_quality.py",
        ["--llm", "http://127.0.0.1:8012/v1", "--llm-model", "gemma", "--only", "slurp"],
        {"--llm": "URL"},
    )
    assert line == ("python bench/routing_quality.py --llm URL --llm-model gemma --only slurp")
    assert "--isolated" not in line  # not given, so not claimed


def test_a_placeholder_stands_in_for_an_equals_value_too() -> None:
    line = results.command_line(
        "bench/routing_quality.py",
        ["--isolated", "--llm=http://10.0.0.5:8080/v1"],
        {"--llm": "URL"},
    )
    assert line == "python bench/routing_quality.py --isolated --llm=URL"
    assert "10.0.0.5" not in line


def test_an_argument_with_a_space_is_quoted_so_the_line_runs_as_shown() -> None:
    line = results.command_line("bench/x.py", ["--eval-dir", "/data/my eval"])
    assert line == "python bench/x.py --eval-dir '/data/my eval'"
