"""Start the ranks of a deploy job with torchrun, watch them, and collect the result or the first failure.

`launch` writes the Job into a fresh run directory, runs ``torchrun --standalone`` in its own process
session and polls: when a rank writes an error file or torchrun exits non-zero it waits a short grace
period for torchrun to stop the others, then kills the whole session; when no rank makes progress for
`timeout_s` seconds (a hang; at least `SETUP_S` until every rank has finished step 0) it kills the session too. Either way `DeployFailed` names the failing rank
and its error; nothing of a failed run is returned as a result.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from tag.deploy.job import Job, save_job, user_training_flags
from tag.deploy.torchrun import torchrun_command

GRACE_S = 30.0  # after a first failure: time torchrun gets to stop the other ranks and report the root cause (slow under load)
POLL_S = 0.1
SETUP_S = 180.0  # least time ranks get to import torch, build the model and finish step 0


class DeployFailed(Exception):
    """A rank failed or hung; the message names the rank and its error (one line)."""


@dataclass
class DeployResult:
    losses: list[float]
    step_ms: list[float]
    measured_step_ms: float
    backend: str
    world: int
    extra: dict = field(default_factory=dict)  # the worker's further results (epochs, first_step, correct)


def launch_commands(job: Job, master: str = "MASTER_HOST:29500") -> list[tuple[str, str]]:
    """(machine, shell command) per machine of the plan's cluster: its devices are its ranks, in topology order.

    Every machine runs the worker on the plan, model and topology paths (copied to the same place on each
    machine); MASTER_HOST is the first machine's address.
    """
    machines: list[str] = []
    for m in job.device_machines:
        if m not in machines:
            machines.append(m)
    flags = ["--plan", job.plan_path, "--model", job.model_path, "--topology", job.topology_path,
             "--steps", str(job.steps), "--seed", str(job.seed), "--threads", str(job.threads),
             "--warmup", str(job.warmup), "--timeout", f"{job.timeout_s:g}", "--optimizer", job.training.optimizer]
    flags += user_training_flags(job)
    out = []
    for i, m in enumerate(machines):
        n = job.device_machines.count(m)
        cmd = torchrun_command("", n, nnodes=len(machines), node_rank=i, endpoint=master)
        cmd = ["torchrun"] + cmd[3:-1] + flags
        out.append((m, shlex.join(cmd)))
    return out


def launch(job: Job, keep_dir: str | None = None, on_step=None) -> DeployResult:
    """Run `job` on local ranks; returns rank 0's result, or raises DeployFailed (never hangs past the timeout).

    `on_step(n)` is called with the number of steps rank 0 has finished whenever it grows (progress bars).
    """
    run_dir = keep_dir or tempfile.mkdtemp(prefix="tag-deploy-")
    os.makedirs(run_dir, exist_ok=True)
    job.run_dir = run_dir
    job_path = os.path.join(run_dir, "job.pkl")
    save_job(job, job_path)
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(job.threads)
    env.setdefault("PYTHONWARNINGS", "ignore")
    log_path = os.path.join(run_dir, "torchrun.log")
    try:
        with open(log_path, "w") as log:
            proc = subprocess.Popen(torchrun_command(job_path, job.nproc), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)
            failure = _watch(proc, job, run_dir, on_step)
        if failure is None and proc.returncode == 0 and os.path.exists(os.path.join(run_dir, "result.json")):
            with open(os.path.join(run_dir, "result.json")) as f:
                r = json.load(f)
            return DeployResult(r["losses"], r["step_ms"], r["measured_step_ms"], r["backend"], r["world"],
                                r.get("extra", {}))
        raise DeployFailed(failure or _first_error(run_dir, job.nproc, log_path, proc.returncode))
    finally:
        if keep_dir is None:
            shutil.rmtree(run_dir, ignore_errors=True)


def _watch(proc: subprocess.Popen, job: Job, run_dir: str, on_step=None) -> str | None:
    """Poll until torchrun exits; kill its session on a failure or a hang. Returns a hang message or None."""
    last_beats, last_change = None, time.monotonic()
    failed_at = None
    while proc.poll() is None:
        time.sleep(POLL_S)
        now = time.monotonic()
        if failed_at is None and any(os.path.exists(os.path.join(run_dir, f"rank{r}.error")) for r in range(job.nproc)):
            failed_at = now
        if failed_at is not None and now - failed_at > GRACE_S:
            _kill(proc)
            return None
        beats = _beats(run_dir, job.nproc)
        if beats != last_beats:
            last_beats, last_change = beats, now
            if on_step is not None and beats[0] is not None:
                on_step(beats[0] // 2)
        elif now - last_change > (job.timeout_s if _past_first_step(beats) else max(job.timeout_s, SETUP_S)):
            _kill(proc)
            if any(os.path.exists(os.path.join(run_dir, f"rank{r}.error")) for r in range(job.nproc)):
                return None
            behind = min(range(job.nproc), key=lambda r: (beats[r] if beats[r] is not None else -1))
            return f"rank {behind} hung: no rank made progress for {job.timeout_s:g} s ({_where(beats[behind])}); killed all ranks"
    return None


def _past_first_step(beats: list[int | None]) -> bool:
    """Have all ranks finished step 0? Until then (imports, first-call warm-up) the setup allowance applies."""
    return all(b is not None and b >= 2 for b in beats)


def _where(beat: int | None) -> str:
    """Words for a heartbeat value (see tag.deploy.worker)."""
    if beat is None:
        return "it never finished setting up"
    if beat == 0:
        return "it stopped before step 0"
    step, done = divmod(beat - 1, 2)
    return f"it stopped after step {step}" if done else f"it stopped inside step {step}"


def _beats(run_dir: str, nproc: int) -> list[int | None]:
    out = []
    for r in range(nproc):
        try:
            with open(os.path.join(run_dir, f"rank{r}.beat")) as f:
                out.append(int(f.read().strip() or -1))
        except (OSError, ValueError):
            out.append(None)
    return out


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun's session and every process below it.

    torchrun starts each rank in a session of its own, so killing torchrun's process group alone would leave a
    hung rank running as an orphan; the descendants are collected first (from /proc), then all are killed.
    """
    victims = _descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in victims:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    proc.wait()


