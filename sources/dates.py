"""Which days a weather question names, one reading for every forecast source.

"today" (and "tonight", "now", "this morning"...), "tomorrow", "the day after tomorrow",
"in N days", weekday names ("next friday" skips today's), "(this|next) weekend",
"this week" (through Sunday), "next week" (Monday to Sunday), ISO dates, and phrases for
the whole forecast ("the week ahead", "coming days", "next 5 days"). A question that names
no day asks about today: "will it rain?" means now, not the whole week.
"""

from __future__ import annotations

import contextlib
import re
from datetime import date, timedelta

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_TODAY_WORDS = re.compile(r"\b(today|tonight|now|currently|this (morning|afternoon|evening))\b")
_ALL_DAYS = re.compile(
    r"\b(week ahead|coming (days|week)|next (few|\d+) days|\d+[- ]day|(the|whole) week)\b"
)


def first_on_or_after(start: date, weekday: int) -> date:
    return start + timedelta(days=(weekday - start.weekday()) % 7)


def weekend(today: date, following: bool) -> set[date]:
    """Saturday and Sunday of this weekend (only Sunday when today is Sunday), or of the
    weekend after it when `following` and the weekend has already begun."""
    weekday = today.weekday()
    if weekday == 6:
        return {today + timedelta(days=6), today + timedelta(days=7)} if following else {today}
    saturday = first_on_or_after(today, 5)
    if following and weekday == 5:
        saturday += timedelta(days=7)
    return {saturday, saturday + timedelta(days=1)}


def pick_days(query: str, today: date, available: list[date]) -> list[date]:
    """The `available` forecast dates `query` asks about, in date order; today when it
    names none ([] when none of the named days is available, or `today`, a backend's
    word, is so near the calendar's end that the days after it do not exist)."""
    try:
        wanted = _wanted_days(query.lower(), today, available)
    except OverflowError:
        return []
    present = set(available)
    return sorted(d for d in wanted if d in present)


def _wanted_days(text: str, today: date, available: list[date]) -> set[date]:
    wanted: set[date] = set()
    for iso in re.findall(r"\b\d{4}-\d{2}-\d{2}\b", text):
        with contextlib.suppress(ValueError):  # 2026-02-30 names no day
            wanted.add(date.fromisoformat(iso))
    if "day after tomorrow" in text:
        wanted.add(today + timedelta(days=2))
        text = text.replace("day after tomorrow", " ")
    if re.search(r"\btomorrow\b", text):
        wanted.add(today + timedelta(days=1))
    if _TODAY_WORDS.search(text):
        wanted.add(today)
    for match in re.finditer(r"\bin (\d{1,2}) days\b", text):
        wanted.add(today + timedelta(days=int(match.group(1))))
    if re.search(r"\bweekends?\b", text):
        wanted.update(weekend(today, following=re.search(r"\bnext weekend\b", text) is not None))
    for index, name in enumerate(WEEKDAYS):
        if re.search(rf"\b{name}s?\b", text):
            day = first_on_or_after(today, index)
            if day == today and re.search(rf"\bnext {name}\b", text):
                day += timedelta(days=7)
            wanted.add(day)
    if re.search(r"\bnext week\b", text):
        monday = first_on_or_after(today + timedelta(days=1), 0)
        wanted.update(monday + timedelta(days=i) for i in range(7))
    elif re.search(r"\bthis week\b", text):
        # The rest of the week, through Sunday; on a Sunday that is the week ahead.
        sunday = first_on_or_after(today, 6)
        span = (sunday - today).days + 1 if today.weekday() != 6 else 7
        wanted.update(today + timedelta(days=i) for i in range(span))
    if _ALL_DAYS.search(text):
        wanted.update(available)
    if not wanted:
        wanted.add(today)
    return wanted
