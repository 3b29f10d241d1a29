"""The step block's ``fill_ms`` (a fresh zeroed buffer per bucket size, what ZeRO's CPU runtime allocates each step):
JSON round trip and validation, and the cost model's interpolation by hand (tests/profile/test_profile_ops.py checks
that `tag profile ops` measures one per bucket size)."""

import dataclasses

import pytest

from tag.cost.profile_db import from_json, load, save, to_json
from tag.cost.profiled import ProfileCostModel
from tag.errors import InputError
from tag.strategy import TrainingConfig
from tag.topology.cluster import DeviceType

from test_profile_step_db import CPU, _db, _gg


def _with_fill(gg):
    db = _db(gg)  # copy_bytes [1000, 3000]
    return dataclasses.replace(db, step=dataclasses.replace(db.step, fill_ms=[0.5, 1.5]))


def test_round_trip_and_validation(tmp_path):
    db = _with_fill(_gg())
    save(db, str(tmp_path / "p.json"))
    assert load(str(tmp_path / "p.json")).step.fill_ms == [0.5, 1.5]
    obj = to_json(db)
    obj["step"]["fill_ms"] = [0.5]
    with pytest.raises(InputError, match=r"p\.json: step\.fill_ms: expected a non-empty list of 2 numbers"):
        from_json(obj, "p.json")
    del obj["step"]["fill_ms"]
    assert from_json(obj, "p.json").step.fill_ms == []  # older profiles: not measured
    assert "fill_ms" not in to_json(_db(_gg()))["step"]


def test_cost_model_interpolates_in_bytes_on_its_device_type_only():
    gg = _gg()
    cm = ProfileCostModel(gg, TrainingConfig(optimizer="adam"), _with_fill(gg))
    assert cm.fresh_fill_ms(CPU, 2000) == pytest.approx(1.0)  # halfway between 0.5 and 1.5
    assert cm.fresh_fill_ms(CPU, 6000) == pytest.approx(3.0)  # beyond: the last segment's line
    assert cm.fresh_fill_ms(DeviceType("other", 0.1, 16.0, 200.0, kind="cpu"), 2000) == 0.0
    assert ProfileCostModel(gg, TrainingConfig(optimizer="adam"), _db(gg)).fresh_fill_ms(CPU, 2000) == 0.0
    assert cm.scaled(2.0).fresh_fill_ms(CPU, 2000) == pytest.approx(2.0)
