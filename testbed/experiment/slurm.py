"""Slurm as the executor: checks before submitting, one job array, and waiting for it.

Slurm's own commands are the interface (sbatch, sinfo, squeue), so the project needs no Slurm
library and works with any version that has `--array` and `--parsable` (17.02 and later). A
whole experiment is one array, each task one manifest line (testbed.experiment.manifest),
submitted with `--exclusive` -- a dilated run's validity verdict reads the whole machine's
CPU, so a run must have its node to itself -- and `--requeue`, so a task whose node fails is
run again, elsewhere. Everything that can be wrong with the input is found before anything is
submitted: no Slurm on the PATH, a partition Slurm does not know, a results folder the compute
nodes cannot see.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.experiment.errors import RunError
from testbed.experiment.manifest import SLURM_DIR, array_spec

CONFIG_ENV = "TESTBED_SLURM_CONFIG"
DEFAULT_CONFIG = Path("~/.config/mrc-testbed/slurm.yaml")
POLL_S = 2.0
NETWORK_FS = frozenset(
    "nfs nfs4 lustre gpfs beegfs fuse.beegfs cephfs ceph cifs smb3 9p virtiofs glusterfs "
    "fuse.glusterfs panfs wekafs fuse.sshfs afs pvfs2 orangefs".split()
)
"""Filesystem types every node of a cluster can mount: results written there are shared."""


class SlurmError(RunError):
    pass


@dataclass
class SlurmOptions:
    """How to submit: from the command line, else the config file (YAML: partition, options,
    shared, python), else Slurm's defaults."""

    partition: str | None = None
    options: list[str] = field(default_factory=list)  # passed to sbatch as they are
    shared: bool | None = None  # the config's word that the results folder is shared
    python: str = sys.executable  # the interpreter the tasks run (the same path on every node)
    poll_s: float = POLL_S

    @classmethod
    def from_config(
        cls, path: str | Path | None, partition: str | None = None,
        options: Sequence[str] = (),
    ) -> SlurmOptions:  # fmt: skip
        """The command line's values over the config file's (`path`, $TESTBED_SLURM_CONFIG or
        ~/.config/mrc-testbed/slurm.yaml; a missing default file is no error)."""
        given = path if path is not None else os.environ.get(CONFIG_ENV)
        where = Path(given if given is not None else DEFAULT_CONFIG).expanduser()
        data: dict[str, Any] = {}
        if given is not None or where.exists():
            data = read_config(where)
        opts = cls(
            partition=partition if partition is not None else data.get("partition"),
            options=[*map(str, data.get("options", [])), *options],
            shared=data.get("shared"),
            python=str(data.get("python", sys.executable)),
        )
        return opts


