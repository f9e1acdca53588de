"""Reading a routed request's chain in tests: route dry, list the steps, take one event."""

from __future__ import annotations

from typing import Any

from search.service import SearchOutcome, Service


async def route(service: Service, query: str) -> SearchOutcome:
    """`query` routed as a dry run, with its chain."""
    return await service.search(query, dry_run=True, explain=True)


def steps(outcome: SearchOutcome) -> list[str]:
    """The chain's steps, without the `planned` ones of a dry run."""
    return [e["step"] for e in outcome.chain if e["step"] != "planned"]


def only(outcome: SearchOutcome, step: str) -> dict[str, Any]:
    """The one event of `step` (it fails when there are none or several)."""
    [found] = [e for e in outcome.chain if e["step"] == step]
    return found
