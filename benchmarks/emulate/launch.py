"""Run a torch.distributed script across emulated machines: one torchrun per namespace, each under its quota.

`run_script(star, quota, script, args, work)` starts, for machine i of `star` (one rank each), inside its
network namespace and CPU-quota cgroup::

    torchrun --nnodes N --node-rank i --master-addr <m0's address> --nproc-per-node 1 SCRIPT ARGS

with ``GLOO_SOCKET_IFNAME=eth0``, so every byte between ranks crosses the shaped veth links, and waits for
all of them (RuntimeError naming the machine and its log tail on a failure). `args_of(i)` gives machine i its own
arguments; each rank runs in a UTS namespace of its own whose hostname is the machine's name (``m0``, ``m1``,
...), as on separate hosts (`tag profile links` tells machines apart by hostname). SCRIPT may be ``-m`` with the
module first in the arguments (torchrun's ``--module``).
"""

from __future__ import annotations

import os
import subprocess
import sys


def run_script(star, quota, script: str, args: list[str], work: str, port: int = 29611,
               timeout_s: float = 3600, args_of=None, log_name: str = "emulated") -> None:
    """Run `script` with `args` (or `args_of(i)`) as one rank per machine of `star`, machine i under CPU quota i of
    `quota`, with hostname ``m<i>``; machine i's output goes to ``<work>/<log_name>-m<i>.log``."""
    import shlex

    n = len(star.machines)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", GLOO_SOCKET_IFNAME="eth0")
    procs, logs = [], []
    for i in range(n):
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={n}", f"--node-rank={i}",
               f"--master-addr={star.machines[0].addr}", f"--master-port={port}", "--nproc-per-node=1",
               "--max-restarts=0", script, *(args if args_of is None else args_of(i))]
        cmd = star.exec_prefix(i) + ["unshare", "--uts", "sh", "-c",
                                     f"hostname {star.machines[i].name} && exec {shlex.join(cmd)}"]
        if quota is not None:  # join the cgroup first: `ip netns exec` remounts /sys without the cgroup tree
            cmd = quota.wrap(i, cmd)
        log = os.path.join(work, f"{log_name}-m{i}.log")
        logs.append(log)
        with open(log, "w") as f:
            procs.append(subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env))
    try:
        codes = [p.wait(timeout=timeout_s) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for i, c in enumerate(codes):
        if c != 0:
            with open(logs[i]) as f:
                tail = [ln.strip() for ln in f if ln.strip()][-3:]
            raise RuntimeError(f"machine m{i} exited with {c}: {' | '.join(tail)}")
