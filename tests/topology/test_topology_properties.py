"""Property tests: random valid topologies parse and route correctly (checked by brute-force path
enumeration), and random mutations of valid files only ever raise InputError."""

import copy
import json
import math

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tag.errors import InputError
from tag.topology import load_topology, parse_topology, random_topology

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _brute_force(cluster, i, j):
    """(fewest hops, widest bandwidth among those) from device i to j over every simple path, or None."""
    g = nx.Graph()
    for link in cluster.links:
        g.add_edge(link.src, link.dst, bw=link.bandwidth_gbps)
    src, dst = cluster.devices[i].id, cluster.devices[j].id
    others = {d.id for d in cluster.devices} - {src, dst}
    g.remove_nodes_from(others)  # devices are end points, never transit nodes
    best = None
    for path in nx.all_simple_paths(g, src, dst):
        hops = len(path) - 1
        width = min(g.edges[a, b]["bw"] for a, b in zip(path, path[1:]))
        key = (hops, -width)
        if best is None or key < best:
            best = key
    return None if best is None else (best[0], -best[1])


def _check_routes(cluster):
    n = cluster.n_devices
    for i in range(n):
        for j in range(n):
            route = cluster.routes[i][j]
            if i == j:
                assert route == ()
                continue
            links = [cluster.links[k] for k in route]
            assert links[0].src == cluster.devices[i].id and links[-1].dst == cluster.devices[j].id
            assert all(a.dst == b.src for a, b in zip(links, links[1:]))
            assert cluster.bandwidth_gbps[i, j] == min(l.bandwidth_gbps for l in links)
            assert math.isclose(cluster.latency_us[i, j], sum(l.latency_us for l in links))
            hops, width = _brute_force(cluster, i, j)
            assert len(route) == hops and cluster.bandwidth_gbps[i, j] == width


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), layout=st.sampled_from([None, "flat", "direct", "racks"]))
def test_random_topologies_parse_and_routes_match_brute_force(seed, layout):
    topo = random_topology(seed, min_machines=3 if layout == "racks" else 1, max_machines=5,
                           max_devices_per_machine=2, layout=layout)
    assert random_topology(seed, min_machines=3 if layout == "racks" else 1, max_machines=5,
                           max_devices_per_machine=2, layout=layout) == topo  # a function of the seed
    cluster = parse_topology(json.loads(json.dumps(topo)), "r.json")
    assert cluster.n_devices == sum(d["count"] for m in topo["machines"] for d in m["devices"])
    _check_routes(cluster)


@st.composite
def _link_graphs(draw):
    """Arbitrary graphs of machines and switches; connected or not."""
    n_m = draw(st.integers(1, 4))
    n_s = draw(st.integers(0, 2))
    machines = []
    for i in range(n_m):
        m = {"name": f"m{i}", "devices": [{"type": "cpu", "count": draw(st.integers(1, 2))}],
             "intra_bandwidth_gbps": draw(st.sampled_from([8, 64, 128]))}
        if draw(st.booleans()):
            m["nic_bandwidth_gbps"] = draw(st.sampled_from([1, 10, 25, 100]))
        machines.append(m)
    nodes = [f"m{i}" for i in range(n_m)] + [f"s{k}" for k in range(n_s)]
    pairs = [(a, b) for x, a in enumerate(nodes) for b in nodes[x + 1:]]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))) if pairs else []
    links = [{"between": [a, b], "bandwidth_gbps": draw(st.sampled_from([1, 5, 40, 100, 400]))} for a, b in chosen]
    in_link = {x for a, b in chosen for x in (a, b)}
    for m in machines:  # the NIC rule: several machines and in no link -> needs a NIC
        if n_m > 1 and m["name"] not in in_link:
            m.setdefault("nic_bandwidth_gbps", 10)
    return {"version": 1, "machines": machines, "switches": [{"name": f"s{k}"} for k in range(n_s)], "links": links}


@SETTINGS
@given(topo=_link_graphs())
def test_arbitrary_fabrics_route_iff_connected(topo):
    try:
        cluster = parse_topology(topo, "g.json")
    except InputError as e:
        assert "no route" in str(e)
        # independently: some device pair really has no path (rebuild the graph by hand from the file)
        g = nx.Graph()
        on_switch = {x for l in topo["links"] for x, y in (l["between"], l["between"][::-1]) if y.startswith("s")}
        attached = [m["name"] for m in topo["machines"] if "nic_bandwidth_gbps" in m and m["name"] not in on_switch]
        g.add_nodes_from(m["name"] for m in topo["machines"])
        if len(attached) >= 2:
            g.add_edges_from((a, "<switch>") for a in attached)
        g.add_edges_from(tuple(l["between"]) for l in topo["links"])
        machines = {m["name"] for m in topo["machines"]}
        assert not any(machines <= comp for comp in nx.connected_components(g))
        return
    _check_routes(cluster)


_JUNK = [None, -1, 0, 1.5, "x", "", [], {}, [1, 2], {"a": 1}, True, 1e308, float("nan"), 10**12, "m0", "<switch>"]


@st.composite
def _mutations(draw):
    topo = random_topology(draw(st.integers(0, 10**6)), max_machines=4, max_devices_per_machine=3)
    for _ in range(draw(st.integers(1, 3))):
        # walk to a random container inside the object
        node, path = topo, []
        while True:
            keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            k = draw(st.sampled_from(keys))
            child = node[k]
            if isinstance(child, (dict, list)) and child and draw(st.booleans()):
                node = child
                continue
            action = draw(st.sampled_from(["set", "delete", "rename"]))
            if action == "set":
                node[k] = copy.deepcopy(draw(st.sampled_from(_JUNK)))
            elif action == "delete":
                del node[k]
            elif isinstance(node, dict):
                node[str(k) + "_"] = node.pop(k)
            break
    return topo


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=_mutations())
def test_mutated_objects_raise_only_input_error(topo):
    try:
        parse_topology(topo, "m.json")
    except InputError as e:
        assert str(e).startswith("m.json: ") and "\n" not in str(e)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), cut=st.floats(0, 1), flip=st.integers(0, 10**6), char=st.sampled_from('{}[]",:0-x '))
def test_mutated_files_raise_only_input_error(tmp_path_factory, seed, cut, flip, char):
    text = json.dumps(random_topology(seed, max_machines=3, max_devices_per_machine=2))
    pos = flip % len(text)
    text = text[:pos] + char + text[pos + 1:]
    text = text[: max(1, int(len(text) * (0.5 + cut / 2)))] if cut < 0.5 else text
    path = tmp_path_factory.mktemp("mut") / "t.json"
    path.write_text(text)
    try:
        load_topology(str(path))
    except InputError as e:
        assert str(path) in str(e)
