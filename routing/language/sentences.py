"""Is a sentence a request of its own, or context for the request beside it?

People often say something about themselves before they ask: "I'm planning a trip. What's
the weather in Boston on Friday?" is one request, and its first sentence, routed alone,
would send "I'm planning a trip" to the encyclopedia. A statement is context when it
opens with the asker or the situation as its subject ("I'm free this weekend", "my car is
low on gas", "it's raining") and asks for nothing ("I need a taxi", "we're looking for a
pub", "I want to know ..." do ask), or when the asker comes after a time or place ("This
weekend I'm free"). Decomposition (routing/language/decompose.py) splits at a sentence end only
between two requests; any other sentence of two words or more is presumed to ask
("Nighttime mode."), but a greeting ("Hi.", "Thanks!") and a context sentence stay with
their request.

Words only, no punctuation: a part's trailing "?" is trimmed, and splitting a part again
must see the same thing. The word lists are data (routing/words.yaml, `sentences`).
"""

from __future__ import annotations

from routing.language.lexicon import lexicon, phrases

_WORDS = lexicon().sentences
_SUBJECTS = _WORDS.context_subjects
_REQUESTS = phrases(_WORDS.request_phrases)
_WISHES = _WORDS.wishes
_WISH_OPENERS = _WORDS.wish_openers
# After "to": verbs that ask ("book", "find", "know"), not those that plan ("go", "get").
_ASKING_VERBS = (lexicon().decompose.openers | _WORDS.inquiry_verbs) - _WORDS.plan_verbs
# How far after the subject a request may start: "I really need ...", "we are looking for".
_REACH = 4
_DELAYED = _WORDS.delayed_subjects
_GREETINGS = _WORDS.greetings
_OPENERS = lexicon().decompose.openers - _DELAYED
# How far into a sentence the asker may come after a time or place: "on friday night we".
_DELAY = 4
_ALL_OPENERS = lexicon().decompose.openers | lexicon().decompose.wake_words
_STATEMENT_VERBS = _WORDS.statement_verbs
_STATEMENT_WORDS = 4  # "Nighttime mode is on." could be a request; shorter ones are


def is_context(words: list[str]) -> bool:
    """A statement about the asker or the situation that asks for nothing itself: it opens
    with its subject ("I'm free this weekend", "my car is low on gas"), or the asker comes
    after a time or place ("This weekend I'm free").

    `words`: the sentence's words, lower case ("i'm", "free", "this", "weekend")."""
    if not words:
        return False
    if words[0] in _SUBJECTS:
        return not asks(words)
    for index, word in enumerate(words[: 1 + _DELAY]):
        if word in _OPENERS:
            return False  # "tell me if I need ...", "what should I wear"
        if word in _DELAYED:
            return not asks(words[index:])
    return False


def is_statement(words: list[str]) -> bool:
    """A fact stated about something else ("The Ferrari Testarossa went into production in
    1984", "Beethoven's Fifth is divided into four movements"): before a question it is the
    question's premise, not a request. It opens with its subject, not with a request's
    word, and has a verb of statement after it."""
    return (
        len(words) >= _STATEMENT_WORDS
        and words[0] not in _ALL_OPENERS
        and words[0] not in _SUBJECTS
        and any(word in _STATEMENT_VERBS for word in words[1:])
    )


# The words a question opens with. A question is told by its words, not its "?": a part's
# trailing "?" is trimmed, and splitting a part again must judge it the same way.
_QUESTION_OPENERS = frozenset(
    [
        "what",
        "what's",
        "whats",
        "who",
        "who's",
        "whom",
        "whose",
        "where",
        "where's",
        "when",
        "which",
        "why",
        "how",
        "how's",
        "is",
        "are",
        "was",
        "were",
        "do",
        "does",
        "did",
        "can",
        "could",
        "will",
        "would",
        "should",
        "has",
        "have",
    ]
)


# The question words among them: a question they open asks for a fact, not a yes or no
# ("is it ...", "can you ..." may be a request: "can you play ...").
_WH_OPENERS = frozenset(w for w in _QUESTION_OPENERS if w.startswith(("wh", "how")))
# ...and the imperative that asks for one: "name a song by ...", "name the capital of ...".
_WORLD_OPENERS = _WH_OPENERS | {"name"}
# ...and the imperatives that ask for one in more words: "tell me about ...", "describe
# ...", "explain to me ...", the longest first ("explain to me" before "explain").
_WORLD_REQUESTS = tuple(sorted(phrases(_WORDS.world_requests), key=len, reverse=True))
_FIRST_PERSON = _WORDS.first_person
_OWN_AFFAIRS = _WORDS.own_affairs
_ADDRESSEE_AFFAIRS = _WORDS.addressee_affairs
_NOT_ABOUT_THE_WORLD = _FIRST_PERSON | _ADDRESSEE_AFFAIRS


