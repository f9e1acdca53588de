"""Routes are shipped data; the user's config.yaml only overrides them.

Each route the package knows ships as one YAML file, `routing/routes/<name>.yaml`, so an
upgrade of the package improves routing for everyone who never edited a rule. A file holds

    description: "What the route's source answers"   # for the LLM and the MCP tool list
    keywords:               # keyword rules, the syntax of routing/stages/keyword_rules.py
      - weather
      - current temperature ^2
    exemplars:              # example requests, for the semantic stage
      - will it rain tomorrow
    about_the_world: false  # true for a source of facts about the world (see below)

No route has a threshold: whether a stage decides is its calibrated confidence against
`routing.min_confidence` (routing/stages/confidence.py). A `threshold` (or another key
that once decided and no longer does) is refused, naming it, rather than kept silently.

A route `about_the_world` (the encyclopedia, the web) answers what anyone could ask. A
request about the asker's own affairs ("why is my transfer late") is rarely its, even
when one of its keywords is in it ("transfer"), so the keyword stage leaves such a request
to the semantic stage, which weighs the same keyword scores beside its meaning
(routing/stages/keyword.py).

`none.yaml` is the pseudo-route of requests no source serves (alarms, email, music): its
matches end a part at a low-confidence default; it is never routed to.

The user's `routing.routes.<name>` is merged over the shipped route the way Home
Assistant merges `custom_sentences` over its shipped intents: what it lists is *added*.

    routing:
      routes:
        ha:
          keywords: ["sauna ^2"]             # appended to the shipped rules
          exemplars: [is the sauna warm yet]
          disable_keywords: [scene]          # a shipped rule, by its text (weight optional)
          disable_exemplars: [what scenes do i have]
          description: "..."                 # replaces the shipped one
          about_the_world: false             # replaces the shipped one
        sauna:                               # a new route, for a source named `sauna`
          keywords: [sauna]
          exemplars: [heat up the sauna]

A shipped rule is named by its text: case, spacing and a `^weight` don't matter, so
`disable_keywords: ["current temperature"]` disables `current temperature ^2`. Naming one
that isn't shipped is an error (a typo would otherwise disable nothing, silently).
A shipped route whose source isn't configured is left out; an override of a route that
is neither configured nor `none` is an error. `routing.shipped_routes: false` starts from
nothing instead of the shipped files (for a fully hand-made rule set, and for tests).
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

NONE = "none"  # requests no source serves; never a route
# libyaml's safe loader where PyYAML has it: the pure-Python one takes ~0.2 s for the routes
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


DECIDED_BY_CONFIDENCE = "no longer used: the fitted confidence decides (routing.min_confidence)"


def _number_kind(annotation: Any) -> str | None:
    """'an integer' or 'a number' when a field of `annotation` takes an int or a float
    (alone or in a union, `int | None`) and not a bool; else None."""
    if get_origin(annotation) in (Union, types.UnionType):
        members = get_args(annotation)
    else:
        members = (annotation,)
    members = tuple(get_args(m)[0] if get_origin(m) is Annotated else m for m in members)
    if bool in members:
        return None
    if float in members:
        return "a number"
    if int in members:
        return "an integer"
    return None


def refuse_booleans_as_numbers(model: type[BaseModel], data: Any) -> None:
    """ValidationError naming each key of `data` that gives `model` a boolean where it
    takes a number: pydantic's lax mode reads `port: true` (or `yes`) as 1. A string of
    digits (from `${VAR}`) and an int for a float are still converted as before."""
    if not isinstance(data, Mapping):
        return
    errors = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        value = data.get(key)
        kind = _number_kind(field.annotation)
        if isinstance(value, bool) and kind is not None:
            message = f"Input should be {kind}, not a boolean ({str(value).lower()})"
            errors.append(
                InitErrorDetails(
                    type=PydanticCustomError("bool_not_number", message), loc=(key,), input=value
                )
            )
    if errors:
        raise ValidationError.from_exception_data(model.__name__, errors)


class Strict(BaseModel):
    """A config section that refuses keys it does not know (a typo is an error), and keys
    it no longer uses (`retired`: key -> why), each named with what decides instead: a
    key that is accepted and then ignored reads as a knob that works. A boolean where a
    number belongs (`port: true`) is refused too, not read as 1."""

    model_config = ConfigDict(extra="forbid")
    retired: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _refuse_retired(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and cls.retired:
            errors = [
                InitErrorDetails(
                    type=PydanticCustomError("retired_key", why), loc=(key,), input=data[key]
                )
                for key, why in cls.retired.items()
                if key in data
            ]
            if errors:
                raise ValidationError.from_exception_data(cls.__name__, errors)
        return data

    @model_validator(mode="before")
    @classmethod
    def _refuse_booleans_as_numbers(cls, data: Any) -> Any:
        refuse_booleans_as_numbers(cls, data)
        return data


class RouteFile(Strict):
    """One shipped `routing/routes/<name>.yaml`."""

    retired: ClassVar[Mapping[str, str]] = {"threshold": DECIDED_BY_CONFIDENCE}

    description: str = ""
    keywords: list[str] = Field(default_factory=list)
    exemplars: list[str] = Field(default_factory=list)
    about_the_world: bool = False


class RouteOverride(Strict):
    """`routing.routes.<name>` in config.yaml: additions to (or a new) route."""

    retired: ClassVar[Mapping[str, str]] = {"threshold": DECIDED_BY_CONFIDENCE}

    description: str | None = Field(default=None, description="Replaces the shipped one.")
    keywords: list[str] = Field(default_factory=list, description="Appended keyword rules.")
    exemplars: list[str] = Field(default_factory=list, description="Appended exemplars.")
    disable_keywords: list[str] = Field(
        default_factory=list, description="Shipped keyword rules to drop, by their text."
    )
    disable_exemplars: list[str] = Field(
        default_factory=list, description="Shipped exemplars to drop, by their text."
    )
    about_the_world: bool | None = Field(
        default=None,
        description="Whether the route answers questions about the world (replaces the "
        "shipped setting): its keywords alone do not decide a request about the asker's "
        "own affairs.",
    )


@dataclass(frozen=True, slots=True)
class Route:
    """A route as routing uses it: shipped data with the user's overrides applied."""

    name: str
    description: str = ""
    keywords: tuple[str, ...] = ()
    exemplars: tuple[str, ...] = ()
    about_the_world: bool = False


