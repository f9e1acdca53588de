"""Careless config is refused with one line naming the key (exit 2), never read as
something else: an empty `${VAR}` with a default, a boolean where a number belongs, a
source named `none`, a tab in the indentation, a key given twice."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from search import config as config_module
from search.cli import main
from search.config import ConfigError, expand_env, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
BASE = (
    "routing: {default_source: kiwix, shipped_routes: false, semantic: {enabled: false}}\n"
    "trace: {enabled: false}\n"
    "sources:\n"
    "  kiwix: {type: zim, paths: [a.zim]}\n"
)


def _minimal(**sections: object) -> dict[str, object]:
    data: dict[str, object] = {
        "routing": {
            "default_source": "kiwix",
            "shipped_routes": False,
            "semantic": {"enabled": False},
        },
        "trace": {"enabled": False},
        "sources": {"kiwix": {"type": "zim", "paths": ["a.zim"]}},
    }
    for section, value in sections.items():
        data[section] = (
            {**data[section], **value}  # type: ignore[dict-item]
            if isinstance(value, dict) and isinstance(data.get(section), dict)
            else value
        )
    return data


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _one_line_exit_2(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["doctor", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("search: "), err
    return err.strip().removeprefix("search: ")


# 1. `${VAR:-default}` takes the default when VAR is set but empty, as the shell does.


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, "/fallback/traces.db"), ("", "/fallback/traces.db"), ("/srv", "/srv/traces.db")],
)
def test_a_default_applies_when_the_variable_is_unset_or_empty(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: str
) -> None:
    if value is None:
        monkeypatch.delenv("CARELESS_DIR", raising=False)
    else:
        monkeypatch.setenv("CARELESS_DIR", value)
    assert expand_env("${CARELESS_DIR:-/fallback}/traces.db") == expected


def test_a_variable_set_empty_without_a_default_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARELESS_EMPTY", "")
    assert expand_env("[${CARELESS_EMPTY}]") == "[]"
    monkeypatch.delenv("CARELESS_EMPTY")
    with pytest.raises(ConfigError, match=r"^a: environment variable \$\{CARELESS_EMPTY\}"):
        expand_env({"a": "${CARELESS_EMPTY}"})


def test_an_empty_data_dir_does_not_put_the_data_at_the_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shipped config.yaml with `SEARCH_DATA_DIR=` (set, empty): not /traces.db."""
    monkeypatch.setenv("SEARCH_DATA_DIR", "")
    config = load_config(ROOT / "config.yaml")
    assert config.trace.path == "~/.local/share/search-router/traces.db"
    zim = config.sources["kiwix"]
    assert zim.paths[0] == "~/.local/share/search-router/demo.zim"  # type: ignore[attr-defined]


# 2. A boolean where a number belongs is not read as 1.


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"server": {"port": True}}, "server.port: Input should be an integer, not a boolean"),
        ({"routing": {"max_parts": True}}, "routing.max_parts: Input should be an integer"),
        (
            {"routing": {"min_confidence": False}},
            "routing.min_confidence: Input should be a number, not a boolean (false)",
        ),
        (
            {"routing": {"llm": {"timeout_s": True}}},
            "routing.llm.timeout_s: Input should be a number, not a boolean (true)",
        ),
        ({"cache": {"result_ttl_s": True}}, "cache.result_ttl_s: Input should be a number"),
        (
            {"sources": {"kiwix": {"type": "zim", "paths": ["a.zim"], "timeout_s": True}}},
            "sources.kiwix.timeout_s: Input should be a number, not a boolean (true)",
        ),
        (
            {"sources": {"kiwix": {"type": "zim", "paths": ["a.zim"], "max_results": True}}},
            "sources.kiwix.max_results: Input should be an integer, not a boolean (true)",
        ),
    ],
)
def test_a_boolean_is_not_a_number(sections: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_minimal(**sections))
    assert str(caught.value).startswith(message)


def test_yes_for_a_port_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, BASE + "server:\n  port: yes\n")
    assert _one_line_exit_2(path, capsys) == (
        "server.port: Input should be an integer, not a boolean (true)"
    )


