"""Which days a weather question names (`sources.dates`), on fixed dates, for every
forecast source alike."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from sources.dates import pick_days

WED = date(2026, 11, 25)  # a Wednesday
SAT, SUN = date(2026, 11, 28), date(2026, 11, 29)
WEEK = [WED + timedelta(days=i) for i in range(7)]  # Wed .. Tue


@pytest.mark.parametrize(
    ("query", "today", "expected"),
    [
        ("what's the weather", WED, [WED]),  # no day named: today, for every source
        ("weather forecast", WED, [WED]),
        ("weather today", WED, [WED]),
        ("will it rain tonight", WED, [WED]),
        ("will it rain tomorrow", WED, [WED + timedelta(1)]),
        ("the day after tomorrow", WED, [WED + timedelta(2)]),
        ("in 3 days", WED, [WED + timedelta(3)]),
        ("this weekend", WED, [SAT, SUN]),
        ("weekend", SAT, [SAT, SUN]),
        ("this weekend", SUN, [SUN]),
        ("next weekend", SUN, [date(2026, 12, 5)]),  # its Sunday is past the forecast
        ("forecast for friday", WED, [date(2026, 11, 27)]),
        ("forecast for wednesday", WED, [WED]),
        ("next wednesday", WED, []),  # a week from today: past the forecast
        ("rain on monday or tuesday", WED, [date(2026, 11, 30), date(2026, 12, 1)]),
        ("this week", WED, WEEK[:5]),
        ("this week", SAT, [SAT, SUN]),
        ("next week", WED, [date(2026, 11, 30), date(2026, 12, 1)]),  # Mon, Tue available
        ("the week ahead", WED, WEEK),
        ("the next 5 days", WED, WEEK),
        ("weather on 2026-11-27", WED, [date(2026, 11, 27)]),
        ("weather on 2026-02-30", WED, [WED]),  # no such day: names nothing
        ("weather on 2027-01-01", WED, []),  # named, but not in the forecast
    ],
)
def test_pick_days(query: str, today: date, expected: list[date]) -> None:
    available = [today + timedelta(days=i) for i in range(7)]
    assert pick_days(query, today, available) == expected


def test_next_weekend_and_next_weekday_skip_the_current_one() -> None:
    available = [SAT + timedelta(days=i) for i in range(10)]
    assert pick_days("next weekend", SAT, available) == [date(2026, 12, 5), date(2026, 12, 6)]
    assert pick_days("next saturday", SAT, available) == [date(2026, 12, 5)]
    assert pick_days("saturday", SAT, available) == [SAT]


def test_only_available_days_are_returned() -> None:
    three = [WED, WED + timedelta(1), WED + timedelta(2)]
    assert pick_days("the week ahead", WED, three) == three
    assert pick_days("sunday", WED, three) == []
