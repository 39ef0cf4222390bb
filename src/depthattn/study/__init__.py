"""Studies: sweeps of methods x seeds over model, data and budget axes, with paired statistics.

A study config (configs/study/*.toml) holds:

    [study]                       title, methods, seeds, baseline (by default the first method); optionally
                                  more_seeds (run where a difference's 95% interval still spans zero),
                                  contrasts (extra method pairs [[a, b], ...], each a − b paired by seed),
                                  paper (a table of the paper's numbers per method, shown beside ours) and
                                  describe (method = what it changes, a column of the report)
    [axes.NAME]                   key = a training-config key ("model.overrides.num_hidden_layers", "data.path",
                                  "train.steps", ...); values = a list, or a table {label = value}; without
                                  key, values = {label = {"section.key" = value, ...}}: each label sets several
                                  keys (settings that each change something else from the base). A table value
                                  merges into the base's; axes apply in order; no two settings may train the
                                  same cells, and the methods and seeds are the study's alone
    [study.search]                a pre-registered search among the study's methods: candidates, metric,
                                  seeds and pick (how many go on); the rule is fixed here: the `pick` candidates
                                  with the lowest mean metric over those seeds, once all their cells are in
    [study.confirm]               from = another study config with a [study.search]; its picks join this study's
                                  methods once the search is complete, each contrasted with `against`
    [datasets.NAME]               a dataset the study prepares when its folder is missing: path, vocab_size
                                  (258 = plain bytes: no merges), input (what `depthattn prepare --input` takes;
                                  the embedded corpus by default), sha256 (of the text wikipedia or linux-doc
                                  reads, so another build of it is refused); a folder prepared otherwise is refused
    [base.SECTION]                the training config every cell starts from
    [slurm]                       how `--executor slurm` submits cells: partition, account, qos, time,
                                  gpus_per_cell, tasks_per_cell, cpus_per_task, mem, array_parallelism,
                                  sbatch (any other option), setup (shell lines); see study/slurm.py
    extends = "core.toml"         (in [study]) take another study's [base], [datasets] and [slurm] (with those
                                  of the studies it extends), then apply this file's

A setting is one combination of axis values; a cell (`Cell`) is a setting, a method and a seed. Cells with the
same setting and seed share the data order and the backbone's initial weights, so differences are paired by seed.

A cell is stored under a key made from its training config (a hash of everything but the method and seed):
checkpoints in `runs/study/<key>/<method>/seed_<s>/`, the small result file in
`docs/results/study/cells/<key>/<method>/seed_<s>.json` (commit these). So studies that share a cell train it
once, a changed config gets a new key instead of a stale result, a cell whose result file exists is never
rerun, and an interrupted one resumes from its last checkpoint.

A study's spec (study/spec.py) reads no results: a confirmation's picks join it through `with_picks`
(study/picks.py). Cells run through an executor (`runner.Executor`), each handed its plan (study/plan.py: config,
paths, budgets): local processes (study/local.py) or a Slurm job array (study/slurm.py); study/wanted.py says which
cells are still wanted. A cell's result file is read and written as a `CellResult` (study/records.py) through a
`CellStore` (study/store.py) that the caller hands in (`CellStore.of(study)`: the study's results folder); the
reports read those, and their own imports reach no trainer. The index page over several studies (`--index`) takes
its title and columns from study/index.toml.
"""

from ..lazy import lazy_names
from .picks import with_picks
from .records import Cell, CellResult
from .render.numbers import format_interval
from .report import IndexPage, markdown_report, report_study, setting_differences, write_index, write_report
from .spec import Axis, Search, Study, cell_key, setting_label
from .stats import paired_difference, summarize, verdict
from .store import CellStore
from .wanted import pending_cells, uncertain_cells

_LAZY = {  # what runs cells (and so imports the trainer) or plots mixing maps loads at its first use
    "Executor": "runner",
    "explain": "mixing_maps",
    "run_cell": "cell",
    "run_study": "runner",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
__all__ = [
    "Axis", "Cell", "CellResult", "CellStore", "IndexPage", "Search", "Study", "cell_key", "format_interval",
    "markdown_report", "paired_difference", "pending_cells", "report_study", "setting_differences", "setting_label",
    "summarize",
    "uncertain_cells", "verdict", "with_picks", "write_index", "write_report", *sorted(_LAZY),
]
