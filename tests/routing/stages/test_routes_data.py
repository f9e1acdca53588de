"""Routes ship as package data; the user's config.yaml only adds, disables or adds routes.

Routing here is the real pipeline (a Service built from a parsed config, dry run, keyword
stage; the semantic stage is off so no model is needed), and the packaging test builds a
real wheel and reads the data from where it is installed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from routing.language.lexicon import parse_lexicon
from routing.stages.build import resolved_routes
from routing.stages.route_data import (
    NONE,
    RouteDataError,
    parse_route_file,
    resolve_routes,
    shipped_routes,
)
from search.config import ConfigError, parse_config
from search.service import Service
from tests.support import scripted
from tests.support.require import missing_data

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = {"forecast", "ha", "kiwix", "web", NONE}


def config(routing: dict[str, Any] | None = None, *, extra_sources: tuple[str, ...] = ()) -> Any:
    scripted.register()
    names = ("kiwix", "forecast", "ha", "web", *extra_sources)
    return parse_config(
        {
            "routing": {
                "default_source": "kiwix",
                "semantic": {"enabled": False},
                **(routing or {}),
            },
            "sources": {name: {"type": "scripted"} for name in names},
            "trace": {"enabled": False},
        }
    )


async def route(cfg: Any, query: str) -> tuple[str | None, str | None]:
    """(source, deciding stage) of a one-part query, through the real pipeline."""
    service = Service(cfg)
    await service.start(sources=False)
    try:
        outcome = await service.search(query, dry_run=True)
    finally:
        await service.aclose()
    [result] = outcome.results
    return result.route, result.stage


def test_every_shipped_route_has_its_data() -> None:
    routes = shipped_routes()
    assert set(routes) == SHIPPED
    for name, data in routes.items():
        assert data.keywords and data.exemplars, name
        assert (data.description != "") == (name != NONE), name


async def test_a_config_without_rules_routes_with_the_shipped_ones() -> None:
    # what an upgrade brings to a user who never edited a rule
    assert await route(config(), "will it rain tomorrow") == ("forecast", "intent_keyword")
    assert await route(config(), "turn off the kitchen lights") == ("ha", "intent_keyword")
    source, stage = await route(config(), "set an alarm for seven")
    assert stage == "intent_default"  # the shipped `none` rules: no source serves alarms


async def test_added_keywords_and_exemplars_extend_a_route() -> None:
    cfg = config({"routes": {"ha": {"keywords": ["sauna ^2"], "exemplars": ["heat the sauna"]}}})
    assert await route(cfg, "is the sauna ready") == ("ha", "intent_keyword")
    ha = resolved_routes(cfg)["ha"]
    shipped = shipped_routes()["ha"]
    assert ha.keywords == (*shipped.keywords, "sauna ^2")  # shipped first, then the user's
    assert ha.exemplars == (*shipped.exemplars, "heat the sauna")


async def test_the_shorthand_keys_add_to_the_shipped_routes_too() -> None:
    cfg = config({"keywords": {"web": ["gossip"]}, "none_keywords": ["horoscope"]})
    assert await route(cfg, "latest gossip") == ("web", "intent_keyword")
    assert (await route(cfg, "my horoscope"))[1] == "intent_default"
    assert "weather" in resolved_routes(cfg)["forecast"].keywords


async def test_a_disabled_rule_no_longer_decides() -> None:
    query = "what is the wind speed"
    assert await route(config(), query) == ("forecast", "intent_keyword")
    # named by its text; case, spacing and weight don't matter
    cfg = config({"routes": {"forecast": {"disable_keywords": ["Wind  Speed"]}}})
    assert (await route(cfg, query))[1] == "intent_default"
    kept = resolved_routes(cfg)["forecast"].keywords
    assert "wind speed" not in kept and "weather" in kept
    weighted = config({"routes": {"forecast": {"disable_keywords": ["current temperature"]}}})
    assert "current temperature ^2" not in resolved_routes(weighted)["forecast"].keywords


def test_the_routes_about_the_world_are_the_encyclopedia_and_the_web() -> None:
    """Shipped: kiwix and web answer questions about the world, the home, the forecast and
    `none` do not. An override replaces the setting; a new route is not one unless it says
    so; a value that is not true or false is refused naming the key."""
    about = {name for name, r in shipped_routes().items() if r.about_the_world}
    assert about == {"kiwix", "web"}
    cfg = config(
        {"routes": {"web": {"about_the_world": False}, "recipes": {"keywords": ["recipe"]}}},
        extra_sources=("recipes",),
    )
    resolved = resolved_routes(cfg)
    assert not resolved["web"].about_the_world and resolved["kiwix"].about_the_world
    assert not resolved["recipes"].about_the_world
    own = config({"routes": {"recipes": {"about_the_world": True}}}, extra_sources=("recipes",))
    assert resolved_routes(own)["recipes"].about_the_world
    with pytest.raises(ConfigError, match="about_the_world"):
        config({"routes": {"web": {"about_the_world": "sometimes"}}})


async def test_a_request_about_ones_own_affairs_is_weighed_by_meaning_too() -> None:
    """With the shipped routes and the semantic stage, a request about one's bank card whose
    rule word is the encyclopedia's ("explain") is declined by the keyword stage for its
    own affairs, and ends unrouted (no source here serves a bank card); the same word in a
    request about the world is the rules'."""
    from search.config import load_config
    from search.traces.records import NullTraceSink

    service = Service(load_config(ROOT / "config.yaml"), traces=NullTraceSink(), household=None)
    await service.start(sources=False)
    try:
        own = await service.search("explain why my card was declined", dry_run=True, explain=True)
        world = await service.search("explain photosynthesis", dry_run=True, explain=True)
    finally:
        await service.aclose()
    [keyword] = [e for e in own.chain if e["step"] == "intent_keyword"]
    assert keyword["outcome"] == "declined" and "own affairs" in keyword["declined"]
    assert [(r.route, r.stage) for r in own.results] == [(None, "intent_default")]
    assert [(r.route, r.stage) for r in world.results] == [("kiwix", "intent_keyword")]