def read_config(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise SlurmError(f"--slurm-config: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise SlurmError(f"--slurm-config: {path} is not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SlurmError(f"--slurm-config: {path} must be a mapping (partition, options, ...)")
    known = {"partition", "options", "shared", "python"}
    for key in data:
        if key not in known:
            raise SlurmError(
                f"--slurm-config: {path}: unknown key {key!r} (one of {', '.join(sorted(known))})"
            )
    if "options" in data and not isinstance(data["options"], list):
        raise SlurmError(f"--slurm-config: {path}: options must be a list of sbatch options")
    if "shared" in data and not isinstance(data["shared"], bool):
        raise SlurmError(f"--slurm-config: {path}: shared must be true or false")
    return data


Runner = Callable[[Sequence[str]], str]


def _run(cmd: Sequence[str]) -> str:
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"--executor slurm: {cmd[0]} failed: {exc}") from None
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmError(
            f"--executor slurm: {' '.join(cmd[:2])} failed: {why[-1] if why else proc.returncode}"
        )
    return proc.stdout


def preflight(out_dir: Path, opts: SlurmOptions, run: Runner = _run) -> list[str]:
    """Every check that needs no submission; the nodes of the partition on success.

    One clear error names the first problem: Slurm's commands missing, Slurm not answering,
    an unknown partition, or a results folder on a filesystem the nodes do not share."""
    for tool in ("sbatch", "squeue", "sinfo"):
        if shutil.which(tool) is None:
            raise SlurmError(
                f"--executor slurm: {tool} is not on the PATH; run on a Slurm login node, or "
                "start a local Slurm (sudo scripts/slurm_local.sh; docs/cluster.md)"
            )
    rows = [r.split() for r in run(["sinfo", "-h", "-o", "%P %N"]).splitlines() if r.strip()]
    partitions = {r[0].rstrip("*"): r[1] if len(r) > 1 else "" for r in rows}
    default = next((r[0].rstrip("*") for r in rows if r[0].endswith("*")), None)
    name = opts.partition or default
    if opts.partition is not None and opts.partition not in partitions:
        known = ", ".join(sorted(partitions)) or "none"
        raise SlurmError(f"--partition: Slurm has no partition {opts.partition!r} (it has {known})")
    if name is None:
        raise SlurmError("--partition: Slurm has no default partition; name one")
    nodes = expand_nodes(partitions.get(name, ""), run)
    if not results_shared(out_dir, nodes, opts.shared):
        fs = fs_type(out_dir)
        raise SlurmError(
            f"--out: {out_dir} is on a {fs} filesystem of this machine, which the nodes of "
            f"partition {name!r} ({', '.join(nodes[:4]) or 'none'}) cannot read; put the results "
            "on the cluster's shared filesystem (NFS, Lustre, ...), or say `shared: true` in "
            "the Slurm config if it is shared in a way not seen here"
        )
    return nodes


def expand_nodes(spec: str, run: Runner = _run) -> list[str]:
    """`node[01-03],gpu1` -> the names (scontrol's own expansion, else the spec split)."""
    if not spec:
        return []
    if "[" in spec and shutil.which("scontrol"):
        try:
            return run(["scontrol", "show", "hostnames", spec]).split()
        except SlurmError:
            pass
    return [n for n in spec.split(",") if n]


def fs_type(path: Path) -> str:
    """The type of the filesystem `path` (or its nearest existing parent) is on."""
    probe = path.resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    best, kind = "", "unknown"
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return kind
    for row in mounts:
        parts = row.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = str(probe) == point or str(probe).startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


def this_host(name: str) -> bool:
    short = socket.gethostname().split(".")[0]
    return name.split(".")[0] in {short, "localhost"}


def results_shared(out_dir: Path, nodes: Sequence[str], said: bool | None) -> bool:
    """The nodes can read what the tasks write: a network filesystem, every node this very
    machine (a local Slurm), or the config says so."""
    if said is not None:
        return said
    if nodes and all(this_host(n) for n in nodes):
        return True
    return fs_type(out_dir) in NETWORK_FS


BATCH_SCRIPT = """#!/bin/bash
# One manifest line per array task (testbed.cli.slurm_task); written by testbed.
exec {python} -m testbed.cli.slurm_task {out} "$SLURM_ARRAY_TASK_ID"
"""


def batch_script(python: str, out_dir: Path) -> str:
    """The array's batch script; `python` may be a command (``sudo -n /opt/.../python``)."""
    words = " ".join(shlex.quote(w) for w in shlex.split(python))
    return BATCH_SCRIPT.format(python=words, out=shlex.quote(str(out_dir.resolve())))


def submit(
    out_dir: Path, name: str, indices: Sequence[int], opts: SlurmOptions, run: Runner = _run
) -> str:
    """sbatch one array of `indices`; its job id. The batch script and the command are kept in
    slurm/ (submissions.jsonl: one line per submission, with the task ids)."""
    where = (out_dir / SLURM_DIR).resolve()
    (where / "logs").mkdir(parents=True, exist_ok=True)
    script = where / "task.sh"
    script.write_text(batch_script(opts.python, out_dir))
    script.chmod(0o755)
    cmd = [
        "sbatch", "--parsable", f"--array={array_spec(indices)}", "--exclusive", "--requeue",
        f"--job-name=testbed-{name}"[:64], f"--output={where / 'logs' / '%A_%a.out'}",
        f"--chdir={out_dir.resolve()}",  # on the shared filesystem, as the nodes need
    ]  # fmt: skip
    if opts.partition:
        cmd.append(f"--partition={opts.partition}")
    cmd += [*opts.options, str(script)]
    job = run(cmd).strip().split(";")[0]
    if not job.isdigit():
        raise SlurmError(f"--executor slurm: sbatch answered {job!r}, not a job id")
    import json

    with (where / "submissions.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"job": job, "tasks": sorted(indices), "at": time.time(),
                             "command": cmd}) + "\n")  # fmt: skip
    return job


def last_job(out_dir: Path) -> str | None:
    """The job id of the experiment's latest submission (slurm/submissions.jsonl)."""
    import json

    try:
        rows = (out_dir / SLURM_DIR / "submissions.jsonl").read_text().splitlines()
        return str(json.loads(rows[-1])["job"]) if rows else None
    except (OSError, ValueError, KeyError, IndexError):
        return None


def active(job: str, run: Runner = _run) -> bool:
    """Whether any task of `job` is still pending or running."""
    try:
        return bool(run(["squeue", "-h", "-r", "-j", job, "-o", "%i"]).strip())
    except SlurmError as exc:
        if "Invalid job id" in str(exc):
            return False
        raise


def cancel(job: str, run: Runner = _run) -> None:
    """scancel the whole array (its tasks get SIGTERM and tear their fabrics down)."""
    try:
        run(["scancel", job])
    except SlurmError:
        pass


def wait(
    job: str,
    *,
    poll_s: float = POLL_S,
    on_poll: Callable[[int], None] | None = None,
    run: Runner = _run,
) -> None:
    """Until no task of `job` is pending or running (squeue no longer lists it)."""
    while True:
        try:
            out = run(["squeue", "-h", "-r", "-j", job, "-o", "%i %T"])
        except SlurmError as exc:
            # squeue refuses a job id it has forgotten (MinJobAge): the job is over.
            if "Invalid job id" in str(exc):
                return
            raise
        left = [r for r in out.splitlines() if r.strip()]
        if not left:
            return
        if on_poll is not None:
            on_poll(len(left))
        time.sleep(poll_s)
