"""One rank of `tag profile links`, started by torchrun: ``python -m tag.profile.links_worker RUN_DIR/config.json``.

Reads the sweep settings, joins the process group (gloo on CPU, NCCL for ``cuda``), runs
`tag.profile.links_sweep.run_rank`, and rank 0 writes ``result.json`` next to the config. A failing rank
writes ``rank{r}.error`` (one line) and exits 1.
"""

from __future__ import annotations

import datetime
import json
import os
import sys


def join_and_run(settings, timeout_s: float = 300.0) -> dict | None:
    """Initialise the default process group from torchrun's environment and run the sweeps; rank 0's result."""
    import torch.distributed as dist

    from tag.profile.links_sweep import run_rank

    backend = "nccl" if settings.device.startswith("cuda") else "gloo"
    if settings.device.startswith("cuda"):
        import torch
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    from tag.profile.autogroup import apply_from_env

    apply_from_env()  # $TAG_AUTOGROUP_NICE: this rank's session's CPU share (tag.profile.autogroup)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    try:
        return run_rank(settings)
    finally:
        dist.destroy_process_group()


def main(config_path: str) -> int:
    from tag.profile.links_sweep import LinkSettings

    run_dir = os.path.dirname(os.path.abspath(config_path))
    rank = int(os.environ.get("RANK", "0"))
    try:
        with open(config_path) as f:
            cfg = json.load(f)
        result = join_and_run(LinkSettings(**cfg["settings"]), float(cfg.get("timeout_s", 300.0)))
        if result is not None:
            tmp = os.path.join(run_dir, "result.json.tmp")
            with open(tmp, "w") as f:
                json.dump(result, f)
            os.replace(tmp, os.path.join(run_dir, "result.json"))
        return 0
    except Exception as e:  # reported to the launcher through the error file
        with open(os.path.join(run_dir, f"rank{rank}.error"), "w") as f:
            f.write(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}\n")
        return 1


if __name__ == "__main__":
    from tag.deploy.rank_exit import exit_rank

    exit_rank(main(sys.argv[1]))
