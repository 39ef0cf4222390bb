"""A private, throw-away single-node Slurm cluster for tests (munged + slurmctld + slurmd).

Everything lives under one state directory: munge key, socket and logs, ``slurm.conf``, the
controller's state, slurmd's spool, pid and log files. The daemons listen on free TCP ports
chosen at start, talk to their own munged through ``AuthInfo=socket=...``, and find their
configuration through ``SLURM_CONF`` (never ``/etc/slurm``), so a run neither disturbs a system
Slurm nor clashes with a concurrent run (pytest-xdist workers) that uses another state directory.

Usage (from a pytest fixture)::

    reason = slurm_available()
    if reason:
        pytest.skip(reason)
    with start_cluster(tmp_path / "slurm") as cluster:
        job_id = cluster.sbatch("--wrap", "echo hello")
        assert cluster.wait_job(job_id) == "COMPLETED"

``start_cluster`` returns a started :class:`SlurmCluster`, which is also a context manager
(``stop()`` on exit). Client programs must run with ``cluster.env`` (``cluster.run`` does);
code that calls them from the test process itself (submitit) needs ``cluster.activate()``,
which puts ``SLURM_CONF`` in ``os.environ`` and removes any outer ``SLURM_*``/``SBATCH_*``
variables for the duration.

There is no accounting storage (no slurmdbd): ``sacct`` fails, so submitit's ``job.state`` is
always ``UNKNOWN``, and a cancelled or killed job is never ``done()``; the study's Slurm executor
reads ``squeue`` instead. Job ids start at a random ``FirstJobId`` per cluster, because submitit
caches job states per process by id.

Processes whose environment carries this cluster's ``SLURM_CONF`` (daemons, slurmstepd, job
tasks, and anything started with ``cluster.env``) are killed by ``stop()``.

Requires root: ``SlurmUser``/``SlurmdUser`` are root and slurmd starts jobs as the submitting user.
Debian: ``apt-get install slurmctld slurmd slurm-client munge`` (Slurm 22.05 on bookworm).

``python tests/study/slurm_cluster.py DIR`` starts a cluster in DIR and keeps it up until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Self

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scancel", "sinfo", "scontrol")
PARTITION = "debug"
# job states after which a job will not run again (squeue %T spelling)
FINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)
# variables of an enclosing Slurm job or user settings that would steer our clients elsewhere
_FOREIGN_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SINFO_", "SCONTROL_", "SACCT_")
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")


class SlurmClusterError(RuntimeError):
    """The cluster did not come up (or a client failed); the message carries the daemons' log tails."""


def _which(name: str) -> str | None:
    path = os.pathsep.join([os.environ.get("PATH", ""), *_SBIN])
    return shutil.which(name, path=path)


def slurm_available() -> str | None:
    """None when a private cluster can be started here, else why not (for a visible ``pytest.skip``)."""
    if not hasattr(os, "geteuid"):
        return "Slurm test cluster needs Linux"
    missing = [name for name in (*DAEMONS, *CLIENTS) if _which(name) is None]
    if missing:
        return (
            f"Slurm test cluster: {', '.join(missing)} not installed "
            "(apt-get install slurmctld slurmd slurm-client munge)"
        )
    if os.geteuid() != 0:
        return "Slurm test cluster needs root (slurmctld/slurmd run as SlurmUser=root and start jobs as their owner)"
    return None


def _free_ports(n: int) -> list[int]:
    """n distinct TCP ports that are free now (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _node_hardware(slurmd: str) -> dict[str, str]:
    """This machine as ``slurmd -C`` sees it: CPUs, Boards, SocketsPerBoard, CoresPerSocket,
    ThreadsPerCore, RealMemory."""
    out = subprocess.run([slurmd, "-C"], capture_output=True, text=True, timeout=30, check=True).stdout
    line = next(line for line in out.splitlines() if line.startswith("NodeName="))
    fields = dict(item.split("=", 1) for item in line.split())
    keep = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    return {k: fields[k] for k in keep if k in fields}


def _die_with_parent() -> None:
    """In the daemon, before exec: SIGTERM when the process that started it dies (even by SIGKILL)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"  ({path}: {e.strerror})"
    return "\n".join("  " + line for line in text[-lines:]) or f"  ({path} is empty)"


