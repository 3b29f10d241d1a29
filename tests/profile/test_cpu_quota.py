"""The CPU quota: read from a fake cgroup tree (v1 and v2, the smallest along the path), kept in the profile, and
dividing the profile device's compute, update and copy times in the cost model (by hand against the unlimited
profile); another device type is left alone."""

import dataclasses

import pytest

from tag.cost.profile_db import from_json, to_json
from tag.cost.profiled import ProfileCostModel
from tag.errors import InputError
from tag.profile.quota import cpu_quota_cores
from tag.strategy import TrainingConfig
from tag.topology.cluster import DeviceType

from test_profile_step_db import CPU, _db, _gg


def _tree(tmp_path, cgroup_lines: str, files: dict[str, str]):
    proc = tmp_path / "cgroup"
    proc.write_text(cgroup_lines)
    root = tmp_path / "fs"
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return str(proc), str(root)


def test_v1_quota_over_period(tmp_path):
    proc, root = _tree(tmp_path, "2:cpuacct:/\n1:cpu:/job/a\n0::/\n",
                       {"cpu/job/a/cpu.cfs_quota_us": "6000\n", "cpu/job/a/cpu.cfs_period_us": "20000\n",
                        "cpu/job/cpu.cfs_quota_us": "-1\n", "cpu/job/cpu.cfs_period_us": "100000\n"})
    assert cpu_quota_cores(proc, root) == pytest.approx(0.3)


def test_v1_the_parent_limits_the_child(tmp_path):
    proc, root = _tree(tmp_path, "3:cpu,cpuacct:/job/a\n",
                       {"cpu,cpuacct/job/a/cpu.cfs_quota_us": "150000", "cpu,cpuacct/job/a/cpu.cfs_period_us": "100000",
                        "cpu,cpuacct/job/cpu.cfs_quota_us": "50000", "cpu,cpuacct/job/cpu.cfs_period_us": "100000"})
    assert cpu_quota_cores(proc, root) == pytest.approx(0.5)


def test_v2_cpu_max(tmp_path):
    proc, root = _tree(tmp_path, "0::/kube/pod\n", {"kube/pod/cpu.max": "25000 100000\n", "kube/cpu.max": "max 100000\n"})
    assert cpu_quota_cores(proc, root) == pytest.approx(0.25)


def test_no_quota(tmp_path):
    proc, root = _tree(tmp_path, "1:cpu:/\n0::/\n", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000",
                                                     "cpu.max": "max 100000"})
    assert cpu_quota_cores(proc, root) is None
    assert cpu_quota_cores(str(tmp_path / "missing"), root) is None


def test_round_trip_and_a_bad_quota_is_named():
    obj = {"version": 1, "device_type": "cpu", "ops": {}, "cpu_quota_cores": 0.3}
    db = from_json(obj, "p.json")
    assert db.cpu_quota_cores == 0.3 and to_json(db)["cpu_quota_cores"] == 0.3
    assert "cpu_quota_cores" not in to_json(from_json({"version": 1, "device_type": "cpu"}, "p.json"))
    with pytest.raises(InputError, match=r"p\.json: cpu_quota_cores: expected a positive number of cores"):
        from_json({**obj, "cpu_quota_cores": 0}, "p.json")


def test_a_quarter_core_makes_the_profiles_device_four_times_slower():
    gg, tc = _gg(), TrainingConfig(optimizer="adam")
    free = ProfileCostModel(gg, tc, _db(gg))
    limited = ProfileCostModel(gg, tc, dataclasses.replace(_db(gg), cpu_quota_cores=0.25))
    other = DeviceType("other", 0.1, 16.0, 200.0, kind="cpu")
    for g in (0, 1):
        for rows in (2, 3, 4):
            assert limited.group_fwd_ms(g, CPU, rows) == pytest.approx(4 * free.group_fwd_ms(g, CPU, rows))
            assert limited.group_bwd_ms(g, CPU, rows) == pytest.approx(4 * free.group_bwd_ms(g, CPU, rows))
            assert limited.group_fwd_ms(g, other, rows) == pytest.approx(free.group_fwd_ms(g, other, rows))
        assert limited.update_ms(g, CPU) == pytest.approx(4 * free.update_ms(g, CPU))
    assert limited.sync_copy_ms(CPU, 2000) == pytest.approx(tuple(4 * v for v in free.sync_copy_ms(CPU, 2000)))
    # a quota above one core leaves a one-thread rank alone; the contention scale still multiplies on top
    assert ProfileCostModel(gg, tc, dataclasses.replace(_db(gg), cpu_quota_cores=2.0)).group_fwd_ms(0, CPU, 2) == \
        pytest.approx(free.group_fwd_ms(0, CPU, 2))
    assert limited.scaled(1.5).group_fwd_ms(0, CPU, 2) == pytest.approx(6 * free.group_fwd_ms(0, CPU, 2))


def test_the_probes_stretch_is_not_charged_twice_under_a_quota():
    """Two ranks under one 0.5-core quota: wall / CPU is 2 with one computing, 4 with both (they share it). The cost
    model already divides every time by 0.5, so the prediction's stretch is 1 alone and 2 together: x2 and x4 in all."""
    from tag.cost.contention import compute_scale

    block = {"clock": "thread", "ranks": 2, "rows": 32, "handoff_ms": 0.2, "alone_stretch": 2.0,
             "together_stretch": 4.0, "together_speed": 1.0}
    limited = from_json({"version": 1, "device_type": "cpu", "cpu_quota_cores": 0.5, "contention": block}, "p.json")
    free = from_json({"version": 1, "device_type": "cpu", "contention": block}, "p.json")
    assert limited.contention.quota_scale == 2.0 and free.contention.quota_scale == 1.0
    gg, tc = _gg(), TrainingConfig(optimizer="adam")
    model = ProfileCostModel(gg, tc, dataclasses.replace(_db(gg), cpu_quota_cores=0.5))
    base = ProfileCostModel(gg, tc, _db(gg)).group_fwd_ms(0, CPU, 2)
    for c, total in ((1.0, 2.0), (2.0, 4.0)):
        assert model.scaled(compute_scale(limited.contention, c, 2)).group_fwd_ms(0, CPU, 2) == pytest.approx(total * base)
    assert compute_scale(free.contention, 2.0, 2) == pytest.approx(4.0)  # without a quota the stretch is all there is
