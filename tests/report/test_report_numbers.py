"""tag report: each section's numbers, read back from the HTML with html.parser, against plan.json and an
independent simulate() of the plan and of every baseline made here."""

import json
import math

import pytest
from htmlparse import Page

from tag.modelio import ModelOptions, load_inputs
from tag.search.baselines import BASELINES, build_baseline
from tag.sim import simulate


@pytest.fixture(scope="module")
def checked(hetero_case):
    plan_path, model, topo, html_path = hetero_case
    with open(plan_path) as f:
        plan = json.load(f)
    with open(html_path) as f:
        page = Page(f.read())
    inp = load_inputs(model, topo, ModelOptions(), plan_path=plan_path)
    res = simulate(inp.gg, inp.cluster, inp.cost, inp.strategy, inp.training)
    return plan, page, inp, res


def test_iteration_time_as_text_with_one_decimal(checked):
    plan, page, _, res = checked
    (el,) = page.find("span", id="iteration-ms")
    assert el.text == f"{plan['predicted']['iteration_ms']:.1f} ms"
    assert el.text == f"{res.iteration_ms:.1f} ms"
    assert float(el.attrs["data-ms"]) == res.iteration_ms


def test_every_baseline_by_name_with_its_ms(checked):
    plan, page, inp, _ = checked
    rows = {el.attrs["data-name"]: el for el in page.find("div", cls="cmp")}
    assert list(rows) == ["plan"] + list(BASELINES)
    assert set(plan["baselines"]) == set(BASELINES)
    for name in BASELINES:
        r = simulate(inp.gg, inp.cluster, inp.cost, build_baseline(name, inp.gg, inp.cluster, inp.cost, inp.training),
                     inp.training)
        shown = float(rows[name].attrs["data-ms"])
        assert shown == r.iteration_ms, name
        recorded = plan["baselines"][name]["iteration_ms"]
        if r.oom:
            assert recorded is None and plan["baselines"][name]["oom"]
            assert "out of memory" in page.find("span", cls="val")[list(rows).index(name)].text
        else:
            assert shown == pytest.approx(recorded, abs=1e-4)  # plan.json keeps 4 decimals
            assert f"{recorded:.1f} ms" in "".join(e.text for e in page.find("span", cls="val"))


def test_memory_per_device(checked):
    plan, page, inp, res = checked
    with open(inp.topology_path) as f:
        types = [dev["type"] for m in json.load(f)["machines"] for dev in m["devices"] for _ in range(dev["count"])]
    memory_gb = {"V100-16GB": 16, "GTX1080Ti-11GB": 11, "P100-12GB": 12}  # the catalog's figures
    devs = {el.attrs["data-device"]: el for el in page.find("tr", cls="dev")}
    ids = [d.id for d in inp.cluster.devices]
    assert list(devs) != [] and sorted(devs) == sorted(ids)
    for d, t in zip(ids, types):
        assert float(devs[d].attrs["data-peak-gb"]) == res.peak_memory_gb[d]
        assert float(devs[d].attrs["data-peak-gb"]) == pytest.approx(plan["predicted"]["peak_memory_gb"][d], abs=1e-4)
        assert float(devs[d].attrs["data-usable-gb"]) == pytest.approx(0.92 * memory_gb[t])
    # each bar's class: the peak of every member
    for bar in page.find("div", cls="mem"):
        for d in bar.attrs["data-devices"].split():
            assert float(bar.attrs["data-peak-gb"]) == res.peak_memory_gb[d]


def test_rows_per_device_per_group(checked):
    plan, page, inp, _ = checked
    shown = page.placement()
    ids = [d.id for d in inp.cluster.devices]
    assert len(shown) == len(plan["decisions"]) * len(ids)
    for dec in plan["decisions"]:
        for d in ids:
            assert shown[(dec["group"], d)] == dec["rows"].get(d, 0), (dec["group"], d)


