import argparse
import dataclasses
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
from itertools import islice
from pathlib import Path

import pytest
from scipy import stats

from depthattn.data import embedded_corpus_documents, prepare
from depthattn.study import (
    Cell,
    CellResult,
    Study,
    cell_key,
    explain,
    markdown_report,
    paired_difference,
    pending_cells,
    run_study,
    summarize,
    uncertain_cells,
    verdict,
    with_picks,
    write_index,
    write_report,
)
from depthattn.study.local import LocalExecutor
from depthattn.study.picks import search_result
from depthattn.study.plan import plan_cell
from depthattn.study.store import CellStore
from tests.data.data_helpers import write_jsonl

BASE = """
[base.model]
preset = "tiny"
overrides = {{ hidden_size = 32, intermediate_size = 64, num_hidden_layers = 2 }}
[base.data]
path = "{data}"
seq_len = 32
[base.train]
steps = 3
batch_size = 4
eval_every = 2
eval_batches = 1
checkpoint_every = 2
progress = false
"""


def write_study(tmp_path, data, head="", axes="", name="s.toml", base=True, methods=("vanilla", "depth_attention"),
                seeds=(0, 1)):
    path = tmp_path / name
    path.write_text(f"""
[study]
methods = {json.dumps(list(methods))}
seeds = {json.dumps(list(seeds))}
out_dir = "{tmp_path / 'runs'}"
results = "{tmp_path / 'results'}"
{head}
{axes}
{BASE.format(data=data) if base else ""}
""")
    return path


def test_paired_difference_and_interval_match_scipy():
    method, base = [2.0, 2.05, 1.9, 2.0], [2.2, 2.15, 2.0, 2.1]
    result = paired_difference(method, base)
    diffs = [a - b for a, b in zip(method, base, strict=True)]
    half = stats.t.ppf(0.975, len(diffs) - 1) * stats.tstd(diffs) / math.sqrt(len(diffs))
    assert result.diff_mean == pytest.approx(-0.125)
    assert result.p_value == pytest.approx(stats.ttest_rel(method, base).pvalue)
    assert (result.diff_low, result.diff_high) == pytest.approx((-0.125 - half, -0.125 + half))
    assert result.wins == 4 and result.n == 4 and verdict(result) == "better"
    assert verdict(paired_difference([2.0, 2.2], [2.1, 2.1])) == "no difference shown"
    assert verdict(paired_difference(base, method)) == "worse"
    assert math.isnan(paired_difference([1.0], [2.0]).diff_low)
    with pytest.raises(ValueError):
        paired_difference([1.0, 2.0], [1.0])


def test_axes_expand_into_settings_and_cells_share_keys(tiny_data, tmp_path):
    axes = """
[axes.layers]
key = "model.overrides.num_hidden_layers"
values = [2, 3]
[axes.budget]
key = "train.steps"
values = { short = 3, long = 6 }
"""
    study = Study.load(write_study(tmp_path, tiny_data, axes=axes))
    assert study.settings() == [{"layers": "2", "budget": "short"}, {"layers": "2", "budget": "long"},
                                {"layers": "3", "budget": "short"}, {"layers": "3", "budget": "long"}]
    cfg = study.cell_config(Cell({"layers": "3", "budget": "long"}, "depth_attention", 1))
    assert cfg.model.overrides["num_hidden_layers"] == 3 and cfg.train.steps == 6 and cfg.train.seed == 1
    assert cfg.model.method == "depth_attention"
    # the (2, short) setting is exactly the plain base config: one key, whatever study asks for it
    plain = Study.load(write_study(tmp_path, tiny_data, name="plain.toml"))
    assert (study.cell_path(Cell({"layers": "2", "budget": "short"}, "vanilla", 0))
            == plain.cell_path(Cell({}, "vanilla", 0)))
    keys = {study.cell_path(Cell(s, "vanilla", 0)).parts[0] for s in study.settings()}
    assert len(keys) == 4
    # settings that change nothing trained share the key; anything trained changes it
    config = plain.setting_config({})
    assert cell_key(config) == cell_key({**config, "train": {**config["train"], "progress": True}})
    assert cell_key(config) != cell_key({**config, "optim": {"lr": 1e-4}})
    # a field left at its default is the same cell as one that does not name it (new fields keep old keys)
    assert cell_key(config) == cell_key({**config, "train": {**config["train"], "activation_checkpointing": False}})
    assert len(pending_cells(study, CellStore.of(study))) == 4 * 2 * 2


def test_extends_takes_the_parent_base(tiny_data, tmp_path):
    write_study(tmp_path, tiny_data, name="parent.toml")
    child = write_study(tmp_path, tiny_data, head='extends = "parent.toml"', base=False, name="child.toml",
                        axes='[axes.lr]\nkey = "optim.lr"\nvalues = [0.001]\n')
    study = Study.load(child)
    assert study.cell_config(Cell({"lr": "0.001"}, "vanilla", 0)).data.seq_len == 32


def test_methods_an_override_makes_one_model_are_refused(tiny_data, tmp_path):
    """At 8 layers depth_half's stride is 4 and depth_quarter's 2; an override of 2 made them one model."""
    axes = '[axes.shape.values.stride2]\n"model.overrides" = { num_hidden_layers = 8, depth_stride = 2 }\n'
    with pytest.raises(ValueError, match="the methods depth_half and depth_quarter build the same model in the "
                                         "setting shape=stride2: model.overrides sets depth_stride, which their"):
        Study.load(write_study(tmp_path, tiny_data, axes=axes, methods=("depth_half", "depth_quarter")))


def test_an_axis_table_merges_into_the_base_table(tiny_data, tmp_path):
    """An axis value that is a table (here model.overrides) sets its keys over the base's, as extends does: the
    base's other overrides stay (they were dropped, so the model fell back to its preset's width)."""
    axes = '[axes.depth]\nkey = "model.overrides"\nvalues = { deeper = { num_hidden_layers = 3 } }\n'
    study = Study.load(write_study(tmp_path, tiny_data, axes=axes))
    overrides = study.cell_config(Cell({"depth": "deeper"}, "vanilla", 0)).model.overrides
    assert overrides == {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3}


def test_extends_follows_a_chain_to_its_root_and_names_a_loop(tiny_data, tmp_path):
    """A study that extends one that extends another takes the root's [base] too, each level over the one below
    (before, only the parent's own tables were read: ladder_smoke.toml lost scale.toml's)."""
    root = write_study(tmp_path, tiny_data, name="root.toml")
    root.write_text(root.read_text() + '[slurm]\nsbatch = { constraint = "h100" }\n')
    (tmp_path / "middle.toml").write_text('[study]\nextends = "root.toml"\nmethods = ["vanilla"]\nseeds = [0]\n'
                                          '[base.optim]\nlr = 0.004\n[slurm]\ntime = "1:00:00"\n'
                                          'sbatch = { qos = "high" }\n')
    (tmp_path / "leaf.toml").write_text('[study]\nextends = "middle.toml"\nmethods = ["vanilla"]\nseeds = [0]\n'
                                        '[base.train]\nsteps = 5\n')
    leaf = Study.load(tmp_path / "leaf.toml")
    cfg = leaf.cell_config(Cell({}, "vanilla", 0))
    assert (cfg.data.seq_len, cfg.train.batch_size, cfg.optim.lr, cfg.train.steps) == (32, 4, 0.004, 5)
    assert leaf.slurm == {"time": "1:00:00", "sbatch": {"constraint": "h100", "qos": "high"}}  # tables merge
    assert leaf.parent.parent.name == "root"
    (tmp_path / "root.toml").write_text(
        (tmp_path / "root.toml").read_text().replace("[study]", '[study]\nextends = "leaf.toml"'))
    with pytest.raises(ValueError, match="leaf.toml -> .*middle.toml -> .*root.toml -> .*leaf.toml: the studies "
                                         "extend each other in a loop"):
        Study.load(tmp_path / "leaf.toml")


