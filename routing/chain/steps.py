"""The vocabulary of the explanation chain: every kind of event, what it means, its fields.

One definition, read by everything that records or reads the chain (the stages, the
dispatcher, metrics, narrative, replay, telemetry): a misspelt step is an AttributeError
and a type error, not a silently empty statistic. Each member is a `str`, so stored
traces, JSON and comparisons with plain strings are unchanged.

`fields` are the ones an event of that step always carries (besides `step`, `seq`,
`t_ms` and `part`); a step may carry more.
"""

from __future__ import annotations

from enum import StrEnum


class Step(StrEnum):
    fields: tuple[str, ...]

    def __new__(cls, value: str, fields: tuple[str, ...], doc: str) -> Step:
        member = str.__new__(cls, value)
        member._value_ = value
        member.fields = fields
        member.__doc__ = doc
        return member

    DECOMPOSED = (
        "decomposed",
        ("query", "parts"),
        "A query was split into parts (`claimed` when the keyword rules split it).",
    )
    CONDITIONAL_DETECTED = (
        "conditional_detected",
        ("query", "condition", "consequence", "remainder", "negated"),
        "A condition was extracted; `negated` for 'unless'.",
    )
    REWRITTEN = (
        "rewritten",
        ("query", "from", "to"),
        "A follow-up was asked as the question it stands for (`outcome: declined`, "
        "`to: null`, when the rewrite would be longer than the server accepts).",
    )
    INTENT_LABEL = (
        "intent_label",
        ("query", "decision", "label"),
        "A query the household labelled went where the label says (`fit` names the artefact).",
    )
    INTENT_KEYWORD = (
        "intent_keyword",
        ("query", "decision", "discourse_escalated"),
        "The keyword rules looked at a part (decided, declined or unserved).",
    )
    INTENT_CACHED = (
        "intent_cached",
        ("query", "decision"),
        "The routing-decision cache answered with an earlier decision.",
    )
    INTENT_SEMANTIC = (
        "intent_semantic",
        ("query", "matched_query", "similarity", "decision"),
        "The semantic stage looked at a part (exemplars, earlier decisions).",
    )
    INTENT_LLM = (
        "intent_llm",
        ("query", "decision", "discourse_escalated", "confidence_source", "calibrated"),
        "The LLM answered (decided, no source, or declined below min_confidence); its "
        "confidence from the server's logprobs (`confidence_source`), calibrated or not.",
    )
    INTENT_SESSION = (
        "intent_session",
        ("query", "decision"),
        "A follow-up inherited its conversation's previous decision.",
    )
    INTENT_WORLD = (
        "intent_world",
        ("query", "decision", "world", "time_sensitive"),
        "The stages before it were unsure which source answers a question about the world "
        "but sure, together, that it is the snapshot's or the live one's (`world`, their "
        "summed confidence): whether its answer changes with time chose (`cue`, `kind`, "
        "`probability` as on `time_sensitive`); `confidence` is `world` times how likely "
        "that reading is right.",
    )
    INTENT_DEFAULT = (
        "intent_default",
        ("query", "decision", "reason"),
        "No stage decided: the default route, or none when unserved.",
    )
    TIME_SENSITIVE = (
        "time_sensitive",
        ("query", "cue", "from_route", "to_route"),
        "A part's answer changes with time (`cue`, its `kind`; `cue` null and `kind` "
        "`model` when the time-sensitivity model alone said so, `probability` its reading): "
        "sent to a live source; with that source disabled (`reason`) the snapshot answers "
        "after it, and with none configured (`to_route` unchanged) the snapshot answers; "
        "its answer may be old. A part sent elsewhere states its new route's `confidence`: "
        "the stage's in the snapshot and live routes together times how likely the "
        "redirect is right.",
    )
    TIME_STABLE = (
        "time_stable",
        ("query", "from_route", "to_route", "probability"),
        "A question routed to the live source by likeness, whose answer the time-sensitivity "
        "model reads as fixed (`probability` under `below`): a snapshot answers it, the live "
        "source after it; `confidence` is the stage's times one minus `probability`.",
    )
    SNAPSHOT_ANSWERED = (
        "snapshot_answered",
        ("query", "source", "live_route"),
        "A snapshot source answered a part meant for the live source (routed there, or "
        "read as time-sensitive), which did not answer: disabled, failed, or not "
        "configured. Its answer may be out of date; the part's result says so "
        "(`may_be_out_of_date`).",
    )
    PLANNED = (
        "planned",
        ("query", "route", "stage", "sources", "unavailable"),
        "A dry run's plan for a part, in place of a source call: the `sources` its route "
        "would try in order, and `unavailable`, those that would be skipped now and why "
        "(`disabled`, `circuit_open`), as the process knows without calling anything.",
    )
    RESULT_CACHE_HIT = (
        "result_cache_hit",
        ("source", "query"),
        "A source's answer was served from the result cache.",
    )
    SOURCE_INVOKED = (
        "source_invoked",
        ("source", "query", "elapsed_ms", "outcome", "result_count"),
        "A real source call (a read, or with `operation: act` a command).",
    )
    SOURCE_SKIPPED = (
        "source_skipped",
        ("source", "query", "reason"),
        "A source was not called: disabled, or its circuit is open.",
    )
    FALLBACK = (
        "fallback",
        ("from_source", "to_source", "query", "reason"),
        "The fallback chain moved on to the next source.",
    )
    FUSION = ("fusion", ("query", "sources"), "A fusion route fanned out to its sources.")
    COMMAND_RECOGNIZED = (
        "command_recognized",
        ("query", "source", "recognizer", "intent", "matched", "slots", "targets"),
        "After the gate let a command through, what the source's own sentence matching "
        "(Home Assistant's) made of it; `error` when it could not be asked.",
    )
    CONTROL_WITHHELD = (
        "control_withheld",
        ("query", "source", "reason"),
        "A state-changing command was not carried out, and why.",
    )
    ERROR = (
        "error",
        ("query", "error_type", "message"),
        "An exception ended a part or the request.",
    )
    LLM_ERROR = ("llm_error", ("query", "reason"), "The LLM stage failed or answered unusably.")
    LLM_FORMAT_REFUSED = (
        "llm_format_refused",
        ("response_format",),
        "The LLM server refused a response_format; the next form is tried.",
    )
    LLM_BIAS_PROBE = (
        "llm_bias_probe",
        ("probe",),
        "The LLM was asked a content-free question to find a habitual answer.",
    )
    SHARED_STATE_DEGRADED = (
        "shared_state_degraded",
        ("component", "reason"),
        "Redis could not be used; local state answered instead.",
    )
    WORKER_THREAD = (
        "worker_thread",
        ("source", "query"),
        "Work recorded from a worker thread (the test suite's witness).",
    )


# Steps that end a part or the request: kept even past the chain's bound.
ALWAYS_KEPT = frozenset({Step.ERROR})
