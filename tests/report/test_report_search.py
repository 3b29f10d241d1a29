"""The search section reads per-part times wherever the plan's search block records them."""

from tag.report.search import search_html, search_parts


def test_parts_as_object_and_as_list():
    assert search_parts({"method": "m", "parts": {"start": 10.0, "refine": 8.0}}) == ("parts", [("start", 10.0), ("refine", 8.0)])
    assert search_parts({"gains": [{"part": "tree", "iteration_ms": 5}]}) == ("gains", [("tree", 5.0)])
    assert search_parts({"method": "m", "playouts": 3, "warnings": ["x"]}) is None


def test_gain_percent_worked_by_hand():
    html = search_html({"search": {"method": "m", "parts": {"start": 10.0, "refine": 8.0, "sfb": 9.0}}})
    assert "20.0% faster than the part before" in html  # (10 - 8) / 10
    assert "12.5% slower than the part before" in html  # (8 - 9) / 8
    assert 'data-part="refine" data-ms="8.0"' in html


def test_not_recorded_and_no_search_block():
    assert "not recorded" in search_html({"search": {"method": "mcts", "warnings": ["a", "b"]}})
    assert "a; b" in search_html({"search": {"method": "mcts", "warnings": ["a", "b"]}})
    assert "no search block" in search_html({})