@pytest.mark.parametrize("head, axes, message", [
    ('baseline = "value_residual"', "", "baseline 'value_residual' must be one of"),
    ('contrasts = [["vanilla", "mhc"]]', "", "contrast"),
    ("more_seeds = [1]", "", "distinct"),
    ('describe = { mhc = "mHC" }', "", "names \\['mhc'\\], which are not among the study's methods"),
    ("steps = 3", "", "unknown \\[study\\] keys"),
    ("", '[axes.x]\nkey = "train.stepz"\nvalues = [1]\n', "unknown key 'stepz'"),
    ("", '[axes.x]\nkey = "steps"\nvalues = [1]\n', "must name a config section"),
    ("", '[axes.x]\nkey = "train.steps"\n', "needs key and values"),
    ("", '[axes.lr]\nkey = "optim.lr"\nvalues = 1e-3\n', "values must be a list .*write values = \\[0.001\\]"),
    ("", '[axes.b]\nkey = "train.steps_fraction"\nvalues = { half = 0.5, more = 1.5 }\nbranches = true\n',
     "past 1 only for a baseline_only budget"),
    ("", '[axes.x.values.deep]\nmodel.overrides.num_hidden_layers = 3\n',
     'sets model as a table: quote a dotted key, "model.overrides.num_hidden_layers" = ...'),
    ("", '[axes.x.values.half]\n"train.steps_fraction" = 0.5\n', "which only an axis of its own takes"),
    ('[study.search]\ncandidates = ["vanilla"]\npick = 1\nmetric = "val_los"\nseeds = [0]', "",
     "metric 'val_los' is not a cell result's loss.*did you mean 'val_loss'"),
    # what a study accepted and then silently dropped or merged into one cell
    ("", '[axes.m]\nkey = "model.method"\nvalues = ["moda"]\n',
     "the setting m=moda sets model.method, which the study sets per cell from its methods"),
    ("", '[axes.s]\nkey = "train.seed"\nvalues = [7]\n', "sets train.seed, which the study sets per cell"),
    ("", '[axes.b]\nkey = "train.branch_steps"\nvalues = { two = [2] }\n',
     "sets train.branch_steps, which the study sets per cell from a budget axis with branches = true"),
    ("", '[axes.lr]\nkey = "optim.lr"\nvalues = [0.001, 0.003]\n[axes.recipe.values.short]\n"optim.lr" = 0.002\n',
     "the settings lr=0.001,recipe=short and lr=0.003,recipe=short train the same cells"),
    ("", "".join(f'[axes.p.values.{preset}]\n"model.preset" = "{preset}"\n"model.overrides.num_attention_heads" = 2\n'
                 '"model.overrides.num_key_value_heads" = 2\n' for preset in ("tiny", "small")),
     "the settings p=tiny and p=small build the same model and train it alike: model.overrides sets every field"),
    ("", '[axes.lr]\nkey = "optim.lr"\nvalues = { a = 1e-3, b = 2e-3 }\nbaseline_only = ["a", "b"]\n',
     "baseline_only \\['a', 'b'\\] must name some of its values \\['a', 'b'\\], not all"),
    ("", '[axes.lr]\nkey = "optim.lr"\nvalues = { a = 1e-3, b = 2e-3 }\nbaseline_only = ["c"]\n',
     "baseline_only \\['c'\\] must name some of its values"),
    ("", '[axes.b]\nkey = "train.steps"\nvalues = { a = 3, b = 6 }\nbranches = true\n',
     'branches = true needs the warmup-stable-decay schedule.*set schedule = "wsd" in \\[base.optim\\]'),
])
def test_bad_studies_name_the_problem(tiny_data, tmp_path, head, axes, message):
    with pytest.raises(ValueError, match=message):
        Study.load(write_study(tmp_path, tiny_data, head=head, axes=axes))


def test_settings_that_build_one_model_but_train_it_otherwise_are_distinct(tiny_data, tmp_path):
    axes = '[axes.start]\nkey = "model.init_from"\nvalues = { fresh = "", other = "/elsewhere/final" }\n'
    assert len(Study.load(write_study(tmp_path, tiny_data, axes=axes)).settings()) == 2  # from other weights


def test_sweep_runs_each_cell_once_resumes_and_reports(tiny_data, tmp_path):
    study = Study.load(write_study(tmp_path, tiny_data, head='contrasts = [["depth_attention", "vanilla"]]'))
    run_study(study, CellStore.of(study), seeds=[0])  # as if the sweep had stopped after seed 0
    assert [cell.seed for cell in pending_cells(study, CellStore.of(study))] == [1, 1]
    done = CellStore.of(study).result_path(study, Cell({}, "vanilla", 0))
    before = done.stat().st_mtime_ns

    # a cell killed after its last checkpoint, before its result file: it resumes and reports the same numbers
    interrupted = CellStore.of(study).result_path(study, Cell({}, "depth_attention", 0))
    first = json.loads(interrupted.read_text())
    interrupted.unlink()
    run_study(study, CellStore.of(study))
    assert done.stat().st_mtime_ns == before  # finished cells are never rerun
    again = json.loads(interrupted.read_text())
    for key in ("val_loss", "val_bits_per_byte", "curve", "train_tokens", "params_total", "val_documents"):
        assert again[key] == first[key], key
    assert pending_cells(study, CellStore.of(study)) == []
    documents = first["val_documents"]  # each held-out document's nats and scored tokens
    assert len(documents["nats"]) == len(documents["tokens"]) > 1 and sum(documents["tokens"]) == first["val_tokens"]
    assert sum(documents["nats"]) / first["val_tokens"] == pytest.approx(first["val_loss"], rel=1e-5)

    results = CellStore.of(study).read_results(study)
    assert len(results) == 4 and all(r.curve and r.val_bits_per_byte > 0 for r in results)
    table = summarize(study, results)[""]
    da = table.row("depth_attention").difference
    losses = {(r.method, r.seed): r.val_loss for r in results}
    diffs = [losses["depth_attention", s] - losses["vanilla", s] for s in (0, 1)]
    assert da.diff_mean == pytest.approx(sum(diffs) / 2) and da.n == 2
    assert table.contrasts[0].difference.diff_mean == pytest.approx(da.diff_mean)
    report = write_report(study, CellStore.of(study))
    text = report.read_text()
    assert "| depth_attention | 2 |" in text and "depth_attention − vanilla" in text
    curves = [r.curve for r in results if r.method == "vanilla"]
    end = max(curves[0])
    start = min(curves[0], key=lambda t: abs(t - 0.75 * end))
    before, after = (sum(curve[t] for curve in curves) / 2 for t in (start, end))
    assert (f"vanilla's eval-subset loss over the last quarter of training ({start:,} to {end:,} tokens): "
            f"{before:.3f} to {after:.3f}") in text
    assert (report.parent / "s_difference.png").stat().st_size > 0
    assert (report.parent / "s_curves.png").stat().st_size > 0


def test_why_maps_depth_weights_beside_value_residual_lambdas(tiny_data, tmp_path):
    study = Study.load(write_study(tmp_path, tiny_data, methods=("vanilla", "depth_attention", "value_residual"),
                                   seeds=(0,)))
    run_study(study, CellStore.of(study))
    why = json.loads(explain(study).read_text())["settings"]["base"]
    matrix = why["depth_attention"]["depth_map"]
    assert len(matrix) == 2 and matrix[0][0] == pytest.approx(1.0)  # layer 0 keeps its own value
    assert sum(matrix[1]) == pytest.approx(1.0, abs=1e-5)
    mixing = why["value_residual"]["mixing"]  # its lambdas, for layer 1
    assert list(mixing) == ["λ1 (layer 0)", "λ2 (own)"] and all(len(weights) == 1 for weights in mixing.values())
    index = write_index([study], CellStore.of(study), tmp_path / "study.md").read_text()
    assert "| base | s |" in index and "s_why_base.png" in index
    assert "![every setting](results/overview.png)" in index
    assert (Path(study.results) / "overview.png").stat().st_size > 10_000


def test_more_seeds_go_where_the_interval_spans_zero(tmp_path, tiny_data):
    study = Study.load(write_study(tmp_path, tiny_data, head='more_seeds = [5]\n'
                                   'describe = { depth_attention = "softmax mix" }\npaper = { vanilla = 2.23 }'))
    results_dir = tmp_path / "results"

    def fake(method, seed, loss):
        path = CellStore.of(study).result_path(study, Cell({}, method, seed))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"method": method, "seed": seed, "val_loss": loss, "val_bits_per_byte": loss,
                                    "params_extra_over_vanilla": 0, "tokens_per_s": 1.0, "train_tokens": 10,
                                    "curve": [[10, loss]]}))

    fake("vanilla", 0, 2.0), fake("vanilla", 1, 2.0)
    fake("depth_attention", 0, 1.9), fake("depth_attention", 1, 2.05)  # spans zero
    wanted = uncertain_cells(study, CellStore.of(study))
    assert [(c.method, c.seed) for c in wanted] == [("vanilla", 5), ("depth_attention", 5)]
    progress = "Finished: 4 of the 4 distinct cells of 1 studies at their first seeds; more seeds where an " \
               "interval spanned zero (the studies with `more_seeds`, a rule that stops on the data; newer " \
               "studies fix their seed count): {} finished, {} still wanted."
    assert progress.format(0, 2) in write_index([study], CellStore.of(study), tmp_path / "study.md").read_text()
    fake("vanilla", 5, 2.0)
    assert progress.format(1, 1) in write_index([study], CellStore.of(study), tmp_path / "study.md").read_text()
    fake("depth_attention", 1, 1.89)  # now clearly better: no more seeds
    assert uncertain_cells(study, CellStore.of(study)) == []
    report = markdown_report(study, CellStore.of(study))
    assert "| method | variant | seeds |" in report and report.count("|---") == 11
    assert "| depth_attention | softmax mix | 2 | 1.8950 ± 0.0071 |" in report
    vanilla_row = next(line for line in report.splitlines() if line.startswith("| vanilla |"))
    assert vanilla_row.startswith("| vanilla |  | 3 | 2.0000") and vanilla_row.endswith("| 2.23 |")
    assert results_dir.is_dir()


