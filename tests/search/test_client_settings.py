"""The client's light reading of config.yaml (`search.client_settings`) agrees with the
full config, and leaves whatever it does not take as plainly valid to the full config."""

from __future__ import annotations

from pathlib import Path

import pytest

from routing.config import RoutingConfig
from search.client_settings import ClientSettings, read_client_settings, settings_of
from search.config import ServerConfig, parse_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_the_full_configs(tmp_path: Path) -> None:
    server = ServerConfig()
    full = ClientSettings(
        host=server.host,
        port=server.port,
        api_token=None,
        max_query_chars=server.max_query_chars,
        request_deadline_s=RoutingConfig.model_fields["request_deadline_s"].default,
    )
    assert read_client_settings(write(tmp_path, "")) == full == ClientSettings()


def test_the_keys_it_reads_match_the_full_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLIENT_TEST_TOKEN", "s3cret")
    text = (
        "sources: {kiwix: {type: zim, paths: [a.zim]}}\n"
        "server: {host: '0.0.0.0', port: 9191, max_query_chars: 50,"
        " api_token: '${CLIENT_TEST_TOKEN}'}\n"
        "routing: {request_deadline_s: 2.5}\n"
    )
    light = read_client_settings(write(tmp_path, text))
    import yaml

    full = settings_of(parse_config(yaml.safe_load(text)))
    assert light == full
    assert light is not None and light.api_token == "s3cret" and light.port == 9191


@pytest.mark.parametrize(
    "text",
    [
        "server: {port: high}\n",
        "server: {port: 70000}\n",
        "server: {port: true}\n",
        "server: {api_token: '${CLIENT_TEST_UNSET_VAR}'}\n",
        "server: {max_query_chars: 0}\n",
        "routing: {request_deadline_s: 0}\n",
        "server: [1, 2]\n",
        "sources: [\n",
        "- just a list\n",
    ],
)
def test_anything_doubtful_is_left_to_the_full_config(tmp_path: Path, text: str) -> None:
    assert read_client_settings(write(tmp_path, text)) is None


def test_a_missing_file_is_left_to_the_full_config(tmp_path: Path) -> None:
    assert read_client_settings(tmp_path / "nowhere.yaml") is None


def test_the_rest_of_the_file_is_not_judged(tmp_path: Path) -> None:
    """A key the client does not need is the server's business (it validated its own)."""
    text = "server: {port: 9192}\nsources: {kiwix: {type: zim, paths: ['${CLIENT_TEST_UNSET}']}}\n"
    settings = read_client_settings(write(tmp_path, text))
    assert settings is not None and settings.port == 9192


def test_a_default_applies_when_the_variable_is_set_but_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`${VAR:-default}` as the shell reads it, and as the full config does."""
    monkeypatch.setenv("CLIENT_TEST_EMPTY", "")
    text = (
        "sources: {kiwix: {type: zim, paths: [a.zim]}}\n"
        "server: {host: '${CLIENT_TEST_EMPTY:-127.0.0.2}', port: 9193}\n"
    )
    light = read_client_settings(write(tmp_path, text))
    import yaml

    assert light is not None and light.host == "127.0.0.2"
    assert light == settings_of(parse_config(yaml.safe_load(text)))


@pytest.mark.parametrize(
    "text",
    [
        "server: {port: 9000, port: 9001}\n",  # the full config refuses a key given twice
        "server: {host: localhost}\nrouting: {}\nserver: {port: 9001}\n",
        "server: {port: 9000}\nwhen: 2024-13-45\n",  # PyYAML's ValueError, not a traceback
    ],
)
def test_a_file_the_full_config_refuses_is_left_to_it(tmp_path: Path, text: str) -> None:
    assert read_client_settings(write(tmp_path, text)) is None
