"""Which reads a device command better: the `ha` source's own parser, or Home Assistant's
sentence matching (`conversation/agent/homeassistant/debug`)?

On the Home Assistant intents test sentences (`ha_intents_tests.jsonl` of the eval
directory, written by HA's contributors, not by this project), each sentence's intent is
known. The router can act on HassTurnOn / HassTurnOff (on/open/lock, off/close/unlock).
For each parser:
- commands read right: of the HassTurnOn/HassTurnOff sentences, those read as a command
  of the right polarity (local: `parse_control`'s action; HA: the intent it names);
- false commands: of every other sentence, those read as an on/off command;
- HA only, matched: its recognition also found the targets in the live registry (a
  real HA 2024.3.3 running its demo, whose device names are not those of the sentences,
  so this counts recognitions that need no name from the registry, e.g. areas missing).

    python bench/ha_parse.py                    # starts a real HA from the cached venv
    python bench/ha_parse.py --ha-url URL --token TOKEN

Prints the counts and one `BENCH_JSON {...}` line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sources.ha_recognize import recognize  # noqa: E402
from sources.homeassistant import parse_control  # noqa: E402

POLARITY = {"HassTurnOn": "on", "HassTurnOff": "off"}
LOCAL_POLARITY = {"on": "on", "open": "on", "lock": "on", "off": "off", "close": "off"}
LOCAL_POLARITY["unlock"] = "off"
BATCH = 50


def default_eval_dir() -> Path:
    env = os.environ.get("ROUTING_EVAL_DIR")
    return Path(env) if env else ROOT.parent / "shared" / "eval"


def load(path: Path) -> list[tuple[str, str]]:
    """(text, HA intent) per row."""
    rows = []
    for line in path.read_text("utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            intent = str(row["origin_label"]).split(":")[1]
            rows.append((str(row["text"]), intent))
    return rows


def local_polarity(text: str) -> str | None:
    parsed = parse_control(text)
    return LOCAL_POLARITY.get(parsed[0]) if parsed else None


async def ha_readings(url: str, token: str, texts: list[str]) -> list[tuple[str | None, bool]]:
    out: list[tuple[str | None, bool]] = []
    for start in range(0, len(texts), BATCH):
        batch = texts[start : start + BATCH]
        for r in await recognize(url, token, batch, timeout_s=120):
            out.append((POLARITY.get(r.intent or ""), r.matched))
    return out


def score(rows: list[tuple[str, str]], url: str, token: str) -> dict[str, object]:
    texts = [t for t, _ in rows]
    ha = asyncio.run(ha_readings(url, token, texts))
    commands = [(i, POLARITY[intent]) for i, (_, intent) in enumerate(rows) if intent in POLARITY]
    others = [i for i, (_, intent) in enumerate(rows) if intent not in POLARITY]
    local = [local_polarity(t) for t in texts]
    return {
        "sentences": len(rows),
        "commands": len(commands),
        "local_commands_right": sum(local[i] == want for i, want in commands),
        "ha_commands_right": sum(ha[i][0] == want for i, want in commands),
        "ha_commands_right_and_matched": sum(ha[i][0] == want and ha[i][1] for i, want in commands),
        "either_commands_right": sum(local[i] == want or ha[i][0] == want for i, want in commands),
        "others": len(others),
        "local_false_commands": sum(local[i] is not None for i in others),
        "ha_false_commands": sum(ha[i][0] is not None for i in others),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ha-url")
    parser.add_argument("--token")
    parser.add_argument("--eval-dir")
    args = parser.parse_args(argv)
    path = Path(args.eval_dir or default_eval_dir()) / "ha_intents_tests.jsonl"
    if not path.exists():
        print(f"no {path}", file=sys.stderr)
        return 2
    rows = load(path)
    if args.ha_url and args.token:
        result = score(rows, args.ha_url, args.token)
    else:
        from tests.support import homeassistant as harness

        hass = harness.ensure_venv()
        with tempfile.TemporaryDirectory() as tmp:
            config_dir, log = Path(tmp) / "config", Path(tmp) / "hass.out"
            port = harness.free_port()
            token = harness.write_config(config_dir, port)
            url = f"http://127.0.0.1:{port}"
            proc = harness.start_process(hass, config_dir, log)
            try:
                harness.wait_until_running(url, token, proc, log)
                result = score(rows, url, token)
            finally:
                harness.stop_process(proc)
    result["date"] = datetime.now(UTC).date().isoformat()
    c, o = result["commands"], result["others"]
    print(f"Home Assistant intents test sentences: {result['sentences']} ({c} on/off commands)")
    print(f"  commands read right   local parser {result['local_commands_right']}/{c}")
    print(f"                        HA matching  {result['ha_commands_right']}/{c}")
    print(f"                        either       {result['either_commands_right']}/{c}")
    print(
        f"  ... with targets in the live demo registry (HA) {result['ha_commands_right_and_matched']}/{c}"
    )
    print(f"  false commands        local parser {result['local_false_commands']}/{o}")
    print(f"                        HA matching  {result['ha_false_commands']}/{o}")
    print("BENCH_JSON " + json.dumps({"bench": "ha_parse", **result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
