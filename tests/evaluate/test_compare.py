import json
import math

import pytest
from scipy.stats import ttest_rel

from depthattn.evaluate.compare import Grid, compare, markdown_table, paired_difference


def write_grid(tmp_path, data, methods=("vanilla", "depth_attention"), seeds=(0, 1), extra=""):
    path = tmp_path / "grid.toml"
    path.write_text(f"""
[grid]
methods = {json.dumps(list(methods))}
seeds = {json.dumps(list(seeds))}
out_dir = "{tmp_path / 'out'}"
{extra}
[base.data]
path = "{data}"
seq_len = 32
[base.train]
steps = 3
batch_size = 4
eval_every = 3
eval_batches = 2
checkpoint_every = 3
progress = false
""")
    return path


def test_paired_difference_matches_scipy():
    method, base = [2.0, 2.1, 1.9, 2.05], [2.2, 2.15, 2.0, 2.1]
    result = paired_difference(method, base)
    assert result["diff_mean"] == pytest.approx(-0.1)
    assert result["p_value"] == pytest.approx(ttest_rel(method, base).pvalue)
    assert result["wins"] == 4
    assert math.isnan(paired_difference([1.0], [2.0])["p_value"])


def test_grid_trains_every_cell_once_and_reports(tiny_data, tmp_path):
    grid = Grid.load(write_grid(tmp_path, tiny_data))
    rows = compare(grid)
    out = tmp_path / "out"
    assert [r["method"] for r in rows] == ["vanilla", "depth_attention"]
    assert rows[1]["seeds"] == 2 and "p_value" in rows[1] and "diff_mean" not in rows[0]
    assert rows[0]["params"] == rows[1]["params"] and rows[1]["extra_params"] == 0
    for name in ("results.md", "results.csv", "results.json", "val_loss.png"):
        assert (out / name).exists(), name
    assert "| depth_attention | 2 |" in (out / "results.md").read_text()

    result_file = out / "depth_attention" / "seed_1" / "result.json"
    before = result_file.stat().st_mtime_ns
    again = compare(Grid.load(write_grid(tmp_path, tiny_data)))  # finished cells are not rerun
    assert result_file.stat().st_mtime_ns == before and again == rows

    # killed after the last checkpoint, before its result was written: resumes at the end and still reports
    first = json.loads(result_file.read_text())
    result_file.unlink()
    assert compare(Grid.load(write_grid(tmp_path, tiny_data))) == rows
    redone = json.loads(result_file.read_text())
    for key in ("val_loss", "train_tokens", "tokens_per_s", "params_total"):
        assert redone[key] == first[key], key


@pytest.mark.parametrize("kwargs, message", [
    (dict(methods=("vanilla", "densformer")), "not a preset"),
    (dict(methods=("depth_attention",)), "baseline 'vanilla' must be one of"),
    (dict(seeds=(1, 1)), "distinct"),
    (dict(extra="steps = 3"), "unknown \\[grid\\] keys"),
])
def test_bad_grids(tiny_data, tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        Grid.load(write_grid(tmp_path, tiny_data, **kwargs))


def test_markdown_table_shows_uncertainty():
    rows = [{"method": "vanilla", "seeds": 3, "val_loss_mean": 2.0, "val_loss_std": 0.01, "val_ppl_mean": 7.4,
             "params": 10, "extra_params": 0, "tokens_per_s": 100.0},
            {"method": "depth_attention", "seeds": 3, "val_loss_mean": 1.9, "val_loss_std": 0.02, "val_ppl_mean": 6.7,
             "params": 10, "extra_params": 0, "tokens_per_s": 99.0, "diff_mean": -0.1, "diff_std": 0.01,
             "p_value": 0.004, "wins": 3}]
    table = markdown_table(rows, "vanilla")
    assert "1.9000 ± 0.0200" in table and "-0.1000 ± 0.0100" in table and "0.004" in table and "3/3" in table
