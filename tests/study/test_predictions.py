"""Predictions from a finished sweep for another study's budgets, written once, scored on the target's cells."""

import dataclasses
import json
from pathlib import Path

import pytest

from depthattn.study import Study
from depthattn.study.analyses.predictions import (
    predict,
    read_prediction,
    score,
    why_unscored,
    write_prediction,
)
from depthattn.study.render.analyses import format_score
from depthattn.study.render.numbers import format_multiplier
from depthattn.study.store import CellStore
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
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: planted_results(self, lambda x: 1.3, noise=0.005))
    prediction = predict(source, CellStore.of(source), target, "2026-11-29", "nothing changes with scale")
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
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: planted_results(self, lambda x: 1.3, seeds=range(3)))
    with pytest.raises(ValueError, match="five seeds"):
        predict(source, CellStore.of(source), target, "2026-11-29", "")


def test_scoring_says_whether_the_measured_multiplier_agrees(studies, monkeypatch):
    source, target = studies
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: planted_results(self, lambda x: 1.3, noise=0.005))
    prediction = predict(source, CellStore.of(source), target, "2026-11-29", "")
    for planted, verdict in ((1.3, "agrees"), (2.0, "above"), (1.0, "below")):
        monkeypatch.setattr(CellStore, "read_results", lambda _, self, m=planted: planted_target(self, m))
        rows = score(prediction, target, CellStore.of(target))
        assert rows and {row.verdict for row in rows} == {verdict}
        assert verdict in format_score(prediction, rows)
        for row in rows:  # read on the calibrated interval, which holds its coverage, and shown with it
            measured, predicted = row.measured, row.predicted
            agrees = measured.t_low <= predicted["high"] and predicted["low"] <= measured.t_high
            assert (row.verdict == "agrees") == agrees
            assert f"| {format_multiplier(measured, calibrated=True)} | {row.verdict} |" in \
                format_score(prediction, rows)


def test_the_study_command_writes_a_prediction_and_scores_it_on_written_cells(studies, tmp_path, capsys):
    from depthattn.cli import main

    source, target = studies
    target = dataclasses.replace(target, results=str(tmp_path / "target_results"))  # apart: they would share keys
    for study, results in ((source, planted_results(source, lambda x: 1.3, noise=0.005)),
                           (target, planted_target(target, 2.0))):
        for result in results:
            result.write(CellStore.of(study).result_path(study, result.cell))
    assert main(["study", source.config_file, "--predict-for", target.config_file, "--assumes", "no change",
                 "--predictions", str(tmp_path / "predictions")]) == 0
    written = capsys.readouterr().out.split("prediction: ")[1].strip()
    assert main(["study", target.config_file, "--score-predictions", written, "--results", target.results]) == 0
    table = capsys.readouterr().out
    assert table.count("| depth_attention |") == 6 and "above" in table and "agrees" not in table
    assert "superseded" not in table
    # a later prediction supersedes it: the file stays as it is, its folder's superseded.json says why
    (Path(written).parent / "superseded.json").write_text(json.dumps({Path(written).name: "read the wrong unit"}))
    assert main(["study", target.config_file, "--score-predictions", written, "--results", target.results]) == 0
    assert capsys.readouterr().out.startswith("superseded: read the wrong unit\n")
    assert main(["study", target.config_file, "--score-predictions", str(tmp_path / "nope.json")]) == 1
    assert "no prediction file" in capsys.readouterr().err
    Path(written).write_text("[]")
    assert main(["study", target.config_file, "--score-predictions", written]) == 1
    assert f"{written} holds" in capsys.readouterr().err