def test_a_retrofitting_study_retrains_its_missing_starting_models(tiny_data, tmp_path):
    """Results are committed but checkpoints are not: on a fresh machine the parent's models are trained again,
    identically, before the cells that start from them."""
    parent = Study.load(write_study(tmp_path, tiny_data, seeds=(0,)))
    run_study(parent, CellStore.of(parent))
    start = tmp_path / "runs" / parent.cell_path(Cell({}, "vanilla", 0))
    weights = (start / "final" / "model.safetensors").read_bytes()
    result = CellStore.of(parent).result_path(parent, Cell({}, "vanilla", 0))
    committed = result.read_text()
    for folder in (tmp_path / "runs").iterdir():  # a fresh clone: result files only
        shutil.rmtree(folder)

    child = tmp_path / "r.toml"
    child.write_text(f'[study]\nextends = "s.toml"\nmethods = ["vanilla", "depth_attention"]\nseeds = [0]\n'
                     f'start_from = "vanilla"\nout_dir = "{tmp_path / "runs"}"\nresults = "{tmp_path / "results"}"\n'
                     '[base.train]\nsteps = 2\n')
    retrofit = Study.load(child)
    assert retrofit.cell_config(Cell({}, "depth_attention", 0)).model.init_from == str(start / "final")
    run_study(retrofit, CellStore.of(retrofit))
    assert (start / "final" / "model.safetensors").read_bytes() == weights and result.read_text() == committed
    assert {r.method for r in CellStore.of(retrofit).read_results(retrofit)} == {"vanilla", "depth_attention"}
    assert retrofit.cell_path(Cell({}, "vanilla", 0)) != parent.cell_path(Cell({}, "vanilla", 0))
    # a finished study, run again as `make study` does: nothing to do, no error
    run_study(retrofit, CellStore.of(retrofit), LocalExecutor(workers=2))
    # `depthattn study r.toml --out-dir ELSEWHERE`: the starting models are trained and read there too
    moved = Study.load(child, out_dir=str(tmp_path / "elsewhere"))
    assert moved.cell_config(Cell({}, "depth_attention", 0)).model.init_from == \
        str(tmp_path / "elsewhere" / parent.cell_path(Cell({}, "vanilla", 0)) / "final")

    child.write_text(child.read_text().replace('extends = "s.toml"\n', ''))
    with pytest.raises(ValueError, match="start_from names a method of the study this one extends"):
        Study.load(child)
    with pytest.raises(ValueError, match="extends none; add extends"):  # a Study made without load
        dataclasses.replace(retrofit, parent=None).check()


def test_a_setting_axis_changes_several_keys_and_keeps_the_cell_keys_of_one_key_axes(tiny_data, tmp_path):
    axes = """
[axes.setting.values.deeper]
"model.overrides.num_hidden_layers" = 3
[axes.setting.values.longer]
"train.steps" = 6
"optim.lr" = 0.001
"""
    study = Study.load(write_study(tmp_path, tiny_data, axes=axes))
    assert study.settings() == [{"setting": "deeper"}, {"setting": "longer"}]
    longer = study.cell_config(Cell({"setting": "longer"}, "vanilla", 0))
    assert longer.train.steps == 6 and longer.optim.lr == 0.001
    one_key = Study.load(write_study(tmp_path, tiny_data, name="layers.toml",
                                     axes='[axes.layers]\nkey = "model.overrides.num_hidden_layers"\nvalues = [3]\n'))
    assert (study.cell_path(Cell({"setting": "deeper"}, "vanilla", 0))
            == one_key.cell_path(Cell({"layers": "3"}, "vanilla", 0)))
    with pytest.raises(ValueError, match="each value must be a table"):
        Study.load(write_study(tmp_path, tiny_data, name="bad.toml", axes="[axes.x]\nvalues = [1, 2]\n"))


def _finish(study, method, seed, val_loss):
    """A finished cell's result file, as run_cell writes it (only the fields the search reads)."""
    path = CellStore.of(study).result_path(study, Cell({}, method, seed))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"method": method, "seed": seed, "val_loss": val_loss}))


SEARCH = """
[study.search]
candidates = ["depth_uniform", "depth_linear", "depth_static"]
pick = 2
seeds = [0, 1]
"""


def test_a_search_picks_only_when_every_candidate_cell_is_in_and_then_by_mean(tiny_data, tmp_path):
    methods = ("vanilla", "depth_uniform", "depth_linear", "depth_static")
    search = Study.load(write_study(tmp_path, tiny_data, head=SEARCH, methods=methods, name="search.toml",
                                   seeds=(0, 1, 2)))
    losses = {"depth_uniform": [2.0, 2.2], "depth_linear": [2.1, 2.0], "depth_static": [1.9, 2.4]}
    for method, values in losses.items():
        for seed, value in enumerate(values):
            if (method, seed) != ("depth_static", 1):
                _finish(search, method, seed, value)
    _finish(search, "depth_static", 2, 0.1)  # a seed outside the search's seeds does not count
    result = search_result(search, CellStore.of(search))
    assert result.picked is None and result.missing == 1
    _finish(search, "depth_static", 1, 2.4)
    result = search_result(search, CellStore.of(search))
    assert [row.method for row in result.ranking] == ["depth_linear", "depth_uniform", "depth_static"]
    assert result.picked == ["depth_linear", "depth_uniform"]  # means 2.05, 2.1, 2.15
    assert "Picked: **depth_linear**, **depth_uniform**" in markdown_report(search, CellStore.of(search), [])

    confirm = write_study(tmp_path, tiny_data, name="confirm.toml", methods=("vanilla", "value_residual"),
                          head='[study.confirm]\nfrom = "search.toml"\nagainst = "value_residual"\n')
    assert Study.load(confirm).methods == ["vanilla", "value_residual"]  # the spec reads no results
    study = with_picks(Study.load(confirm), CellStore.of(search))
    assert study.methods == ["vanilla", "value_residual", "depth_linear", "depth_uniform"] and not study.waiting
    assert study.contrasts == [["depth_linear", "value_residual"], ["depth_uniform", "value_residual"]]
    CellStore.of(search).result_path(search, Cell({}, "depth_linear", 0)).unlink()
    study = with_picks(Study.load(confirm), CellStore.of(search))
    assert study.methods == ["vanilla", "value_residual"] and "1 candidate cells to go" in study.waiting

    # a diverged search seed is in, and ranks its candidate below every candidate without one
    store = CellStore.of(search)
    store.write_diverged(search.cell_path(Cell({}, "depth_linear", 0)), Cell({}, "depth_linear", 0), "nan", {})
    result = search_result(search, store)
    assert result.missing == 0 and [row.method for row in result.ranking][-1] == "depth_linear"
    assert result.picked == ["depth_uniform", "depth_static"]
    assert "| 3 | depth_linear | 1 | 2.0000 (1 diverged: ranked last) |" in markdown_report(search, store, [])


def test_a_confirmation_takes_the_picks_of_a_search_that_finished_in_the_same_run(tiny_data, tmp_path, capsys):
    from depthattn.study.actions import load_studies, run_studies
    from depthattn.study.runner import ExecutorOptions

    methods = ("vanilla", "depth_uniform", "depth_linear", "depth_static")
    search = Study.load(write_study(tmp_path, tiny_data, head=SEARCH, methods=methods, name="search.toml"))
    store = CellStore.of(search)

    def finish(method, seed):  # a whole result file: the confirmation's page reads the cells it shares
        loss = 2.0 + 0.1 * methods.index(method)
        store.write(search.cell_path(Cell({}, method, seed)), CellResult(method, seed, loss, {
            "val_bits_per_byte": loss, "params_extra_over_vanilla": 0, "tokens_per_s": 1.0, "train_tokens": 10,
            "curve": [[10, loss]]}))

    for method, seed in [(m, s) for m in methods[1:] for s in (0, 1)][:-1]:
        finish(method, seed)
    confirm = write_study(tmp_path, tiny_data, name="confirm.toml", methods=("vanilla", "value_residual"),
                          head='[study.confirm]\nfrom = "search.toml"\nagainst = "value_residual"\n')
    (study,), store, _ = load_studies([str(confirm)])
    assert study.waiting  # loaded before the search's last cell is in
    finish("depth_static", 1)  # as if this run had trained it before the confirmation's turn
    assert run_studies([study], store, ExecutorOptions(), report_only=True) == 0
    page = (tmp_path / "results" / "confirm.md").read_text()
    assert "Waiting" not in page and "| depth_uniform | — | not decided |" in page


