"""Predictions from a finished sweep for another study's budgets, written once, scored on the target's cells."""

import dataclasses

import pytest

from depthattn.study import Study
from depthattn.study.predictions import format_score, predict, read_prediction, score, write_prediction
from tests.study.test_multiplier import BUDGETS, fewer_resamples, planted_results  # noqa: F401 (a fixture)
from tests.study.test_study import WSD_BUDGETS, write_study

TARGET_AXES = WSD_BUDGETS.replace("{ short = 3, long = 6 }", "{ one = 2, two = 4, three = 8 }") + """
[axes.lr]
key = "optim.lr"
values = { low = 0.001, high = 0.002 }
"""


def planted_target(target, multiplier, seeds=range(5)):
    """Cells of `target` (two learning rates, two budgets) with a planted data multiplier."""
    source_like = Study.load(target.config_file)
    results = []
    for label in target.axes[1].values:
        for result in planted_results(source_like, lambda x: multiplier, seeds=seeds, noise=0.005):
            results.append(dataclasses.replace(result, setting={**result.setting, "lr": label}))
    return results


@pytest.fixture
def studies(tiny_data, tmp_path):
    seeds = range(5)
    source = Study.load(write_study(tmp_path, tiny_data, name="sweep.toml", seeds=seeds,
                                    axes=WSD_BUDGETS.replace("{ short = 3, long = 6 }", BUDGETS)))
    target = Study.load(write_study(tmp_path, tiny_data, name="rungs.toml", axes=TARGET_AXES, seeds=seeds))
    return source, target


def test_a_prediction_reads_the_sweeps_trend_at_every_target_budget(studies, monkeypatch, tmp_path):
    source, target = studies
    monkeypatch.setattr(Study, "read_results", lambda self: planted_results(self, lambda x: 1.3, noise=0.005))
    prediction = predict(source, target, "2026-11-29", "nothing changes with scale")
    entries = prediction["methods"]["depth_attention"]["at"]
    assert {(e["group"], e["budget"]) for e in entries} == {(f"lr={lr}", b) for lr in ("low", "high")
                                                            for b in ("one", "two", "three")}
    for entry in [*entries, prediction["methods"]["depth_attention"]["paper"]]:
        assert entry["low"] <= entry["multiplier"] <= entry["high"]
        assert entry["multiplier"] == pytest.approx(1.3, rel=0.05)
    path = write_prediction(prediction, tmp_path / "predictions")
    assert read_prediction(path)["assumes"] == "nothing changes with scale"
    with pytest.raises(FileExistsError, match="written once"):
        write_prediction(prediction, tmp_path / "predictions")


def test_too_few_seeds_cannot_predict(studies, monkeypatch):
    source, target = studies
    monkeypatch.setattr(Study, "read_results", lambda self: planted_results(self, lambda x: 1.3, seeds=range(3)))
    with pytest.raises(ValueError, match="five seeds"):
        predict(source, target, "2026-11-29", "")


def test_scoring_says_whether_the_measured_multiplier_agrees(studies, monkeypatch):
    source, target = studies
    monkeypatch.setattr(Study, "read_results", lambda self: planted_results(self, lambda x: 1.3, noise=0.005))
    prediction = predict(source, target, "2026-11-29", "")
    for planted, verdict in ((1.3, "agrees"), (2.0, "above"), (1.0, "below")):
        monkeypatch.setattr(Study, "read_results", lambda self, m=planted: planted_target(self, m))
        rows = score(prediction, target)
        assert rows and {row["verdict"] for row in rows} == {verdict}
        assert verdict in format_score(prediction, rows)


def test_the_study_command_writes_a_prediction_and_scores_it_on_written_cells(studies, tmp_path, capsys):
    from depthattn.cli import main

    source, target = studies
    target.results = str(tmp_path / "target_results")  # apart: their cells would share keys
    for study, results in ((source, planted_results(source, lambda x: 1.3, noise=0.005)),
                           (target, planted_target(target, 2.0))):
        for result in results:
            result.write(study.result_path(result.cell))
    assert main(["study", source.config_file, "--predict-for", target.config_file, "--assumes", "no change",
                 "--predictions", str(tmp_path / "predictions")]) == 0
    written = capsys.readouterr().out.split("prediction: ")[1].strip()
    assert main(["study", target.config_file, "--score-predictions", written, "--results", target.results]) == 0
    table = capsys.readouterr().out
    assert table.count("| depth_attention |") == 6 and "above" in table and "agrees" not in table