def test_a_disabled_exemplar_is_left_out() -> None:
    exemplar = shipped_routes()["ha"].exemplars[0]
    cfg = config({"routes": {"ha": {"disable_exemplars": [exemplar.upper()]}}})
    assert exemplar not in resolved_routes(cfg)["ha"].exemplars
    assert len(resolved_routes(cfg)["ha"].exemplars) == len(shipped_routes()["ha"].exemplars) - 1


async def test_a_new_source_brings_its_own_route() -> None:
    cfg = config(
        {"routes": {"recipes": {"description": "Cooking: recipes.", "keywords": ["recipe"]}}},
        extra_sources=("recipes",),
    )
    assert await route(cfg, "a recipe for pancakes") == ("recipes", "intent_keyword")
    assert cfg.sources["recipes"].description == "Cooking: recipes."


def test_descriptions_come_from_the_route_unless_the_source_has_one() -> None:
    cfg = config()
    assert cfg.sources["forecast"].description == shipped_routes()["forecast"].description
    scripted.register()
    own = parse_config(
        {
            "routing": {"default_source": "kiwix", "routes": {"ha": {"description": "Route's."}}},
            "sources": {
                "kiwix": {"type": "scripted", "description": "Mine."},
                "ha": {"type": "scripted"},
            },
            "trace": {"enabled": False},
        }
    )
    assert own.sources["kiwix"].description == "Mine."
    assert own.sources["ha"].description == "Route's."


