"""The data preparation benchmark at a tiny size: it runs and writes its JSON and markdown. No timing is asserted."""

import json

from benchmarks.prepare import main


def test_quick_run_writes_json_and_markdown(tmp_path, capsys):
    out = tmp_path / "prepare.json"
    assert main(["--quick", "--megabytes", "0.3", "--workers", "1,2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"ceiling", "workers_1", "workers_2"}
    assert report["workload"]["tokens"] > 50_000 and report["workload"]["reps"] == 1
    for name, result in report["results"].items():
        assert result["tokens_per_s"] > 0 and result["seconds"]["n"] == 1, name
    assert report["ratios"]["two_workers_over_one"]["median"] > 0
    assert set(report["ratios"]["per_worker_over_ceiling"]) == {"1", "2"}
    assert set(report["extrapolation"]["hours_for_30b_tokens"]) == {"1", "2", "8", "64"}
    table = out.with_suffix(".md").read_text()
    assert "| prepare, 2 worker(s) |" in table and "Extrapolation, not a measurement" in table
    assert table in capsys.readouterr().out
