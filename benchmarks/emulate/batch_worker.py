"""Run many `tag deploy` jobs in one torchrun launch: the deploy runtime without per-plan start-up.

    python -m torch.distributed.run --standalone --nproc-per-node N benchmarks/emulate/batch_worker.py JOBS.json

JOBS.json is a list of job pickles (`tag.deploy.job.prepare_job` + `save_job`, all with the same `nproc`).
Every rank runs each job as `tag.deploy.worker` does (`TorchProgram`, `build_schedule`, `train_rank`:
barrier-fenced steps, slowest rank's time per step) and rank 0 writes ``<job>.result.json`` next to each
pickle with the same keys as deploy's result (losses, step_ms, measured_step_ms). A failing job writes
``<job>.error`` and the batch goes on.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import traceback


def main(jobs_file: str) -> int:
    import onnx
    import torch
    import torch.distributed as dist

    from tag.deploy.job import load_job
    from tag.deploy.onnx_torch import TorchProgram
    from tag.deploy.schedule import build_schedule
    from tag.deploy.train import train_rank

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
    with open(jobs_file) as f:
        paths = json.load(f)
    programs: dict = {}
    for path in paths:
        try:
            job = load_job(path)
            if job.nproc != world:
                raise RuntimeError(f"job of {job.nproc} ranks in a launch of {world}")
            key = (job.model_path, job.seed, job.batch_size)
            if key not in programs:  # fresh weights per job: the model is rebuilt, the ONNX parse is cached
                programs.clear()
                programs[key] = onnx.load(job.model_path)
            program = TorchProgram(programs[key], job.graph, seed=job.seed)
            sched = build_schedule(job.graph, job.groups, job.strategy, job.device_machines, job.nproc, job.plan_path)
            res = train_rank(sched, job.graph, program, rank, job.steps, job.seed, job.training.optimizer,
                             job.training.lr, "cpu")
            if rank == 0:
                with open(path + ".result.json", "w") as f:
                    json.dump({"losses": res.losses, "step_ms": res.step_ms,
                               "measured_step_ms": res.measured_step_ms(job.warmup)}, f)
        except Exception as e:  # noqa: BLE001 - recorded per job; the other ranks fail the same job alike
            with open(f"{path}.error", "w") as f:
                f.write(f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
