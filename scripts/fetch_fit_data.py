"""Fetch the public labelled corpora `search fit` learns from, into routing/fit_data/*.jsonl.

Their output is committed (both licences allow it, with attribution: see routing/fit_data/NOTICE.md),
so a fit is reproducible from the repository alone; this script says where the rows came
from and regenerates them.

- HWU64 (xliuhw/NLU-Evaluation-Data, CC BY 4.0): the KFold_1 *trainset* files only, never a
  test set, mapped to routes with the same label mapping as ../shared/eval's SLURP rows
  (SLURP's text comes from HWU64). Rows whose text equals an evaluation text are dropped.
- ../shared/eval's single-intent files (SLURP devel and home-assistant/intents tests, both
  CC BY 4.0), copied as they are, so the repository holds every row a fit uses.
- SNIPS (sonos/nlu-benchmark, 2017-06-custom-intent-engines, CC0): the train_*.json files
  only (the validate_*.json files are that benchmark's test set), mapped as ../shared/eval
  maps SNIPS intents.
- OpenTriviaQA (uberspot/OpenTriviaQA, CC BY-SA 4.0): encyclopedic quiz questions that end
  in "?" and are short enough to be asked aloud, labelled kiwix.
- Banking77 (PolyAI-LDN/task-specific-datasets, CC BY 4.0): banking_data/train.csv only
  (test.csv is that benchmark's test set), a few short rows per intent, labelled none: no
  source here serves a bank account. Its exchange_rate intent is left out, since "what is
  the current exchange rate?" is a web question here. As many other rows of each intent go
  to banking77_check.jsonl, on which bench/routing_quality.py checks the `none` prior.
- MultiWOZ 2.2 (budzianowski/multiwoz, MIT): the first user turn of train/ dialogues only
  (never dev/ or test/), short ones, labelled none: booking hotels, tables, trains and
  taxis, or a town's local information, is a service nobody here offers. Written only with
  --multiwoz, because its dialogue files are large.

    python scripts/fetch_fit_data.py [--git-dir-hwu DIR] [--git-dir-trivia DIR]
        [--git-dir-snips DIR] [--git-dir-banking DIR] [--multiwoz] [--git-dir-multiwoz DIR]

The evaluation directory is ../shared/eval or $ROUTING_EVAL_DIR. Without a git dir it reads raw.githubusercontent.com (10 s timeout per file).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "routing" / "fit_data"
# Fetched but not fitted on (routing/fit_data/NOTICE.md says why).
STAGED = OUT / "staged"
# Corpora written but not yet fitted on: `search fit` reads only OUT/*.jsonl (NOTICE.md).
HWU_REPO = "xliuhw/NLU-Evaluation-Data"
HWU_DIR = (
    "CrossValidation/autoGeneFromRealAnno/autoGene_2018_03_22-13_01_25_169/"
    "CrossValidation/KFold_1/trainset"
)
EVAL_DIR = Path(os.environ.get("ROUTING_EVAL_DIR", ROOT / "../shared/eval"))
SNIPS_REPO = "sonos/nlu-benchmark"
SNIPS_ROUTES = {
    "GetWeather": "forecast",
    "SearchScreeningEvent": "web",
    "PlayMusic": "none",
    "AddToPlaylist": "none",
    "RateBook": "none",
    "BookRestaurant": "none",
}
TRIVIA_REPO = "uberspot/OpenTriviaQA"
TRIVIA_CATEGORIES = (
    "animals",
    "geography",
    "history",
    "humanities",
    "literature",
    "people",
    "religion-faith",
    "science-technology",
    "world",
    "general",
)
PER_INTENT = 40  # HWU64 rows per intent: enough to fit a few weights, small to ship
TRIVIA_ROWS = 400
BANKING_REPO = "PolyAI-LDN/task-specific-datasets"
BANKING_PER_INTENT = 5  # 76 intents: about as many rows as another corpus, not more
BANKING_LEFT_OUT = {"exchange_rate"}  # the current rate is a web question here
MAX_WORDS = 30  # Banking77 and MultiWOZ: a request said aloud, not a letter
MULTIWOZ_REPO = "budzianowski/multiwoz"
MULTIWOZ_TRAIN = "data/MultiWOZ_2.2/train"
MULTIWOZ_FILES = 17  # train/dialogues_001.json .. dialogues_017.json
MULTIWOZ_ROWS = 300
# A quiz's own framing ("which of these...") is not how anyone asks an encyclopedia.
_QUIZ_FRAMES = ("of these", "following", "which one", "true or false", ".?")

# The label mapping of ../shared/eval/README.md (SLURP intents are HWU64's).
ROUTE_OF = {
    "weather_query": "forecast",
    **{
        i: "ha"
        for i in (
            "iot_cleaning",
            "iot_coffee",
            "iot_hue_lightchange",
            "iot_hue_lightdim",
            "iot_hue_lightoff",
            "iot_hue_lighton",
            "iot_hue_lightup",
            "iot_wemo_off",
            "iot_wemo_on",
        )
    },
    **{
        i: "web"
        for i in (
            "news_query",
            "qa_currency",
            "qa_stock",
            "recommendation_events",
            "recommendation_locations",
            "recommendation_movies",
            "transport_traffic",
        )
    },
    "qa_definition": "kiwix",
    "qa_factoid": "kiwix",
    **{
        i: "none"
        for i in (
            "alarm_query",
            "alarm_remove",
            "alarm_set",
            "calendar_query",
            "calendar_remove",
            "calendar_set",
            "datetime_convert",
            "datetime_query",
            "email_addcontact",
            "email_query",
            "email_querycontact",
            "email_sendemail",
            "general_joke",
            "music_likeness",
            "play_audiobook",
            "play_game",
            "play_podcasts",
            "qa_maths",
            "social_post",
            "social_query",
            "takeaway_order",
            "transport_taxi",
            "transport_ticket",
        )
    },
}


def reader(repo: str, git_dir: str | None):
    def read(path: str) -> str:
        if git_dir:
            return subprocess.run(
                ["git", f"--git-dir={git_dir}", "show", f"HEAD:{path}"],
                check=True,
                capture_output=True,
            ).stdout.decode("utf-8", "replace")
        url = f"https://raw.githubusercontent.com/{repo}/HEAD/{path}"
        response = httpx.get(url, timeout=10.0, follow_redirects=True)
        response.raise_for_status()
        return response.text

    return read


def eval_texts() -> set[str]:
    texts: set[str] = set()
    for path in EVAL_DIR.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                texts.add(json.loads(line)["text"].strip().lower())
    return texts


def eval_plain() -> set[str]:
    return {plain(text) for text in eval_texts()}


def plain(text: str) -> str:
    """A text as lower-case words, so punctuation and spacing do not hide a copy."""
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


def banking77(
    git_dir: str | None, exclude: set[str]
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Rows for the `none` prior, and as many other rows of the same intents to check it on."""
    read = reader(BANKING_REPO, git_dir)
    by_intent: dict[str, set[str]] = {}
    for row in csv.DictReader(io.StringIO(read("banking_data/train.csv"))):
        text = " ".join(row["text"].split())
        if (
            text
            and len(text.split()) <= MAX_WORDS
            and plain(text) not in exclude
            and row["category"] not in BANKING_LEFT_OUT
        ):
            by_intent.setdefault(row["category"], set()).add(text)
    rows: list[dict[str, str]] = []
    check: list[dict[str, str]] = []
    for intent, found in sorted(by_intent.items()):
        texts = sorted(found)
        random.Random(f"banking77:{intent}").shuffle(texts)
        labelled = [{"text": t, "route": "none", "origin": f"banking77:{intent}"} for t in texts]
        rows += labelled[:BANKING_PER_INTENT]
        check += labelled[BANKING_PER_INTENT : 2 * BANKING_PER_INTENT]
    return rows, check


