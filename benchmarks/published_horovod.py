"""The 512-GPU Horovod rows, and why simulations of the same cluster disagree (lab entry point).

    python benchmarks/published_horovod.py

Prints, for Inception-v3, ResNet-101 and VGG-16 on 128 x 4 P100 (25 Gb/s NICs, the ring step latency alpha fitted
on VGG-16 by `tag.bench.published_horovod`) at 64 images per GPU, the scaling efficiency 100 x T1 / T512 of:

* Horovod as modelled (`tag bench --published` prints the same figures): 64 MiB fusion on a 5 ms cycle, NCCL2's
  flat ring;
* `simulate` of the 512-device group graph (`group_graph(key, 512)`) with every replicated group synced by its own
  flat ring (bucket cap 0: version 1's data parallelism, no fusion);
* the same with the flat ring in 64 MiB buckets (DDP-style static fusion, no cycle);
* `tag simulate --baseline dp-even` and dp-proportional (25 MiB buckets, ring / tree / hierarchical by cost).
"""

from __future__ import annotations


def main() -> int:
    from tag.bench.data import published_table
    from tag.bench.published_horovod import (HOROVOD_MODELS, PHASES, compute_profile, fit_step_latency_us,
                                             predict_horovod, simulate_pct)
    from tag.bench.published_predict import group_graph
    from tag.bench.published_rows import read_table
    from tag.textfmt import table

    row = read_table(published_table("horovod512.json"))[0]
    n = row["machines"] * row["gpus_per_machine"]
    b = row["per_gpu_batch"]
    alpha = fit_step_latency_us(compute_profile("vgg16", row["device"], b, n), n, row["nic_gbps"],
                                row["scaling_efficiency_pct"]["VGG-16"], phases=PHASES)
    print(f"{row['system']}, {b} per GPU; ring step latency alpha = {alpha:.2f} us (fitted on VGG-16)\n")
    rows = []
    for name, key in HOROVOD_MODELS.items():
        prof = compute_profile(key, row["device"], b, n)
        hv = 100.0 * prof.iteration_ms / predict_horovod(prof, n, row["nic_gbps"], alpha, phases=PHASES)[0]
        rows.append([name, row["scaling_efficiency_pct"][name], f"{hv:.1f}",
                     f"{group_graph(key, 1).n_groups} / {group_graph(key, n).n_groups}",
                     f"{simulate_pct(key, row, alpha, sync='ring', bucket_mb=0):.1f}",
                     f"{simulate_pct(key, row, alpha, sync='ring', bucket_mb=64):.1f}",
                     f"{simulate_pct(key, row, alpha, 'dp-even'):.1f}",
                     f"{simulate_pct(key, row, alpha, 'dp-proportional'):.1f}"])
    print(table(rows, ["model", "published %", "Horovod model %", "groups (1 / 512 dev)", "ring per group %",
                       "ring 64 MiB buckets %", "dp-even %", "dp-proportional %"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
