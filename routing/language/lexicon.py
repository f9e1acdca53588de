"""The word lists of decomposition, sentences, conditions, discourse, follow-ups and
time-sensitivity, as data (routing/words.yaml).

Which words open a request, which make a condition a premise, which pronouns point back:
the grammar lives in code, the vocabulary it uses in one shipped YAML file, read once
on first import and checked here, so a list missing or misspelt fails at start-up instead
of silently splitting every query differently.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, field_validator

Words = frozenset[str]
Phrases = tuple[tuple[str, ...], ...]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _strings(cls, value: object) -> object:
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            raise ValueError("every entry must be a string (quote yes/no/on/off)")
        return value


class DecomposeWords(_Section):
    openers: Words
    question_after_when: Words
    wake_words: Words
    fillers: Words  # with the wake words
    topic_openers: Words
    topic_modifiers: Words
    articles: Words
    paired_modifiers: Words
    prepositions: Words
    wh_words: Words
    continuations: Words
    introductions: Words
    in_place_questions: Words
    relatives: Words
    participles: Words
    speech_verbs: Words
    condition_openers: Words
    pronouns: Words
    particles: Words


class SentenceWords(_Section):
    statement_verbs: Words
    first_person: Words
    own_affairs: Words
    addressee_affairs: Words
    context_subjects: Words
    delayed_subjects: Words
    greetings: Words
    abbreviations: Words
    request_phrases: Words
    wishes: Words
    wish_openers: Words
    inquiry_verbs: Words
    plan_verbs: Words
    world_requests: Words


class ConditionalWords(_Section):
    whether_verbs: Words
    premise_subjects: Words
    markers: Words
    doubts: Words


class DiscourseWords(_Section):
    follow_up_openers: Words
    follow_up_endings: Words
    references: Words
    determiner_uses: Words
    weather_it: Words
    clock_words: Words
    clock_adverbs: Words


class FollowUpWords(_Section):
    frames: Words
    endings: Words
    subject_pronouns: Words
    possessives: Words
    place_pronouns: Words
    time_heads: Words
    time_words: Words
    place_prepositions: Words
    subject_frames: Words
    auxiliaries: Words
    subject_ends: Words


class TimeWords(_Section):
    present: Words
    recent: Words
    relative: Words
    age: Words
    measures: Words
    roles: Words
    role_frames: Words
    fixed_roles: Words
    role_ends: Words
    office_after: Words
    holding: Words
    superlatives: Words
    present_frames: Words
    perfect: Words
    perfect_subjects: Words
    past: Words
    noun_current: Words


class Lexicon(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    decompose: DecomposeWords
    sentences: SentenceWords
    conditional: ConditionalWords
    discourse: DiscourseWords
    followup: FollowUpWords
    time_sensitive: TimeWords


def parse_lexicon(text: str) -> Lexicon:
    """Validate the YAML text of a words file (ValueError naming the list that is wrong)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml, where PyYAML has it
    return Lexicon.model_validate(yaml.load(text, Loader=loader))


@lru_cache(maxsize=1)
def lexicon() -> Lexicon:
    """The shipped word lists, read once per process."""
    text = (resources.files("routing") / "words.yaml").read_text(encoding="utf-8")
    return parse_lexicon(text)


def phrases(words: Words) -> Phrases:
    """Space-separated phrases as word tuples ("what about" -> ("what", "about"))."""
    return tuple(sorted(tuple(phrase.split()) for phrase in words))
