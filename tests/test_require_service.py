"""`require_service`: a missing real service skips on a developer's machine and fails the
run under `CI=true`, so a green CI run means the real-service tests ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.require import ci_strict, missing_data, require_service

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes"])
def test_a_missing_service_fails_under_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="redis-server unavailable: not installed"):
        require_service("redis-server", False, "not installed")


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_a_missing_service_skips_outside_ci(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert not ci_strict()
    with pytest.raises(pytest.skip.Exception, match="Chromium unavailable: no binary"):
        require_service("Chromium", False, "no binary")


@pytest.mark.parametrize("value", ["true", "false"])
def test_an_available_service_goes_on(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    require_service("kiwix-serve", True, "never said")  # neither skips nor fails


def run_suite(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_needs_a_service.py"
    test.write_text(
        "from tests.support.require import require_service\n"
        "def test_it():\n"
        "    require_service('a service', False, 'not on this machine')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rsf", str(test)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_whole_run_is_red_under_ci_and_green_with_a_skip_otherwise(tmp_path: Path) -> None:
    strict = run_suite(tmp_path, "true")
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "1 failed" in strict.stdout and "a service unavailable" in strict.stdout
    relaxed = run_suite(tmp_path, None)
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr
    assert "1 skipped" in relaxed.stdout and "a service unavailable" in relaxed.stdout


def test_missing_evaluation_data_skips_even_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluation sets live outside the repository: a fresh clone has none."""
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.skip.Exception, match="the evaluation sets unavailable"):
        missing_data("the evaluation sets", "none in /nowhere")