def test_a_target_of_two_budgets_is_refused_up_front_and_scoring_says_why_it_cannot_score(studies, tmp_path,
                                                                                          monkeypatch):
    source, target = studies
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: planted_results(self, lambda x: 1.3, noise=0.005))
    two = Study.load(write_study(tmp_path, "data", name="two.toml", seeds=range(5),
                                 axes=TARGET_AXES.replace(", three = 8", "")))
    with pytest.raises(ValueError, match="two.toml has 2 budgets on its axes.budget \\(one, two\\), and a data "
                                         "multiplier reads vanilla's curve through 3 budgets at least"):
        predict(source, CellStore.of(source), two, "2026-11-29", "")
    # a prediction for the three-budget target, scored on a study of two of its budgets, all finished
    prediction = predict(source, CellStore.of(source), target, "2026-11-29", "")
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: planted_target(self, 1.3))
    assert score(prediction, two, CellStore.of(two)) == []
    text = format_score(prediction, [], why_unscored(prediction, two, CellStore.of(two)))
    assert "(no finished cell of the target measures a predicted budget: " in text
    assert "its cells can never score a prediction: give axes.budget 3 values or more)" in text
    # the three-budget target with one budget still to run: says what a multiplier needs and what is missing
    monkeypatch.setattr(CellStore, "read_results", lambda _, self: [r for r in planted_target(self, 1.3)
                                                             if r.setting["budget"] != "three"])
    why = why_unscored(prediction, target, CellStore.of(target))
    assert "lr=low: a multiplier needs vanilla's cells at 3 budgets at least" in why and "it has 2 such" in why
    assert "(seed 0 lacks vanilla at three, depth_attention at three;" in why


def test_a_prediction_far_past_the_sweeps_depth_is_marked_and_warned_of(studies, tmp_path, capsys):
    from depthattn.cli import main

    source, target = studies
    for result in planted_results(source, lambda x: 1.3, noise=0.005):
        result.write(CellStore.of(source).result_path(source, result.cell))
    assert main(["study", source.config_file, "--predict-for", target.config_file, "--assumes", "no change",
                 "--predictions", str(tmp_path / "predictions")]) == 0
    out, err = capsys.readouterr()
    prediction = read_prediction(out.split("prediction: ")[1].strip())
    paper = prediction["methods"]["depth_attention"]["paper"]
    assert prediction["depths"] == [2] and paper["depth"] == 48 and paper["extrapolated"]
    assert "paper 1.5B shape: 48 layers against the 2 measured" in err and "more than 2 x past" in err
    # the target's budgets are 2-layer models too, but read at far fewer tokens per parameter than the fitted
    assert all(at["extrapolated"] for at in prediction["methods"]["depth_attention"]["at"])
    assert "lr=low budget one: " in err and "tokens per parameter against the 10-200 fitted" in err


def test_a_second_prediction_of_the_day_takes_a_later_date(studies, tmp_path, capsys):
    import datetime

    from depthattn.cli import main

    source, target = studies
    for result in planted_results(source, lambda x: 1.3, noise=0.005):
        result.write(CellStore.of(source).result_path(source, result.cell))
    command = ["study", source.config_file, "--predict-for", target.config_file,
               "--predictions", str(tmp_path / "predictions")]
    assert main(command) == 1
    assert "--predict-for needs --assumes" in capsys.readouterr().err
    command += ["--assumes", "no change"]
    assert main(command) == 0
    assert main(command) == 1
    assert "a prediction is written once; date a new one later with --prediction-date YYYY-MM-DD" in \
        capsys.readouterr().err
    tomorrow = (datetime.date.today() + datetime.timedelta(days=1)).isoformat()
    assert main([*command, "--prediction-date", tomorrow]) == 0
    assert read_prediction(tmp_path / "predictions" / f"rungs_from_sweep_{tomorrow}.json")["date"] == tomorrow
    yesterday = (datetime.date.today() - datetime.timedelta(days=1)).isoformat()
    for bad, message in (("2026-13-01", "is not a date as YYYY-MM-DD"), (yesterday, "is before today")):
        with pytest.raises(SystemExit):
            main([*command, "--prediction-date", bad])
        assert message in capsys.readouterr().err
