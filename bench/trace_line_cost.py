"""What encoding one trace's line costs the server, piece by piece, in CPU instructions.

The trace store's cost on the request (bench/trace_overhead.py) is almost all
`record_line`: the trace of a finished request turned into the JSON line the writer
process reads. This counts, per call, with valgrind's callgrind (`bench.common.
count_instructions`), on the trace of the cache-hit request `trace_overhead.py` times:

- `record_line`: the whole line, as `SQLiteTraceStore.submit` makes it;
- `counted_results`: its first step, each part's items replaced by their count;
- `orjson`: the encoding of the message it builds, alone (the message as the writer
  process reads it back: the same values, step names as plain strings);
- `orjson_chain`: the encoding of the message's recorded chain alone (its events), the
  part no leaner line can leave out;
- `orjson_empty`: orjson's fixed cost, an empty list encoded with the same options;
- `marshal`: the same message encoded by the standard library's `marshal` instead, the
  fastest other encoder of plain Python values at hand;
- `nothing`: the loop around each call, for reference.

So a change to the line's encoding shows where its instructions went, and what an
alternative encoder would save. Needs valgrind (Debian).

    .venv/bin/python bench/trace_line_cost.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import marshal
import operator
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import count_instructions, emit  # noqa: E402
from bench.trace_overhead import QUERY, captured_trace  # noqa: E402
from search.traces.records import TraceRecord  # noqa: E402
from search.traces.rows import counted_results  # noqa: E402
from search.traces.writer import _plain, record_line  # noqa: E402

# Where the chain stands in the writer's "trace" message (search.traces.writer's protocol):
# after the tag, trace id, start, query, status code and duration.
CHAIN_FIELD = 6
SIDES = (
    "nothing",
    "counted_results",
    "orjson",
    "orjson_chain",
    "orjson_empty",
    "marshal",
    "record_line",
)


async def cache_hit_trace() -> TraceRecord:
    """The trace of the cache-hit request `trace_overhead.py` times, as the store gets it."""
    return await captured_trace(QUERY["query"], asks=2)


def run_counted_side(side: str, n: int) -> None:
    """In a child under callgrind: `n` calls of `side` inside `operator.call`."""
    trace = asyncio.run(cache_hit_trace())
    # The message `record_line` encodes, as the writer process reads it back: the same
    # values, with the step names as plain strings (marshal refuses a str subclass).
    built = orjson.loads(record_line(trace, False))
    chain, empty = built[CHAIN_FIELD], []
    calls = {
        "nothing": lambda: None,
        "counted_results": lambda: counted_results(trace.results),
        "orjson": lambda: orjson.dumps(built, default=_plain, option=orjson.OPT_APPEND_NEWLINE),
        "orjson_chain": lambda: orjson.dumps(chain, option=orjson.OPT_APPEND_NEWLINE),
        "orjson_empty": lambda: orjson.dumps(empty, option=orjson.OPT_APPEND_NEWLINE),
        "marshal": lambda: marshal.dumps(built),
        "record_line": lambda: record_line(trace, False),
    }
    call = calls[side]

    def loop() -> None:
        for _ in range(n):
            call()

    loop()  # warm
    operator.call(loop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    trace = asyncio.run(cache_hit_trace())
    line = record_line(trace, False)
    counts = count_instructions(Path(__file__), SIDES, args.calls)
    if counts is None:
        print("needs valgrind (Debian: apt-get install -y valgrind)", file=sys.stderr)
        raise SystemExit(2)
    print(f"the cache-hit trace of {QUERY['query']!r}: a line of {len(line)} bytes")
    floor = counts["nothing"]
    print(f"  (the loop and call around each: {floor:,.0f} instructions, taken off below)")
    for side in SIDES[1:]:
        print(f"  {side:16s} {counts[side] - floor:9,.0f} instructions per call")
    emit("trace_line_cost", line_bytes=len(line), instructions=counts, calls=args.calls)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--counted-side"]:
        run_counted_side(sys.argv[2], int(sys.argv[3]))
    else:
        main()
