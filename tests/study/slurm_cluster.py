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

Requires root: ``SlurmUser``/``SlurmdUser`` are root and slurmd starts jobs as the submitting user.
Debian: ``apt-get install slurmctld slurmd slurm-client munge`` (Slurm 22.05 on bookworm).

``python tests/slurm_cluster.py DIR`` starts a cluster in DIR and keeps it up until Ctrl-C.
"""

from __future__ import annotations

import contextlib
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
from pathlib import Path
from typing import Iterator, Mapping, Sequence

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
    """This machine as ``slurmd -C`` sees it: CPUs, Boards, SocketsPerBoard, CoresPerSocket, ThreadsPerCore, RealMemory."""
    out = subprocess.run([slurmd, "-C"], capture_output=True, text=True, timeout=30, check=True).stdout
    line = next(line for line in out.splitlines() if line.startswith("NodeName="))
    fields = dict(item.split("=", 1) for item in line.split())
    keep = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    return {k: fields[k] for k in keep if k in fields}


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
        sacct_shim: bool = False,
        extra_conf: Sequence[str] = (),
    ) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.cpus = cpus
        self.realmemory_mb = realmemory_mb
        self.sacct_shim = sacct_shim
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

    def start(self, timeout: float = 30.0) -> "SlurmCluster":
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
        if self.sacct_shim:
            base_env["PATH"] = os.pathsep.join([str(self._write_sacct_shim()), base_env["PATH"]])
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

    def _write_sacct_shim(self) -> Path:
        bin_dir = self.state_dir / "bin"
        bin_dir.mkdir(exist_ok=True)
        shim = bin_dir / "sacct"
        python = sys.executable if len(sys.executable) < 120 else "/usr/bin/env python3"  # shebang limit
        shim.write_text(_SACCT_SHIM.format(python=python, sacct=_which("sacct"), squeue=_which("squeue")))
        shim.chmod(0o755)
        return bin_dir

    def _spawn(self, name: str, argv: list) -> None:
        out = open(self.log_dir / f"{name}.out", "ab")
        try:
            # own session: a ^C to pytest does not hit the daemons before stop() runs
            self._procs[name] = subprocess.Popen(
                [str(a) for a in argv],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            out.close()

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
                    while time.monotonic() < end and self.run(
                        "squeue", "-h", "-o", "%A", check=False, timeout=10
                    ).stdout.strip():
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

    def _kill_leftovers(self) -> None:
        """SIGKILL every process whose environment carries our SLURM_CONF (slurmstepd, job steps, tasks)."""
        if not self.env:
            return
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

    def __enter__(self) -> "SlurmCluster":
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
        # ClusterName: lowercase, and unique-ish so that a stale state dir of another cluster is noticed
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
            # scheduling: start jobs as soon as they are submitted or resources free up
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
    def activate(self) -> Iterator["SlurmCluster"]:
        """Point in-process users of the Slurm clients (submitit) at this cluster: os.environ gets
        ``SLURM_CONF`` (and sbin on PATH), loses outer ``SLURM_*``-style variables; restored on exit."""
        saved = dict(os.environ)
        try:
            for k in [k for k in os.environ if k.startswith(_FOREIGN_PREFIXES)]:
                del os.environ[k]
            os.environ["SLURM_CONF"] = self.env["SLURM_CONF"]
            os.environ["PATH"] = self.env["PATH"]
            yield self
        finally:
            os.environ.clear()
            os.environ.update(saved)

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
    sacct_shim: bool = False,
    extra_conf: Sequence[str] = (),
    timeout: float = 30.0,
) -> SlurmCluster:
    """Start a private one-node cluster (partition ``debug``) with its files under ``state_dir``.

    ``cpus``: advertise this many CPUs instead of the machine's (``SlurmdParameters=config_overrides``),
    e.g. to run several jobs at once on a 2-CPU CI machine. ``realmemory_mb`` likewise for memory.
    ``sacct_shim``: put a ``sacct`` first on the clients' PATH that answers submitit's state query
    (``sacct -o JobID,State,NodeList --parsable2 -j ID...``) from ``squeue -t all``; without it
    ``sacct`` fails here (no accounting storage) and submitit's ``job.state`` stays ``UNKNOWN``.
    ``extra_conf``: more slurm.conf lines, placed before the node and partition lines.
    Raises :class:`SlurmClusterError` (with log tails) if the node is not idle within ``timeout``
    seconds; nothing is left running then.
    """
    cluster = SlurmCluster(
        state_dir, cpus=cpus, realmemory_mb=realmemory_mb, sacct_shim=sacct_shim, extra_conf=extra_conf
    )
    return cluster.start(timeout)


_SACCT_SHIM = '''#!{python}
"""sacct stand-in written by tests/slurm_cluster.py (sacct_shim=True).

This test cluster has no accounting storage (slurmdbd), so the real sacct only says "Slurm
accounting storage is disabled". The one query submitit makes,
`sacct -o JobID,State,NodeList --parsable2 -j ID [-j ID ...]`, is answered from
`squeue -t all`, which lists finished jobs for MinJobAge seconds; anything else goes to the real sacct.
"""
import os
import subprocess
import sys

SACCT, SQUEUE = {sacct!r}, {squeue!r}
# squeue-only states, spelled as sacct would report them
STATES = {{"CONFIGURING": "RUNNING", "SIGNALING": "RUNNING", "RESIZING": "RUNNING", "STAGE_OUT": "COMPLETING"}}


def main(args):
    ids, fields, parsable = [], None, False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-j", "--jobs", "-o", "--format") and i + 1 < len(args):
            if arg in ("-j", "--jobs"):
                ids += args[i + 1].split(",")
            else:
                fields = args[i + 1]
            i += 2
            continue
        if arg.startswith(("--jobs=", "--format=")):
            key, value = arg.split("=", 1)
            if key == "--jobs":
                ids += value.split(",")
            else:
                fields = value
        elif arg in ("-P", "--parsable2"):
            parsable = True
        else:
            return None
        i += 1
    if not (ids and parsable and fields and fields.lower() == "jobid,state,nodelist"):
        return None
    out = subprocess.run(
        [SQUEUE, "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T|%N"], capture_output=True, text=True
    ).stdout  # fails (no output) only when none of the ids is known any more
    lines = ["JobID|State|NodeList"]
    for line in out.splitlines():
        job, state, nodes = line.split("|", 2)
        lines.append(f"{{job}}|{{STATES.get(state, state)}}|{{nodes or 'None assigned'}}")
    print("\\n".join(lines))
    return 0


status = main(sys.argv[1:])
if status is None:
    os.execv(SACCT, ["sacct", *sys.argv[1:]])
sys.exit(status)
'''


def _main(argv: Sequence[str]) -> None:
    reason = slurm_available()
    if reason:
        raise SystemExit(reason)
    with start_cluster(Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="slurm-"))) as cluster:
        print(f"export SLURM_CONF={cluster.conf_path}  # Ctrl-C stops the cluster", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    import sys

    _main(sys.argv[1:])
