"""One cell of a study: train (or resume) one method with one seed, score it, write its result file. Every executor
runs cells through `run_cell`, so a cell is the same wherever it trained."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch

from ..data import MANIFEST_NAME, prepare
from ..data.manifest import TOKENIZER_DIR
from ..data.shards import TokenShards
from ..data.tokenizer import load_tokenizer
from ..evaluate.perplexity import compute_perplexity
from ..files import read_json_object
from ..loading import load_model, run_metadata
from ..methods import count_parameters
from ..run_metrics import METRICS_FILE, read_metrics
from ..train import train
from ..train.branches import RECORD as BRANCHES
from ..train.branches import branch_folder
from ..train.checkpoint import STEP_DIR, list_checkpoints, newest_good_checkpoint
from .records import Cell, CellResult
from .spec import Study

# False in a local pool's workers (study/local.py): several processes share one terminal, where their progress
# bars would overwrite each other and run the other workers' notes into their lines; they print log lines instead
PROGRESS_BARS = True


def ensure_dataset(study: Study, path: str) -> None:
    if (Path(path) / MANIFEST_NAME).exists():
        return
    if path not in study.datasets:
        raise FileNotFoundError(f"{path} holds no prepared data; run depthattn prepare --out {path}, or declare it "
                                f"under [datasets.NAME] in the study config so the study prepares it")
    settings = dict(study.datasets[path])
    source = settings.pop("input")
    print(f"preparing {source} into {path} ({settings})")
    prepare([source], Path(path), **settings)


def run_cell(study: Study, cell: Cell, threads: int | None = None, bars: bool | None = None) -> CellResult | None:
    """Train (or resume) one cell, score the whole validation split, and write the cell's result file. With a
    branched budget axis the cell is the run of its longest budget, and it writes the result of every budget
    still missing as its branch finishes.

    Under torch.distributed (torchrun, a Slurm job of several tasks) every process trains its share of each
    global batch, the study's `train.batch_size` split over the world (the executor has checked that it divides:
    `check_split`); the first process then scores and writes the results, which record the world size, and the
    others return None. `bars`: whether train.progress may draw its bar (default: PROGRESS_BARS)."""
    budgets = [Cell(setting, cell.method, cell.seed) for setting in study.budget_settings(cell.setting, cell.method)]
    budgets = [budget for budget in budgets if not study.has_result(budget)]
    if not budgets:
        return study.read_result(cell)
    if threads:
        torch.set_num_threads(threads)
    cfg = study.cell_config(cell)
    world_size, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    cfg.train.batch_size //= world_size  # per process; the global batch stays the study's
    cfg.train.progress &= PROGRESS_BARS if bars is None else bars  # not in the cell key, nor in its result
    started = time.perf_counter()
    if study.branch_axis:
        for budget in late_budgets(study, cell, budgets):
            budgets.remove(budget)
            alone = study.cell_config(budget)
            alone.train.batch_size, alone.train.progress = cfg.train.batch_size, cfg.train.progress
            if rank == 0:
                print(f"{budget.label}: {cfg.train.out_dir} is past where this budget's branch would leave it, "
                      "so it trains as a run of its own (a branch equals one)", flush=True)
            train(alone, resume=True)
            if rank == 0:
                write_result(study, budget, Path(alone.train.out_dir), Path(alone.train.out_dir), started, world_size)
        if not budgets:
            return study.read_result(cell) if rank == 0 else None
        cfg.train.branch_steps = [study.cell_config(budget).train.steps for budget in budgets]
    by_steps = {study.cell_config(budget).train.steps: budget for budget in budgets}

    def write(steps: int, folder: Path):
        if rank == 0 and steps in by_steps:
            write_result(study, by_steps[steps], folder, Path(cfg.train.out_dir), started, world_size)

    train(cfg, resume=True, on_budget=write)
    if rank:
        return None
    run = Path(cfg.train.out_dir)
    # each budget was written as it finished; one recorded by an earlier, interrupted process is written here
    recorded = read_json_object(run / BRANCHES) if study.branch_axis else {str(cfg.train.steps): {"folder": "."}}
    for steps, budget in by_steps.items():
        if not study.has_result(budget):
            write(steps, run / recorded[str(steps)]["folder"])
    return study.read_result(cell)


def late_budgets(study: Study, cell: Cell, budgets: list[Cell]) -> list[Cell]:
    """The budgets among `budgets` (cells still to train, of the run of `cell`) whose cooldown branch that run can no
    longer train: the run is past the step where the branch would leave it (a budget added to a sweep after its
    runs went by) and the branch was never started. Each trains as a WSD run of its own, which a branch equals."""
    run = Path(study.cell_config(cell).train.out_dir)
    newest = newest_good_checkpoint(run)
    if newest is None:
        return []
    reached = int(STEP_DIR.match(newest.name)[1])
    recorded = read_json_object(run / BRANCHES) if (run / BRANCHES).exists() else {}
    late = []
    for budget in budgets:
        config = study.cell_config(budget)
        steps = config.train.steps
        if (budget != cell and str(steps) not in recorded and config.optim.decay_start(steps) < reached
                and not list_checkpoints(branch_folder(run, steps))):
            late.append(budget)
    return late


def write_result(study: Study, cell: Cell, folder: Path, run: Path, started: float, world_size: int) -> CellResult:
    """Score the model in `folder` (trained for the cell's setting: the run in `run`, or a branch of it) on the
    whole validation split, and write the cell's result file."""
    cfg = study.cell_config(cell)
    records = read_metrics(folder / METRICS_FILE)
    if folder != run:  # a branch: the run's records up to where it branched off, then its own
        records = [r for r in read_metrics(run / METRICS_FILE) if r["step"] < records[0]["step"]] + records
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_model(folder / "final", device=device)
    val = TokenShards(cfg.data.path, "val")
    scored = compute_perplexity(model, val, block_size=cfg.data.seq_len,
                                tokenizer=load_tokenizer(Path(cfg.data.path) / TOKENIZER_DIR), documents=True)
    config = cfg.to_dict()
    config["train"].pop("out_dir")  # where this machine keeps the checkpoints: not part of the result
    trunk = Cell(study.run_setting(cell.setting, cell.method), cell.method, cell.seed)  # the run a branch left
    result = CellResult(cell.method, cell.seed, scored["loss"], {
        "val_bits_per_byte": scored["bits_per_byte"],
        "val_tokens": scored["tokens"], "val_bytes": scored["bytes"],
        # each held-out document's nats and scored tokens, in the split's order: intervals resample documents too
        "val_documents": {"nats": [round(n, 5) for n in scored["document_nats"]],
                          "tokens": scored["document_tokens"]},
        "train_tokens": records[-1]["tokens"], "final_train_loss": records[-1]["loss"],
        "data_epochs": records[-1]["tokens"] / len(TokenShards(cfg.data.path, "train", verify=False)),
        "curve": [[r["tokens"], r["val_loss"]] for r in records if "val_loss" in r],  # eval-subset loss
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in records if "tokens_per_s" in r),
        **{f"params_{k}": v for k, v in count_parameters(model).items()},
        "seconds": time.perf_counter() - started, "threads": torch.get_num_threads(),
        **({"world_size": world_size, "parallel": cfg.train.parallel} if world_size > 1 else {}),
        **({"branched_from_steps": study.cell_config(trunk).train.steps} if folder != run else {}),
        "device": device, "config": config, **run_metadata(),
    })
    study.store.write(study.cell_path(cell), result)
    return result


def check_split(study: Study, cells: list[Cell], tasks: int) -> None:
    """A cell of `tasks` processes splits each batch over them: the study's batch size must divide. Executors check
    every cell once, before any starts."""
    for cell in cells:
        batch = study.cell_config(cell).train.batch_size
        if batch % tasks:
            raise ValueError(f"a cell of {tasks} processes splits train.batch_size ({batch}) over them: pick a number "
                             "of tasks that divides it")


def train_start(study: Study, seed: int, threads: int | None = None) -> None:
    """Train (or resume) the model a retrofitting study's cells of `seed` start from, unless it is there: its
    result may be committed while its checkpoints, never committed, are on another machine."""
    cfg = study.start_config(seed)
    cfg.train.progress &= PROGRESS_BARS
    if not study.start_ready(seed):
        if threads:
            torch.set_num_threads(threads)
        train(cfg, resume=True)
