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

    python scripts/fetch_fit_data.py [--git-dir-hwu DIR] [--git-dir-trivia DIR]
        [--git-dir-snips DIR]

The evaluation directory is ../shared/eval or $ROUTING_EVAL_DIR. Without a git dir it reads raw.githubusercontent.com (10 s timeout per file).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import random
import subprocess
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "routing" / "fit_data"
HWU_REPO = "xliuhw/NLU-Evaluation-Data"
HWU_DIR = ("CrossValidation/autoGeneFromRealAnno/autoGene_2018_03_22-13_01_25_169/"
           "CrossValidation/KFold_1/trainset")
EVAL_DIR = Path(os.environ.get("ROUTING_EVAL_DIR", ROOT / "../shared/eval"))
SNIPS_REPO = "sonos/nlu-benchmark"
SNIPS_ROUTES = {"GetWeather": "forecast", "SearchScreeningEvent": "web", "PlayMusic": "none",
                "AddToPlaylist": "none", "RateBook": "none", "BookRestaurant": "none"}
TRIVIA_REPO = "uberspot/OpenTriviaQA"
TRIVIA_CATEGORIES = ("animals", "geography", "history", "humanities", "literature", "people",
                     "religion-faith", "science-technology", "world", "general")
PER_INTENT = 40  # HWU64 rows per intent: enough to fit a few weights, small to ship
TRIVIA_ROWS = 400
# A quiz's own framing ("which of these...") is not how anyone asks an encyclopedia.
_QUIZ_FRAMES = ("of these", "following", "which one", "true or false", ".?")

# The label mapping of ../shared/eval/README.md (SLURP intents are HWU64's).
ROUTE_OF = {
    "weather_query": "forecast",
    **{i: "ha" for i in ("iot_cleaning", "iot_coffee", "iot_hue_lightchange",
                         "iot_hue_lightdim", "iot_hue_lightoff", "iot_hue_lighton",
                         "iot_hue_lightup", "iot_wemo_off", "iot_wemo_on")},
    **{i: "web" for i in ("news_query", "qa_currency", "qa_stock", "recommendation_events",
                          "recommendation_locations", "recommendation_movies",
                          "transport_traffic")},
    "qa_definition": "kiwix",
    "qa_factoid": "kiwix",
    **{i: "none" for i in ("alarm_query", "alarm_remove", "alarm_set", "calendar_query",
                           "calendar_remove", "calendar_set", "datetime_convert",
                           "datetime_query", "email_addcontact", "email_query",
                           "email_querycontact", "email_sendemail", "general_joke",
                           "music_likeness", "play_audiobook", "play_game", "play_podcasts",
                           "qa_maths", "social_post", "social_query", "takeaway_order",
                           "transport_taxi", "transport_ticket")},
}


def reader(repo: str, git_dir: str | None):
    def read(path: str) -> str:
        if git_dir:
            return subprocess.run(["git", f"--git-dir={git_dir}", "show", f"HEAD:{path}"],
                                  check=True, capture_output=True).stdout.decode("utf-8", "replace")
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


def hwu64(git_dir: str | None, exclude: set[str]) -> list[dict[str, str]]:
    read = reader(HWU_REPO, git_dir)
    rows: list[dict[str, str]] = []
    for intent, route in sorted(ROUTE_OF.items()):
        found = list(csv.DictReader(io.StringIO(read(f"{HWU_DIR}/{intent}.csv")), delimiter=";"))
        texts = sorted({r["answer_from_anno"].strip().lower() for r in found} - exclude)
        random.Random(intent).shuffle(texts)
        rows += [{"text": t, "route": route, "origin": f"hwu64:{intent}"}
                 for t in texts[:PER_INTENT] if t]
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
        rows += [{"text": t, "route": route, "origin": f"snips:{intent}"}
                 for t in texts[:PER_INTENT] if t]
    return rows


def trivia(git_dir: str | None) -> list[dict[str, str]]:
    read = reader(TRIVIA_REPO, git_dir)
    questions: list[str] = []
    for category in TRIVIA_CATEGORIES:
        for block in read(f"categories/{category}").split("#Q ")[1:]:
            question = block.split("\n^")[0].replace("\n", " ").strip()
            if (question.endswith("?") and 15 <= len(question) <= 110 and "_" not in question
                    and not any(w in question.lower() for w in _QUIZ_FRAMES)):
                questions.append(question)
    questions = sorted(set(questions))
    random.Random("trivia").shuffle(questions)
    return [{"text": q, "route": "kiwix", "origin": "opentriviaqa"}
            for q in questions[:TRIVIA_ROWS]]


def shared_eval(name: str) -> list[dict[str, str]]:
    rows = []
    for line in (EVAL_DIR / name).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows.append({"text": row["text"], "route": row["expected"],
                         "origin": row["origin_label"]})
    return rows


def write(name: str, rows: list[dict[str, str]]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (OUT / name).write_text(body, encoding="utf-8")
    print(f"{name}: {len(rows)} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir-hwu", default=None)
    parser.add_argument("--git-dir-trivia", default=None)
    parser.add_argument("--git-dir-snips", default=None)
    args = parser.parse_args()
    write("hwu64.jsonl", hwu64(args.git_dir_hwu, eval_texts()))
    write("opentriviaqa.jsonl", trivia(args.git_dir_trivia))
    write("snips.jsonl", snips(args.git_dir_snips, eval_texts()))
    for name in ("slurp_devel.jsonl", "ha_intents_tests.jsonl"):
        write(name, shared_eval(name))


if __name__ == "__main__":
    main()