def multiwoz(git_dir: str | None, exclude: set[str]) -> list[dict[str, str]]:
    read = reader(MULTIWOZ_REPO, git_dir)
    found: dict[str, str] = {}  # first user turn -> the dialogue's services
    for number in range(1, MULTIWOZ_FILES + 1):
        for dialogue in json.loads(read(f"{MULTIWOZ_TRAIN}/dialogues_{number:03d}.json")):
            turn = next((t for t in dialogue["turns"] if t["speaker"] == "USER"), None)
            if turn is None:
                continue
            text = " ".join(turn["utterance"].split())
            if text and len(text.split()) <= MAX_WORDS and plain(text) not in exclude:
                found.setdefault(text, "+".join(sorted(dialogue.get("services") or [])))
    texts = sorted(found)
    random.Random("multiwoz").shuffle(texts)
    return [
        {"text": t, "route": "none", "origin": f"multiwoz:{found[t] or 'none'}"}
        for t in texts[:MULTIWOZ_ROWS]
    ]


def hwu64(git_dir: str | None, exclude: set[str]) -> list[dict[str, str]]:
    read = reader(HWU_REPO, git_dir)
    rows: list[dict[str, str]] = []
    for intent, route in sorted(ROUTE_OF.items()):
        found = list(csv.DictReader(io.StringIO(read(f"{HWU_DIR}/{intent}.csv")), delimiter=";"))
        texts = sorted({r["answer_from_anno"].strip().lower() for r in found} - exclude)
        random.Random(intent).shuffle(texts)
        rows += [
            {"text": t, "route": route, "origin": f"hwu64:{intent}"}
            for t in texts[:PER_INTENT]
            if t
        ]
    return rows