class RouteDataError(ValueError):
    """A shipped route file or a user override is invalid; the message names the key."""


_WEIGHT = re.compile(r"\s*\^\s*[0-9]+(?:\.[0-9]+)?\s*$")
_SPACE = re.compile(r"\s+")


def rule_key(text: str) -> str:
    """What names a rule or exemplar: its text without weight, case or extra spacing."""
    return _SPACE.sub(" ", _WEIGHT.sub("", text).replace("’", "'").lower()).strip()


def parse_route_file(name: str, text: str) -> Route:
    try:
        data = RouteFile.model_validate(yaml.load(text, Loader=_LOADER) or {})
    except (yaml.YAMLError, ValidationError) as exc:
        raise RouteDataError(f"routing/routes/{name}.yaml: {exc}") from None
    return Route(
        name,
        data.description,
        tuple(data.keywords),
        tuple(data.exemplars),
        data.about_the_world,
    )


@lru_cache(maxsize=1)
def shipped_routes() -> dict[str, Route]:
    """Every shipped route by name, read once from the package (sorted by name)."""
    folder = resources.files("routing") / "routes"
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name)
    routes = {}
    for file in files:
        name = file.name.removesuffix(".yaml")
        routes[name] = parse_route_file(name, file.read_text(encoding="utf-8"))
    return routes


def _without(
    shipped: tuple[str, ...], disabled: list[str], where: str, what: str
) -> tuple[str, ...]:
    keys = [rule_key(text) for text in shipped]
    for index, text in enumerate(disabled):
        if rule_key(text) not in keys:
            raise RouteDataError(f"{where}[{index}]: {text!r} is not a shipped {what}")
    drop = {rule_key(text) for text in disabled}
    return tuple(text for text, key in zip(shipped, keys, strict=True) if key not in drop)


def resolve_routes(
    names: Iterable[str],
    overrides: Mapping[str, RouteOverride],
    *,
    shipped: bool = True,
    where: str = "routing.routes",
) -> dict[str, Route]:
    """The routes of the configured `names` (and `none`), overrides merged over shipped data.

    Order: shipped routes by name, then the others in the order of `overrides`; within a
    route, shipped rules come first (the keyword stage breaks ties by that order).
    """
    active = set(names) | {NONE}
    for name in overrides:
        if name not in active:
            raise RouteDataError(f"{where}.{name}: unknown source or route")
    base = {n: r for n, r in shipped_routes().items() if n in active} if shipped else {}
    resolved: dict[str, Route] = {}
    for name in [*base, *(n for n in overrides if n not in base)]:
        route = base.get(name, Route(name))
        extra = overrides.get(name)
        if extra is None:
            resolved[name] = route
            continue
        keywords = _without(
            route.keywords,
            extra.disable_keywords,
            f"{where}.{name}.disable_keywords",
            f"keyword rule of {name}",
        )
        exemplars = _without(
            route.exemplars,
            extra.disable_exemplars,
            f"{where}.{name}.disable_exemplars",
            f"exemplar of {name}",
        )
        resolved[name] = Route(
            name,
            extra.description if extra.description is not None else route.description,
            (*keywords, *extra.keywords),
            (*exemplars, *extra.exemplars),
            route.about_the_world if extra.about_the_world is None else extra.about_the_world,
        )
    return resolved
