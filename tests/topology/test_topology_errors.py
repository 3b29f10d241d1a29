"""Malformed topology files: exit 2 and one stderr line naming the file and the JSON path."""

import copy
import json
import os
import subprocess
import sys

import pytest

from tag.cli import main

GOOD = {"version": 1, "name": "ok", "machines": [
    {"name": "m0", "devices": [{"type": "V100-16GB", "count": 2}], "nic_bandwidth_gbps": 100},
    {"name": "m1", "devices": [{"type": "T4-16GB", "count": 1}], "nic_bandwidth_gbps": 50}]}


def _mut(fn):
    obj = copy.deepcopy(GOOD)
    fn(obj)
    return json.dumps(obj)


def _set(path_fn, value):
    return lambda o: path_fn(o, value)


CASES = [
    # (id, file text, JSON path the message must contain)
    ("count-string", _mut(lambda o: o["machines"][1]["devices"][0].__setitem__("count", "2")), "machines[1].devices[0].count"),
    ("count-negative", _mut(lambda o: o["machines"][1]["devices"][0].__setitem__("count", -2)), "machines[1].devices[0].count"),
    ("count-zero", _mut(lambda o: o["machines"][0]["devices"][0].__setitem__("count", 0)), "machines[0].devices[0].count"),
    ("count-fraction", _mut(lambda o: o["machines"][0]["devices"][0].__setitem__("count", 1.5)), "machines[0].devices[0].count"),
    ("nic-zero", _mut(lambda o: o["machines"][1].__setitem__("nic_bandwidth_gbps", 0)), "machines[1].nic_bandwidth_gbps"),
    ("nic-bool", _mut(lambda o: o["machines"][0].__setitem__("nic_bandwidth_gbps", True)), "machines[0].nic_bandwidth_gbps"),
    ("nic-missing", _mut(lambda o: o["machines"][1].pop("nic_bandwidth_gbps")), "machines[1].nic_bandwidth_gbps"),
    ("intra-negative", _mut(lambda o: o["machines"][0].__setitem__("intra_bandwidth_gbps", -128)), "machines[0].intra_bandwidth_gbps"),
    ("duplicate-machine", _mut(lambda o: o["machines"][1].__setitem__("name", "m0")), "machines[1].name"),
    ("unknown-key", _mut(lambda o: o["machines"][0].__setitem__("gpus", 2)), "machines[0].gpus"),
    ("unknown-top-key", _mut(lambda o: o.__setitem__("racks", [])), "racks"),
    ("unknown-device-type", _mut(lambda o: o["machines"][1]["devices"][0].__setitem__("type", "V200")), "machines[1].devices[0].type"),
    ("link-unknown-node", _mut(lambda o: o.__setitem__("links", [{"between": ["m0", "m9"], "bandwidth_gbps": 10}])), "links[0].between[1]"),
    ("link-self", _mut(lambda o: o.__setitem__("links", [{"between": ["m0", "m0"], "bandwidth_gbps": 10}])), "links[0].between"),
    ("link-duplicate", _mut(lambda o: o.__setitem__("links", [{"between": ["m0", "m1"], "bandwidth_gbps": 10},
                                                              {"between": ["m1", "m0"], "bandwidth_gbps": 20}])), "links[1].between"),
    ("link-no-bandwidth", _mut(lambda o: o.__setitem__("links", [{"between": ["m0", "m1"]}])), "links[0].bandwidth_gbps"),
    ("unreachable", _mut(lambda o: (o["switches"] if "switches" in o else o.setdefault("switches", [{"name": "s"}]),
                                    o.__setitem__("links", [{"between": ["m0", "s"], "bandwidth_gbps": 10}]),
                                    o["machines"].append({"name": "m2", "devices": [{"type": "cpu", "count": 1}],
                                                          "nic_bandwidth_gbps": 1}))), "machines[1]"),
    ("bad-version", _mut(lambda o: o.__setitem__("version", 2)), "version"),
    ("no-version", _mut(lambda o: o.pop("version")), "version"),
    ("empty-machines", _mut(lambda o: o.__setitem__("machines", [])), "machines"),
    ("machines-object", _mut(lambda o: o.__setitem__("machines", {"m0": {}})), "machines"),
    ("empty-devices", _mut(lambda o: o["machines"][0].__setitem__("devices", [])), "machines[0].devices"),
    ("device-type-missing-field", _mut(lambda o: o.__setitem__("device_types", {"X1": {"peak_tflops": 3}})), "device_types.X1.memory_gb"),
    ("device-type-nan", _mut(lambda o: o.__setitem__("device_types", {"T4-16GB": {"peak_tflops": float("nan")}})), "device_types.T4-16GB.peak_tflops"),
    ("switch-name-clash", _mut(lambda o: o.__setitem__("switches", [{"name": "m1"}])), "switches[0].name"),
    ("slash-in-name", _mut(lambda o: o["machines"][0].__setitem__("name", "a/b")), "machines[0].name"),
    ("truncated-json", json.dumps(GOOD)[:57], "line 1, column"),
    ("not-json", "machines: [m0, m1]\n", "line 1, column 1"),
    ("root-array", "[1, 2]", "$"),
    ("empty-file", "", "line 1, column 1"),
]


@pytest.mark.parametrize("case_id,text,where", CASES, ids=[c[0] for c in CASES])
def test_malformed_topology_exits_2_with_one_line(tmp_path, capsys, case_id, text, where):
    path = tmp_path / f"bad-{case_id}.json"
    path.write_text(text)
    rc = main(["inspect", str(path)])
    out, err = capsys.readouterr()
    assert rc == 2
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert str(path) in err
    assert where in err, err
    assert "Traceback" not in err and out == ""


def test_there_are_at_least_15_distinct_cases():
    assert len({c[1] for c in CASES}) >= 15


def test_missing_file_is_exit_2(tmp_path, capsys):
    rc = main(["inspect", str(tmp_path / "nope.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "nope.json" in err and err.count("\n") == 1


@pytest.mark.parametrize("case_id", ["count-negative", "truncated-json"])
def test_console_script_subprocess(tmp_path, case_id):
    text, where = next((c[1], c[2]) for c in CASES if c[0] == case_id)
    path = tmp_path / f"{case_id}.json"
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "tag.cli", "inspect", str(path)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2
    lines = proc.stderr.strip("\n").split("\n")
    assert len(lines) == 1 and str(path) in lines[0] and where in lines[0]


def test_an_unknown_device_type_names_close_catalog_types(tmp_path, capsys):
    """A misspelt type lists the catalog types difflib finds close; one nothing resembles lists none; both point at
    `tag topo catalog`."""
    for typo, close in (("V100-16G", "close: V100-16GB"), ("Quantum-9000", None)):
        obj = copy.deepcopy(GOOD)
        obj["machines"][0]["devices"][0]["type"] = typo
        p = tmp_path / "t.json"
        p.write_text(json.dumps(obj))
        capsys.readouterr()
        assert main(["inspect", str(p)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "machines[0].devices[0].type" in err and "`tag topo catalog`" in err
        assert (close in err) if close else ("close:" not in err)
