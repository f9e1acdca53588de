"""`search label`, `search label --export` and `search check`, run as a user runs them: a
subprocess over a real config, the real ZIM and a real trace store on disk."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.search.test_cli import run, write_config


def _with_store(config: Path, db: Path) -> Path:
    data = yaml.safe_load(config.read_text())
    data["trace"] = {"path": str(db)}
    config.write_text(yaml.safe_dump(data))
    return config


def _trace_of(config: Path, query: str) -> str:
    done = run("query", query, "--json", "--config", str(config))
    assert done.returncode in (0, 1), done.stderr  # ha is configured but disabled: it fails
    return str(json.loads(done.stdout)["trace_id"])


def test_label_then_export_then_check_the_exported_file(tmp_path: Path, demo_zim: Path) -> None:
    config = _with_store(write_config(tmp_path, demo_zim), tmp_path / "traces.db")
    trace_id = _trace_of(config, "lights in the hall")  # a keyword rule: ha
    done = run("label", trace_id[:10], "kiwix", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "ha -> kiwix" in done.stdout
    shown = run("trace", "show", trace_id, "--json", "--config", str(config))
    assert [lab["route"] for lab in json.loads(shown.stdout)["labels"]] == ["kiwix"]

    exported = tmp_path / "household.yaml"
    done = run("label", "--export", str(exported), "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(exported.read_text()) == [
        {"query": "lights in the hall", "route": "kiwix"}
    ]
    # the label has not been fitted, so the keyword rule still wins: check reports the miss
    done = run("check", str(exported), "--config", str(config))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "MISS" in done.stdout and "expected kiwix, got ha" in done.stdout


def test_label_refuses_an_unknown_trace_part_or_route(tmp_path: Path, demo_zim: Path) -> None:
    config = _with_store(write_config(tmp_path, demo_zim), tmp_path / "traces.db")
    trace_id = _trace_of(config, "lights in the hall")
    unknown = run("label", "0" * 32, "kiwix", "--config", str(config))
    bad_part = run("label", trace_id, "kiwix", "--part", "2", "--config", str(config))
    bad_route = run("label", trace_id, "weather", "--config", str(config))
    no_route = run("label", trace_id, "--config", str(config))
    assert unknown.returncode == 1 and "no such trace" in unknown.stderr
    assert bad_part.returncode == 2 and bad_part.stderr.startswith("search: part:")
    assert bad_route.returncode == 2 and bad_route.stderr.startswith("search: route:")
    assert no_route.returncode == 2


def test_check_passes_prints_the_table_and_fails_on_a_wrong_expectation(
    tmp_path: Path, demo_zim: Path
) -> None:
    config = write_config(tmp_path, demo_zim)
    good = tmp_path / "good.yaml"
    good.write_text("lights in the hall: ha\nwho wrote romeo and juliet: kiwix\n")
    done = run("check", str(good), "--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    header = done.stdout.splitlines()[0].split()
    assert header == ["query", "expected", "got", "stage", "confidence"]
    assert "intent_keyword" in done.stdout and "all 2 queries routed as expected" in done.stdout

    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(
        yaml.safe_dump(
            [
                {"query": "lights in the hall", "route": "ha"},
                {"query": "who wrote romeo and juliet", "route": "ha"},
            ]
        )
    )
    done = run("check", str(wrong), "--config", str(config))
    assert done.returncode == 1
    assert "1 of 2 queries did not route as expected" in done.stdout
    assert "'who wrote romeo and juliet': expected ha, got kiwix" in done.stdout


def test_check_exits_2_on_a_bad_file(tmp_path: Path, demo_zim: Path) -> None:
    config = write_config(tmp_path, demo_zim)
    cases = {
        "missing.yaml": None,
        "broken.yaml": "a: [b\n",
        "scalar.yaml": "just text\n",
        "empty.yaml": "",
        "unknown.yaml": "lights in the hall: weather\n",
        "shape.yaml": "- {query: lights in the hall}\n",
        "blank.yaml": "'  ': ha\n",
    }
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        done = run("check", str(path), "--config", str(config))
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        assert done.stderr.startswith("search: ") and "Traceback" not in done.stderr, name


def test_an_export_writes_through_a_symlink_keeps_modes_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    from search.correction.label_cli import LabelUsageError, _write_whole

    real = tmp_path / "dotfiles" / "household.yaml"
    real.parent.mkdir()
    real.write_text("old\n")
    real.chmod(0o644)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    _write_whole(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert oct(real.stat().st_mode & 0o777) == oct(0o644)
    fresh = tmp_path / "fresh.yaml"
    _write_whole(fresh, "x\n")
    assert fresh.stat().st_mode & 0o044  # readable as any new file is, not 0600
    folder = tmp_path / "folder"
    folder.mkdir()
    before = set(tmp_path.iterdir())
    try:
        _write_whole(folder, "x\n")
    except LabelUsageError as exc:
        assert "cannot write" in str(exc)
    else:
        raise AssertionError("a directory is no export target")
    assert set(tmp_path.iterdir()) == before  # no stray temporary file


def test_check_refuses_an_entry_that_splits_into_too_many_parts(
    tmp_path: Path, demo_zim: Path
) -> None:
    config = write_config(tmp_path, demo_zim)
    path = tmp_path / "many.yaml"
    path.write_text("a; b; c; d; e; f; g; h; i; j: kiwix\n")
    done = run("check", str(path), "--config", str(config))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith(f"search: {path}: ") and "max_parts" in done.stderr
    assert "MISS" not in done.stdout