def asks_about_the_world(words: list[str]) -> bool:
    """ "who sang the theme song", "when did the first season air", "name a film by ...",
    "tell me about the album ...": a question word (or an imperative that asks for a fact)
    opens it and nothing after that is the asker's own ("my calendar", "our flight") or the
    addressee's ("your opening hours", "your name"). Such a question is rarely one no
    source serves, whatever its topic words ("song", "album")."""
    if len(words) < 3:
        return False
    asked = _after_world_opener(words)
    if not asked:
        return False
    return _NOT_ABOUT_THE_WORLD.isdisjoint(asked)


def about_the_world(words: list[str]) -> bool:
    """A question about the world (`asks_about_the_world`), or a phrase with no question
    word typed as into a search box ("2015 national book award winners", "number of
    branches in the philippines") with nothing of the asker's or the addressee's in it. A
    yes-or-no question ("is there an age limit", "can you ...") is neither: it is as
    often put to whoever is asked. Words alone do not tell an imperative ("play the
    theme") from such a phrase: a caller that must leaves commands out itself, as the
    time reading does."""
    if asks_about_the_world(words):
        return True
    return bool(words) and not is_question(words) and _NOT_ABOUT_THE_WORLD.isdisjoint(words)


def asks_for_a_fact(words: list[str]) -> bool:
    """ "when did the song without me come out", "what is on my calendar": a question word
    opens it, whoever it is about. `asks_about_the_world` asks that and also that nothing
    after it is the asker's or the addressee's, which a title ("without me") can fail."""
    return len(words) >= 3 and words[0] in _WH_OPENERS


def _after_world_opener(words: list[str]) -> list[str] | None:
    """The words after what opens a question about the world, or None if nothing does."""
    if words[0] in _WORLD_OPENERS:
        return words[1:]
    for phrase in _WORLD_REQUESTS:
        if tuple(words[: len(phrase)]) == phrase:
            return words[len(phrase) :]
    return None


def speaks_of_the_asker(words: list[str]) -> bool:
    """ "why is my transfer late", "can we get a refund": the request is about the asker's
    own affairs (a first-person word other than the "me" of "tell me ...")."""
    return not _OWN_AFFAIRS.isdisjoint(words)


def speaks_of_the_addressee(words: list[str]) -> bool:
    """ "what are your opening hours", "do your rooms have a bath", "what's your name": the
    request is about whoever is asked (a business, the assistant), which a source about
    the world rarely serves."""
    return not _ADDRESSEE_AFFAIRS.isdisjoint(words)


def is_question(words: list[str]) -> bool:
    """ "What does it weigh?", "is it heavy": a question, with or without its "?"."""
    return bool(words) and words[0] in _QUESTION_OPENERS


def is_greeting(words: list[str]) -> bool:
    """ "Hi.", "Thanks!", "Quick question.": nothing to ask."""
    return all(word in _GREETINGS for word in words)


def first_person_request(words: list[str]) -> bool:
    """A request phrased as a statement: "we're looking for a pub", "I need a taxi"."""
    return bool(words) and words[0] in _SUBJECTS and asks(words)


def asks(words: list[str]) -> bool:
    """A request follows the subject: "I need a taxi", "I'd like the news", "I want to
    know ...", "I want to book a table". Not "I like jazz" nor "I want to go to the beach"
    (a plan, context for the request beside it), nor "I wonder." with nothing after it."""
    for start in range(1, min(len(words), 1 + _REACH)):
        for phrase in _REQUESTS:
            if tuple(words[start : start + len(phrase)]) != phrase:
                continue
            if phrase[0] in _WISHES and words[start - 1] not in _WISH_OPENERS:
                continue  # "I like jazz", "we love hiking"
            after = words[start + len(phrase) :]
            if not after:
                return False  # "I wonder.", "I'm curious.": nothing asked yet
            if phrase == ("wanna",):
                after = ["to", *after]
            if after[:1] == ["to"]:
                return len(after) > 1 and after[1] in _ASKING_VERBS
            return True
    return False
