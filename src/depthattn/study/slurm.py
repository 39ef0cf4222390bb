"""The Slurm executor: a study's cells as one job array, submitted through submitit (`depthattn[slurm]`).

Each array task trains one cell and writes its result file atomically, exactly as the local executor does, so a
study moves between a laptop and a cluster cell by cell. A cell of several tasks (`tasks_per_cell`, by default one
per GPU) runs under torch.distributed with the environment submitit derives from Slurm's. A job that is preempted
or reaches its time limit is requeued by submitit and resumes from the cell's last checkpoint; a failed or
cancelled cell has no result file, so the next submission of the study sends it again and it resumes likewise.

Which job trains which cell is recorded in `<out_dir>/slurm/jobs.json`; `depthattn study ... --status` reads it
with `squeue` (no accounting database is needed).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from ..files import atomic_write_json, held_elsewhere
from .cell import check_split, run_cell, skipped_note
from .plan import CellPlan, StartPlan
from .records import Cell, CellResult
from .spec import Study
from .store import CellStore


@dataclasses.dataclass
class SlurmSettings:
    """The `[slurm]` table of a study config; every key can be overridden with `--slurm KEY=VALUE`."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str = "4:00:00"  # per cell, as sbatch --time takes it: minutes, "H:MM:SS" or "D-HH:MM:SS"
    gpus_per_cell: int = 0
    tasks_per_cell: int | None = None  # processes per cell; default: one per GPU, or 1
    cpus_per_task: int = 1
    mem: str | None = None  # per node, as sbatch --mem takes it ("32G")
    array_parallelism: int = 256  # cells running at once
    sbatch: dict = dataclasses.field(default_factory=dict)  # any other sbatch option: {"constraint" = "h100"}
    setup: list = dataclasses.field(default_factory=list)  # shell lines before each cell ("module load cuda")

    @classmethod
    def from_table(cls, table: dict, overrides: Sequence[str] = ()) -> SlurmSettings:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = dict(table)
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or key not in fields:
                raise ValueError(f"--slurm takes KEY=VALUE with KEY one of {', '.join(fields)}; got {item!r}")
            values[key] = json.loads(value) if key in ("sbatch", "setup") else value
        unknown = set(values) - set(fields)
        if unknown:
            raise ValueError(f"unknown [slurm] keys {sorted(unknown)}; known: {', '.join(fields)}")
        for name in ("gpus_per_cell", "tasks_per_cell", "cpus_per_task", "array_parallelism"):
            if values.get(name) is not None:
                given = values[name]
                try:
                    values[name] = int(str(given))  # "4" from --slurm; never 2.5 cut to 2
                except ValueError:
                    raise ValueError(f"[slurm] {name} must be an integer, got {given!r}") from None
                if values[name] < (0 if name == "gpus_per_cell" else 1):
                    raise ValueError(f"[slurm] {name} must be at least {0 if name == 'gpus_per_cell' else 1}, "
                                     f"got {values[name]}")
        settings = cls(**values)
        settings.minutes()  # a bad time shows now
        if not isinstance(values.get("sbatch", {}), dict) or not isinstance(values.get("setup", []), list):
            raise ValueError("[slurm] sbatch must be a table of sbatch options and setup a list of shell lines")
        return settings

    @property
    def tasks(self) -> int:
        return self.tasks_per_cell or max(self.gpus_per_cell, 1)

    def minutes(self) -> int:
        """`time` in whole minutes (what submitit takes), from any of sbatch's forms: M, M:S, H:M:S, D-H, D-H:M,
        D-H:M:S."""
        text = str(self.time)
        day_text, dash, rest = text.partition("-") if "-" in text else ("0", "", text)
        try:
            days, numbers = int(day_text), [int(part) for part in rest.split(":")]
        except ValueError:
            days, numbers = 0, []
        if dash and 1 <= len(numbers) <= 3:
            hours, minutes, seconds = (numbers + [0, 0])[:3]
        elif not dash and 1 <= len(numbers) <= 3:
            hours, minutes, seconds = ([0, 0] + numbers)[-3:] if len(numbers) == 3 else (0, *(numbers + [0])[:2])
        else:
            raise ValueError(f"[slurm] time must be minutes, H:MM:SS or D-HH:MM:SS (as sbatch --time), got {text!r}")
        return days * 1440 + hours * 60 + minutes + (seconds > 0)

    def submitit_parameters(self, name: str) -> dict:
        params = {"job_name": name, "time": self.minutes(), "nodes": 1, "ntasks_per_node": self.tasks,
                  "cpus_per_task": self.cpus_per_task, "array_parallelism": self.array_parallelism,
                  "setup": list(self.setup), "additional_parameters": dict(self.sbatch)}
        for key in ("partition", "account", "qos", "mem"):
            if getattr(self, key):
                params[key] = getattr(self, key)
        if self.gpus_per_cell:
            params["gpus_per_node"] = self.gpus_per_cell
        return params


