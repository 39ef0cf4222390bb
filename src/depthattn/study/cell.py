"""One cell of a study: train (or resume) one method with one seed, score it, write its result file. Every executor
runs cells through `run_cell`, so a cell is the same wherever it trained."""

from __future__ import annotations

import copy
import os
import re
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from ..data import MANIFEST_NAME, prepare
from ..data.manifest import TOKENIZER_DIR
from ..data.prepare import DEFAULT_SEED, DEFAULT_VAL_FRACTION
from ..data.shards import TokenShards
from ..data.sources import HF_PREFIX, NAMED_INPUTS, resolve_sources, source_files
from ..data.tokenizer import load_tokenizer
from ..evaluate.perplexity import compute_perplexity
from ..files import read_json_object
from ..loading import load_model, run_metadata
from ..methods import count_parameters
from ..run_metrics import METRICS_FILE, read_metrics
from ..train import train
from ..train.branches import RECORD as BRANCHES
from ..train.branches import branch_folder
from ..train.checkpoint import checkpoint_step, list_checkpoints, newest_good_checkpoint
from ..train.config import TrainConfig
from ..train.step import TrainingDiverged
from .plan import Budget, CellPlan, StartPlan
from .records import CellResult
from .spec import Study

# False in a local pool's workers (study/local.py): several processes share one terminal, where their progress
# bars would overwrite each other and run the other workers' notes into their lines; they print log lines instead
PROGRESS_BARS = True


def ensure_dataset(study: Study, path: str) -> None:
    """Prepare the data at `path` as the study's [datasets.*] declares it, unless it is there; data there that a
    declaration describes otherwise is an error (cell keys hold the path alone, so old cells would pass as new)."""
    manifest_path = Path(path) / MANIFEST_NAME
    if manifest_path.exists():
        if path in study.datasets:
            check_prepared_as_declared(path, read_json_object(manifest_path), study.datasets[path])
        return
    if path not in study.datasets:
        raise FileNotFoundError(f"{path} holds no prepared data; run depthattn prepare --input TEXT --out {path}, or "
                                "declare it under [datasets.NAME] in the study config so the study prepares it")
    settings = dict(study.datasets[path])
    source, sha256 = settings.pop("input"), settings.pop("sha256", None)
    if sha256:  # before hours of preparing, and without a folder to clean up
        records = source_files(resolve_sources([source]), DEFAULT_SEED, DEFAULT_VAL_FRACTION)
        if records[0]["sha256"] != sha256:
            raise ValueError(f"the input {source!r} read here ({records[0]['attribution']}) has sha256 "
                             f"{records[0]['sha256']}, but the study's [datasets.*] declares {sha256}: its cells "
                             "would mix two texts. Install the text the study config names (its comments say which "
                             "version) and run again; for a study of this text, give the declaration a path and "
                             "sha256 of its own")
    print(f"preparing {source} into {path} ({settings})")
    prepare([source], Path(path), **settings)


def _source_sha256(manifest: dict) -> str | None:
    """The sha256 of the text a checked input read (the manifest's source_files; None where it read none)."""
    return next((record["sha256"] for record in manifest.get("source_files", [])), None)


def _source_origin(manifest: dict) -> str:
    return next((record["attribution"] for record in manifest.get("source_files", [])), "no checked source")


def prepared_from(sources: list[str], declared: str) -> bool:
    """Whether a manifest's `sources` came from the input `declared`: a named corpus by its name, a file or folder
    by its path (the manifest lists a folder's files, each path as prepare wrote it: "./a.txt" becomes "a.txt")."""
    if declared in NAMED_INPUTS or declared.startswith(HF_PREFIX):
        return sources == [declared]
    return bool(sources) and all(Path(source).is_relative_to(Path(declared)) for source in sources)