def test_studies_run_together_share_one_results_folder(tiny_data, tmp_path):
    from depthattn.study.actions import load_studies

    one = write_study(tmp_path, tiny_data, name="one.toml")
    (tmp_path / "elsewhere").mkdir()
    two = write_study(tmp_path / "elsewhere", tiny_data, name="two.toml")
    with pytest.raises(ValueError, match="share one results folder: give --results"):
        load_studies([str(one), str(two)])
    studies, store, _ = load_studies([str(one), str(two)], results=str(tmp_path / "shared"))
    assert store == CellStore(tmp_path / "shared" / "cells")
    assert {study.results for study in studies} == {str(tmp_path / "shared")}


def test_a_confirmation_names_a_preset_only_when_better_in_every_setting(tiny_data, tmp_path):
    axes = '[axes.setting.values.a]\n"train.steps" = 4\n[axes.setting.values.b]\n"train.steps" = 5\n'
    study = Study.load(write_study(tmp_path, tiny_data, axes=axes, seeds=(0, 1, 2),
                                   methods=("vanilla", "value_residual", "depth_static"),
                                   head='more_seeds = [3, 4]\ncontrasts = [["depth_static", "value_residual"]]'))
    study = dataclasses.replace(study, confirm={"from": "search.toml", "against": "value_residual"})  # as if picked

    def finish(setting, method, losses):
        for seed, loss in enumerate(losses):
            path = CellStore.of(study).result_path(study, Cell({"setting": setting}, method, seed))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"method": method, "seed": seed, "val_loss": loss, "val_bits_per_byte": loss,
                                        "params_extra_over_vanilla": 0, "tokens_per_s": 1.0, "train_tokens": 10,
                                        "curve": [[10, loss]]}))

    def outcome():
        report = markdown_report(study, CellStore.of(study))
        row = next(line for line in report.splitlines() if line.startswith("| depth_static |") and "[" in line)
        return row.rsplit("|", 2)[-2].strip(), next(line for line in report.splitlines() if line.startswith("Outcome"))

    for setting in ("a", "b"):
        finish(setting, "vanilla", [2.0, 2.1, 2.2, 2.0, 2.1])
        finish(setting, "value_residual", [1.9, 2.0, 2.1, 1.9, 2.0])
    finish("a", "depth_static", [1.8, 1.91, 2.0])
    finish("b", "depth_static", [1.85, 1.94, 2.06])
    assert outcome() == ("yes", "Outcome: **depth_static** better than value_residual in every setting: a named "
                                "preset.")
    finish("b", "depth_static", [1.85, 2.04, 2.06])  # spans zero with 3 of 5 seeds: more seeds decide
    assert outcome() == ("not decided", "Outcome: not decided yet (depth_static still open).")
    finish("b", "depth_static", [1.85, 2.04, 2.06, 1.95, 1.98])  # spans zero with every seed in
    assert outcome() == ("no", "Outcome: no method is better than value_residual in every setting; closest: "
                               "**depth_static** (mean difference over the settings it ran in: -0.0503).")
    finish("b", "depth_static", [2.0, 2.1, 2.2])  # worse in one setting
    assert outcome()[0] == "no"


@pytest.mark.parametrize("line, replacement, message", [
    ("seeds = [0, 1]", 'seeds = [0, "one"]', "seeds must be a list of seeds, integers >= 0, got \\[0, 'one'\\]"),
    ("seeds = [0, 1]", "seeds = [0, -1]", "seeds must be a list of seeds"),
    ('methods = ["vanilla", "depth_attention"]', 'methods = "vanilla"', "methods must be a list of method presets"),
    ('methods = ["vanilla", "depth_attention"]', "methods = []", "methods must be a list of method presets"),
    ('methods = ["vanilla", "depth_attention"]', 'methods = ["vanilla", "vanilla"]', "names \\['vanilla'\\] twice"),
    ("steps = 3", "stepz = 3",
     "s.toml: a cell's settings \\(\\[base.\\*\\] and the axes'\\): \\[train\\]: unknown key 'stepz'"),
])
def test_bad_seeds_methods_or_base_keys_name_the_config(tiny_data, tmp_path, line, replacement, message):
    path = write_study(tmp_path, tiny_data)
    assert line in path.read_text()
    path.write_text(path.read_text().replace(line, replacement))
    with pytest.raises(ValueError, match=message):
        Study.load(path)


def test_narrowing_to_a_method_or_seed_the_study_lacks_is_refused(tiny_data, tmp_path):
    from depthattn.cli import main

    path = str(write_study(tmp_path, tiny_data))
    with pytest.raises(ValueError, match="--methods vanila: not a method of .*s.toml .*did you mean 'vanilla'"):
        check_narrowing_of(path, ["vanila"], None)
    with pytest.raises(ValueError, match="--seeds 7: not a seed of .*add it to the config's seeds"):
        check_narrowing_of(path, None, [7])
    check_narrowing_of(path, ["vanilla"], [1])
    assert main(["study", path, "--status", "--methods", "vanila"]) == 1  # it said "0 finished, 2 to run"
    assert main(["study", path, "--dry-run", "--mfu", "0"]) == 1  # a division by zero


def test_narrowing_several_studies_keeps_each_to_its_own_methods_and_seeds(tiny_data, tmp_path):
    """`study a.toml b.toml --methods value_residual --seeds 3` runs b's cell only: a, which has neither, gave a
    value_residual cell of seed 3 to train."""
    a = Study.load(write_study(tmp_path, tiny_data, name="a.toml", seeds=[0, 1]))
    b = Study.load(write_study(tmp_path, tiny_data, name="b.toml", methods=("vanilla", "value_residual"),
                               seeds=[0, 3]))
    from depthattn.commands.study import check_narrowing

    check_narrowing([a, b], ["value_residual"], [3])  # each is some study's
    assert pending_cells(a, CellStore.of(a), [3], ["value_residual"]) == []
    assert pending_cells(b, CellStore.of(b), [3], ["value_residual"]) == [Cell({}, "value_residual", 3)]
    assert pending_cells(a, CellStore.of(a), [1, 3], None) == [Cell({}, "vanilla", 1), Cell({}, "depth_attention", 1)]


def check_narrowing_of(path, methods, seeds):
    from depthattn.commands.study import check_narrowing

    check_narrowing([Study.load(path)], methods, seeds)


@pytest.mark.parametrize("search, message", [
    ('[study.search]\ncandidates = ["mudd"]\npick = 1\n', "must be some of the study's methods"),
    ('[study.search]\ncandidates = ["depth_attention"]\npick = 2\n', "picks 1 .. len"),
    ('[study.search]\ncandidates = ["depth_attention"]\npick = 1\nseeds = [5]\n', "among the study's seeds"),
    ('[study.search]\ncandidates = ["depth_attention"]\npicks = 1\n', "takes candidates, pick"),
    ('[study.search]\ncandidates = ["depth_attention"]\npick = "1"\n', "pick must be an integer, got '1'"),
    ('[study.search]\ncandidates = ["depth_attention"]\npick = 1\nseeds = 0\n', "seeds must be a list of seeds"),
    ('[study.search]\ncandidates = "depth_attention"\npick = 1\n', "candidates must be a list of method names"),
    ('[study.search]\ncandidates = ["depth_attention"]\npick = 1\nmetric = 3\n', "metric must be a string"),
])
def test_bad_searches_name_the_problem(tiny_data, tmp_path, search, message):
    with pytest.raises(ValueError, match=message):
        Study.load(write_study(tmp_path, tiny_data, head=search))