def _submitit():
    try:
        import submitit
    except ImportError:
        raise ImportError("the Slurm executor submits through submitit: pip install 'depthattn[slurm]'") from None
    return submitit


def run_cell_task(plan: CellPlan, threads: int | None, tasks: int) -> CellResult | None:
    """What an array task runs: one cell, its processes joined by torch.distributed when it has several. A cell whose
    run folder another process holds (the study submitted twice, or run locally beside) is skipped by every task
    alike: each looks before any joins the others, so no task of this job holds it yet."""
    if held_elsewhere(plan.config.train.out_dir):
        print(f"{plan.label}: {skipped_note(Path(plan.config.train.out_dir))}", file=sys.stderr, flush=True)
        return None
    if tasks > 1:
        _submitit().helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    return run_cell(plan, threads)


class _Resumable:
    """A requeued job (preemption, time limit) runs the same call again; the cell resumes from its checkpoint."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)

    def checkpoint(self, *args):
        return _submitit().helpers.DelayedSubmission(self, *args)


REPORTED_STATES = ("running", "running elsewhere", "finished", "diverged", "failed")  # as a cell reaches one


class SlurmExecutor:
    """Cells as a Slurm job array (implements `study.runner.Executor`)."""

    def __init__(self, settings: SlurmSettings, out_dir: str | Path, poll_s: float = 30.0, wait: bool = True):
        self.settings, self.folder = settings, Path(out_dir) / "slurm"
        self.poll_s, self.wait = poll_s, wait

    @staticmethod
    def need_slurm():
        """Submitting and asking the queue need Slurm's commands; describing and pricing cells do not."""
        if shutil.which("sbatch") is None or shutil.which("squeue") is None:
            raise RuntimeError("the Slurm executor needs sbatch and squeue on PATH (run it on a Slurm login node; "
                               "--dry-run prices a study anywhere)")

    def describe(self) -> str:
        s = self.settings
        where = f" on partition {s.partition}" if s.partition else ""
        return (f"as a Slurm job array{where}, {s.tasks} task(s) x {s.cpus_per_task} CPU(s), {s.gpus_per_cell} GPU(s) "
                "per cell")

    # -------------------------------------------------------------- the record of submitted jobs

    @property
    def record_path(self) -> Path:
        return self.folder / "jobs.json"

    def records(self) -> dict:
        return json.loads(self.record_path.read_text()) if self.record_path.exists() else {}

    def queued(self) -> dict[str, str]:
        """Job id -> state of every job Slurm still holds (array tasks one by one)."""
        self.need_slurm()
        out = subprocess.run(["squeue", "--array", "--noheader", "--format=%i|%T"], capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(f"squeue failed: {out.stderr.strip()}")
        return dict(line.split("|", 1) for line in out.stdout.split() if "|" in line)

    def cell_states(self, store: CellStore, cells: Sequence[tuple[Cell, Path]]) -> list[dict]:
        """Per cell (with its path in `store`, and of its run under the out_dir): its state (finished, diverged,
        pending, running, running elsewhere, failed, not submitted), job id and log path."""
        records, queued = self.records(), self.queued()
        states = []
        for cell, path in cells:
            key = str(path)
            record = records.get(key, {})
            job = record.get("job_id")
            if store.has(path):
                state = "finished"
            elif store.diverged(path) is not None:  # the job recorded it: a result, not a failure
                state = "diverged"
            elif job in queued:
                state = queued[job].lower()
            elif held_elsewhere(self.folder.parent / path):  # not by a job of the study: run locally, or twice
                state = "running elsewhere"
            elif job is None:
                state = "not submitted"
            else:
                state = "failed"  # left the queue without a result: an error, scancel, a node failure
            states.append({"cell": cell, "key": key, "state": state, "job_id": job, "log": record.get("stderr"),
                           "stdout": record.get("stdout")})
        return states

    # -------------------------------------------------------------- submission

    def run(self, name: str, plans: Sequence[CellPlan | StartPlan],
            fn: Callable[[StartPlan, int | None], None] | None = None) -> bool:
        """Submit the cells `plans` plan that are neither finished nor queued as one job array; with `wait`, wait
        until every one has left the queue and report those that failed (the others go on regardless). True when
        all are finished. `fn(plan, threads)` instead submits one job per plan (a retrofitting study's starts)."""
        self.need_slurm()
        submitit = _submitit()
        check_split(plans, self.settings.tasks)
        # with fn the plans are a retrofitting study's starts, without it cells
        cells, starts = cast(Sequence[CellPlan], plans), cast(Sequence[StartPlan], plans)
        states = self._states(cells) if fn is None else self._start_states(name, starts)
        todo = [s for s in states if s["state"] in ("not submitted", "failed")]
        if todo:
            executor = submitit.SlurmExecutor(folder=self.folder / "%j")
            executor.update_parameters(**self.settings.submitit_parameters(f"depthattn-{name}"))
            threads, tasks = self.settings.cpus_per_task, self.settings.tasks
            with executor.batch():
                jobs = [executor.submit(_Resumable(fn), s["plan"], threads) if fn is not None else
                        executor.submit(_Resumable(run_cell_task), s["plan"], threads, tasks) for s in todo]
            records = self.records()
            for state, job in zip(todo, jobs, strict=True):
                records[state["key"]] = {"job_id": job.job_id, "stdout": str(job.paths.stdout).replace("%t", "0"),
                                         "stderr": str(job.paths.stderr).replace("%t", "0"),
                                         "submitted": time.strftime("%Y-%m-%dT%H:%M:%S")}
            atomic_write_json(self.record_path, records)
            print(f"study {name}: submitted {len(jobs)} job(s) (array {jobs[0].job_id.split('_')[0]}); "
                  f"logs in {self.folder}", flush=True)
        if not self.wait:
            return False
        if fn is not None:
            return self._wait_for_starts(name, starts)
        return self._wait(name, cells)

    def _start_states(self, name: str, starts: Sequence[StartPlan]) -> list[dict]:
        """Each start (a model not trained yet) queued or running under its recorded job, else not submitted: a
        start's job still in the queue is not submitted again (two jobs would train one folder)."""
        records, queued = self.records(), self.queued()
        states = []
        for plan in starts:
            key = f"start/{name}/seed_{plan.seed}"
            job = records.get(key, {}).get("job_id")
            states.append({"plan": plan, "key": key, "job_id": job, "log": records.get(key, {}).get("stderr"),
                           "state": queued[job].lower() if job in queued else "not submitted"})
        return states

    def _wait_for_starts(self, name: str, starts: Sequence[StartPlan]) -> bool:
        """Wait until no start's job is queued; True when every starting model is trained, else each failed one
        is reported with its log."""
        states = self._start_states(name, starts)
        while any(s["state"] != "not submitted" for s in states):
            time.sleep(self.poll_s)
            states = self._start_states(name, starts)
        failed = [s for s in states if not s["plan"].ready()]
        for s in failed:
            print(f"study {name}: starting model {s['key']} failed (job {s['job_id']}); log: {s['log']}\n"
                  f"{_tail(s['log'])}", flush=True)
        return not failed

    def _states(self, plans: Sequence[CellPlan]) -> list[dict]:
        """`cell_states` of the planned cells, each with its plan."""
        states = self.cell_states(plans[0].store, [(plan.cell, plan.path) for plan in plans]) if plans else []
        return [{**state, "plan": plan} for state, plan in zip(states, plans, strict=True)]

    def _wait(self, name: str, plans: Sequence[CellPlan]) -> bool:
        seen: dict[str, str] = {}
        while True:
            states = self._states(plans)
            for s in states:
                if seen.get(s["key"]) != s["state"] and s["state"] in REPORTED_STATES:
                    print(f"  {s['cell'].label}: {s['state']} (job {s['job_id']})", flush=True)
                seen[s["key"]] = s["state"]
            if not any(s["state"] not in ("finished", "diverged", "failed", "not submitted") for s in states):
                break
            time.sleep(self.poll_s)
        failed = [s for s in states if s["state"] == "failed"]
        for s in failed:
            print(f"study {name}: cell {s['key']} failed (job {s['job_id']}); log: {s['log']}\n"
                  f"{_tail(s['log'])}", flush=True)
        return not failed


def _tail(path: str | None, lines: int = 5) -> str:
    if not path or not Path(path).exists():
        return "    (no log: the job never started)"
    text = Path(path).read_text(errors="replace").splitlines()
    return "\n".join(f"    {line}" for line in text[-lines:])


def print_status(study: Study, store: CellStore, executor: SlurmExecutor, cells: list[Cell]) -> dict[str, int]:
    """One line per cell: state, job id, log; then the counts. A branched budget's cell is in the job of its run
    (the method's longest budget), and finished once its own result is written."""
    counts: dict[str, int] = {}
    runs = [(cell, study.cell_path(Cell(study.run_setting(cell.setting, cell.method), cell.method, cell.seed)))
            for cell in cells]
    for cell, s in zip(cells, executor.cell_states(store, runs), strict=True):
        if store.has(study.cell_path(cell)):
            state = "finished"
        elif store.diverged(study.cell_path(cell)) is not None:
            state = "diverged"
        else:  # a run finished without this budget's result: the budget joined the sweep after it
            state = "not submitted" if s["state"] in ("finished", "diverged") else s["state"]
        counts[state] = counts.get(state, 0) + 1
        job = f"job {s['job_id']}" if s["job_id"] else ""
        log = s["log"] if state in ("failed", "running", "pending") and s["log"] else ""
        print(f"{state:>13}  {study.cell_path(cell)}  {job}  {log}".rstrip())
    print(f"study {study.name}: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    return counts