def check_prepared_as_declared(path: str, manifest: dict, declared: dict) -> None:
    sources = manifest.get("source", [])
    prepared: dict[str, str | int | None] = {"input": ", ".join(sources), "vocab_size": None}
    if prepared_from(sources, declared["input"]):
        prepared["input"] = declared["input"]
    tokenizer = manifest.get("tokenizer", {})
    # a tokenizer prepare trained (not one it was given); manifests before vocab_size_requested say it in the origin
    requested = tokenizer.get("vocab_size_requested") or next(
        (int(n) for n in re.findall(r"vocab_size (\d+) requested", tokenizer.get("origin", ""))), None)
    if requested:
        prepared["vocab_size"] = requested
    differ = [key for key in ("input", "vocab_size") if prepared[key] is not None and prepared[key] != declared[key]]
    if differ:
        said = ", ".join(f"{key} {prepared[key]!r}" for key in differ)
        wanted = ", ".join(f"{key} {declared[key]!r}" for key in differ)
        raise ValueError(f"{path} was prepared with {said}, but the study's [datasets.*] declares {wanted}: its "
                         "cells would pass for the declared data's; give the declaration a path of its own, or delete "
                         f"{path} so that the study prepares it again")
    if declared.get("sha256") and _source_sha256(manifest) != declared["sha256"]:
        raise ValueError(f"{path} was prepared from a text with sha256 {_source_sha256(manifest)} "
                         f"({_source_origin(manifest)}), but the study's [datasets.*] declares {declared['sha256']}: "
                         f"its cells would pass for the declared text's; install the text the study config names and "
                         f"delete {path} so that the study prepares it again")


def run_cell(plan: CellPlan, threads: int | None = None, bars: bool | None = None) -> CellResult | None:
    """Train (or resume) one cell, score the whole validation split, and write the cell's result file. With a
    branched budget axis the cell is the run of its longest budget, and it writes the result of every budget
    still missing as its branch finishes.

    Under torch.distributed (torchrun, a Slurm job of several tasks) every process trains its share of each
    global batch, the study's `train.batch_size` split over the world (the executor has checked that it divides:
    `check_split`); the first process then scores and writes the results, which record the world size, and the
    others return None. `bars`: whether train.progress may draw its bar (default: PROGRESS_BARS)."""
    budgets = [budget for budget in plan.budgets if not plan.settled(budget)]
    if not budgets:
        return plan.read_result()
    if threads:
        torch.set_num_threads(threads)
    cfg = copy.deepcopy(plan.config)  # the plan stays as it was planned
    world_size, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    cfg.train.batch_size //= world_size  # per process; the global batch stays the study's
    cfg.train.progress &= PROGRESS_BARS if bars is None else bars  # not in the cell key, nor in its result
    started = time.perf_counter()
    if plan.branched:
        budgets = _train_late_budgets_alone(plan, budgets, cfg, started, world_size, rank)
        if not budgets:
            return plan.read_result() if rank == 0 else None
        cfg.train.branch_steps = [budget.config.train.steps for budget in budgets]
    by_steps = {budget.config.train.steps: budget for budget in budgets}

    def write(steps: int, folder: Path):
        if rank == 0 and steps in by_steps:
            write_result(plan, by_steps[steps], folder, Path(cfg.train.out_dir), started, world_size)

    try:
        train(cfg, resume=True, on_budget=write)
    except TrainingDiverged as error:  # every budget the run (or the branch that diverged) had not written
        record_diverged(plan, [budget for budget in budgets if not plan.has_result(budget)], error, rank)
        return plan.read_result() if rank == 0 else None
    if rank:
        return None
    run = Path(cfg.train.out_dir)
    # each budget was written as it finished; one recorded by an earlier, interrupted process is written here
    recorded = read_json_object(run / BRANCHES) if plan.branched else {str(cfg.train.steps): {"folder": "."}}
    for steps, budget in by_steps.items():
        if not plan.has_result(budget):
            write(steps, run / recorded[str(steps)]["folder"])
    return plan.read_result()


def skipped_note(folder: Path) -> str:
    """What a study says of a cell whose run folder another process holds."""
    return (f"skipped: another process is training it (it holds {folder}; the same study started twice?): run the "
            "study again once that process has ended")


