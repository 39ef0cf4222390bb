"""What a run reports each step: loss, lr, gradient norm, throughput and validation loss, to metrics.jsonl (and
TensorBoard or W&B when asked), a progress bar, and a log line every log_every steps when there is no bar."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..files import atomic_write_bytes, read_records, reporting_full_disk
from ..run_metrics import METRICS_FILE
from .config import TrainConfig
from .distributed import World


class MetricsLog:
    """metrics.jsonl: one JSON record per line, flushed as written; on resume, records after the checkpoint go."""

    def __init__(self, path: Path, enabled: bool, resume_step: int | None):
        self.path, self.enabled = path, enabled
        if enabled and resume_step is not None and path.exists():
            kept = [record for record in read_records(path) if record.get("step", 0) <= resume_step]
            atomic_write_bytes(path, "".join(json.dumps(record) + "\n" for record in kept).encode())
        elif enabled and resume_step is None:
            path.unlink(missing_ok=True)
        self.file = open(path, "a") if enabled else None  # noqa: SIM115  (open until close())
        self.writers: list[Callable[[dict], object]] = []

    def write(self, record: dict):
        if self.file is None:  # not enabled
            return
        with reporting_full_disk(self.path.parent):
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
        for writer in self.writers:
            writer(record)

    def close(self):
        if self.file:
            self.file.close()


def _external_loggers(cfg: TrainConfig, out_dir: Path) -> list[Callable[[dict], object]]:
    writers: list[Callable[[dict], object]] = []
    if cfg.logging.tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ImportError("logging.tensorboard needs the tensorboard package: pip install tensorboard") from None
        board = SummaryWriter(out_dir / "tensorboard")
        def to_board(record: dict) -> None:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)):  # not rescheduled_from_optim
                    board.add_scalar(k, v, record["step"])

        writers.append(to_board)
    if cfg.logging.wandb:
        try:
            import wandb
        except ImportError:
            raise ImportError("logging.wandb needs the wandb package: pip install wandb") from None
        run = wandb.init(project=cfg.logging.wandb_project, config=cfg.to_dict(), dir=str(out_dir))
        writers.append(lambda r: run.log(r, step=r["step"]))
    return writers


class Metrics:
    """The records of one run, from the step after `start` (a resumed run's checkpoint, else 0); `last` holds the
    newest value of each metric, the run's summary."""

    def __init__(self, cfg: TrainConfig, world: World, parameters: int, start: int, resumed: bool):
        self.cfg, self.is_main = cfg, world.is_main
        out_dir = Path(cfg.train.out_dir)
        self.log = MetricsLog(out_dir / METRICS_FILE, world.is_main, start if resumed else None)
        if world.is_main:
            self.log.writers = _external_loggers(cfg, out_dir)
        t = cfg.train
        self.tokens_per_step = t.batch_size * cfg.data.seq_len * t.grad_accum * world.world_size
        if world.is_main:
            resuming = f", resuming after step {start}" if start else ""
            compiled = "; each layer compiled (the first steps and evaluations compile, then run faster)" \
                if t.compile else ""
            print(f"{cfg.model.method}: {parameters:,} parameters, {self.tokens_per_step:,} tokens per step, "
                  f"{world.world_size} process(es) on {world.device}{resuming}{compiled}")
        # disable=None: tqdm draws no bar where stderr is not a terminal (a log file), and log lines stand in
        self.progress = tqdm(total=t.steps, initial=start, disable=None if t.progress and world.is_main else True,
                             unit="step", desc=cfg.model.method, dynamic_ncols=True)
        self.last: dict[str, Any] = {"step": start}
        self.clock = time.perf_counter()

    def record(self, step: int, step_metrics: dict) -> dict:
        """The record of `step`: its metrics, the tokens seen and the throughput since the previous record."""
        now = time.perf_counter()
        elapsed, self.clock = now - self.clock, now
        return {"step": step, **step_metrics, "tokens": step * self.tokens_per_step,
                "tokens_per_s": self.tokens_per_step / elapsed}

    def write(self, record: dict):
        self.log.write(record)
        self.last = {**self.last, **record}
        step, loss, lr, tok_s, val = (record["step"], record["loss"], record["lr"], record["tokens_per_s"],
                                      record.get("val_loss"))
        self.progress.update(1)
        # in this order: tqdm would sort keyword arguments
        self.progress.set_postfix({"loss": f"{loss:.3f}", "lr": f"{lr:.2e}", "tok_s": f"{tok_s:,.0f}",
                                   **({"val": f"{val:.3f}"} if val is not None else {})})
        t = self.cfg.train
        if self.is_main and self.progress.disable and (step % t.log_every == 0 or val is not None):
            print(f"{self.cfg.model.method} step {step}/{t.steps}: loss {loss:.4f}, lr {lr:.2e}, "
                  f"{tok_s:,.0f} tok/s" + (f", val {val:.4f}" if val is not None else ""), flush=True)

    def restart_clock(self):
        """After a pause that is not training (a cooldown branch), so the next throughput is the step's own."""
        self.clock = time.perf_counter()

    def write_start(self, val_loss: float):
        """The validation loss before the first step, of a run that starts from another model's weights."""
        self.log.write({"step": 0, "tokens": 0, "val_loss": val_loss, "val_ppl": math.exp(val_loss)})
        if self.is_main:
            print(f"{self.cfg.model.method} step 0/{self.cfg.train.steps}: val {val_loss:.4f} "
                  f"(from {self.cfg.model.init_from})", flush=True)

    def close(self):
        self.progress.close()
        self.log.close()