def test_a_cell_of_two_processes_matches_the_one_process_cell(tiny_data, tmp_path, one_world):
    """gloo DDP under torch's elastic launcher (torchrun's): the study's batch is split over the processes, so the
    two-process cell sees the one-process cell's batches; only the order of float sums differs."""
    one = Study.load(write_study(tmp_path, tiny_data, methods=("vanilla",), seeds=(0,), name="one.toml"))
    two = Study.load(write_study(tmp_path, tiny_data, methods=("vanilla",), seeds=(0,), name="two.toml"),
                     out_dir=str(tmp_path / "runs-two"), results=str(tmp_path / "results-two"))
    run_study(one, CellStore.of(one))
    run_study(two, CellStore.of(two), LocalExecutor(tasks_per_cell=2, threads=1))
    a, b = (json.loads(CellStore.of(study).result_path(study, Cell({}, "vanilla", 0)).read_text())
            for study in (one, two))
    assert b["world_size"] == 2 and b["parallel"] == "ddp" and "world_size" not in a
    launches = list((Path(two.cell_config(Cell({}, "vanilla", 0)).train.out_dir) / "launches").iterdir())
    assert len(launches) == 1 and (launches[0] / "attempt_0" / "1").is_dir()  # the agent's folder, with the run
    assert a["train_tokens"] == b["train_tokens"] and a["config"] == b["config"]  # the same cell
    assert b["val_loss"] == pytest.approx(a["val_loss"], abs=1e-4)
    for (tokens_a, loss_a), (tokens_b, loss_b) in zip(a["curve"], b["curve"], strict=True):
        assert tokens_a == tokens_b and loss_b == pytest.approx(loss_a, abs=1e-4)
    with pytest.raises(ValueError, match="divides it"):  # 4 sequences per batch cannot split over 3 processes
        three = Study.load(write_study(tmp_path, tiny_data, methods=("vanilla",), seeds=(1,), name="three.toml"))
        run_study(three, CellStore.of(three), LocalExecutor(tasks_per_cell=3))
    # a run that diverges stops every process at the same step (the loss and norm are the world's): recorded, no hang
    huge = Study.load(write_study(tmp_path, tiny_data, axes="[base.optim]\nlr = 1e4\nwarmup_steps = 0\n",
                                  methods=("vanilla",), seeds=(0,), name="huge.toml"))
    assert run_study(huge, CellStore.of(huge), LocalExecutor(tasks_per_cell=2, threads=1)) is True
    assert CellStore.of(huge).has_diverged(huge, Cell({}, "vanilla", 0)) and not pending_cells(huge, CellStore.of(huge))


def test_dry_run_prints_each_cell_and_its_cost(tiny_data, tmp_path, capsys):
    from depthattn.commands.study import add_arguments, run
    from depthattn.evaluate.costs import method_costs
    from depthattn.study.pricing import cell_flops, gpu_hours
    from depthattn.train.loop import build_model_config

    study = write_study(tmp_path, tiny_data)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args([str(study), "--dry-run", "--mfu", "0.5"])) == 0
    out = capsys.readouterr().out
    loaded = Study.load(study)
    cost, vanilla = cell_flops(loaded, {}, "depth_attention"), cell_flops(loaded, {}, "vanilla")
    assert cost["tokens"] == vanilla["tokens"] == 3 * 4 * 32  # steps x batch x seq_len
    config = loaded.cell_config(Cell({}, "depth_attention", 0))
    model_config = build_model_config(config, 384, None)  # tiny_data's vocabulary
    extra = method_costs(model_config)["extra_flops_per_token"]
    assert cost["flops"] - vanilla["flops"] == 3 * extra * cost["tokens"] > 0  # training = 3 x forward
    embeddings = model_config.vocab_size * model_config.hidden_size
    assert 6 * (vanilla["params"] - embeddings) * vanilla["tokens"] < vanilla["flops"]
    assert "default depth_attention seed 1: " in out and "4 cells would run" in out
    total = 2 * sum(cell_flops(loaded, {}, m)["flops"] for m in ("vanilla", "depth_attention"))
    assert f"{total:.2e} FLOPs, {gpu_hours(total, 0.5):,.2f} GPU-hours at 50% MFU" in out
    assert not (tmp_path / "results").exists()  # nothing trained
    assert run(parser.parse_args([str(study), "--status"])) == 0
    assert "study s: 0 finished, 4 to run" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["scale", "scale_smoke"])
def test_the_scale_studies_are_valid_and_priced(name):
    from depthattn.study.pricing import cell_flops, gpu_hours
    from depthattn.study.slurm import SlurmSettings

    study = Study.load(f"configs/study/{name}.toml")  # the tests run from the repository root
    settings = SlurmSettings.from_table(study.slurm)
    cost = cell_flops(study, {}, "depth_attention")
    assert settings.tasks == settings.gpus_per_cell and cost["params"] > 2e8
    if name == "scale":
        assert cost["tokens"] == pytest.approx(20 * 360e6, rel=0.01)  # 20 tokens per parameter
        assert 5 < gpu_hours(cost["flops"], 0.4) < 20


@pytest.mark.parametrize("table, overrides, expected", [
    ({}, [], dict(time=240, ntasks_per_node=1, cpus_per_task=1)),
    ({"time": "1-00:00:00", "gpus_per_cell": 8}, ["partition=gpu"],
     dict(time=1440, ntasks_per_node=8, gpus_per_node=8, partition="gpu")),
    ({"tasks_per_cell": 2, "sbatch": {"constraint": "h100"}}, ["time=90", 'setup=["module load cuda"]'],
     dict(time=90, ntasks_per_node=2, additional_parameters={"constraint": "h100"}, setup=["module load cuda"])),
])
def test_slurm_settings_from_the_table_and_the_command_line(table, overrides, expected):
    from depthattn.study.slurm import SlurmSettings

    params = SlurmSettings.from_table(table, overrides).submitit_parameters("x")
    assert {key: params[key] for key in expected} == expected


@pytest.mark.parametrize("table, overrides, message", [
    ({"partitoin": "gpu"}, [], "unknown \\[slurm\\] keys"),
    ({}, ["gpus=2"], "--slurm takes KEY=VALUE"),
    ({}, ["time=soon"], "time must be"),
    ({"gpus_per_cell": -1}, [], "at least 0"),
    ({}, ["tasks_per_cell=two"], "must be an integer"),
    ({"gpus_per_cell": 2.5}, [], "gpus_per_cell must be an integer, got 2.5"),  # it was cut to 2
])
def test_bad_slurm_settings_name_the_problem(table, overrides, message):
    from depthattn.study.slurm import SlurmSettings

    with pytest.raises(ValueError, match=message):
        SlurmSettings.from_table(table, overrides)


WSD_BUDGETS = """
[base.optim]
schedule = "wsd"
warmup_steps = 1
decay_fraction = 0.34
[axes.budget]
key = "train.steps"
values = { short = 3, long = 6 }
branches = true
"""


def test_status_says_how_long_the_cells_to_run_train_at_the_speed_of_the_finished_ones(tiny_data, tmp_path, capsys):
    from depthattn.commands.study import add_arguments, run
    from depthattn.study.pricing import tokens_left

    path = write_study(tmp_path, tiny_data, axes=WSD_BUDGETS, methods=("vanilla", "depth_attention", "value_residual"))
    study = Study.load(path)
    short, long = {"budget": "short"}, {"budget": "long"}
    for setting, method, seed, tokens_per_s in [(short, "vanilla", 0, 0.01), (long, "vanilla", 0, 0.03),
                                                (short, "vanilla", 1, 0.08), (short, "depth_attention", 0, 0.01)]:
        CellStore.of(study).write(study.cell_path(Cell(setting, method, seed)), CellResult(
            method, seed, 2.0, {"tokens_per_s": tokens_per_s}, setting=setting))
    per_step = 4 * 32  # batch x seq_len
    # a run's steps after the step it resumes at, and the decay (0.34 x 3 steps: 1) of a shorter budget still to do
    store = CellStore.of(study)
    assert tokens_left(study, store, Cell(long, "value_residual", 1), 0) == (6 + 1) * per_step
    assert tokens_left(study, store, Cell(long, "value_residual", 1), 4) == (2 + 1) * per_step
    assert tokens_left(study, store, Cell(long, "vanilla", 1), 0) == 6 * per_step  # its short budget is done
    assert tokens_left(study, store, Cell(long, "depth_attention", 0), 0) == 6 * per_step  # its short budget is done
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args([str(path), "--status"])) == 0
    out = capsys.readouterr().out
    # vanilla at its median speed, 0.03 tokens/s; depth_attention at 0.01; value_residual has no finished cell
    seconds = 6 * per_step / 0.03 + (6 + 7) * per_step / 0.01
    assert f"4 finished, 5 to run; about {seconds / 3600:,.1f} hours of training left for one worker" in out
    assert "value_residual not counted: no finished cell to time" in out
    damaged = store.path(study.cell_path(Cell(short, "vanilla", 1)))
    damaged.write_text(damaged.read_text()[:20])  # cut short: no result, whatever its name says
    assert run(parser.parse_args([str(path), "--status"])) == 0
    out = capsys.readouterr().out
    assert f"to run  {study.cell_path(Cell(short, 'vanilla', 1))}" not in out  # its run is vanilla's long seed 1
    assert f"finished  {study.cell_path(Cell(short, 'vanilla', 1))}" not in out and "3 finished" in out