def _descendants(root: int) -> list[int]:
    """Pids of every process below `root` (Linux /proc; empty where /proc is unavailable)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _first_error(run_dir: str, nproc: int, log_path: str, returncode: int | None) -> str:
    """The root failure: a rank killed by a signal (torchrun's report), else the earliest rank error file."""
    killed = _signalled_rank(log_path, run_dir)
    if killed is not None:
        return f"rank {killed[0]} died: {killed[1]}; the other ranks were stopped"
    errors = []
    for r in range(nproc):
        try:
            with open(os.path.join(run_dir, f"rank{r}.error")) as f:
                t, line = f.readline().strip(), f.readline().strip()
            errors.append((float(t), r, line))
        except (OSError, ValueError):
            continue
    if errors:
        _, r, line = min(errors)
        return f"rank {r} failed: {line}"
    tail = ""
    try:
        with open(log_path) as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        tail = lines[-1] if lines else ""
    except OSError:
        pass
    return f"torchrun exited with code {returncode}" + (f": {tail}" if tail else "")


def _signalled_rank(log_path: str, run_dir: str) -> tuple[int, str] | None:
    """(rank, 'signal SIGKILL') of a rank torchrun reports killed by a signal without an error file, or None.

    A rank that dies by a signal writes no error file, and the ranks talking to it then fail with "connection
    reset" errors of their own (torchrun may then kill them too); torchrun's "Root Cause" is whichever failure it
    observed first, which under load can be one of those. So every failure torchrun lists is read, and the root
    cause is a rank that was signalled before it could write an error file."""
    try:
        with open(log_path) as f:
            text = f.read()
    except OSError:
        return None
    report = text.split("Failures:", 1)[-1]  # torchrun's failure report: "[i]:" blocks of "key : value" lines
    signalled = []
    for m in re.finditer(r"^\s*rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)", report, flags=re.M):
        rank, code = int(m.group(1)), int(m.group(2))
        if code >= 0 or os.path.exists(os.path.join(run_dir, f"rank{rank}.error")):
            continue  # an ordinary exit, or a rank that reported its own error: its error file says more
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        signalled.append((rank, name))
    if not signalled:
        return None
    # torchrun stops the surviving ranks with SIGTERM, so a rank killed by any other signal is the root cause
    rank, name = next((c for c in signalled if c[1] != "SIGTERM"), signalled[0])
    return rank, f"signal {name}"