def test_numbers_and_booleans_are_still_read_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """An int for a float, digits from `${VAR}` for an int, a boolean for a boolean."""
    monkeypatch.setenv("CARELESS_PORT", "9123")
    config = parse_config(
        _minimal(
            server={"port": "${CARELESS_PORT}"},
            routing={"request_deadline_s": 3, "min_confidence": 1, "shipped_routes": False},
            sources={"kiwix": {"type": "zim", "paths": ["a.zim"], "timeout_s": 2}},
            trace={"enabled": True, "capture_results": True},
        )
    )
    assert config.server.port == 9123
    assert config.routing.request_deadline_s == 3.0
    assert config.routing.min_confidence == 1.0
    assert config.sources["kiwix"].timeout_s == 2.0
    assert config.trace.enabled is True and config.routing.shipped_routes is False


# 3. `none` is the reserved route of requests no source serves.


@pytest.mark.parametrize(
    ("sections", "key"),
    [
        (
            {
                "sources": {
                    "kiwix": {"type": "zim", "paths": ["a.zim"]},
                    "none": {"type": "zim", "paths": ["b.zim"]},
                }
            },
            "sources.none",
        ),
        ({"routing": {"fusion": {"none": ["kiwix"]}}}, "routing.fusion.none"),
    ],
)
def test_a_route_may_not_be_named_none(sections: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}: the name 'none' is reserved"):
        parse_config(_minimal(**sections))


def test_a_source_named_none_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, BASE + "  none: {type: zim, paths: [b.zim]}\n")
    assert _one_line_exit_2(path, capsys).startswith("sources.none: the name 'none' is reserved")


# 4. A YAML syntax error is one line: the problem, where it was found.


def test_a_tab_is_one_line_naming_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, BASE + "server:\n  host: 127.0.0.1\n\tport: 9000\n")
    assert _one_line_exit_2(path, capsys) == (
        f"{path}: not valid YAML: line 7, column 1: found a tab character that violates indentation"
    )


def test_a_syntax_error_from_the_pure_python_loader_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config_module, "_LOADER", yaml.SafeLoader)
    path = _write(tmp_path, BASE + "server:\n  host: 127.0.0.1\n\tport: 9000\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(
        f"{path}: not valid YAML: line 7, column 1: found character '\\t'"
    )
    assert "\n" not in str(caught.value)


def test_an_unclosed_bracket_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE + "server: {port: 9000\n")
    with pytest.raises(
        ConfigError, match=rf"^{path}: not valid YAML: line \d+, column \d+: "
    ) as caught:
        load_config(path)
    assert "\n" not in str(caught.value)


# 5. A key given twice is refused, not kept last-wins.


def test_a_key_given_twice_exits_2_naming_it_and_both_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, BASE.replace("routing: {", "routing: {max_parts: 8, max_parts: 3, "))
    assert _one_line_exit_2(path, capsys) == (
        f"{path}: line 1, column 25: routing.max_parts is given twice (first on line 1); "
        "YAML would keep only the last"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            BASE + "server:\n  port: 9000\n  host: localhost\n  port: 9001\n",
            "line 8, column 3: server.port is given twice (first on line 6)",
        ),
        (
            BASE + "trace: {enabled: true}\n",
            "line 5, column 1: trace is given twice (first on line 2)",
        ),
        (
            BASE + "  web: {type: searxng, url: 'http://127.0.0.1:8888', fallback: [kiwix]}\n"
            "  kiwix: {type: zim, paths: [b.zim]}\n",
            "line 6, column 3: sources.kiwix is given twice (first on line 4)",
        ),
        (
            "a: [{x: 1}, {y: 1, y: 2}]\n",
            "line 1, column 20: a[1].y is given twice (first on line 1)",
        ),
    ],
)
def test_a_key_given_twice_is_named_by_its_path(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_merge_keys_aliases_and_variables_still_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit key may override what `<<` merges; an alias is not a second key."""
    monkeypatch.setenv("CARELESS_URL", "http://127.0.0.1:8888")
    path = _write(
        tmp_path,
        BASE + "  web: &web {type: searxng, url: '${CARELESS_URL}', timeout_s: 3}\n"
        "  web2: {<<: *web, timeout_s: 1}\n"
        "  web3: *web\n",
    )
    config = load_config(path)
    assert config.sources["web"].url == "http://127.0.0.1:8888"  # type: ignore[attr-defined]
    assert config.sources["web2"].timeout_s == 1
    assert config.sources["web3"].timeout_s == 3


def test_a_key_given_twice_inside_a_merged_anchor_is_refused(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        BASE + "  web: &web {type: searxng, url: 'http://127.0.0.1:8888', enabled: true,"
        " enabled: false}\n  web2: {<<: *web}\n",
    )
    with pytest.raises(ConfigError, match=r"sources\.web\.enabled is given twice"):
        load_config(path)
