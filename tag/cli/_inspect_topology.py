"""`tag inspect TOPOLOGY.json`: a cluster summary (machines, devices, slowest and fastest routes)."""

from __future__ import annotations

from tag.cli.util import emit, table


def run_topology(args) -> int:
    from tag.topology import load_topology, summary

    cluster = load_topology(args.path)
    s = summary(cluster)
    lines = [f"cluster {s['name']}: {s['machines']} machines, {s['devices']} devices, "
             f"{s['total_peak_tflops']:.2f} peak FP32 TFLOPS, {s['total_memory_gb']:.0f} GB device memory"]
    lines.append("")
    lines.append(table(
        [[m["name"], m["devices"], ", ".join(f"{n} x {t}" for t, n in m["device_types"].items()),
          m["peak_tflops"], m["memory_gb"], m["intra_bandwidth_gbps"], m["nic_bandwidth_gbps"]]
         for m in s["machine_list"]],
        ["machine", "devices", "types", "peak TFLOPS", "memory GB", "intra Gb/s", "NIC Gb/s"]))
    if s["switches"]:
        lines += ["", f"switches: {', '.join(s['switches'])}; {s['links']} physical links"]
    if s["slowest_route"]:
        lines.append("")
        lines.append(table(
            [[label, r["from"], r["to"], r["bandwidth_gbps"], r["latency_us"], r["hops"]]
             for label, r in (("slowest", s["slowest_route"]), ("fastest", s["fastest_route"]))],
            ["route", "from", "to", "Gb/s", "latency us", "hops"]))
    emit(args, s, "\n".join(lines))
    return 0
