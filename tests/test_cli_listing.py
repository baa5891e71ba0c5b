"""``paramsym list``, ``show`` and ``--json``, and progress without a terminal (issue 17)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

import experiments_for_tests  # noqa: F401  (registers "test-counter")
from paramsym.cli import main
from paramsym.cli_display import PlainProgress, measure_quick_times, short_data
from paramsym.experiments import registry


def invoke(*args: str, columns: int = 80) -> Result:
    """Run ``paramsym ARGS`` under CliRunner (no terminal) with COLUMNS set."""
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(main, list(args))


def test_list_names_every_experiment_on_one_line_each_within_80_columns() -> None:
    result = invoke("list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # one line per experiment, one per paper heading and the two header lines, nothing else
    # (no blank lines): the densest listing that keeps the groups (it outgrew 60 lines with the
    # merging experiments of issue 30)
    experiments = registry.all_experiments()
    papers = registry.by_paper(experiments)
    assert len(lines) == len(experiments) + len(papers) + 2, result.stdout
    assert all(len(line) <= 80 for line in lines), result.stdout
    names = {line.split()[0] for line in lines if line.startswith("  ") and line.strip()}
    for experiment in experiments:
        assert experiment.name in names
    assert "seed 001 — " in result.stdout
    assert any(line.startswith("other") for line in lines)  # test-counter names no seed


def test_list_lines_are_at_most_100_columns_on_a_wide_terminal() -> None:
    for columns in (100, 250):
        result = invoke("list", columns=columns)
        assert result.exit_code == 0
        assert max(len(line) for line in result.stdout.splitlines()) <= 100


def test_list_json_has_one_entry_per_experiment() -> None:
    result = invoke("list", "--json")
    assert result.exit_code == 0
    entries = json.loads(result.stdout)
    experiments = registry.all_experiments()
    assert [e["name"] for e in entries] == [e.name for e in experiments]
    for entry, experiment in zip(entries, experiments, strict=True):
        assert entry["seed_ref"] == experiment.seed_ref
        assert entry["claims"] == len(experiment.claims)
        assert entry["paper"] == registry.paper_of(experiment)
    assert "[/" not in result.stdout  # no rich markup


def test_show_prints_the_description_presets_and_claims() -> None:
    experiment = registry.get("teleport-regression")
    result = invoke("show", "teleport-regression")
    assert result.exit_code == 0, result.output
    flat = " ".join(result.stdout.split())
    assert " ".join(experiment.description.split()) in flat
    for field in experiment.presets["quick"].__dataclass_fields__:
        assert field in result.stdout
    for claim in experiment.claims:
        assert " ".join(claim.text.split()) in flat


def test_show_names_the_data_files_of_file_data_sets() -> None:
    result = invoke("show", "teleport-mnist", columns=200)
    assert result.exit_code == 0
    assert "train-images-idx3-ubyte" in result.stdout


def test_show_json_has_presets_and_claims() -> None:
    experiment = registry.get("test-counter")
    result = invoke("show", "test-counter", "--json")
    assert result.exit_code == 0
    record = json.loads(result.stdout)
    assert record["name"] == "test-counter"
    assert record["description"] == experiment.description
    assert set(record["presets"]) == {"quick", "paper"}
    assert record["presets"]["paper"]["offset"] == 1.0
    assert [c["text"] for c in record["claims"]] == [c.text for c in experiment.claims]


def test_show_unknown_name_is_a_one_line_error_with_close_matches() -> None:
    result = invoke("show", "teleport-regresion")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: unknown experiment 'teleport-regresion'")
    assert "teleport-regression" in lines[0]


def test_run_json_is_parseable(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = invoke("run", "test-counter", "--json", "--out", str(out))
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["directory"] == str(out)
    assert [c["holds"] for c in record["claims"]] == [True, True]
    assert record["claims_summary"]["holding"] == 2
    assert record["metrics"]["value"] == 0.0


def test_run_without_a_terminal_logs_plain_lines(tmp_path: Path) -> None:
    result = invoke("run", "test-counter", "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert "\r" not in result.output
    lines = result.output.splitlines()
    assert all(line.strip() for line in lines), result.output
    assert "test-counter: quick run 1/1 finished, seed=0 [" in result.stderr


def test_plain_progress_throttles_loops_and_keeps_messages_on_one_line() -> None:
    now = [0.0]
    lines: list[str] = []
    progress = PlainProgress("demo", lines.append, interval=10.0, clock=lambda: now[0])
    for _ in progress.track(range(100), description="epochs"):
        now[0] += 1.0
    progress.log("two\nlines")
    assert lines[0] == "demo: epochs 10/100 [10.0 s]"
    assert len(lines) == 11
    assert lines[-1] == "demo: two lines [100.0 s]"


def test_short_data_and_measured_quick_times(tmp_path: Path) -> None:
    assert short_data("digits (quick); MNIST IDX files in --data-dir (paper)") == "digits, MNIST"
    assert short_data("synthetic (generated)") == "synthetic"
    run = tmp_path / "test-counter" / "20260101-000000"
    (run / "members").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"experiment": "test-counter", "preset": "quick"}))
    (run / "members" / "seed=0.json").write_text(json.dumps({"seconds": 2.0}))
    (run / "members" / "seed=1.json").write_text(json.dumps({"seconds": 4.0}))
    assert measure_quick_times([tmp_path]) == {"test-counter": 3.0}
