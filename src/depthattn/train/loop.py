"""The training loop: build the model, then for each step train, maybe evaluate, log, maybe checkpoint; then export.

The parts live beside it: step.py (one step, the validation loss, divergence), metrics.py (metrics.jsonl, the
progress bar, log lines) and checkpoint.py (resume, checkpoints, the final model folder). `depthattn train` is
add_arguments and run at the end.
"""

from __future__ import annotations

import math
import sys
from contextlib import nullcontext
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

from .. import DepthAttentionForCausalLM
from ..convert import load_backbone
from ..data.shards import TokenBatches, TokenShards
from ..files import atomic_write_json, folder_held
from .branches import Branches
from .checkpoint import CheckpointManager, rng_state, set_rng_state
from .config import TrainConfig, build_model_config
from .distributed import World, close_world, init_world, parallelize
from .interrupt import StopNow, StopSignals, TrainingInterrupted, signal_name
from .metrics import Metrics
from .optim import build_optimizer, build_scheduler, follow_config
from .step import TrainingDiverged, autocast_dtype, check_weights_finite, evaluate, train_step


def build_model(cfg: TrainConfig, shards: TokenShards, world: World, checkpoints: CheckpointManager):
    """The model (with a resumed run's weights) and its DDP / FSDP2 wrapping, which is the model itself alone."""
    t = cfg.train
    model = DepthAttentionForCausalLM(build_model_config(cfg, shards.vocab_size, shards.eos_id))
    if cfg.model.init_from and checkpoints.resume_from is None:
        load_backbone(model, cfg.model.init_from)
    model.to(world.device)
    checkpoints.load_weights(model)
    if t.activation_checkpointing:
        model.activation_checkpointing_enable()
    if t.compile:
        compile_layers(model)
    return model, parallelize(model, t.parallel, world)


def compile_layers(model: DepthAttentionForCausalLM) -> None:
    """torch.compile each decoder layer, as torchtitan compiles each block (FSDP2 shards layer by layer).

    The layers of every model share one forward, whose graphs dynamo caches together, and each layer at each loop
    compiles graphs of its own (its index and its method's state are constants to dynamo; training and evaluation,
    a new batch shape). Each model compiled raises dynamo's limit by as many: at its default of 8 every layer past the
    8th ran eagerly, silently, and so did every model after the first few in one process (a study's worker)."""
    graphs = 4 * model.config.unrolled_depth
    dynamo_config = torch._dynamo.config
    dynamo_config.recompile_limit += graphs
    dynamo_config.accumulated_recompile_limit += graphs
    for layer in model.model.layers:
        layer.compile()


def train(cfg: TrainConfig, resume: bool = False, on_budget=None, reschedule: bool = False) -> dict:
    """Run (or resume) one training run described by `cfg`; returns a summary of the final metrics.

    With `train.branch_steps`, each shorter budget is a cooldown branch of this run (branches.py), and
    `on_budget(steps, folder)` hears of each budget, the run's own last, once its folder is final and recorded.
    A resumed run whose new train.steps would change its learning-rate schedule is an error unless `reschedule`.

    SIGINT or SIGTERM (in the main thread) stops it after the current step with a checkpoint there, raising
    TrainingInterrupted; a second signal stops it at once (interrupt.py has the rules)."""
    hf_logging.disable_progress_bar()  # checkpoint writes would print a bar each
    with StopSignals() as stop:
        try:
            world = init_world()
            try:
                with folder_held(cfg.train.out_dir, "--train.out_dir") if world.is_main else nullcontext():
                    return _train(cfg, resume, world, stop, on_budget, reschedule=reschedule)
            finally:
                close_world()
        except StopNow as second:
            raise stop.stopped_at_once(second.signum) from None


