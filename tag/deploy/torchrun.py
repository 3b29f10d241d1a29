"""The torchrun command line that starts the ranks of one machine (deploy jobs and `tag profile links` sweeps)."""

from __future__ import annotations

import sys

WORKER_MODULE = "tag.deploy.worker"  # the module each deploy rank runs


def torchrun_command(job_path: str, nproc: int, *, nnodes: int = 1, node_rank: int = 0,
                     endpoint: str | None = None, module: str = WORKER_MODULE) -> list[str]:
    """argv running `python -m <module> <job_path>` on `nproc` ranks of this machine with torch.distributed.run.

    One node: ``--standalone``. Several: ``endpoint`` ("host:port") is the rendezvous of node 0 and this
    machine is ``node_rank`` of ``nnodes``. The module's argument is always the last element.
    """
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    if nnodes == 1:
        cmd += ["--standalone"]
    else:
        host, _, port = endpoint.partition(":")
        cmd += [f"--nnodes={nnodes}", f"--node-rank={node_rank}", f"--master-addr={host}", f"--master-port={port}"]
    cmd += [f"--nproc-per-node={nproc}", "--max-restarts=0", "--monitor-interval=0.1", "-m", module, job_path]
    return cmd