def test_link_bytes(checked):
    _, page, inp, res = checked
    links = {el.attrs["data-link"]: float(el.attrs["data-bytes"]) for el in page.find("tr", cls="link")}
    assert len(links) == len({(l.src, l.dst) for l in inp.cluster.links})
    for key, b in links.items():
        assert b == res.link_bytes.get(key, 0.0), key
    assert {k for k, b in links.items() if b > 0} == set(res.link_bytes)
    # the drawn machine <-> switch lines: both directions summed (one box per machine at 8 devices)
    lines = page.find(None, data_pair="m0<-><switch>")
    assert len(lines) == 1
    for line in lines:
        assert float(line.attrs["data-bytes"]) == res.link_bytes.get("m0-><switch>", 0) + res.link_bytes.get("<switch>->m0", 0)


def test_timeline_compute_sums_to_busy_time(checked):
    """Each drawn lane's compute bars (from the trace) add up to the device's busy time (from the task graph);
    idle = iteration - busy."""
    _, page, inp, res = checked
    lanes = page.find("g", cls="lane")
    assert lanes
    html_order = [el for el in page.elements]
    for lane in lanes:
        d = lane.attrs["data-device"]
        start = html_order.index(lane)
        nxt = next((i for i in range(start + 1, len(html_order)) if "lane" in html_order[i].classes()), len(html_order))
        bars = [el for el in html_order[start + 1:nxt] if el.attrs.get("data-kind") in ("fwd", "bwd", "update")]
        assert sum(float(b.attrs["data-ms"]) for b in bars) == pytest.approx(res.busy_ms[d], rel=1e-9)
        assert float(lane.attrs["data-busy-ms"]) == res.busy_ms[d]
        assert float(lane.attrs["data-idle-ms"]) == pytest.approx(res.iteration_ms - res.busy_ms[d], abs=1e-9)
        kinds = {b.attrs["data-kind"] for b in bars}
        assert {"fwd", "bwd"} <= kinds or res.busy_ms[d] == 0.0


def test_identical_devices_aggregated(checked):
    """heterog8's two GTX machines (m1, m2) have the same kind; devices with the same rows share one column."""
    plan, page, inp, res = checked
    cols = [el.attrs["data-devices"].split() for el in page.find("th", cls="cls")]
    assert sorted(d for c in cols for d in c) == sorted(d.id for d in inp.cluster.devices)
    for c in cols:
        sig = {(inp.cluster.devices[inp.cluster.device_index(d)].type.name,
                tuple(dec["rows"].get(d, 0) for dec in plan["decisions"]), res.peak_memory_gb[d]) for d in c}
        assert len(sig) == 1
    by_sig = {}
    for d in inp.cluster.devices:
        kind = tuple(sorted(x.type.name for x in inp.cluster.devices if x.machine == d.machine))
        served = tuple(dec["group"] for dec in plan["decisions"] if dec.get("server") == d.id)  # a ps server differs
        sig = (d.type.name, kind, tuple(dec["rows"].get(d.id, 0) for dec in plan["decisions"]), served,
               res.peak_memory_gb[d.id], res.busy_ms[d.id])
        by_sig.setdefault(sig, []).append(d.id)
    assert sorted(map(sorted, by_sig.values())) == sorted(map(sorted, cols))


def test_search_block_and_gains_not_recorded(checked):
    plan, page, _, _ = checked
    text = " ".join(el.text for el in page.elements)
    assert plan["search"]["method"] in text
    assert page.find("p", data_gains="not recorded")


def test_self_contained(hetero_case):
    with open(hetero_case[3]) as f:
        html = f.read()
    for needle in ("http://", "https://", "<link", "src="):
        assert needle not in html.replace('xmlns="http://www.w3.org/2000/svg"', ""), needle
    assert math.isfinite(float(Page(html).find("span", id="iteration-ms")[0].attrs["data-ms"]))