RETIRED = "no longer used: the fitted confidence decides (routing.min_confidence)"


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        ({"routes": {"kiwix": {"threshold": 0.42}}}, f"routing.routes.kiwix.threshold: {RETIRED}"),
        (
            {"semantic": {"default_threshold": 0.3}},
            f"routing.semantic.default_threshold: {RETIRED}",
        ),
        ({"semantic": {"thresholds": {"web": 0.3}}}, f"routing.semantic.thresholds: {RETIRED}"),
        ({"semantic": {"none_threshold": 0.4}}, f"routing.semantic.none_threshold: {RETIRED}"),
        ({"semantic": {"margin": 0.1}}, f"routing.semantic.margin: {RETIRED}"),
        (
            {"semantic": {"classifier_weight": 0.1}},
            "routing.semantic.classifier_weight: no longer used: the fitted confidence weighs "
            "the classifier (routing.semantic.classifier: false turns it off)",
        ),
    ],
)
def test_a_key_that_no_longer_decides_is_refused_naming_it(
    routing: dict[str, Any], message: str
) -> None:
    """Accepted and ignored, it would read as a knob that works."""
    with pytest.raises(ConfigError) as caught:
        config(routing)
    assert str(caught.value) == message


def test_a_shipped_route_file_with_a_threshold_is_refused() -> None:
    with pytest.raises(RouteDataError) as caught:
        parse_route_file("ha", "keywords: [sauna]\nthreshold: 0.4\n")
    message = str(caught.value)
    assert message.startswith("routing/routes/ha.yaml: ") and "threshold" in message, message
    assert RETIRED in message, message


