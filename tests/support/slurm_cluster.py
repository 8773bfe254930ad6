"""A throwaway SLURM cluster on this machine: munged, slurmctld and one slurmd per node.

Debian's slurm-wlm runs several slurmd on one host (`slurmd -N <node>`, a port per
node, every NodeAddr 127.0.0.1), so each hardware pair of a test gets a node of its
own, with the feature `pair_<pair>` that the slurm profile pins the pair's job to.
Everything lives in one directory and listens on loopback only; the daemons run
configless (slurmd fetches its config from slurmctld), because the executor plugin
drops SLURM_CONF from the environment of some of its commands. Processes are tracked
with proctrack/cgroup where the cgroup v1 freezer is mounted, as production clusters
do: whatever a job leaves behind is killed when the job ends.

    python -m tests.support.slurm_cluster up DIR NODE [NODE ...]   # prints the SLURM_CONF line
    python -m tests.support.slurm_cluster down DIR

Needs root (slurmd starts jobs as their user).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import free_port

PACKAGES = ("slurm-wlm", "munge")
FREEZER = Path("/sys/fs/cgroup/freezer")


class ClusterUnavailable(RuntimeError):
    """This machine cannot run a test cluster; the message says why."""


def install() -> None:
    """Install slurm-wlm and munge with apt-get when they are missing (root only)."""
    if shutil.which("slurmctld") and shutil.which("munged"):
        return
    if os.geteuid() != 0:
        raise ClusterUnavailable("slurm-wlm and munge are not installed and installing "
                                 "them needs root (apt-get install slurm-wlm munge)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    result = subprocess.run(["apt-get", "install", "-y", "-q", *PACKAGES],
                            capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise ClusterUnavailable(f"apt-get install {' '.join(PACKAGES)} failed: "
                                 f"{result.stderr.strip()[-400:]}")


def memory_mb() -> int:
    """This machine's memory: every node reports all of it (they share it)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 1024


def proctrack() -> str:
    """proctrack/cgroup as on a real cluster where the v1 freezer is mounted."""
    return "proctrack/cgroup" if FREEZER.is_dir() else "proctrack/linuxproc"


@dataclass
class Cluster:
    root: Path
    nodes: list[str]
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    ctld_port: int = 0
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a client (sbatch, squeue, snakemake) needs to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        self.ctld_port = free_port()
        for sub in ("state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        lines = [
            "ClusterName=splitbench",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.root / 'munge.socket'}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}/%n",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'spool'}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'log'}/slurmd-%n.log",
            "SlurmctldParameters=enable_configless",
            f"ProctrackType={proctrack()}",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.root / 'log' / 'jobcomp.txt'}",
            "KillWait=10",
            "InactiveLimit=0",
            "MinJobAge=600",
        ]
        for node in self.nodes:
            lines.append(f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname=localhost "
                         f"Port={free_port()} CPUs={self.cpus} RealMemory={memory_mb()} "
                         f"Features=pair_{node} "
                         "State=UNKNOWN")
        lines.append("PartitionName=bench Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (self.root / "cgroup.conf").write_text(
            "CgroupPlugin=autodetect\nCgroupMountpoint=/sys/fs/cgroup\n")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 - the daemon's
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   env={**os.environ, **self.env})
        log.close()
        self.pids[name] = process.pid
        (self.root / "pids").mkdir(exist_ok=True)
        (self.root / "pids" / name).write_text(str(process.pid))

    def start(self, timeout: float = 30.0) -> None:
        install()
        if os.geteuid() != 0:
            raise ClusterUnavailable("slurmd runs jobs as their user and needs root")
        self.write_config()
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn("munged", ["munged", "-F", "--force", f"--socket={self.root / 'munge.socket'}",
                               f"--key-file={key}", f"--pid-file={self.root / 'munged.pid'}",
                               f"--log-file={self.root / 'log' / 'munged.log'}",
                               f"--seed-file={self.root / 'munged.seed'}"])
        self._wait(lambda: (self.root / "munge.socket").exists(), timeout, "munged")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self._squeue_ok(), timeout, "slurmctld")
        for node in self.nodes:
            self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])
        self._wait(self._nodes_idle, timeout, "slurmd")

    def _squeue_ok(self) -> bool:
        return self.client(["squeue", "-h"]).returncode == 0

    def _nodes_idle(self) -> bool:
        out = self.client(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.split("\n")
        states = dict(line.split() for line in out if line.strip())
        return all(states.get(node, "").startswith("idle") for node in self.nodes)

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, pid in self.pids.items():
                if _exited(pid):
                    raise ClusterUnavailable(f"{name} exited at start; see "
                                             f"{self.root / 'log'}: {self._tail(name)}")
            if ready():
                return
            time.sleep(0.2)
        raise ClusterUnavailable(f"{what} not ready after {timeout:.0f}s; see {self.root}/log")

    def _tail(self, name: str) -> str:
        path = self.root / "log" / f"{name}.out"
        return path.read_text()[-600:] if path.exists() else ""

    def client(self, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env})

    def stop(self) -> None:
        """Cancel every job, then stop the daemons this cluster started, by pid."""
        if "slurmctld" in self.pids and not _exited(self.pids["slurmctld"]):
            self.client(["scancel", "--full", "--user", "root"])
        order = [n for n in self.pids if n.startswith("slurmd-")] + ["slurmctld", "munged"]
        for name in order:
            pid = self.pids.get(name)
            if pid is None:
                continue
            with _suppress_gone():
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not _exited(pid):
                time.sleep(0.1)
            if not _exited(pid):
                with _suppress_gone():
                    os.kill(pid, signal.SIGKILL)
                _exited(pid, block=True)
        self.pids.clear()


def _exited(pid: int, block: bool = False) -> bool:
    """True once pid has ended (collected when it is our child)."""
    try:
        done, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
        return done != 0
    except ChildProcessError:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        return stat.rsplit(")", 1)[1].split()[0] == "Z"


class _suppress_gone:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, value, tb) -> bool:
        return kind is ProcessLookupError


def _stop_dir(root: Path) -> None:
    """Stop the daemons a `up` in root started (their pids are in root/pids)."""
    cluster = Cluster(root, [])
    for path in sorted((root / "pids").glob("*")):
        cluster.pids[path.name] = int(path.read_text())
    cluster.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.slurm_cluster")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up")
    up.add_argument("dir", type=Path)
    up.add_argument("nodes", nargs="+")
    down = sub.add_parser("down")
    down.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    root = args.dir.resolve()
    if args.command == "up":
        root.mkdir(parents=True, exist_ok=True)
        cluster = Cluster(root, args.nodes)
        try:
            cluster.start()
        except ClusterUnavailable as error:
            cluster.stop()
            sys.exit(f"slurm_cluster: {error}")
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        _stop_dir(root)


if __name__ == "__main__":
    main()
