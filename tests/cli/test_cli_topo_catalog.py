"""`tag topo catalog`: every built-in device type, figures checked against the vendors' published values."""

import json

from tag.cli import main
from tag.topology.catalog import CATALOG

# Published values written here by hand (vendor datasheets), not read from the catalog:
# name -> (FP32 TFLOPS, memory GB, memory bandwidth GB/s as printed; tag stores Gb/s = 8 x GB/s)
PUBLISHED = {
    "V100-16GB": (15.7, 16, 900),     # NVIDIA Tesla V100 SXM2 datasheet
    "A100-40GB": (19.5, 40, 1555),    # NVIDIA A100 datasheet, SXM 40 GB
    "T4-16GB": (8.1, 16, 320),        # NVIDIA T4 datasheet
    "H100-80GB": (67.0, 80, 3350),    # NVIDIA H100 SXM datasheet (3.35 TB/s)
}
# Tensor-core peaks, dense: A100 TF32 156 / FP16 312; V100 tensor 125 (no TF32).
PUBLISHED_TENSOR = {"A100-40GB": (156.0, 312.0), "V100-16GB": (None, 125.0)}


def _catalog_json(capsys) -> dict:
    assert main(["topo", "catalog", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_lists_every_catalog_type_once(capsys):
    types = _catalog_json(capsys)["device_types"]
    names = [t["name"] for t in types]
    assert sorted(names) == sorted(CATALOG) and len(names) == len(set(names))
    for t in types:
        for key in ("peak_tflops", "memory_gb", "memory_bandwidth_gbps"):
            assert isinstance(t[key], float) and t[key] > 0, (t["name"], key)
        assert t["kind"] in ("gpu", "cpu") and t["source"].strip(), t["name"]


def test_figures_match_published_datasheets(capsys):
    by_name = {t["name"]: t for t in _catalog_json(capsys)["device_types"]}
    for name, (tflops, mem_gb, gbytes_per_s) in PUBLISHED.items():
        t = by_name[name]
        assert t["peak_tflops"] == tflops and t["memory_gb"] == mem_gb, name
        assert t["memory_bandwidth_gbps"] == gbytes_per_s * 8, name
    for name, (tf32, amp) in PUBLISHED_TENSOR.items():
        assert (by_name[name]["tf32_tflops"], by_name[name]["amp_tflops"]) == (tf32, amp), name


def test_table_names_every_type_and_its_source(capsys):
    assert main(["topo", "catalog"]) == 0
    out = capsys.readouterr().out
    table, _, sources = out.partition("sources:")
    for name in CATALOG:
        assert f"\n{name} " in table and f"  {name} " in sources, name
    assert "NVIDIA A100 datasheet" in sources
