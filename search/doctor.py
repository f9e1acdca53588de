"""`search doctor`: is every configured source (and the LLM) there, and does it answer?

The first thing to run after pointing the config at a real Home Assistant. Per source it
reports reachability, version, whether credentials were accepted, and one sample
read-only call (`Source.search`, never `act`) with its time. Exit 1 when an enabled source
is down: it failed to start, nothing answers at its address, or the sample call failed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

from routing.dispatch.dispatcher import expand_chain
from search.config import Config
from search.observability.health import check_source, source_url
from sources.base import Source, SourceUnauthorized
from sources.registry import kind_module

# One harmless question each kind can answer; read-only, whatever the source is.
SAMPLE_QUERIES = {
    "zim": "water",
    "kiwix_serve": "water",
    "open_meteo": "weather today",
    "ha_weather": "weather today",
    "homeassistant": "lights status",
    "searxng": "weather",
}
DEFAULT_SAMPLE = "status"
TIMEOUT = "timeout"  # the sample call's outcome when no answer came in the source's time
LLM_SAMPLE = "what is the weather today"


@dataclass(slots=True)
class Finding:
    """One row of the doctor's table."""

    name: str
    type: str
    enabled: bool
    status: str = "disabled"  # ok | down | disabled | not configured
    reachable: bool | None = None
    version: str | None = None
    auth: str = "-"  # ok | refused | - (nothing to authenticate, or no answer to tell)
    sample: str = ""  # "ok, 3 items" | "empty" | an error reason
    sample_ms: float | None = None
    detail: str = ""
    # For a source that is down: the first source of its fallback list that is up and so
    # answers its questions meanwhile (None: none does).
    covered_by: str | None = None

    @property
    def down(self) -> bool:
        return self.status == "down"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _has_credentials(entry: Any) -> bool:
    for key in ("token", "api_key"):
        secret = getattr(entry, key, None)
        if secret is not None and (
            secret.get_secret_value() if hasattr(secret, "get_secret_value") else secret
        ):
            return True
    return False


async def _sample(source: Source, query: str) -> tuple[str, float, Exception | None]:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(source.timeout_s):
            items = await source.search(query)
    except TimeoutError:
        return TIMEOUT, (time.perf_counter() - started) * 1000.0, None
    except Exception as exc:  # noqa: BLE001 - every failure is a finding
        reason = str(getattr(exc, "reason", type(exc).__name__))
        return reason, (time.perf_counter() - started) * 1000.0, exc
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    return (f"ok, {len(items)} items" if items else "empty"), elapsed_ms, None


def _auth(outcome: str, error: Exception | None) -> str:
    """`ok` only when the source answered the sample call: a source that never answered
    (a timeout) accepted nothing, so its credentials are unknown (`-`)."""
    return "ok" if error is None and outcome != TIMEOUT else "-"


async def check_one(name: str, entry: Any) -> Finding:
    """Start the source, ask its info, make one sample call, close it."""
    finding = Finding(name, str(entry.type), bool(entry.enabled))
    if not entry.enabled:
        return finding
    source = kind_module(entry.type).build(name, entry)
    try:
        try:
            await source.start()
        except Exception as exc:  # noqa: BLE001 - a source that cannot start is down
            finding.status = "down"
            finding.reachable = False
            finding.sample = str(getattr(exc, "reason", type(exc).__name__))
            finding.detail = f"start failed: {exc}"
            return finding
        health = await check_source(source, source_url(entry))
        finding.reachable = health.reachable
        finding.version = health.version
        outcome, elapsed_ms, error = await _sample(
            source, SAMPLE_QUERIES.get(str(entry.type), DEFAULT_SAMPLE)
        )
        finding.sample, finding.sample_ms = outcome, round(elapsed_ms, 1)
        refused = health.error == SourceUnauthorized.reason or isinstance(error, SourceUnauthorized)
        if refused:
            finding.auth = "refused"
        elif _has_credentials(entry):
            finding.auth = _auth(outcome, error)
        failed = error is not None or outcome == TIMEOUT
        if error is not None:
            finding.detail = str(error)
        finding.status = "down" if (failed or not health.reachable or refused) else "ok"
    finally:
        try:
            await source.aclose()
        except Exception:  # noqa: BLE001, S110 - closing a probe's client must not hide the finding
            pass
    return finding


