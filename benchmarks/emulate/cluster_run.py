"""Fidelity on an emulated heterogeneous cluster: machines = namespaces with shaped NICs, devices = CPU quotas.

`emulated_rows(...)` builds the cluster (`netns.Star` + `cpuquota.CpuQuota`, one rank per machine) and measures it
as a user measures a real one (issue 27, the product path):

* the topology: `tag profile links` run as one torchrun rank per machine, inside each machine's namespace and under
  its quota, machine i with ``--device-type cpu-m<i>`` (`launch.run_script`): links, barrier and collective rates
  across the shaped NICs, each machine's own device type and peak;
* the op times: `tag profile ops --device-type cpu-m<i> --clock thread` under machine i's quota: thread CPU time
  holds the work, and the profile records the quota it ran under (``cpu_quota_cores``, `tag.profile.quota`), which
  the cost model divides it by (a wall clock under a 20-ms CFS period saw short ops run inside one period,
  unthrottled, so a 0.3-core device looked nearly as fast as a whole core); no contention probe: the probe's ranks
  would share one quota; joined into one profile set (`tag.profile.profile_set`);
* the plans: `tag plan --profile SET` (baselines, searched, random), so each plan records the set's path and hash.

Each plan is measured with the deploy runtime across the namespaces (`launch.run_script` + `batch_worker.py`) and
predicted three ways: `product` = what `tag deploy` prints (`tag.cli.deploy.predict_as_run` on the job, the cost
model rebuilt from the plan's recorded profile set); `planner` = the planner's mode on the same profiles; `bench
contention` = the benchmark-only model of earlier rounds (deploy mode with the handoff probe run across the
namespaces, `fidelity.predict_ms(contention=...)`). Everything it made is removed when it returns (also on an
exception). A NIC goodput probe (`probe`) is reported beside the configured rates.
"""

from __future__ import annotations

import json
import os
import sys

from emulate import cpuquota, launch, netns, probe
from tag.cli.deploy import predict_as_run
from tag.deploy.job import load_job
from tag.profile.profile_set import write_profile_set

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _profile_links(star, quota, work: str, path: str) -> None:
    """`tag profile links` across the emulated machines (module docstring) into `path`."""
    args = ["tag.cli", "profile", "links", "--repeats", "3", "--warmup", "1", "--timeout", "900", "-o", path]
    launch.run_script(star, quota, "-m", [], work, port=29613, timeout_s=1200, log_name="emulated-links",
                      args_of=lambda i: args + ["--device-type", f"cpu-m{i}"])


def emulated_rows(fid, models: list[str], rates_mbit: list[float], quotas: list[float], a, work: str, log):
    """Fidelity rows (`fid.Row`) on the emulated cluster, plus a dict describing what was emulated."""
    ok, why = netns.available()
    if not ok:
        raise SystemExit(f"emulation unavailable: {why}")
    qok, qwhy = cpuquota.available()
    star = netns.Star(rates_mbit)
    quota = cpuquota.CpuQuota(quotas) if qok else None
    info = {"nic_mbit": rates_mbit, "quotas": quotas if qok else None, "cgroup": qwhy,
            "delay": "none configured (" + (netns.delay_available()[1] or "netem available") + ")"}
    try:
        info["probe_mbit_0to1"] = probe.measure_mbit(star, 0, 1, nbytes=2_000_000)
        topo = os.path.join(work, "emulated.json")
        if not (a.reuse and os.path.exists(topo)):
            _profile_links(star, quota, work, topo)
        entries, profiles_of = [], {}
        for name in models:
            model = os.path.join(fid.MODELS, f"{name}.onnx")
            profs = []
            for i in range(len(quotas)):
                prof = os.path.join(work, f"{name}-profile-m{i}.json")
                if not (a.reuse and os.path.exists(prof)):
                    fid.profile_ops(model, a.batch_size, a.rows, prof, device_type=f"cpu-m{i}", clock="thread",
                                    wrap=(lambda c, i=i: quota.wrap(i, c)) if quota else None)
                profs.append(prof)
            profiles_of[name] = profs
            both = os.path.join(work, f"{name}-profiles.json")
            write_profile_set(profs, both)
            plans = fid.build_plans(model, topo, both, a.batch_size, work, a.random, a.seed, stem=f"emu-{name}")
            entries += [(f"{name}/{label}", plan, model) for label, plan in plans.items()]
            log(f"  emulated: planned {name}: {len(plans)} plans")
        # job files named emu-<model>--<plan> so they never overwrite the loopback table's results in `work`
        paths = fid.prepare_jobs([("emu-" + k, p, m) for k, p, m in entries], a.steps, work)
        jobs_file = os.path.join(work, "emu-jobs.json")
        with open(jobs_file, "w") as f:
            json.dump([p for p in paths if not os.path.exists(p + ".error")], f)
        hand = os.path.join(work, "emu-handoff.json")
        probes = []
        for stage in ("before", "after"):
            if stage == "after":
                launch.run_script(star, quota, os.path.join(HERE, "emulate", "batch_worker.py"),
                                  [jobs_file, str(a.rounds)], work)
            launch.run_script(star, quota, os.path.join(HERE, "emulate", "handoff_probe.py"), [hand], work, port=29612)
            with open(hand) as f:
                probes.append(json.load(f))
        info["probes"] = probes
    finally:
        star.close()
        if quota is not None:
            quota.close()
    contention = fid.probe_mean(probes)
    rows = []
    for (key, plan, model), path in zip(entries, paths):
        try:
            with open(path + ".result.json") as f:
                res = json.load(f)
        except OSError:
            log(f"  {key}: no measurement ({path}.error)")
            continue
        profs = profiles_of[key.split("/")[0]]
        product = predict_as_run(load_job(path)).step_ms  # what `tag deploy` prints
        pred_ov = fid.predict_ms(model, topo, plan, profs, overlap_sync=True)
        pred_c = fid.predict_ms(model, topo, plan, profs, contention=contention)
        rows.append(fid.Row(*key.split("/"), product, pred_ov, pred_c, res["measured_step_ms"], res["cpu_ms"]))
        log(f"  emulated {key:30s} predicted {product:9.2f} ms  measured {res['measured_step_ms']:9.2f} ms")
    info.update(contention)
    return rows, info
