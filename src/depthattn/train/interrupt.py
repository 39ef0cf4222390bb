"""Stopping a run cleanly on SIGINT (Ctrl-C) or SIGTERM.

While train() runs in the main thread, the first SIGINT or SIGTERM only asks the run to stop. The current step
finishes (an optimizer step is never left half-applied), then every process agrees to stop after that same step
(under torchrun one all_reduce of a stop flag per step), the run writes its checkpoint there as it writes the
periodic ones (atomic, with checksums; never non-finite weights: then it says so and writes none), and train()
raises TrainingInterrupted. Its `exit_status` is the signal's conventional one (130 for SIGINT, 143 for SIGTERM),
which `depthattn train` exits with after one line on stderr. A signal during the final export lets the export
finish, then stops the same way (the run is then complete).

A second signal stops at once: whatever the run was doing is abandoned, a checkpoint being written included (its
temporary folder is removed; a process killed outright leaves it for the next run of the out_dir to delete, and
--resume never reads it), so the newest whole checkpoint is the one before. A third signal meets the default
handlers (the process ends without a word). A Python handler runs between bytecodes, so "at once" waits for the
C call under way (a large tensor write, a collective) to return.

Under torchrun each process counts its own signals. torchrun forwards a Ctrl-C (or its own SIGTERM) once to every
worker, then kills them after --shutdown-timeout seconds (default 30): a checkpoint that takes longer to write
needs a longer timeout.

The handlers exist only while train() runs; the ones found are put back when it returns or raises. A signal ignored
when train() starts (SIG_IGN, as nohup or a shell's background job set) stays ignored. Python installs signal
handlers only in the main thread: train() called in another thread keeps whatever the process does (Ctrl-C raises
KeyboardInterrupt in the main thread, SIGTERM ends the process), as before.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import torch
import torch.distributed as dist

from .checkpoint import step_name
from .distributed import World

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(KeyboardInterrupt):
    """train() stopped on SIGINT or SIGTERM. str() says when and what was saved; `checkpoint` is the folder to resume
    from (None when the run has none), `exit_status` 128 + the signal's number, `complete` whether the run had
    finished (its final/ written). A KeyboardInterrupt, as Ctrl-C in train() raised before."""

    def __init__(self, signum: int, message: str, checkpoint: Path | None, complete: bool = False):
        super().__init__(message)
        self.signum, self.checkpoint, self.complete = signum, checkpoint, complete
        self.exit_status = 128 + signum


class StopNow(KeyboardInterrupt):
    """What the second signal raises, wherever the run is; train() turns it into TrainingInterrupted."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


class SignalHandlers:
    """A context manager that sends SIGINT and SIGTERM to the subclass's `_handle` while it is open and puts back the
    handlers it found. Only in the main thread (where Python installs handlers); a signal ignored stays ignored."""

    previous: dict

    def _handle(self, signum: int, frame) -> None:
        raise NotImplementedError("a subclass handles the signals")

    def __enter__(self):
        self.previous = {}
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                if signal.getsignal(signum) != signal.SIG_IGN:
                    self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info):
        for signum, handler in self.previous.items():
            # None: a handler set outside Python, which Python cannot put back
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self.previous = {}


class StopSignals(SignalHandlers):
    """The stop requests of one train() call: the handlers while it runs. The loop keeps `step` (the last step whose
    update is applied), `saving` (the checkpoint folder being written) and `newest` (the run's newest whole
    checkpoint) up to date for a stop at once to report."""

    def __init__(self):
        self.signum: int | None = None  # the first signal this process received
        self.previous: dict = {}
        self.step: int | None = None
        self.saving: Path | None = None
        self.newest: Path | None = None

    def _handle(self, signum, frame):
        if self.signum is None:
            self.signum = signum
            return
        for other in self.previous:  # a third signal ends the process, whatever this one's clean-up does
            signal.signal(other, signal.SIG_DFL)
        raise StopNow(signum)

    def agreed(self, world: World) -> int | None:
        """The signal all processes stop on at this step boundary (any process's), else None: the same answer on
        every process, from one all_reduce under torchrun. From a stop on, another signal stops at once."""
        signum = self.signum or 0
        if world.world_size > 1:
            flag = torch.tensor(signum, device=world.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            signum = int(flag.item())
        if signum and self.signum is None:
            self.signum = signum
        return signum or None

    def stopped_at_once(self, signum: int) -> TrainingInterrupted:
        """What a second signal leaves: the checkpoint it cut short (if any) is not there; the newest one is."""
        if self.saving is not None and self.saving.is_dir():  # cut short after its rename: it is whole
            self.newest, self.saving = self.saving, None
        newest = f"the newest whole checkpoint is {self.newest}" if self.newest else "the run has no checkpoint yet"
        if self.saving is not None:
            what = f"while writing the checkpoint of step {self.step}: it was not written"
        elif self.step is None:
            what = "before the first step"
        elif self.newest is not None and self.newest.name == step_name(self.step):
            what = f"after step {self.step}, whose checkpoint is written"
        else:
            what = f"after step {self.step}: no checkpoint was written for it"
        return TrainingInterrupted(signum, f"stopped at once by a second {signal_name(signum)} {what}; {newest}",
                                   self.newest)