def test_status_states_time_left_under_an_hour_in_minutes(tiny_data, tmp_path, capsys):
    from depthattn.commands.study import add_arguments, run
    from depthattn.study.status import duration

    path = write_study(tmp_path, tiny_data, axes=WSD_BUDGETS, methods=("vanilla",))
    study = Study.load(path)
    left = (6 + 1) * 4 * 32  # seed 1's run: 6 steps and its short budget's decay, of 4 x 32 tokens
    for budget in ("short", "long"):
        setting = {"budget": budget}
        CellStore.of(study).write(study.cell_path(Cell(setting, "vanilla", 0)), CellResult(
            "vanilla", 0, 2.0, {"tokens_per_s": left / (12 * 60)}, setting=setting))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args([str(path), "--status"])) == 0
    assert "1 to run; about 12 minutes of training left for one worker" in capsys.readouterr().out
    assert [duration(s) for s in (20, 100, 3599, 5400)] == ["a minute", "2 minutes", "60 minutes", "1.5 hours"]


@pytest.fixture(scope="module")
def short_data(tmp_path_factory):
    """tiny_data's documents cut to 3,000 characters: each budget is scored on the whole held-out split, which is
    a tenth of tiny_data's here."""
    root = tmp_path_factory.mktemp("short_data")
    source = write_jsonl(root / "docs.jsonl", [doc[:3000] for doc in islice(embedded_corpus_documents(), 12)])
    prepare([str(source)], root / "prepared", vocab_size=384, val_fraction=0.25, seed=0, progress=False)
    return root / "prepared"


def test_a_branched_budget_axis_trains_one_run_per_method_and_seed(short_data, tmp_path):
    study = Study.load(write_study(tmp_path, short_data, axes=WSD_BUDGETS, methods=["vanilla"], seeds=[0]))
    long, short = {"budget": "long"}, {"budget": "short"}
    # one run, named by its longest budget
    assert pending_cells(study, CellStore.of(study)) == [Cell(long, "vanilla", 0)]
    run_study(study, CellStore.of(study))
    results = {s["budget"]: json.loads(CellStore.of(study).result_path(study, Cell(s, "vanilla", 0)).read_text())
               for s in (short, long)}
    assert results["short"]["branched_from_steps"] == 6 and "branched_from_steps" not in results["long"]
    assert [results[b]["train_tokens"] for b in ("short", "long")] == [3 * 128, 6 * 128]
    short_train = results["short"]["config"]["train"]
    assert short_train["steps"] == 3 and short_train["branch_steps"] == []

    # the short budget's result equals a standalone WSD run of 3 steps, stored under the same cell key
    plain = Study.load(write_study(tmp_path, short_data, axes=WSD_BUDGETS.replace("branches = true", ""),
                                   methods=["vanilla"], seeds=[0], name="plain.toml"))
    assert (CellStore.of(plain).result_path(plain, Cell(short, "vanilla", 0))
            == CellStore.of(study).result_path(study, Cell(short, "vanilla", 0)))
    alone = tmp_path / "alone"
    plain = dataclasses.replace(plain, results=str(alone))
    run_study(plain, CellStore.of(plain), seeds=[0])
    assert CellStore.of(plain).read_result(plain, Cell(short, "vanilla", 0)).val_loss == results["short"]["val_loss"]

    # a lost result of a recorded branch is written again from its folder, without training
    CellStore.of(study).result_path(study, Cell(short, "vanilla", 0)).unlink()
    assert pending_cells(study, CellStore.of(study)) == [Cell(long, "vanilla", 0)]
    run_study(study, CellStore.of(study))
    assert CellStore.of(study).read_result(study, Cell(short, "vanilla", 0)).val_loss == results["short"]["val_loss"]


def test_a_budget_added_below_a_finished_branched_run_trains_as_a_run_of_its_own(short_data, tmp_path, capsys):
    """The finished run is past where the new budget's branch would leave it: that budget trains alone (what the
    branch equals), and the finished cells stay as they are."""
    axes = WSD_BUDGETS.replace("{ short = 3, long = 6 }", "{ mid = 4, long = 6 }")
    path = write_study(tmp_path, short_data, axes=axes, methods=["vanilla"], seeds=[0])
    study = Study.load(path)
    run_study(study, CellStore.of(study))
    finished = {label: CellStore.of(study).result_path(study, Cell({"budget": label}, "vanilla", 0))
                for label in ("mid", "long")}
    before = {label: f.read_bytes() for label, f in finished.items()}

    path.write_text(path.read_text().replace("{ mid = 4, long = 6 }", "{ short = 3, mid = 4, long = 6 }"))
    study = Study.load(path)
    capsys.readouterr()
    run_study(study, CellStore.of(study))
    out = capsys.readouterr().out
    assert "budget=short vanilla seed 0: " in out and "so it trains as a run of its own" in out
    assert {label: f.read_bytes() for label, f in finished.items()} == before
    short = json.loads(CellStore.of(study).result_path(study, Cell({"budget": "short"}, "vanilla", 0)).read_text())
    assert short["train_tokens"] == 3 * 128 and short["config"]["train"]["steps"] == 3
    assert "branched_from_steps" not in short
    assert pending_cells(study, CellStore.of(study)) == []


def synthetic_budget_results(study, gain_of, seeds=(0, 1, 2), noise=0.0):
    """Cell results of a branched budget study whose `depth_attention` gain over vanilla is gain_of(tokens per
    parameter), the same in every seed but for +-noise."""
    results = []
    for label, steps in study.branch_axis.values.items():
        for seed in seeds:
            base = 3.0 - 0.1 * seed
            tokens = steps * 1000
            for method, loss in (("vanilla", base), ("depth_attention",
                                                     base + gain_of(tokens / 100)
                                                     + noise * (seed - sum(seeds) / len(seeds)))):
                results.append(CellResult(method, seed, loss, {
                    "val_bits_per_byte": loss, "train_tokens": tokens, "params_total": 100,
                    "params_extra_over_vanilla": 0, "tokens_per_s": 1.0, "curve": [], "data_epochs": tokens / 1e6},
                    setting={"budget": label}))
    return results


def test_the_budget_trend_fits_the_gain_and_finds_where_it_reaches_zero(tiny_data, tmp_path, monkeypatch):
    from depthattn.study import multiplier, sweep
    from depthattn.study import trend as trends
    from depthattn.study.render.numbers import describe_zero
    from depthattn.study.report import markdown_report
    from depthattn.study.trend import trend

    # the rule's 2,000 resamples (and 400 joint fits) are not needed for these margins
    monkeypatch.setattr(trends, "RESAMPLES", 400)
    monkeypatch.setattr(sweep, "RESAMPLES", 400)
    monkeypatch.setattr(multiplier, "FIT_RESAMPLES", 50)

    axes = WSD_BUDGETS.replace("{ short = 3, long = 6 }", '{ a = 1, b = 10, c = 100, d = 1000 }')
    study = Study.load(write_study(tmp_path, tiny_data, axes=axes))
    # budgets of 10, 100, 1,000 and 10,000 tokens per parameter; the gain -0.1 + 0.025 log10(x) is gone at 10^4
    five = (0, 1, 2, 3, 4)  # a band needs five seeds
    results = synthetic_budget_results(study, lambda x: -0.1 + 0.025 * math.log10(x), seeds=five, noise=0.002)
    fit = trend(study, results, "depth_attention", "vanilla")
    assert fit.slope_per_decade == pytest.approx(0.025, abs=1e-9)
    assert fit.intercept == pytest.approx(-0.1, abs=1e-9)
    assert fit.slope_low - 1e-9 <= 0.025 <= fit.slope_high + 1e-9
    assert 5000 < fit.zero_at <= 10000 and not fit.zero_is_extrapolated and not fit.zero_from_the_start
    assert [p.tokens_per_parameter for p in fit.points] == [10, 100, 1000, 10000]
    assert all(p.difference.diff_high < 0 for p in fit.points[:2])
    # a gain that does not change with the budget: the band never holds zero
    flat = trend(study, synthetic_budget_results(study, lambda x: -0.05, seeds=five, noise=0.001), "depth_attention",
                 "vanilla")
    assert flat.zero_at is None and flat.slope_per_decade == pytest.approx(0, abs=1e-9)
    # no gain at all: the band holds zero from the smallest budget
    none = trend(study, synthetic_budget_results(study, lambda x: 0.0, seeds=five, noise=0.01), "depth_attention",
                 "vanilla")
    assert none.zero_from_the_start
    assert trend(study, results[:10], "depth_attention", "vanilla") is None  # one budget: nothing to fit
    # a gain that reaches zero far past the data: a bound, not an extrapolated number
    short = Study.load(write_study(tmp_path, tiny_data, name="short.toml", axes=axes.replace(", d = 1000", "")))
    far = trend(short, synthetic_budget_results(short, lambda x: -0.1 + 0.027 * math.log10(x), seeds=five,
                                                noise=0.001), "depth_attention", "vanilla")
    assert far.zero_at is None and far.zero_beyond == 2000 and "beyond 2e+03" in describe_zero(far)
    # three seeds cannot carry a band: none, and the report says why
    few = trend(study, synthetic_budget_results(study, lambda x: -0.05, noise=0.001), "depth_attention", "vanilla")
    assert few.band is None and few.slope_low is None and few.zero_at is None
    assert "no band: 3 seeds" in describe_zero(few)
    text = markdown_report(study, CellStore.of(study), results)
    assert "| depth_attention − vanilla |" in text and "+0.0250 [" in text and "Epochs over the training data" in text