def snips(git_dir: str | None, exclude: set[str]) -> list[dict[str, str]]:
    read = reader(SNIPS_REPO, git_dir)
    rows: list[dict[str, str]] = []
    for intent, route in sorted(SNIPS_ROUTES.items()):
        path = f"2017-06-custom-intent-engines/{intent}/train_{intent}.json"
        found = json.loads(read(path))[intent]
        texts = sorted({"".join(chunk["text"] for chunk in r["data"]).strip() for r in found})
        texts = [t for t in texts if t.lower() not in exclude]
        random.Random(intent).shuffle(texts)
        rows += [
            {"text": t, "route": route, "origin": f"snips:{intent}"}
            for t in texts[:PER_INTENT]
            if t
        ]
    return rows


def trivia(git_dir: str | None) -> list[dict[str, str]]:
    read = reader(TRIVIA_REPO, git_dir)
    questions: list[str] = []
    for category in TRIVIA_CATEGORIES:
        for block in read(f"categories/{category}").split("#Q ")[1:]:
            question = block.split("\n^")[0].replace("\n", " ").strip()
            if (
                question.endswith("?")
                and 15 <= len(question) <= 110
                and "_" not in question
                and not any(w in question.lower() for w in _QUIZ_FRAMES)
            ):
                questions.append(question)
    questions = sorted(set(questions))
    random.Random("trivia").shuffle(questions)
    return [
        {"text": q, "route": "kiwix", "origin": "opentriviaqa"} for q in questions[:TRIVIA_ROWS]
    ]


def shared_eval(name: str) -> list[dict[str, str]]:
    rows = []
    for line in (EVAL_DIR / name).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows.append(
                {"text": row["text"], "route": row["expected"], "origin": row["origin_label"]}
            )
    return rows


def write(name: str, rows: list[dict[str, str]], directory: Path = OUT) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (directory / name).write_text(body, encoding="utf-8")
    print(f"{directory.relative_to(ROOT)}/{name}: {len(rows)} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir-hwu", default=None)
    parser.add_argument("--git-dir-trivia", default=None)
    parser.add_argument("--git-dir-snips", default=None)
    parser.add_argument("--git-dir-banking", default=None)
    parser.add_argument(
        "--multiwoz",
        action="store_true",
        help="also write multiwoz.jsonl (reads 17 large dialogue files)",
    )
    parser.add_argument("--git-dir-multiwoz", default=None)
    args = parser.parse_args()
    if not any(EVAL_DIR.glob("*.jsonl")):
        # Without them no row could be checked against the evaluation texts.
        print(f"no evaluation sets in {EVAL_DIR} (set ROUTING_EVAL_DIR)", file=sys.stderr)
        raise SystemExit(2)
    write("hwu64.jsonl", hwu64(args.git_dir_hwu, eval_texts()))
    write("opentriviaqa.jsonl", trivia(args.git_dir_trivia))
    write("snips.jsonl", snips(args.git_dir_snips, eval_texts()))
    prior_rows, check_rows = banking77(args.git_dir_banking, eval_plain())
    write("banking77.jsonl", prior_rows, STAGED)
    write("banking77_check.jsonl", check_rows, STAGED)
    if args.multiwoz or args.git_dir_multiwoz:
        write("multiwoz.jsonl", multiwoz(args.git_dir_multiwoz, eval_plain()), STAGED)
    for name in ("slurp_devel.jsonl", "ha_intents_tests.jsonl"):
        write(name, shared_eval(name))


if __name__ == "__main__":
    main()