def record_diverged(plan: CellPlan, budgets: list[Budget], error: TrainingDiverged, rank: int) -> None:
    """Record `budgets` of `plan`'s run as diverged (by the first process): the run stopped with `error` before it
    wrote their results. They count as run: the study goes on, its reports list them, and a learning-rate sweep's
    tuning ranks them below every finished run."""
    if rank or not budgets:
        return
    reason = str(error).split(";")[0]  # the problem and its step; the advice that follows is a single run's
    print(f"{plan.label}: diverged: {reason}; recorded for {', '.join(b.cell.label for b in budgets)} (delete "
          f"{plan.store.diverged_path(budgets[0].path).name} beside its result files to train it again)", flush=True)
    for budget in budgets:
        config = budget.config.to_dict()
        config["train"].pop("out_dir")
        plan.store.write_diverged(budget.path, budget.cell, reason, config)


def _train_late_budgets_alone(plan: CellPlan, budgets: list[Budget], cfg: TrainConfig, started: float,
                              world_size: int, rank: int) -> list[Budget]:
    """Train each of `budgets` whose branch the run is past (`late_budgets`) as a run of its own; the rest, to
    train as branches of the run."""
    late = late_budgets(plan, budgets)
    for budget in late:
        try:
            _train_alone(plan, budget, cfg, started, world_size, rank)
        except TrainingDiverged as error:  # a run of its own: only its budget
            record_diverged(plan, [budget], error, rank)
    return [budget for budget in budgets if budget not in late]


def _train_alone(plan: CellPlan, budget: Budget, cfg: TrainConfig, started: float, world_size: int, rank: int):
    """Train a budget whose branch the run `cfg` is past as a WSD run of its own, and write its result."""
    alone = copy.deepcopy(budget.config)
    alone.train.batch_size, alone.train.progress = cfg.train.batch_size, cfg.train.progress
    if rank == 0:
        print(f"{budget.cell.label}: {cfg.train.out_dir} is past where this budget's branch would leave it, "
              "so it trains as a run of its own (a branch equals one)", flush=True)
    train(alone, resume=True)
    if rank == 0:
        write_result(plan, budget, Path(alone.train.out_dir), Path(alone.train.out_dir), started, world_size)


def late_budgets(plan: CellPlan, budgets: list[Budget]) -> list[Budget]:
    """The budgets among `budgets` (still to train, of the run of `plan`) whose cooldown branch that run can no
    longer train: the run is past the step where the branch would leave it (a budget added to a sweep after its
    runs went by) and the branch was never started. Each trains as a WSD run of its own, which a branch equals."""
    run = Path(plan.config.train.out_dir)
    newest = newest_good_checkpoint(run)
    if newest is None:
        return []
    reached = checkpoint_step(newest)
    recorded = read_json_object(run / BRANCHES) if (run / BRANCHES).exists() else {}
    late = []
    for budget in budgets:
        steps = budget.config.train.steps
        if (budget.cell != plan.cell and str(steps) not in recorded and budget.config.optim.decay_start(steps) < reached
                and not list_checkpoints(branch_folder(run, steps))):
            late.append(budget)
    return late


def write_result(plan: CellPlan, budget: Budget, folder: Path, run: Path, started: float,
                 world_size: int) -> CellResult:
    """Score the model in `folder` (trained for `budget`: the run in `run`, or a branch of it) on the whole
    validation split, and write the budget's result file."""
    cfg = budget.config
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
    cell = budget.cell
    trunk = plan.budgets[-1]  # the run a branch left: the longest budget the method trains
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
        **({"branched_from_steps": trunk.config.train.steps} if folder != run else {}),
        "device": device, "config": config, **run_metadata(),
    })
    plan.store.write(budget.path, result)
    return result


def check_split(plans: Sequence[CellPlan | StartPlan], tasks: int) -> None:
    """A cell of `tasks` processes splits each batch over them: the study's batch size must divide. Executors check
    every cell once, before any starts."""
    for plan in plans:
        batch = plan.config.train.batch_size
        if batch % tasks:
            raise ValueError(f"a cell of {tasks} processes splits train.batch_size ({batch}) over them: pick a number "
                             "of tasks that divides it")


def train_start(start: StartPlan, threads: int | None = None) -> None:
    """Train (or resume) the model a retrofitting study's cells of one seed start from, unless it is there: its
    result may be committed while its checkpoints, never committed, are on another machine."""
    cfg = copy.deepcopy(start.config)
    cfg.train.progress &= PROGRESS_BARS
    if not start.ready():
        if threads:
            torch.set_num_threads(threads)
        train(cfg, resume=True)