async def check_llm(config: Config) -> Finding:
    """One routing question to the configured chat model, timed."""
    from routing.stages.build import route_descriptions
    from routing.stages.llm import LLMFailure, LLMStage, build_messages

    llm = config.routing.llm
    finding = Finding("llm", "chat-completions", bool(llm.base_url))
    if not llm.base_url:
        finding.status = "not configured"
        return finding
    finding.version = llm.model or None
    routes = route_descriptions(config)
    stage = LLMStage(llm, routes)
    started = time.perf_counter()
    try:
        answer = await stage.ask(build_messages(routes, LLM_SAMPLE))
    except LLMFailure as exc:
        finding.sample_ms = round((time.perf_counter() - started) * 1000.0, 1)
        finding.status = "down"
        finding.sample = exc.reason
        finding.detail = exc.detail
        finding.reachable = "request failed" not in exc.detail and "no answer" not in exc.detail
        if " 401 " in f" {exc.detail} " or " 403 " in f" {exc.detail} ":
            finding.auth = "refused"
        return finding
    finally:
        await stage.aclose()
    finding.sample_ms = answer.elapsed_ms
    finding.reachable = True
    finding.status = "ok"
    finding.sample = f"ok, routed to {answer.route or 'none'}"
    if llm.api_key is not None and llm.api_key.get_secret_value():
        finding.auth = "ok"
    return finding


async def diagnose(config: Config) -> list[Finding]:
    """Every configured source and the LLM, checked concurrently."""
    checks = [check_one(name, entry) for name, entry in config.sources.items()]
    findings = list(await asyncio.gather(*checks, check_llm(config)))
    fallbacks = {name: entry.fallback for name, entry in config.sources.items()}
    up = {f.name for f in findings if f.status == "ok"}
    for finding in findings:
        if finding.down and finding.name in fallbacks:
            stand_ins = expand_chain(finding.name, fallbacks)[1:]
            finding.covered_by = next((n for n in stand_ins if n in up), None)
    return findings


def coverage(findings: list[Finding], config: Config) -> list[str]:
    """For each source that is down, who answers its questions meanwhile, in words: a
    fallback stands in for its own source only, so this is the one place to read it."""
    lines = []
    for f in findings:
        if not f.down or f.name not in config.sources:
            continue
        listed = config.sources[f.name].fallback
        if f.covered_by is not None:
            line = f"{f.name} is down: {f.covered_by} answers its questions meanwhile"
            if config.routing.time_sensitive.snapshot_for_live(f.name, f.covered_by):
                line += " (an offline snapshot: its answers may be out of date)"
            lines.append(line)
        elif listed:
            lines.append(
                f"{f.name} is down, and none of the sources it falls back to "
                f"({', '.join(listed)}) is up: its questions get no answer"
            )
        else:
            lines.append(f"{f.name} is down and has no fallback: its questions get no answer")
    return lines


def table(findings: list[Finding]) -> list[tuple[str, ...]]:
    """The rows of the doctor's table, header first."""
    rows: list[tuple[str, ...]] = [
        ("source", "type", "status", "reachable", "version", "auth", "sample call", "time")
    ]
    for f in findings:
        reachable = "-" if f.reachable is None else ("yes" if f.reachable else "no")
        rows.append(
            (
                f.name,
                f.type,
                f.status,
                reachable,
                f.version or "-",
                f.auth,
                f.sample or "-",
                "-" if f.sample_ms is None else f"{f.sample_ms:.1f} ms",
            )
        )
    return rows
