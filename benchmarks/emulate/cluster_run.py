"""Fidelity on an emulated heterogeneous cluster: machines = namespaces with shaped NICs, devices = CPU quotas.

`emulated_rows(...)` builds the cluster (`netns.Star` + `cpuquota.CpuQuota`, one rank per machine), measures
it (each NIC's TCP goodput with `probe`; each device's op profile with `tag profile ops` run under its own
quota, in thread CPU time; the contention probe across the emulated machines), writes the measured topology (machine i has device
type ``cpu-m<i>`` and NIC ``rate_i x measured/configured goodput``), plans the strategies, measures them
with the deploy runtime across the namespaces (`launch.run_script` + `batch_worker.py`), and returns the
fidelity rows. Everything it made is removed when it returns (also on an exception).
"""

from __future__ import annotations

import json
import os
import sys

from emulate import cpuquota, launch, netns, probe

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _topology(star, local_topo: str, goodput_ratio: float, path: str) -> None:
    with open(local_topo) as f:
        cpu = json.load(f)["device_types"]["cpu"]
    obj = {"version": 1, "name": "emulated", "device_types": {}, "machines": [],
           "x-emulated": {"nic_mbit": [m.rate_mbit for m in star.machines], "goodput_ratio": goodput_ratio,
                          "delay": "none" if not star.delay_ok else "netem"}}
    for i, m in enumerate(star.machines):
        obj["device_types"][f"cpu-m{i}"] = dict(cpu)
        obj["machines"].append({"name": m.name, "devices": [{"type": f"cpu-m{i}", "count": 1}],
                                "nic_bandwidth_gbps": round(m.rate_mbit * goodput_ratio / 1e3, 6)})
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


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
        got = probe.measure_mbit(star, 0, 1, nbytes=2_000_000)
        ratio = got / min(m.rate_mbit for m in star.machines)
        info["probe_mbit_0to1"] = got
        topo = os.path.join(work, "emulated.json")
        _topology(star, os.path.join(work, f"local{a.nproc}.json"), ratio, topo)
        entries, profiles_of = [], {}
        for name in models:
            model = os.path.join(fid.MODELS, f"{name}.onnx")
            profs = []
            for i in range(len(quotas)):
                prof = os.path.join(work, f"{name}-profile-m{i}.json")
                if not (a.reuse and os.path.exists(prof)):
                    fid.profile_ops(model, a.batch_size, a.rows, prof, wrap=(lambda c, i=i: quota.wrap(i, c)) if quota else None)
                    with open(prof) as f:
                        obj = json.load(f)
                    obj["device_type"] = f"cpu-m{i}"  # measured under machine i's quota: that device's figures
                    with open(prof, "w") as f:
                        json.dump(obj, f)
                profs.append(prof)
            profiles_of[name] = profs
            plans = fid.build_plans(model, topo, profs[0], a.batch_size, work, a.random, a.seed, stem=f"emu-{name}")
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
        pred = fid.predict_ms(model, topo, plan, profs)
        pred_ov = fid.predict_ms(model, topo, plan, profs, overlap_sync=True)
        pred_c = fid.predict_ms(model, topo, plan, profs, contention=contention)
        rows.append(fid.Row(*key.split("/"), pred, pred_ov, pred_c, res["measured_step_ms"], res["cpu_ms"]))
        log(f"  emulated {key:30s} predicted {pred_c:9.2f} ms  measured {res['measured_step_ms']:9.2f} ms")
    info.update(contention)
    return rows, info
