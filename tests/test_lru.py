"""`tag.lru.Recent`: which keys it keeps, worked by hand."""

import pytest

from tag.lru import Recent


def test_the_least_recently_asked_key_goes_first():
    r = Recent(2)
    assert r.put("a", 1) == 1 and r.put("b", 2) == 2
    assert r.get("a") == 1  # a is now more recent than b
    r.put("c", 3)  # b, asked least recently, goes
    assert "b" not in r and r.get("b") is None
    assert r.get("a") == 1 and r.get("c") == 3 and len(r) == 2
    r.put("d", 4)  # a was asked before c: a goes
    assert r.values() == [3, 4]


def test_putting_a_kept_key_again_replaces_it_and_makes_it_recent():
    r = Recent(2)
    r.put("a", 1)
    r.put("b", 2)
    r.put("a", 10)
    r.put("c", 3)
    assert r.values() == [10, 3]


def test_falsy_values_are_kept_and_a_miss_is_none():
    r = Recent(3)
    r.put("empty", {})
    r.put("zero", 0)
    assert r.get("empty") == {} and r.get("zero") == 0 and r.get("other") is None
    r.clear()
    assert len(r) == 0


def test_size_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        Recent(0)
