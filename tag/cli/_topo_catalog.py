"""`tag topo catalog [--json]`: the built-in device types with their figures and sources.

Figures are `tag.topology.catalog.CATALOG` as the cost model reads them: `peak_tflops` (10^12 FP32 FLOP/s),
`memory_gb` (10^9 bytes), `memory_bandwidth_gbps` (10^9 bits/s; 900 GB/s is 7200), and the tensor-core
peaks the catalog records in `extra` (`tf32_tflops`, `amp_tflops`; null where a device has none).
"""

from __future__ import annotations

from tag.cli.util import add_output_flags, add_verb

_BASE_KEYS = ("name", "kind", "peak_tflops", "memory_gb", "memory_bandwidth_gbps")


def add_parser(verbs):
    """Add the `catalog` action to `tag topo`'s sub-parsers."""
    c = add_verb(verbs, "catalog", "list the built-in device types with their figures and sources",
                 "tag topo catalog\n  tag topo catalog --json",
                 description="List the device types a topology.json may name without defining them: peak FP32 "
                             "TFLOPS, memory (GB), memory bandwidth (Gb/s = 8 x the datasheet's GB/s), the TF32 "
                             "and FP16 (AMP) tensor-core peaks, and the datasheet each figure comes from. A "
                             "topology's device_types entries override these field by field (docs/topology.md).")
    add_output_flags(c)
    return c


def catalog_rows() -> list[dict]:
    """One dict per catalog type, catalog order: the base figures, every `extra` key the catalog uses
    (None where a type lacks it), and `source`."""
    from tag.topology.catalog import CATALOG, SOURCES

    extra_keys = sorted({k for t in CATALOG.values() for k in t.extra})
    rows = []
    for t in CATALOG.values():
        row = {"name": t.name, "kind": t.kind, "peak_tflops": t.peak_tflops, "memory_gb": t.memory_gb,
               "memory_bandwidth_gbps": t.memory_bandwidth_gbps}
        row.update({k: t.extra.get(k) for k in extra_keys})
        row["source"] = SOURCES.get(t.name, "")
        rows.append(row)
    return rows


def _fmt(v, header: str) -> str:
    """A cell: numbers as the catalog writes them (%g); a missing figure as '-' right-aligned under `header`."""
    return "-".rjust(len(header)) if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def run(args) -> int:
    from tag.cli.util import emit
    from tag.textfmt import table

    rows = catalog_rows()
    figures = [k for k in rows[0] if k != "source"] if rows else list(_BASE_KEYS)
    text = table([[_fmt(r[k], k) for k in figures] for r in rows], figures)
    width = max((len(r["name"]) for r in rows), default=0)
    sources = "\n".join(f"  {r['name']:<{width}}  {r['source']}" for r in rows)
    emit(args, {"device_types": rows},
         f"{text}\n\nunits: peak_tflops, tf32_tflops, amp_tflops 10^12 FLOP/s (dense); memory_gb 10^9 bytes; "
         f"memory_bandwidth_gbps 10^9 bits/s\nsources:\n{sources}")
    return 0
