"""Routing quality on corpora left out of the weights' fit (leave-one-corpus-out, no LLM).

Runs `bench/routing_quality.py`'s leave-one-corpus-out evaluation once for the module: for
each file of ../shared/eval (and OpenTriviaQA, a fit corpus with no evaluation file, from
its own fit rows), the confidence is fitted without that file's corpus (routing/fitting/fit.py)
and the whole resolution of a `Service` built from the shipped config.yaml routes the
file (dry run). Only the corpus's fit rows are left out: the shipped rules, exemplars,
word lists and thresholds were written while reading these corpora's errors, so these
figures flatter routing on unseen language (bench/sealed_quality.py estimates that); they
guard against a change that makes routing worse, and the in-corpus figures (the rows are
in the fit) would flatter it more. The sources are swapped for the scripted test kind
(routing only reads the `routing:` section).

- Floors: what the shipped routing reaches today, minus a little slack: a change that makes
  routing worse on the left-out corpora fails here. Every floor (and ceiling) holds the issue's
  target too (85% per source and compound, <= 10% of `none` routed confidently), checked
  on the numbers themselves, so a floor cannot be lowered past its target unnoticed.
- Calibration (ECE <= 0.05) on each left-out corpus, gibberish at the default, and
  requests no source serves (Banking77 rows in no fit) rarely routed to one.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest

from bench import routing_quality as rq
from tests.support.require import missing_data

ROOT = Path(__file__).resolve().parents[3]
SLACK = 0.015

# Leave-one-corpus-out accuracy today, per file and expected label ("*": every row).
TRIVIA = rq.fit_only_name("opentriviaqa")  # a fit corpus with no evaluation file
FLOORS: dict[str, dict[str, float]] = {
    "ha_intents_tests.jsonl": {"ha": 0.952, "*": 0.952},
    "slurp_devel.jsonl": {"forecast": 0.975, "ha": 0.904, "kiwix": 0.750, "web": 0.883, "*": 0.892},
    "slurp_devel_compound.jsonl": {"*": 0.773},
    "mixsnips_dev.jsonl": {"*": 0.933},
    TRIVIA: {"kiwix": 0.908},
}
# Since 2026-12-03 the exemplar classifier also trains on the prior of SituatedQA's stable
# questions (routing/stages/classifier_prior.py): SituatedQA's dev questions 75.3% -> 80.5%
# right (bench/situatedqa_routing.py), kiwix and compound here up, SLURP's ha (91.3% ->
# 89.6%) and web (90.8% -> 88.3%) rows down by two and three (bench/README.md).
# Floors that are short of the issue's target, each with what it measured and why it was
# let fall: nothing else may be (test_every_floor_holds_the_issues_target).
_TIME_SENSITIVE = (
    "since 2026-12-02 a question whose answer changes with time is routed to web even with "
    "web disabled, as shipped (kiwix answers it after web), where before it stayed kiwix: "
    "the corpus labels such questions kiwix"
)
SHORT_OF_TARGET = {
    ("slurp_devel_compound.jsonl", "*"): "88.9% before the written distinctions joined the "
    "fit and the exemplars (2026-12-02), 79.6% with them: its kiwix+web and kiwix+none pairs "
    "fall most, while the sealed corpora's compound requests rose (bench/README.md); 77.8% "
    f"{_TIME_SENSITIVE}, and two of its kiwix+web pairs' web halves read as fixed facts; "
    "79.2% with the classifier prior; 77.3% (two pairs) with the questions put to a "
    "business or the assistant about its own affairs (2026-12-06), while the sealed corpora's "
    "compound requests went 0.782 -> 0.784 and their unserved requests routed 7.6% -> 6.0%",
    ("slurp_devel.jsonl", "kiwix"): "85.8% (88.3% before the written distinctions); 77.5% "
    f"{_TIME_SENSITIVE} ('how old is ...', 'who is the governor of ...', 'this week'; "
    "../shared/eval/README.md counts about 15% of its questions as current events); 80.0% "
    "with the classifier prior; 76.7% with a hidden layer in the time-sensitivity model "
    "(2026-12-06), which finds more of the questions whose answer changes (SituatedQA dev: "
    "recall 0.74 -> 0.79 at precision 0.86 -> 0.91) and so reads 'how old is ...' and "
    "'what age is ...' of living people as such, as the routing issue asks; 75.0% since the "
    "time model's threshold is the one with the best balanced accuracy (2026-12-07: 0.60 -> "
    "0.50), which sends 'what age is britney spears' (changing) and 'who was the twenty "
    "fifth president of the united states of america' (fixed) to web too, while SituatedQA "
    "dev went 0.859 -> 0.864 and its web questions 0.790 -> 0.825",
}
NONE_CONFIDENT_CEILING = {"slurp_devel.jsonl": 0.083, "ha_intents_tests.jsonl": 0.067}
# Of Banking77's check rows (routing/fit_data/staged/banking77_check.jsonl: requests no
# source serves, in no fit), the share routed to a source with the shipped artefacts: 8.7%
# since the `none` route's classifier prior and the own-affairs deferral (2026-12-06); the
# slack stops at the target.
UNSERVED_CHECK_CEILING = 0.087


@pytest.fixture(scope="module")
def config() -> object:
    return rq.isolated_config(ROOT / "config.yaml")


@pytest.fixture(scope="module")
def left_out(config: object) -> dict[str, rq.LeftOut]:
    eval_dir = rq.default_eval_dir()
    files = rq.load_rows(eval_dir) if eval_dir.is_dir() else {}
    if not files:
        missing_data("the evaluation sets", f"none in {eval_dir} (set ROUTING_EVAL_DIR)")
    with tempfile.TemporaryDirectory() as workdir:
        return asyncio.run(rq.leave_one_corpus_out(config, files, Path(workdir)))


def accuracy(result: rq.Score, label: str) -> float:
    if label == "*":
        return result.accuracy
    value = result.source_accuracy(label)
    assert value is not None, f"no {label} rows"
    return value


def _file(left_out: dict[str, rq.LeftOut], file: str) -> rq.LeftOut:
    if file not in left_out:
        missing_data(f"the evaluation set {file}", "not in the evaluation directory")
    return left_out[file]


@pytest.mark.parametrize(
    ("file", "label"), [(f, label) for f, labels in FLOORS.items() for label in labels]
)
def test_no_regression(left_out: dict[str, rq.LeftOut], file: str, label: str) -> None:
    value = accuracy(_file(left_out, file).score, label)
    assert value >= FLOORS[file][label] - SLACK, f"{file} {label}: {value:.1%}"


@pytest.mark.parametrize("file", sorted(NONE_CONFIDENT_CEILING))
def test_none_rows_stay_low_confidence(left_out: dict[str, rq.LeftOut], file: str) -> None:
    share = _file(left_out, file).score.none_confident_share or 0.0
    assert share <= NONE_CONFIDENT_CEILING[file] + SLACK + 1e-9, f"{file}: {share:.1%} routed"


@pytest.mark.parametrize("file", sorted(FLOORS))
def test_confidence_is_calibrated_on_a_left_out_corpus(
    left_out: dict[str, rq.LeftOut], file: str
) -> None:
    ece = _file(left_out, file).ece
    assert ece is not None and ece <= rq.ECE_MAX, f"{file}: ECE {ece}"


def test_gibberish_never_gets_a_confident_route(config: object) -> None:
    defaulted, total = asyncio.run(rq.gibberish_defaults(config))
    assert defaulted == total


def test_requests_no_source_serves_are_rarely_routed(config: object) -> None:
    routed, total, answered = asyncio.run(rq.unserved_routed(config))
    assert total == 380
    assert routed <= answered <= total  # a decision's source, or the default's too
    allowed = min(UNSERVED_CHECK_CEILING + SLACK, rq.NONE_CONFIDENT_MAX)  # and the target
    assert routed / total <= allowed + 1e-9, f"{routed}/{total} routed"


def test_every_floor_holds_the_issues_target() -> None:
    """With the slack taken off, a floor is still the target (a compound file's, or each
    source's), and a `none` ceiling with its slack is still within the target share."""
    for file, labels in FLOORS.items():
        for label, floor in labels.items():
            if label == "*" and "compound" not in file and "mixsnips" not in file:
                continue  # a whole single-source file: its sources have their own floors
            target = rq.COMPOUND_TARGET if label == "*" else rq.SINGLE_TARGET
            short = (file, label) in SHORT_OF_TARGET
            assert (floor - SLACK >= target) != short, (file, label)
    for file, ceiling in NONE_CONFIDENT_CEILING.items():
        assert ceiling + SLACK <= rq.NONE_CONFIDENT_MAX, file


def test_llm_figures_count_what_each_run_decided() -> None:
    """The totals `--json-out` writes for docs/llm.md: per run, rows right, rows with a part
    the LLM decided and how many of those were right, rows it failed on."""
    kiwix = rq.Row("a.jsonl", "who wrote hamlet", "kiwix", "tune")
    unserved = rq.Row("a.jsonl", "order a pizza", "none", "tune")
    plain = [
        rq.Outcome(kiwix, [("who wrote hamlet", "kiwix", "intent_semantic")]),
        rq.Outcome(unserved, [("order a pizza", "none", "intent_default")]),
    ]
    every = [
        rq.Outcome(kiwix, [("who wrote hamlet", "kiwix", "intent_semantic")]),
        rq.Outcome(unserved, [("order a pizza", "kiwix", "intent_llm")]),
    ]
    checked = [
        rq.Outcome(kiwix, [("who wrote hamlet", "kiwix", "intent_semantic")]),
        rq.Outcome(unserved, [("order a pizza", "none", "intent_default")], llm_failed=True),
    ]
    runs = {
        "no LLM": {"a.jsonl": plain},
        "LLM, every answer": {"a.jsonl": every},
        "LLM, bias check": {"a.jsonl": checked},
    }
    assert rq.llm_figures(runs, "a test server") == {
        "rows": 2,
        "server": "a test server",
        "no_llm_right": 2,
        "every_answer_right": 1,
        "every_answer_decided": 1,
        "every_answer_decided_right": 0,
        "every_answer_failed": 0,
        "bias_check_right": 2,
        "bias_check_decided": 0,
        "bias_check_decided_right": 0,
        "bias_check_failed": 1,
    }


def test_a_part_left_to_the_default_is_answered_by_its_source() -> None:
    """By decision a part that ended at the default is `none`; by the source that answers
    it, it is the default's route, which the service asks; only an unserved part is `none`
    both ways."""
    question = rq.Row("a.jsonl", "who wrote hamlet", "kiwix", "tune")
    request = rq.Row("a.jsonl", "order a pizza", "none", "tune")
    left_to_kiwix = rq.Outcome(question, [("q", "none", "intent_default")], answered=("kiwix",))
    fell_to_kiwix = rq.Outcome(request, [("r", "none", "intent_default")], answered=("kiwix",))
    unserved = rq.Outcome(request, [("r", "none", "intent_default")], answered=("none",))
    assert not left_to_kiwix.correct and left_to_kiwix.answered_correct
    assert fell_to_kiwix.correct and not fell_to_kiwix.answered_correct
    assert fell_to_kiwix.answered_by_source and not fell_to_kiwix.confident_source
    assert unserved.correct and unserved.answered_correct and not unserved.answered_by_source
    pair = rq.Row("b.jsonl", "q and r", ("kiwix", "web"), "tune")
    joined = rq.Outcome(pair, [("q", "none", "intent_default"), ("r", "web", "intent_keyword")])
    assert not joined.answered_correct  # without `answered`, the labels stand
    joined.answered = ("kiwix", "web")
    assert joined.answered_correct


def test_json_out_without_an_llm_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        rq.main(["--json-out", "figures.json"])
    assert exit_info.value.code == 2
    assert "--json-out writes the LLM comparison: it needs --llm" in capsys.readouterr().err


def test_a_plain_run_prints_its_checks_and_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --llm too, the run prints the gibberish and unserved checks and its verdict,
    not only the per-file tables."""
    rows = ['{"text": "turn off the kitchen light", "expected": "ha"}\n']
    (tmp_path / "tiny.jsonl").write_text("".join(rows), "utf-8")
    code = rq.main(["--isolated", "--no-sealed", "--no-loco", "--eval-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "== tiny.jsonl" in out
    assert "gibberish -> intent_default: " in out
    assert "unserved check (" in out
    assert "targets: " in out
