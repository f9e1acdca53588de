"""A config file that is not UTF-8, nested too deep, an alias bomb or a URL with a port
past 65535 is refused as a config error naming the problem (exit 2), never a traceback,
a hang or gigabytes of memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from search import config as config_module
from search.cli import main
from search.config import ConfigError, expand_env, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]


def alias_bomb(levels: int) -> str:
    """A few hundred bytes that load as 10^levels strings: a1 is ten a0, each ten x..."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


MINIMAL = {
    "routing": {"default_source": "kiwix", "shipped_routes": False, "semantic": {"enabled": False}},
    "trace": {"enabled": False},
}


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "config.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _with_web(url: str) -> dict[str, object]:
    return {
        **MINIMAL,
        "sources": {
            "kiwix": {"type": "zim", "paths": ["a.zim"]},
            "web": {"type": "searxng", "url": url, "enabled": True},
        },
    }


def test_a_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, b"server:\n  host: caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8") as caught:
        load_config(path)
    assert str(path) in str(caught.value)
    assert "0xe9" in str(caught.value)


def test_nesting_past_libyaml_limit_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="nesting depth"):
        load_config(path)


def test_nesting_past_the_pure_python_loaders_stack_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where PyYAML has no libyaml, its loader recurses: a RecursionError, caught."""
    monkeypatch.setattr(config_module, "_LOADER", yaml.SafeLoader)
    path = _write(tmp_path, "a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="nested too deep"):
        load_config(path)


def test_nesting_libyaml_accepts_is_refused_before_it_recurses(tmp_path: Path) -> None:
    path = _write(tmp_path, "a: " + "[" * 900 + "]" * 900 + "\n")
    with pytest.raises(ConfigError, match=r"^a\[0\].*: nested too deep"):
        load_config(path)


def test_a_list_that_contains_itself_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "a: &a [*a]\n")
    with pytest.raises(ConfigError, match="nested too deep"):
        load_config(path)


def test_a_scalar_python_cannot_construct_is_a_yaml_error(tmp_path: Path) -> None:
    """PyYAML lets ValueError out of `2024-13-45` (an implicit date)."""
    path = _write(tmp_path, "a: 2024-13-45\n")
    with pytest.raises(ConfigError, match="not valid YAML: month must be in 1..12"):
        load_config(path)


def test_an_alias_bomb_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """Run where memory is capped, so without the bound this fails fast (MemoryError)
    instead of taking gigabytes; with it, the walk stops after MAX_CONFIG_VALUES."""
    path = _write(tmp_path, alias_bomb(8))  # 452 bytes, 10^8 strings
    child = (
        "import resource, sys\n"
        "from search.config import ConfigError, load_config\n"
        "used = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
        "resource.setrlimit(resource.RLIMIT_AS, (used + 512 * 2**20, -1))\n"
        "try:\n"
        "    load_config(sys.argv[1])\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert "config too large" in done.stdout
    assert "aliases" in done.stdout


def test_an_alias_bomb_exits_2_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """10^5 strings, past the bound: without it, `a0: unknown key` after a copy."""
    path = _write(tmp_path, alias_bomb(5))
    assert main(["doctor", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("search: (root): config too large")
    assert "Traceback" not in err


def test_the_bound_counts_every_value_an_alias_copies() -> None:
    shared = ["x"] * 999  # one list, referenced many times: what an alias loads as
    under = {"a": [shared] * 99}  # 1 + 1 + 99 * (1 + 999) values
    assert expand_env(under) == {"a": [["x"] * 999] * 99}
    with pytest.raises(ConfigError, match="more than 100,000 values"):
        expand_env({"a": [shared] * 100})


def test_ordinary_anchors_aliases_and_merge_keys_still_work(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "routing: {default_source: kiwix, shipped_routes: false, semantic: {enabled: false}}\n"
        "trace: {enabled: false}\n"
        "sources:\n"
        "  kiwix: {type: zim, paths: [a.zim]}\n"
        "  web: &web {type: searxng, url: 'http://127.0.0.1:8888', timeout_s: 3}\n"
        "  web2: *web\n"
        "  web3: {<<: *web, enabled: false}\n",
    )
    config = load_config(path)
    assert config.sources["web2"].timeout_s == 3
    assert config.sources["web3"].timeout_s == 3
    assert config.sources["web3"].enabled is False


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://127.0.0.1:99999", "its port is out of range 0-65535"),
        ("http://127.0.0.1:8x", "its port is not a number"),
        ("http://[::1:8888", "its bracketed (IPv6) host is malformed"),
    ],
)
def test_a_source_url_whose_port_cannot_be_dialled_is_refused(url: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=r"^sources\.web\.url: .*not a valid URL") as caught:
        parse_config(_with_web(url))
    assert needle in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://user:hunter2@127.0.0.1:99999",
        # a "#", "/" or "?" in the password ends the host there: the rest is read as a port
        "http://admin:hunter2#x@127.0.0.1:8888",
        "http://admin:hunter2/pw@127.0.0.1:8888",
        "http://admin:hunter2?x@127.0.0.1:8888",
    ],
)
def test_a_url_with_a_password_and_a_bad_port_does_not_repeat_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with_web(url))
    assert "not a valid URL" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_a_source_url_with_a_valid_port_is_kept() -> None:
    config = parse_config(_with_web("http://127.0.0.1:65535/"))
    assert config.sources["web"].url == "http://127.0.0.1:65535"  # type: ignore[attr-defined]


def test_doctor_exits_2_on_a_port_out_of_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, yaml.safe_dump(_with_web("http://127.0.0.1:99999")))
    assert main(["doctor", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "sources.web.url" in err and "port is out of range" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("trace", "max_traces"),
        ("trace", "max_age_days"),
        ("cache", "result_max_entries"),
        ("cache", "result_ttl_s"),
        ("routing", "decision_cache_max_entries"),
        ("routing", "session_ttl_s"),
    ],
)
def test_a_limit_past_any_use_is_refused_naming_its_key(section: str, key: str) -> None:
    """A huge number was taken, then overflowed where it was used (SQLite's integers, on
    the first start-up): a traceback instead of a config error."""
    data = yaml.safe_load(yaml.safe_dump(MINIMAL))  # a copy to change
    data.setdefault(section, {})[key] = 10**20
    with pytest.raises(ConfigError, match=rf"^{section}\.{key}: .*less than or equal to"):
        parse_config(data)


def test_a_huge_max_traces_exits_2_before_the_store_opens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {
        **MINIMAL,
        "trace": {"enabled": True, "path": str(tmp_path / "t.db"), "max_traces": 10**20},
    }
    path = _write(tmp_path, yaml.safe_dump(data))
    assert main(["doctor", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "trace.max_traces" in err and "Traceback" not in err
    assert not (tmp_path / "t.db").exists()
