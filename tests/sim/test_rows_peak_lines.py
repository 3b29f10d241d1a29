"""`rows_peak_lines`: the peak of a device computing r rows of a stage as lines in r, read from the memory terms at 1
and 2 rows, against the terms evaluated at other row counts; and its answers kept per device type."""

import numpy as np
import pytest

from tag.modelio import ModelOptions, load_inputs
from tag.search.space import memory_context
from tag.sim import memory as M


@pytest.fixture(scope="module")
def ctx():
    inp = load_inputs("datasets/models/gpt2_tiny.onnx", "datasets/topologies/heterog8.json", ModelOptions())
    return memory_context(inp.gg, inp.cluster, inp.training)


def _peak(lines: M.PeakLines, r: int) -> float:
    return lines.fixed + lines.per_row * r + max(float((lines.intercepts + lines.slopes * r).max(initial=0.0)), 0.0)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_lines_equal_the_terms_at_other_row_counts(ctx, precision):
    n = ctx.gg.n_groups
    for groups in ([0], list(range(n // 2)), list(range(n // 3, n)), list(range(n))):
        lines = M._rows_peak_lines(ctx, groups, 0, precision)
        for r in (3, 7, 40):
            want = float(M.rows_terms(ctx, groups, 0, r, precision).peak()[0])
            assert _peak(lines, r) == pytest.approx(want, rel=1e-9), (groups, r)


def test_answers_are_kept_per_device_type(ctx, monkeypatch):
    monkeypatch.setattr(M, "LINES_KEPT", 2)
    monkeypatch.setattr(ctx, "_rows_peak_lines", None, raising=False)  # a memo of LINES_KEPT is made on first ask
    types = [t.name for t in ctx.dtypes]
    a, b = [i for i, t in enumerate(types) if t == "GTX1080Ti-11GB"][:2]  # two devices of one type
    groups = [1, 2, 3]
    first = M.rows_peak_lines(ctx, groups, a)
    assert M.rows_peak_lines(ctx, groups, b) is first  # the same type: the kept answer
    fresh = M._rows_peak_lines(ctx, groups, b, "fp32")
    assert first.fixed == fresh.fixed and first.per_row == fresh.per_row
    assert np.array_equal(first.intercepts, fresh.intercepts) and np.array_equal(first.slopes, fresh.slopes)
    other = types.index("V100-16GB")
    assert M.rows_peak_lines(ctx, groups, other) is not first
    for g in range(4, 8):
        M.rows_peak_lines(ctx, [g], a)
    assert len(ctx._rows_peak_lines) <= 2
    assert M.rows_peak_lines(ctx, groups, a) is not first  # evicted, built again
