"""A real single-node Slurm cluster for the Slurm tests: this machine is its one node, in one CPU-only
partition `debug`.

`SlurmCluster.start()` needs root and Slurm and munge installed (Debian: `apt-get install slurm-wlm
munge`; it installs nothing itself). It writes a minimal slurm.conf (the node as `slurmd -C` sees it, no
cgroups, no accounting, a short KillWait), creates a munge key, starts munged, slurmctld and slurmd in the
foreground as children of this process and waits until `sinfo` shows the node idle. Every file (configuration,
state, logs, sockets) lives in one temporary folder and the daemons listen on free ports, so a Slurm installation
already on the machine is not touched. Clients find the cluster through $SLURM_CONF (`env`).
`stop()` cancels the cluster's jobs, then ends the daemons it started.

Anything that prevents a cluster raises `ClusterUnavailable` with a one-line reason (the fixture skips
with it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

PARTITION = "debug"
MAX_MINUTES = 60
"""The partition's time limit (below the sweeps' default of a day, as on many clusters)."""
PACKAGES = ("slurm-wlm", "munge")
DAEMONS = ("munged", "slurmctld", "slurmd")
NEEDED = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "scancel", "srun")
KILL_WAIT_S = 10
"""Seconds between Slurm's SIGTERM and SIGKILL when it stops a task: what a run has to save its checkpoint."""
START_TIMEOUT_S = 600.0
COMMAND_TIMEOUT_S = 300.0
"""Guards on the wall clock against a daemon that never comes up and a client command that never returns, far above
their seconds on a busy machine (the daemons wait on each other, so their CPU time says nothing)."""


class ClusterUnavailable(RuntimeError):
    """No cluster can run here; the message (one line) says why."""


def _tool(name: str) -> str | None:
    found = (p for d in ("/usr/sbin", "/sbin") if os.access(p := f"{d}/{name}", os.X_OK))
    return shutil.which(name) or next(found, None)


def check_installed() -> None:
    missing = [name for name in NEEDED if not _tool(name)]
    if missing:
        raise ClusterUnavailable(f"{', '.join(missing)} not installed (Debian: apt-get install {' '.join(PACKAGES)})")


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _run_guarded(command: list, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"hung: {' '.join(map(str, command))} did not return in {COMMAND_TIMEOUT_S:.0f} s "
                             f"(load average {_load()})") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """One slurmctld and one slurmd on this machine; see the module docstring."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.processes: dict[str, subprocess.Popen] = {}
        self.node = ""
        self.cpus = 0

    @property
    def env(self) -> dict[str, str]:
        """What a client (sbatch, squeue, submitit) needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self) -> SlurmCluster:
        if not sys.platform.startswith("linux"):
            raise ClusterUnavailable("a Slurm test cluster needs Linux")
        if os.geteuid() != 0:
            raise ClusterUnavailable("starting a Slurm test cluster needs root (slurmd runs jobs as their user)")
        check_installed()
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)  # munged refuses group- or world-writable folders
        hardware = self._hardware()
        self.node = hardware["NodeName"]
        self.cpus = int(hardware["CPUs"])
        self._write_munge_key()
        self._write_conf(hardware)
        try:
            self._spawn("munged", [_tool("munged"), "--foreground", "--force", f"--socket={self.root / 'munge.socket'}",
                                   f"--key-file={self.root / 'munge.key'}", f"--pid-file={self.root / 'munged.pid'}",
                                   f"--log-file={self.root / 'munged.log'}",
                                   f"--seed-file={self.root / 'munged.seed'}"])
            self._wait(lambda: (self.root / "munge.socket").exists(), "munged did not create its socket")
            self._spawn("slurmctld", [_tool("slurmctld"), "-D", "-c", "-f", str(self.conf)])
            self._spawn("slurmd", [_tool("slurmd"), "-D", "-f", str(self.conf), "-N", self.node])
            self._wait(self.node_idle, f"node {self.node} did not become idle in partition {PARTITION}")
        except BaseException:
            self.stop()
            raise
        return self

    def run(self, *command: str, check: bool = True) -> str:
        """A Slurm client command against this cluster; its stdout."""
        done = _run_guarded(list(command), env={**os.environ, **self.env})
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def stop(self) -> None:
        """Cancel every job, wait for the queue to empty, then end the daemons (slurmd first)."""
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            _run_guarded(["scancel", "--full", "--user", "root"], env={**os.environ, **self.env})
            deadline = time.monotonic() + KILL_WAIT_S + 20
            while time.monotonic() < deadline and self.run("squeue", "--noheader", check=False).strip():
                time.sleep(0.5)
        for name in reversed(DAEMONS):
            process = self.processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of each daemon's log (for failure messages)."""
        parts = []
        for name in DAEMONS:
            path = self.root / f"{name}.log"
            if path.is_file():
                parts.append(f"--- {path}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(parts)

    def _hardware(self) -> dict[str, str]:
        """`slurmd -C`: the node line as Slurm detects this machine (name, CPUs, sockets, memory)."""
        done = _run_guarded([_tool("slurmd"), "-C"])
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("NodeName=")), "")
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if not {"NodeName", "CPUs", "RealMemory"} <= set(fields):
            said = done.stdout.strip() or done.stderr.strip()
            raise ClusterUnavailable(f"`slurmd -C` did not describe this machine: {said}")
        return fields

    def _write_munge_key(self) -> None:
        key = self.root / "munge.key"
        if not key.exists():
            with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(os.urandom(1024))

    def _write_conf(self, hardware: dict[str, str]) -> None:
        node_keys = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
        node = " ".join(f"{k}={hardware[k]}" for k in node_keys if k in hardware)
        # a little under the detected memory, so the node is never drained for it
        memory = max(1, int(hardware["RealMemory"]) - 256)
        for folder in ("ctld", "d"):
            (self.root / folder).mkdir(exist_ok=True)
        self.conf.write_text("\n".join([
            "ClusterName=loglinear-test",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.root / 'munge.socket'}",
            f"StateSaveLocation={self.root / 'ctld'}",
            f"SlurmdSpoolDir={self.root / 'd'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",  # no cgroups; tracks a task's whole process tree
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "MpiDefault=none",
            "ReturnToService=2",
            f"KillWait={KILL_WAIT_S}",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "InactiveLimit=0",
            "MinJobAge=300",
            f"NodeName={self.node} NodeAddr=127.0.0.1 {node} RealMemory={memory} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime={MAX_MINUTES} State=UP",
            "",
        ]))

    def _spawn(self, name: str, command: list[str | None]) -> None:
        if None in command:
            raise ClusterUnavailable(f"{name} is not installed")
        log = open(self.root / f"{name}.out", "w")
        self.processes[name] = subprocess.Popen([str(c) for c in command], stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        log.close()

    def node_idle(self) -> bool:
        """Whether the node runs nothing (a stopped task's processes are gone too)."""
        state = self.run("sinfo", "--noheader", "--partition", PARTITION, "--format=%T", check=False).strip()
        return state == "idle"

    def _wait(self, ready, failure: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    out = (self.root / f"{name}.out").read_text(errors="replace").strip().splitlines()
                    last = out[-1] if out else "no output"
                    raise ClusterUnavailable(f"{name} exited with status {process.returncode}: {last}")
            if ready():
                return
            time.sleep(0.5)
        raise ClusterUnavailable(f"{failure} within {START_TIMEOUT_S:.0f}s, load average {_load()} "
                                 f"(logs in {self.root})")