class SlurmCluster:
    """A private munged + slurmctld + slurmd; build with :func:`start_cluster`."""

    def __init__(
        self,
        state_dir: Path,
        *,
        cpus: int | None = None,
        realmemory_mb: int | None = None,
        extra_conf: Sequence[str] = (),
    ) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.cpus = cpus
        self.realmemory_mb = realmemory_mb
        self.extra_conf = list(extra_conf)
        # job ids differ between clusters: submitit's job-state cache (one per process) is keyed by id
        self.first_job_id = random.SystemRandom().randrange(1000, 50_000_000, 1000)
        self.hostname = socket.gethostname().split(".")[0]
        self.node_name = self.hostname
        self.partition = PARTITION
        self.conf_path = self.state_dir / "slurm.conf"
        self.log_dir = self.state_dir / "log"
        self.ctld_port, self.slurmd_port = 0, 0
        self._procs: dict[str, subprocess.Popen] = {}
        self._runtime_dir: Path | None = None  # sockets: short path outside state_dir when state_dir is long
        self.env: dict[str, str] = {}
        self._stopped = False

    # ---------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 30.0) -> Self:
        """Start munged, slurmctld and slurmd; return once the node is idle. Stops what it started on failure."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._kill_leftovers()  # of an earlier cluster in this state dir that its process left behind
        self.log_dir.mkdir(exist_ok=True)
        # unix socket paths must stay under ~108 bytes (munged socket, slurmstepd sockets in the spool)
        if len(str(self.state_dir)) <= 60:
            run = self.state_dir / "run"
            run.mkdir(exist_ok=True)
        else:
            run = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
            self._runtime_dir = run
            (self.state_dir / "run").unlink(missing_ok=True)
            (self.state_dir / "run").symlink_to(run)
        self.munge_socket = run / "munge.socket"
        self.spool_dir = run / "slurmd"
        self.spool_dir.mkdir(exist_ok=True)
        # munged insists: key owned by its user, no group/other access; socket dir searchable by all
        run.chmod(0o755)
        key = self.state_dir / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        key.chmod(0o400)

        base_env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_PREFIXES)}
        base_env["PATH"] = os.pathsep.join([base_env.get("PATH", "/usr/bin:/bin"), *_SBIN])
        self.env = {**base_env, "SLURM_CONF": str(self.conf_path)}

        # -F foreground, -f: the state dir's ancestors (pytest's 0700 tmp dirs) fail munged's o+x check
        self._spawn(
            "munged",
            [
                _which("munged"),
                "-F",
                "-f",
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={run / 'munged.pid'}",
                f"--log-file={self.log_dir / 'munged.log'}",
                f"--seed-file={self.state_dir / 'munged.seed'}",
            ],
        )
        self._wait(lambda: self.munge_socket.exists(), deadline, "munged did not create its socket")

        self.ctld_port, self.slurmd_port = _free_ports(2)
        self.conf_path.write_text(self._conf_text())
        (self.state_dir / "plugstack.conf").write_text("")  # keep /etc/slurm/plugstack.conf out

        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf_path)])
        self._wait(self._controller_up, deadline, "slurmctld did not answer `scontrol ping`")
        self._spawn("slurmd", [_which("slurmd"), "-D", "-N", self.node_name, "-f", str(self.conf_path)])
        self._wait(lambda: self.node_state() == "idle", deadline, f"node {self.node_name} did not become idle")

    def _spawn(self, name: str, argv: list) -> None:
        with open(self.log_dir / f"{name}.out", "ab") as out:
            # own session: a ^C to pytest does not hit the daemons before stop() runs;
            # they go when the thread that started them does (pytest killed: no daemons left over)
            self._procs[name] = subprocess.Popen(
                [str(a) for a in argv],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 (only prctl, no locks)
            )

    def _wait(self, ready, deadline: float, what: str) -> None:
        while True:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise SlurmClusterError(f"{name} exited with {proc.returncode} while starting\n{self.logs()}")
            if ready():
                return
            if time.monotonic() > deadline:
                raise SlurmClusterError(f"{what} in time\n{self.logs()}")
            time.sleep(0.1)

    def _controller_up(self) -> bool:
        r = self.run("scontrol", "ping", check=False, timeout=10)
        return r.returncode == 0 and "UP" in r.stdout

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel all jobs, stop the daemons and kill anything left of this cluster. Idempotent; keeps all files."""
        if self._stopped:
            return
        self._stopped = True
        ctld = self._procs.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            with contextlib.suppress(Exception):
                ids = self.run("squeue", "-h", "-o", "%A", check=False, timeout=10).stdout.split()
                if ids:
                    self.run("scancel", *ids, check=False, timeout=10)
                    end = time.monotonic() + timeout / 2
                    while (
                        time.monotonic() < end
                        and self.run("squeue", "-h", "-o", "%A", check=False, timeout=10).stdout.strip()
                    ):
                        time.sleep(0.1)
        for name in ("slurmd", "slurmctld", "munged"):  # clients need munged until the end
            proc = self._procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout / 3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._kill_leftovers()
        if self._runtime_dir is not None:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                (self.state_dir / "run").unlink()

    def _kill_leftovers(self) -> None:
        """SIGKILL every process whose environment carries our SLURM_CONF (slurmstepd, job steps, tasks)."""
        marker = f"SLURM_CONF={self.conf_path}".encode()
        spare = {os.getpid()}
        pid = os.getppid()
        while pid > 1 and pid not in spare:  # never ourselves or the processes that started us
            spare.add(pid)
            try:
                pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                break
        for _ in range(3):
            victims = []
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit() or int(entry.name) in spare:
                    continue
                try:
                    if marker in (entry / "environ").read_bytes().split(b"\0"):
                        victims.append(int(entry.name))
                except OSError:
                    continue
            if not victims:
                return
            for pid in victims:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---------------------------------------------------------------- configuration

    def _conf_text(self) -> str:
        d = self.state_dir
        hw = _node_hardware(_which("slurmd"))
        overrides = []
        if self.cpus is not None:  # more (virtual) CPUs than the machine has: slurmd takes the config's word
            hw.update(CPUs=str(self.cpus), Boards="1", SocketsPerBoard="1", CoresPerSocket=str(self.cpus))
            hw["ThreadsPerCore"] = "1"
            overrides.append("SlurmdParameters=config_overrides")
        if self.realmemory_mb is not None:
            hw["RealMemory"] = str(self.realmemory_mb)
        node = " ".join(f"{k}={v}" for k, v in hw.items())
        # ClusterName: lowercase; fixed per state dir (slurmctld refuses a state dir saved under another name)
        cluster = "t" + format(zlib.crc32(str(d).encode()), "08x")
        lines = [
            f"ClusterName={cluster}",
            f"FirstJobId={self.first_job_id}",
            f"SlurmctldHost={self.hostname}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={d / 'ctld-state'}",
            f"SlurmdSpoolDir={self.spool_dir}",
            f"SlurmctldPidFile={d / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'run' / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.log_dir / 'slurmctld.log'}",
            f"SlurmdLogFile={self.log_dir / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            f"PlugStackConfig={d / 'plugstack.conf'}",
            "MailProg=/bin/true",
            # no cgroups, no accounting daemon
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={d / 'jobcomp.txt'}",
            "MpiDefault=none",
            "SwitchType=switch/none",
            # scheduling: the backfill pass (every bf_interval=1 s) starts a submitted job within ~0.8 s
            # (Slurm's defaults: ~3 s, batch_sched_delay)
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=1,sched_min_interval=100000,bf_interval=1,batch_sched_delay=0",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ReturnToService=2",
            "KillWait=2",  # seconds between SIGTERM and SIGKILL on scancel/timeout
            "InactiveLimit=0",
            "MinJobAge=3600",  # finished jobs stay visible to `squeue -t all` / `scontrol show job`
            "SlurmctldTimeout=30",
            "SlurmdTimeout=300",
            "MessageTimeout=10",
            *overrides,
            *self.extra_conf,
            f"NodeName={self.node_name} NodeAddr=127.0.0.1 NodeHostname={self.hostname} {node} State=UNKNOWN",
            f"PartitionName={self.partition} Nodes={self.node_name} Default=YES MaxTime=INFINITE State=UP",
        ]
        return "\n".join(lines) + "\n"

    # ---------------------------------------------------------------- clients

    def run(
        self,
        *argv: str,
        check: bool = True,
        timeout: float = 60,
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        """Run a Slurm client (``sbatch``, ``squeue``, ...) against this cluster; text output captured.
        ``env``: more environment variables (sbatch passes its whole environment on to the job)."""
        r = subprocess.run(
            [str(a) for a in argv],
            check=False,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
        )
        if check and r.returncode != 0:
            raise SlurmClusterError(
                f"{' '.join(map(str, argv))} exited with {r.returncode}:\n{r.stdout}{r.stderr}\n{self.logs()}"
            )
        return r

    def sbatch(self, *args: str, cwd: str | Path | None = None, env: Mapping[str, str] | None = None) -> str:
        """Submit with ``sbatch --parsable ARGS``; return the job id.

        To give the job more variables pass ``env``, not ``--export=ALL,X=1``: any ``--export``
        makes slurmd build the job's environment with ``su - USER -c env`` first (1-2 s)."""
        out = self.run("sbatch", "--parsable", *args, cwd=cwd, env=env).stdout.strip()
        return out.split(";")[0]

    def job_state(self, job_id: str) -> str:
        """Job state as squeue spells it (PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, ...);
        for an array job id, the states of its tasks joined by ','; '' if unknown."""
        r = self.run("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T", check=False, timeout=10)
        return ",".join(sorted(set(r.stdout.split()))) if r.returncode == 0 else ""

    def wait_job(self, job_id: str, timeout: float = 30.0) -> str:
        """Wait until the job (all tasks of an array) reached a final state; return it."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_state(job_id)
            if state and all(s in FINAL_STATES for s in state.split(",")):
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {state or 'unknown'} after {timeout:.0f} s\n{self.logs()}")
            time.sleep(0.1)

    def node_state(self) -> str:
        r = self.run("sinfo", "-h", "-N", "-n", self.node_name, "-o", "%T", check=False, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else ""

    @contextlib.contextmanager
    def activate(self) -> Iterator[Self]:
        """Point in-process users of the Slurm clients (submitit) at this cluster: os.environ gets
        ``SLURM_CONF`` (and sbin on PATH), loses outer ``SLURM_*``-style variables; restored on exit."""
        changed = [k for k in os.environ if k.startswith(_FOREIGN_PREFIXES)] + ["SLURM_CONF", "PATH"]
        saved = {k: os.environ.get(k) for k in changed}
        try:
            for k in changed:
                os.environ.pop(k, None)
            os.environ["SLURM_CONF"] = self.env["SLURM_CONF"]
            os.environ["PATH"] = self.env["PATH"]
            yield self
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def logs(self, lines: int = 25) -> str:
        """Tails of the daemons' logs, for error messages."""
        parts = []
        for name in ("slurmctld", "slurmd", "munged"):
            # -D daemons log to both; .out alone has what came before the log file was opened
            log, out = self.log_dir / f"{name}.log", self.log_dir / f"{name}.out"
            path = log if log.exists() and log.stat().st_size else out
            if path.exists():
                parts.append(f"--- {path}\n{_tail(path, lines)}")
        return "\n".join(parts) or f"(no logs in {self.log_dir})"


def start_cluster(
    state_dir: Path,
    *,
    cpus: int | None = None,
    realmemory_mb: int | None = None,
    extra_conf: Sequence[str] = (),
    timeout: float = 30.0,
) -> SlurmCluster:
    """Start a private one-node cluster (partition ``debug``) with its files under ``state_dir``.

    ``cpus``: advertise this many CPUs instead of the machine's (``SlurmdParameters=config_overrides``),
    e.g. to run several jobs at once on a 2-CPU CI machine. ``realmemory_mb`` likewise for memory.
    ``extra_conf``: more slurm.conf lines, placed before the node and partition lines.
    Raises :class:`SlurmClusterError` (with log tails) if the node is not idle within ``timeout``
    seconds; nothing is left running then.
    """
    cluster = SlurmCluster(
        state_dir, cpus=cpus, realmemory_mb=realmemory_mb, extra_conf=extra_conf
    )
    return cluster.start(timeout)



def _main(argv: Sequence[str]) -> None:
    reason = slurm_available()
    if reason:
        raise SystemExit(reason)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop() on `kill` too
    with start_cluster(Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="slurm-"))) as cluster:
        print(f"export SLURM_CONF={cluster.conf_path}  # Ctrl-C stops the cluster", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    _main(sys.argv[1:])