# the training loop in one piece (complexity 30): save, stop_if_asked and branch_off share the run's state
def _train(cfg: TrainConfig, resume: bool, world: World, stop: StopSignals, on_budget=None,  # noqa: C901
           score_whole_split: bool = False, reschedule: bool = False) -> dict:
    t = cfg.train
    branches = Branches(cfg, resume, world.is_main) if t.branch_steps else None
    checkpoints = CheckpointManager(cfg, resume, world.is_main, reschedule)
    stop.newest = checkpoints.resume_from
    torch.manual_seed(t.seed)
    train_shards = TokenShards(cfg.data.path, "train")
    val_shards = TokenShards(cfg.data.path, "val")
    if world.is_main and cfg.optim.warmup_steps >= t.steps:
        print(f"warning: optim.warmup_steps ({cfg.optim.warmup_steps}) is not shorter than train.steps ({t.steps}): "
              "the learning rate rises for the whole run and never decays; lower optim.warmup_steps",
              file=sys.stderr)
    if world.is_main and not train_shards.tokenizer_path.is_dir():
        print(f"warning: {cfg.data.path} holds no tokenizer ({train_shards.tokenizer_path} is missing), so the "
              "model folders this run writes have none: generate, eval and harness will need --tokenizer DIR",
              file=sys.stderr)
    model, wrapped = build_model(cfg, train_shards, world, checkpoints)
    optimizer = build_optimizer(wrapped, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, t.steps)
    batches = TokenBatches(train_shards, t.batch_size, cfg.data.seq_len, t.seed, world.rank, world.world_size)
    start = checkpoints.load_trainer_state(wrapped, optimizer, scheduler, batches)
    resumed = checkpoints.resume_from is not None
    if resumed:
        follow_config(optimizer, scheduler, cfg.optim)
    if world.is_main:
        record = cfg.to_dict()  # the data's path absolute: eval and harness find it from any folder
        record["data"]["path"] = str(Path(cfg.data.path).absolute())
        atomic_write_json(checkpoints.out_dir / "train_config.json", record)
    amp = autocast_dtype(t.dtype, world.device)
    metrics = Metrics(cfg, world, sum(p.numel() for p in model.parameters()), start, resumed)
    epochs = t.steps * metrics.tokens_per_step / len(train_shards)
    if world.is_main and epochs > 1:
        print(f"note: {t.steps:,} steps of {metrics.tokens_per_step:,} tokens pass over the {len(train_shards):,} "
              f"training tokens {epochs:.1f} times: the data repeats (more data, or fewer steps, avoids it)")

    def save(step: int, loss: float):
        stop.saving = checkpoints.folder(step)
        checkpoints.save(step, wrapped, model, optimizer, scheduler, batches, {"loss": loss})
        stop.newest, stop.saving = checkpoints.folder(step), None

    def stop_if_asked(step: int):
        """At a step boundary: on a stop request (any process's), a checkpoint of `step`, then TrainingInterrupted."""
        signum = stop.agreed(world)
        if signum is None:
            return
        metrics.close()
        stopped = f"stopped by {signal_name(signum)}"
        newest = f"the newest whole checkpoint is {stop.newest}" if stop.newest else "the run has no checkpoint yet"
        if step == start:
            raise TrainingInterrupted(signum, f"{stopped} before the first step: nothing new to save; {newest}",
                                      stop.newest)
        if stop.newest != checkpoints.folder(step):  # not written as a periodic checkpoint
            try:
                check_weights_finite(model, step, checkpoints.out_dir)
            except TrainingDiverged:
                raise TrainingInterrupted(signum, f"{stopped} after step {step}, whose weights are NaN or infinite: "
                                          f"no checkpoint was written for it; {newest}" + (
                                              " (resume from it with a lower --optim.lr)" if stop.newest else ""),
                                          stop.newest) from None
            save(step, metrics.last["loss"])
        raise TrainingInterrupted(signum, f"{stopped} after step {step}, checkpoint saved in {stop.newest}",
                                  stop.newest)

    def branch_off(branches: Branches, step: int):
        """Train the branches that leave the run at `step` (from its checkpoint there), then go on unchanged."""
        for budget in branches.due(step):
            if stop.newest != checkpoints.folder(step):
                check_weights_finite(model, step, checkpoints.out_dir)
                save(step, metrics.last["loss"])
            rng = rng_state()
            branch = branches.start(budget, checkpoints.folder(step))
            summary = _train(branch, True, world, stop, score_whole_split=True)
            set_rng_state(rng)
            stop.newest, stop.step = checkpoints.folder(step), step
            branches.record(budget, budget * metrics.tokens_per_step, summary["val_loss_whole_split"])
            if on_budget:
                on_budget(budget, Path(branch.train.out_dir))
            metrics.restart_clock()

    if cfg.model.init_from and start == 0:  # where a converted model starts (docs/method.md#retrofitting)
        metrics.write_start(evaluate(wrapped, val_shards, t.batch_size, cfg.data.seq_len, t.eval_batches, world, amp))
    wrapped.train()
    try:
        stop.step = start
        stop_if_asked(start)
        if branches:
            branch_off(branches, start)
        for step in range(start + 1, t.steps + 1):
            step_metrics = train_step(step, wrapped, batches, optimizer, scheduler, cfg, world, amp)
            stop.step = step
            if checkpoints.due(step):
                check_weights_finite(model, step, checkpoints.out_dir)
            record = metrics.record(step, step_metrics)
            if step == start + 1 and checkpoints.rescheduled_from:
                was = checkpoints.rescheduled_from
                record["rescheduled_from_steps"] = was["steps"]
                if was["optim"]:  # the schedule settings the steps before followed
                    record["rescheduled_from_optim"] = was["optim"]
            if step % t.eval_every == 0 or step == t.steps:
                val_loss = evaluate(wrapped, val_shards, t.batch_size, cfg.data.seq_len, t.eval_batches, world, amp)
                record.update(val_loss=val_loss, val_ppl=math.exp(val_loss))
            metrics.write(record)
            if checkpoints.due(step):
                save(step, record["loss"])
            if branches:
                branch_off(branches, step)
            stop_if_asked(step)
    finally:
        metrics.close()
    # the weights were checked before the last step's checkpoint (or, with no step left, are a checked checkpoint's)
    if start < t.steps or not checkpoints.final_is_current():  # a finished run resumed keeps its final/ as it is
        checkpoints.export(wrapped, model)
    if branches or score_whole_split:  # every budget is scored alike
        whole = evaluate(wrapped, val_shards, t.batch_size, cfg.data.seq_len, None, world, amp)
        metrics.last["val_loss_whole_split"] = whole
        if branches:
            branches.record(t.steps, t.steps * metrics.tokens_per_step, whole)
            if on_budget:
                on_budget(t.steps, checkpoints.out_dir)
    signum = stop.agreed(world)
    if signum:  # it came during the export, which it let finish
        raise TrainingInterrupted(signum, f"stopped by {signal_name(signum)} during the export, which was finished: "
                                  f"the run is complete, its model is {checkpoints.out_dir / 'final'}", stop.newest,
                                  complete=True)
    return metrics.last
