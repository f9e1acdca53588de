"""Reciprocal rank fusion: merge ranked lists without comparing their incomparable scores.

score(item) = sum over lists of 1 / (k + rank). Items are the same when their url (or,
without one, their title) is the same; the first-seen copy is kept.
"""

from __future__ import annotations

from sources.base import Item

RRF_K = 60


def _identity(item: Item) -> str:
    return item.url or item.title.strip().lower()


def reciprocal_rank_fusion(ranked_lists: list[list[Item]], k: int = RRF_K) -> list[Item]:
    scores: dict[str, float] = {}
    first: dict[str, Item] = {}
    order: dict[str, int] = {}
    for items in ranked_lists:
        for rank, item in enumerate(items, start=1):
            key = _identity(item)
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
            if key not in first:
                first[key] = item
                order[key] = len(order)
    ranked = sorted(scores, key=lambda key: (-scores[key], order[key]))
    return [first[key] for key in ranked]