def test_the_budget_report_draws_the_trend_and_compares_schedules(tiny_data, tmp_path):
    from depthattn.study.report import markdown_report

    axes = WSD_BUDGETS.replace("{ short = 3, long = 6 }", '{ a = 1, b = 10, c = 100 }')
    study = Study.load(write_study(tmp_path, tiny_data, axes=axes))
    for result in synthetic_budget_results(study, lambda x: -0.1 + 0.03 * math.log10(x), noise=0.003):
        result.write(CellStore.of(study).result_path(study, result.cell))
    report = write_report(study, CellStore.of(study)).read_text()
    assert "![gains against the budget](s_trend.png)" in report and (tmp_path / "results" / "s_trend.png").exists()

    # the same settings as separate runs whose losses are 0.001 higher: the rule says they reproduce
    cosine = write_study(tmp_path, tiny_data, name="cosine.toml",
                         axes=axes.replace("branches = true", "").replace('schedule = "wsd"', 'schedule = "cosine"'))
    compared = write_study(tmp_path, tiny_data, axes=axes, name="compared.toml",
                           head='[study.compare]\nwith = "cosine.toml"\ntolerance = 0.02')
    study = Study.load(compared)
    other = Study.load(cosine)
    for result in CellStore.of(study).read_results(study):
        path = CellStore.of(other).result_path(other, result.cell)
        assert path != result.source
        dataclasses.replace(result, val_loss=result.val_loss + 0.001).write(path)
    text = markdown_report(study, CellStore.of(study))
    assert "| depth_attention | +0.0010 (n=3) |" not in text  # identical shifts: no spread, so no interval
    assert "Largest mean difference: 0.0010; intervals overlap in 3/3: **reproduces**" in text


def test_the_ladder_is_20_tokens_per_parameter_per_size_with_branches_and_priced():
    from depthattn.study.pricing import run_flops

    study = Study.load("configs/study/ladder.toml")
    runs = pending_cells(study, CellStore.of(study))
    assert study.branch_axis.name == "budget" and len(runs) == 4 * 5 * 5  # one run per size
    assert study.seeds == [0, 1, 2, 3, 4] and not study.more_seeds  # fixed in advance
    for size in study.axes[0].values:
        run = study.run_setting({"size": size, "budget": "1"}, "depth_attention")
        cost = run_flops(study, run, "depth_attention")
        assert cost["tokens"] == pytest.approx(20 * cost["params"], rel=0.01), size
        budgets = [study.cell_config(Cell(s, "vanilla", 0)).train.steps
                   for s in study.budget_settings(run, "depth_attention")]
        assert budgets == [round(f * budgets[-1]) for f in (0.05, 0.1, 0.25, 0.5, 1.0)]
        # one run with four decays costs far less than five runs
        assert 1.3 < cost["separate_flops"] / cost["flops"] < 2
        # vanilla alone goes on to 30, so that a multiplier at 20 reads its measured curve
        longest = study.run_setting({"size": size, "budget": "1"}, "vanilla")
        assert longest["budget"] == "30"
        assert run_flops(study, longest, "vanilla")["tokens"] == pytest.approx(30 * cost["params"], rel=0.01)
    smoke = Study.load("configs/study/ladder_smoke.toml")
    assert [smoke.cell_config(Cell(s, "moda", 0)).train.steps for s in smoke.budget_settings(
        {"size": "8x256", "budget": "whole"}, "moda")] == [75, 150, 300]


@pytest.mark.parametrize("damage, message", [
    (lambda text: text[: len(text) // 2], "is not valid JSON"),  # cut short
    (lambda text: "", "is empty"),
    (lambda text: json.dumps({"method": "vanilla", "val_loss": None}), "seed, val_loss missing"),  # another schema
    (lambda text: "[1, 2]", "holds a JSON list, not an object"),
])
def test_a_damaged_result_is_named_left_out_of_reports_and_trained_again(tiny_data, tmp_path, capsys, damage,
                                                                         message):
    study = Study.load(write_study(tmp_path, tiny_data, seeds=[0]))
    run_study(study, CellStore.of(study))
    path = CellStore.of(study).result_path(study, Cell({}, "vanilla", 0))
    whole = json.loads(path.read_text())
    path.write_text(damage(path.read_text()))
    capsys.readouterr()

    write_report(study, CellStore.of(study))  # --report-only: named, left out, the rest reported
    err = capsys.readouterr().err
    assert str(path) in err and message in err and "left out as missing" in err
    assert [r.method for r in CellStore.of(study).read_results(study)] == ["depth_attention"]
    assert pending_cells(study, CellStore.of(study)) == [Cell({}, "vanilla", 0)]

    # a run sets it aside, says so, and trains the cell again (resumed: the same numbers)
    run_study(study, CellStore.of(study))
    err = capsys.readouterr().err
    assert f"moved aside to {path}.damaged; the cell trains again" in err
    assert json.loads(path.read_text())["val_loss"] == whole["val_loss"]
    assert (path.parent / (path.name + ".damaged")).exists()


def test_pricing_a_slurm_study_needs_no_slurm(tiny_data, tmp_path, capsys, monkeypatch):
    from depthattn.commands.study import add_arguments, run
    from depthattn.study import slurm

    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)  # off a cluster
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    study = write_study(tmp_path, tiny_data)
    assert run(parser.parse_args([str(study), "--executor", "slurm", "--dry-run"])) == 0
    out = capsys.readouterr().out
    assert "4 cells would run, as a Slurm job array" in out and "sbatch: " in out and "GPU-hours" in out
    with pytest.raises(RuntimeError, match="needs sbatch and squeue on PATH"):
        run(parser.parse_args([str(study), "--executor", "slurm", "--status"]))


def test_several_workers_print_log_lines_not_progress_bars(tiny_data, tmp_path, capfd):
    """Bars of two processes in one terminal overwrite each other and run the other's notes into their lines."""
    path = write_study(tmp_path, tiny_data, seeds=[0])
    path.write_text(path.read_text().replace("progress = false", "progress = true\nlog_every = 1"))
    study = Study.load(path)
    assert study.cell_config(Cell({}, "vanilla", 0)).train.progress
    capfd.readouterr()
    run_study(study, CellStore.of(study), LocalExecutor(workers=2))
    out, err = capfd.readouterr()
    assert "\r" not in err and "step/s" not in err  # no bar
    lines = out.splitlines()
    for method in ("vanilla", "depth_attention"):
        assert sum(line.startswith(f"{method} step ") for line in lines) == 3, out  # one whole line per step
        assert any(line.startswith(f"{method}: ") and line.endswith("process(es) on cpu") for line in lines), out
    result = CellStore.of(study).read_result(study, Cell({}, "vanilla", 0))
    assert result.record["config"]["train"]["progress"]  # as the study says


def test_workers_start_from_a_process_whose_openmp_threads_ran(tiny_data, tmp_path):
    """A forked worker of such a process (a notebook that trained, a test session) hung in its first OpenMP parallel
    region (GNU libgomp is not fork-safe); the pool's workers are spawned. In a child process, so that a hang fails
    the test by its timeout rather than hanging the suite."""
    path = write_study(tmp_path, tiny_data, seeds=[0])
    script = f"""
import torch
from depthattn.study import Study, run_study
from depthattn.study.local import LocalExecutor
from depthattn.study.store import CellStore
torch.set_num_threads(2)
q = torch.randn(4, 2, 256, 32)
torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)  # this process's OpenMP threads start
study = Study.load({str(path)!r})
run_study(study, CellStore.of(study), LocalExecutor(workers=2, threads=2))
print(len(CellStore.of(study).read_results(study)))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, ["src", os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "2", done.stderr[-3000:]


def _started(plan):
    """A file in the study's out_dir (above <key>/<method>/seed_<s>) saying that the cell started."""
    marker = Path(plan.config.train.out_dir).parents[2] / f"{plan.cell.method}-{plan.cell.seed}"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("started")


def _slow_cell(plan, threads=None):
    import time

    _started(plan)
    time.sleep(2)
    return CellResult(plan.cell.method, plan.cell.seed, 1.0, {"seconds": 2.0})


def test_sigterm_stops_a_study_of_several_workers_without_starting_queued_cells(tiny_data, tmp_path):
    """SIGTERM to the main process alone: passed on to the running cells, no queued cell starts."""
    import os
    import signal
    import threading
    import time

    study = Study.load(write_study(tmp_path, tiny_data, seeds=[0, 1, 2, 3]))
    cells, before = pending_cells(study, CellStore.of(study)), signal.getsignal(signal.SIGTERM)
    def signal_once_a_cell_runs():
        while not list(Path(study.out_dir).glob("*-*")):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=signal_once_a_cell_runs, daemon=True).start()
    with pytest.raises(KeyboardInterrupt, match="stopped by SIGTERM"):  # the spawned workers import _slow_cell
        LocalExecutor(workers=2).run(study.name, [plan_cell(study, CellStore.of(study), cell) for cell in cells],
                                     _slow_cell)
    started = list(Path(study.out_dir).glob("*-*"))
    assert 1 <= len(started) < len(cells) == 8  # the running cells stop; the queued ones never start
    assert signal.getsignal(signal.SIGTERM) == before  # the study's handler lasts only while its pool runs