async def test_without_shipped_routes_only_the_configs_rules_count() -> None:
    cfg = config({"shipped_routes": False, "keywords": {"web": ["gossip"]}})
    assert set(resolved_routes(cfg)) == {"web"}
    assert await route(cfg, "will it rain tomorrow") == ("kiwix", "intent_default")
    assert await route(cfg, "gossip today") == ("web", "intent_keyword")


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        (
            {"routes": {"weather": {"keywords": ["rain"]}}},
            "routing.routes.weather: unknown source or route",
        ),
        ({"routes": {"ha": {"keywords": "sauna"}}}, "routing.routes.ha.keywords: "),
        ({"routes": {"ha": {"rules": ["sauna"]}}}, "routing.routes.ha.rules: unknown key"),
        ({"routes": {"ha": ["sauna"]}}, "routing.routes.ha: "),
        (
            {"routes": {"ha": {"disable_keywords": ["lights", "no such rule"]}}},
            "routing.routes.ha.disable_keywords[1]: 'no such rule' is not a shipped keyword rule"
            " of ha",
        ),
        (
            {"routes": {"none": {"disable_exemplars": ["hello there general"]}}},
            "routing.routes.none.disable_exemplars[0]: 'hello there general' is not a shipped",
        ),
        (
            {"shipped_routes": False, "routes": {"ha": {"disable_keywords": ["lights"]}}},
            "routing.routes.ha.disable_keywords[0]: 'lights' is not a shipped keyword rule",
        ),
        ({"keywords": {"weather": ["rain"]}}, "routing.keywords.weather: unknown source or route"),
    ],
)
def test_bad_overrides_are_config_errors_naming_the_key(
    routing: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        config(routing)
    assert str(caught.value).startswith(message), str(caught.value)


def test_the_cli_exits_2_on_a_bad_override(tmp_path: Path) -> None:
    bad = {
        "routing": {
            "default_source": "kiwix",
            "semantic": {"enabled": False},
            "routes": {"ha": {"disable_keywords": ["no such rule"]}},
        },
        "sources": {
            "kiwix": {"type": "zim", "paths": ["x.zim"]},
            "ha": {"type": "homeassistant", "url": "http://127.0.0.1:1", "token": "t"},
        },
        "trace": {"enabled": False},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(bad))
    done = subprocess.run(
        [sys.executable, "-m", "search", "route", "lights", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 2, done.stderr
    assert "routing.routes.ha.disable_keywords[0]" in done.stderr


def test_resolving_keeps_shipped_order_then_new_routes() -> None:
    from routing.stages.route_data import RouteOverride

    resolved = resolve_routes(
        ["web", "ha", "zeta", "alpha"],
        {"zeta": RouteOverride(keywords=["z"]), "alpha": RouteOverride(keywords=["a"])},
    )
    assert list(resolved) == ["ha", NONE, "web", "zeta", "alpha"]
    with pytest.raises(RouteDataError):
        resolve_routes(["web"], {"ha": RouteOverride()})


def test_the_shipped_config_holds_settings_not_rules() -> None:
    text = (ROOT / "config.yaml").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 200
    shipped = parse_config(yaml.safe_load(text))
    assert shipped.routing.route_overrides() == {}
    assert set(resolved_routes(shipped)) == SHIPPED


def test_a_malformed_word_list_is_an_error_naming_it() -> None:
    from importlib import resources

    good = (resources.files("routing") / "words.yaml").read_text(encoding="utf-8")
    broken = good.replace("particles: [", "particles: [on, ", 1)  # `on` is YAML's true
    with pytest.raises(ValueError, match="particles"):
        parse_lexicon(broken)
    missing = good.replace("  weather_it: [", "  weather_words: [", 1)
    with pytest.raises(ValueError, match="weather"):
        parse_lexicon(missing)


def test_an_installed_wheel_carries_the_routes_and_word_lists(tmp_path: Path) -> None:
    """Build the real wheel, install it apart from the repo, read the data from there."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for part in ("search", "routing", "sources"):
        shutil.copytree(ROOT / part, src / part, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    [wheel] = wheels.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"routing/routes/{n}.yaml" for n in SHIPPED} | {"routing/words.yaml"} <= names
    # the fitted artefacts, and the staged rows `search fit --shipped` refits a prior from
    fitted = {"confidence.json", "classifier_prior.npz", "classifier_prior_none.npz"}
    assert {f"routing/fitted/{name}" for name in fitted} <= names
    assert "routing/fit_data/staged/banking77.jsonl" in names
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    probe = (
        f"import sys; sys.path.insert(0, {str(target)!r})\n"
        "import routing.stages.route_data as r, routing.language.lexicon as l, routing.language.decompose as d\n"
        f"assert r.__file__.startswith({str(target)!r}), r.__file__\n"
        "print(sorted(r.shipped_routes()), len(l.lexicon().decompose.openers),\n"
        "      d.decompose('turn off the lights and what is the weather'))\n"
    )
    # -I: no PYTHONPATH, no current directory; only the wheel's copy can be imported first
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(sorted(SHIPPED)))
    assert "['turn off the lights', 'what is the weather']" in done.stdout


def test_the_commented_override_example_in_config_yaml_is_valid() -> None:
    """Uncommented, the example works: the shipped rule and exemplar it disables exist."""
    import re

    text = (ROOT / "config.yaml").read_text(encoding="utf-8")
    uncommented = re.sub(r"^  # (routes:|  )", r"  \1", text, flags=re.MULTILINE)
    data = yaml.safe_load(uncommented)
    assert data["routing"]["routes"], "config.yaml no longer shows an override example"
    data["sources"]["recipes"] = {"type": "searxng", "url": "http://127.0.0.1:8888"}
    routes = resolved_routes(parse_config(data))
    for name, override in data["routing"]["routes"].items():
        for added in override.get("keywords", []):
            assert added in routes[name].keywords
        for dropped in override.get("disable_keywords", []):
            assert dropped not in routes[name].keywords


def _plain(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


def test_no_shipped_exemplar_is_a_sentence_of_a_labelled_corpus() -> None:
    """The shipped exemplars are the project's own sentences: none is one of an evaluation
    set, nor of a fit corpus (whose left-out figure would otherwise not be one). Compared
    as words, ignoring case and punctuation. (Keyword rules are phrases: "what time is it"
    is a rule and, whole, a test sentence of Home Assistant's; that is vocabulary.)"""
    from bench.routing_quality import default_eval_dir

    eval_dir = default_eval_dir()
    if not eval_dir.is_dir():
        missing_data("the evaluation sets", f"none in {eval_dir} (set ROUTING_EVAL_DIR)")
    sentences = {
        _plain(json.loads(line)["text"])
        for path in [*eval_dir.glob("*.jsonl"), *(ROOT / "routing/fit_data").glob("*.jsonl")]
        for line in path.read_text("utf-8").splitlines()
        if line.strip()
    }
    assert len(sentences) > 4000
    copied = [
        (route.name, text)
        for route in shipped_routes().values()
        for text in route.exemplars
        if _plain(text) in sentences
    ]
    assert copied == []