def test_a_signal_while_the_workers_start_stops_the_study_cleanly(tiny_data, tmp_path):
    """Spawned workers take seconds to start; a signal passed on meanwhile waits for their handlers (it killed them,
    breaking the pool)."""
    import os
    import signal
    import threading

    study = Study.load(write_study(tmp_path, tiny_data, seeds=[0, 1]))
    plans = [plan_cell(study, CellStore.of(study), cell) for cell in pending_cells(study, CellStore.of(study))]
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
    with pytest.raises(KeyboardInterrupt, match="stopped by SIGTERM"):
        LocalExecutor(workers=2).run(study.name, plans, _slow_cell)
    assert not list(Path(study.out_dir).glob("*-*"))  # no cell started


def _slow_cell_stopped_by_sigterm(plan, threads=None):
    """A cell that, as train() does, turns SIGTERM into a KeyboardInterrupt and stops."""
    import signal
    import time

    def stop(signum, frame):
        raise KeyboardInterrupt("stopped")

    _started(plan)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        time.sleep(30)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return CellResult(plan.cell.method, plan.cell.seed, 1.0, {"seconds": 30.0})


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the pool's workers in /proc")
def test_sigterm_to_every_process_starts_no_queued_cell(tiny_data, tmp_path):
    """As `kill -- -PGID` or a scheduler does: the study and its workers each get SIGTERM. The running cells stop;
    the cell the pool had already handed a worker (it queues one ahead) must not start."""
    import os
    import signal
    import threading
    import time

    study = Study.load(write_study(tmp_path, tiny_data, seeds=[0, 1, 2, 3]))
    cells, started = pending_cells(study, CellStore.of(study)), Path(study.out_dir)

    def signal_everyone():
        while len(list(started.glob("*-*"))) < 2:  # both workers are in a cell
            time.sleep(0.05)
        children = [int(stat.split()[0]) for stat in (Path(f"/proc/{pid}/stat").read_text()
                                                      for pid in os.listdir("/proc") if pid.isdigit()
                                                      if Path(f"/proc/{pid}/stat").exists())
                    if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid()]
        signalled.append(time.monotonic())
        for pid in children:
            os.kill(pid, signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)

    signalled: list[float] = []
    threading.Thread(target=signal_everyone, daemon=True).start()
    with pytest.raises(KeyboardInterrupt, match="stopped by SIGTERM"):
        LocalExecutor(workers=2).run(study.name, [plan_cell(study, CellStore.of(study), cell) for cell in cells],
                                     _slow_cell_stopped_by_sigterm)
    # nothing queued ran, and the running cells stopped well before their 30 s (timed from the signal: a loaded
    # machine's workers take a while to start)
    assert len(list(started.glob("*-*"))) == 2 and time.monotonic() - signalled[0] < 25


def test_a_cell_plan_holds_the_run_and_its_budgets_and_pickles(tmp_path):
    """What an executor hands a pool worker or a Slurm job: computed from the study once, whole after pickling."""
    study = Study.load(write_study(tmp_path, "data", axes=WSD_BUDGETS, methods=["vanilla"], seeds=[0]),
                       out_dir=str(tmp_path / "elsewhere"))
    run = pending_cells(study, CellStore.of(study))[0]
    plan = plan_cell(study, CellStore.of(study), run)
    assert plan.config == study.cell_config(run) and plan.path == study.cell_path(run) and plan.branched
    assert [budget.config.train.steps for budget in plan.budgets] == [3, 6]
    assert plan.config.train.out_dir == str(tmp_path / "elsewhere" / plan.path)
    assert pickle.loads(pickle.dumps(plan)) == plan


def test_an_unknown_model_override_or_a_misspelled_method_is_refused_with_a_suggestion(tmp_path):
    study = write_study(tmp_path, "data")
    study.write_text(study.read_text().replace("num_hidden_layers = 2", "n_layers = 2"))
    with pytest.raises(ValueError, match="unknown key 'n_layers' \\(did you mean 'num_hidden_layers'\\?\\)"):
        Study.load(study)
    with pytest.raises(ValueError, match="'depth_atention' is not a preset \\(did you mean 'depth_attention'\\?\\)"):
        Study.load(write_study(tmp_path, "data", methods=("vanilla", "depth_atention")))


def test_a_cell_another_process_trains_is_skipped_and_the_study_is_not_done(tiny_data, tmp_path, capsys):
    """The same study started twice (two terminals): the second skips the cell the first holds, trains the others and
    says the study is not done; run again once the first has ended, it trains the skipped cell."""
    from concurrent.futures import Future

    from depthattn.files import FolderHeld
    from depthattn.study.local import _outcome

    study = Study.load(write_study(tmp_path, tiny_data, seeds=[0]))
    store = CellStore.of(study)
    held_folder = Path(plan_cell(study, store, Cell({}, "vanilla", 0)).config.train.out_dir)
    held_folder.mkdir(parents=True)
    hold = ("import fcntl, os, sys, time; fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(held_folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert run_study(study, store) is False
        # a cell of several processes too: seen before the launch, not as rank 0's error through torch's agent
        assert run_study(study, store, LocalExecutor(tasks_per_cell=2)) is False
    finally:
        holder.kill()
        holder.wait()
    out = capsys.readouterr().out
    assert out.count(f"vanilla seed 0: skipped: another process is training it (it holds {held_folder};") == 2, out
    assert [cell.method for cell in pending_cells(study, store)] == ["vanilla"]
    assert run_study(study, store) is True and not pending_cells(study, store)

    # several workers: the worker's error comes back through its future, pickled
    future: Future = Future()
    held = FolderHeld("another process is writing into x")
    held.folder = held_folder
    future.set_exception(pickle.loads(pickle.dumps(held)))
    assert isinstance(returned := _outcome(future), FolderHeld) and returned.folder == held_folder


def test_a_diverged_run_is_recorded_as_run_listed_and_ranked_below_every_rate_that_finished(short_data, tmp_path,
                                                                                             capsys):
    """A learning-rate sweep whose highest rate diverges finishes: the diverged budgets are recorded (no loss), not
    trained again, listed by --status and the page, and never averaged."""
    from depthattn.commands.study import add_arguments, run

    axes = WSD_BUDGETS + '[axes.lr]\nkey = "optim.lr"\nvalues = { low = 1e-3, huge = 1e3 }\n'
    path = write_study(tmp_path, short_data, axes=axes, methods=["vanilla"], seeds=[0])
    study = Study.load(path)
    store = CellStore.of(study)
    assert run_study(study, store) is True  # the study goes on past the diverged run
    out = capsys.readouterr().out
    assert "budget=long,lr=huge vanilla seed 0: diverged: the " in out and " at step " in out

    cell = {label: Cell({"lr": "huge", "budget": label}, "vanilla", 0) for label in ("short", "long")}
    assert store.has_diverged(study, cell["long"]) and not store.has_result(study, cell["long"])
    record = json.loads(store.diverged_path(study.cell_path(cell["long"])).read_text())
    assert record["config"]["optim"]["lr"] == 1e3 and "at step" in record["diverged"]
    assert all(store.has_result(study, Cell({"lr": "low", "budget": b}, "vanilla", 0)) for b in ("short", "long"))
    assert pending_cells(study, store) == []
    assert [r.val_loss for r in store.read_diverged(study)] == [math.inf] * len(store.read_diverged(study))
    assert all(math.isfinite(r.val_loss) for r in store.read_results(study))

    run_study(study, store)  # nothing trains again
    assert "cells to run" not in capsys.readouterr().out
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args([str(path), "--status"])) == 0
    assert f"diverged  {study.cell_path(cell['long'])} (the " in capsys.readouterr().out
    page = markdown_report(study, store)
    assert "**Diverged**: " in page and "budget=long,lr=huge vanilla seed 0 (the " in page
    assert "**Interim**" not in page  # every cell ran

    store.diverged_path(study.cell_path(cell["long"])).unlink()  # deleting the record trains the cell again
    assert pending_cells(study, store) == [cell["long"]]
