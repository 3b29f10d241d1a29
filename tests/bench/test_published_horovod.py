"""The 512-GPU Horovod model: fusion cycles, the flat ring and the iteration, each against figures worked by hand."""

import pytest

from tag.bench.data import published_table
from tag.bench.published_horovod import (FUSION_BYTES, HOROVOD_MODELS, ComputeProfile, fit_step_latency_us,
                                         flat_ring_ms, fusion_schedule, horovod_cluster, predict_horovod)
from tag.bench.published_predict import model_path
from tag.bench.published_rows import read_table

MIB = 2 ** 20


def _ar(nbytes):  # 1 ms + 10 bytes per ms
    return 1.0 + nbytes / 10.0


def test_fusion_waits_for_the_cycle_and_fuses_what_is_ready():
    """Cycle 5 ms, cap 25 bytes. Gradients of 10 and 10 ready at 0.5 ms: the first cycle at or after 0.5 is 5;
    they fuse (20 <= 25): 5 -> 5 + 1 + 2 = 8. The next cycle starts at max(5 + 5, 8) = 10, where the 30-byte
    gradient (ready at 7) goes alone (above the cap): 10 -> 10 + 1 + 3 = 14."""
    got = fusion_schedule([(0.5, 10.0), (0.5, 10.0), (7.0, 30.0)], _ar, 5.0, 25.0)
    assert [(f.start_ms, f.end_ms, f.nbytes, f.tensors) for f in got] == [(5.0, 8.0, 20.0, 2), (10.0, 14.0, 30.0, 1)]


def test_fusion_cap_splits_a_cycle_and_a_long_cycle_delays_the_next():
    """Four 10-byte gradients ready at 1 ms, cap 25: the cycle at 5 runs buffers of 20 (5 -> 8) and 20 (8 -> 11).
    A gradient ready at 9 waits for the next cycle, which starts when the work ends (11 > 5 + 5): 11 -> 13."""
    got = fusion_schedule([(1.0, 10.0)] * 4 + [(9.0, 10.0)], _ar, 5.0, 25.0)
    assert [(f.start_ms, f.end_ms, f.nbytes) for f in got] == [(5.0, 8.0, 20.0), (8.0, 11.0, 20.0), (11.0, 13.0, 10.0)]


def test_fusion_idle_cycles_skip_to_the_next_ready_gradient():
    """Ready at 5 (a cycle start: taken there) and at 23 (cycles 10, 15, 20 idle; taken at 25)."""
    got = fusion_schedule([(5.0, 10.0), (23.0, 10.0)], _ar, 5.0, 25.0)
    assert [f.start_ms for f in got] == [5.0, 25.0]


def test_flat_ring_by_hand():
    """512 GPUs, 25 Gb/s = 3.125e6 bytes/ms, 64 MiB: 2 x 511/512 x 67,108,864 / 3.125e6 = 42.865... ms, plus
    1,022 steps x 25 us = 25.55 ms."""
    assert flat_ring_ms(64 * MIB, 512, 25.0, 25.0) == pytest.approx(2 * 511 / 512 * 67108864 / 3.125e6 + 25.55)
    assert flat_ring_ms(64 * MIB, 512, 25.0, 25.0) == pytest.approx(68.4158, abs=1e-3)


@pytest.mark.parametrize("machines,per", [(4, 2), (128, 4)])
def test_the_simulators_ring_on_the_horovod_cluster_is_the_flat_ring(machines, per):
    """`algorithm_ms("ring")` on the cluster the model builds (NIC the narrowest hop, route latency alpha across
    machines) equals 2(n-1)/n x S / B + 2(n-1) x alpha."""
    from tag.sim.algorithms import algorithm_ms

    cl = horovod_cluster(machines, per, "P100-16GB", 25.0, 26.0)
    n = machines * per
    assert float(cl.latency_us[0][per]) == pytest.approx(26.0)
    got = algorithm_ms("ring", cl, tuple(range(n)), 8 * MIB)
    assert got == pytest.approx(2 * (n - 1) / n * 8 * MIB / 3.125e6 + 2 * (n - 1) * 0.026)


def test_iteration_is_one_gpu_plus_the_tail_past_the_backward():
    """T1 = 100 ms, backward ends at 90; gradients 64 MiB ready at 60 and 32 MiB at 88; ring over 2 GPUs at
    8 Gb/s (1e6 bytes/ms), alpha 0: an all-reduce of S takes S / 1e6 ms (2(n-1)/n = 1). Cycles of 5 ms: 64 MiB
    runs 60 -> 127.108864; the next cycle starts there and takes 32 MiB: -> 160.663296. T2 = 100 + 70.663296."""
    prof = ComputeProfile(100.0, 90.0, ((60.0, 64.0 * MIB), (88.0, 32.0 * MIB)))
    t, fused = predict_horovod(prof, 2, 8.0, 0.0)
    assert [f.start_ms for f in fused] == pytest.approx([60.0, 127.108864])
    assert t == pytest.approx(100.0 + 60.0 + 96 * MIB / 1e6 - 90.0)


def test_no_tail_when_the_ring_keeps_up():
    prof = ComputeProfile(100.0, 90.0, ((10.0, 1000.0),))
    assert predict_horovod(prof, 2, 8.0, 0.0)[0] == pytest.approx(100.0)


def test_fitted_latency_reproduces_its_target():
    """A toy profile whose only gradient is ready at the end of the backward: T_n = T1 + ring(S); the fit returns
    the alpha at which 100 x T1 / T_n is the target, which is worked out in closed form here."""
    s = 50 * MIB
    prof = ComputeProfile(100.0, 100.0, ((100.0, float(s)),))
    n, bw = 16, 25.0
    target = 75.0  # T_n = 133.33: ring(S) = 33.33 ms = 2 x 15/16 x S / 3.125e6 (31.457 ms) + 30 alpha
    want_ms = (100.0 / 0.75 - 100.0 - 2 * 15 / 16 * s / 3.125e6) / 30  # 0.0625 ms
    assert fit_step_latency_us(prof, n, bw, target) == pytest.approx(want_ms * 1e3, rel=1e-6)


def test_published_rows_have_a_source_and_a_graph():
    rows = read_table(published_table("horovod512.json"))
    assert rows and all(r["source"] for r in rows)
    for r in rows:
        assert r["machines"] * r["gpus_per_machine"] == 512
        for name in r["scaling_efficiency_pct"]:
            assert model_path(HOROVOD_MODELS[name]).is_file()
    assert FUSION_BYTES == 64 * MIB


def test_cycle_phases_average_the_wait_for_the_next_cycle():
    """One gradient ready at 1 ms, the backward ending there, an all-reduce of 1 ms, 5 ms cycles. With the
    iteration starting 0, 1, 2, 3, 4 ms after a cycle start, the gradient waits for the cycle at absolute 5 ms: the
    tails past the backward are 5, 4, 3, 2, 1 ms; their mean is 3."""
    prof = ComputeProfile(10.0, 1.0, ((1.0, 8.0),))
    fixed = lambda s: 1.0  # noqa: E731
    assert predict_horovod(prof, 2, 8.0, 0.0, phases=1, allreduce_ms=fixed)[0] == pytest.approx(15.0)
    assert predict_horovod(prof, 2, 8.0, 0.0, phases=5, allreduce_ms=fixed)[0] == pytest.approx(13.0)


def test_report_prints_and_serialises_the_horovod_rows():
    from tag.bench.published import PublishedReport
    from tag.bench.published_format import published_json, published_markdown
    from tag.bench.published_horovod import HorovodResult

    h = HorovodResult("VGG-16", 512, 64, 68.0, 400.0, 500.0, 4, 553.4, 21.6, True, 77.7, 77.7)
    assert h.predicted_pct == pytest.approx(80.0)  # 100 x 400 / 500
    rep = PublishedReport("p", False, horovod=[h])
    md = published_markdown(rep)
    assert "| VGG-16 | 512 | 64 | 68 | 80.0 | +12.0 |" in md and "21.6 (fitted here)" in md
    j = published_json(rep)["horovod"][0]
    assert j["predicted_efficiency_pct"] == pytest.approx(80.0) and j["fitted"] is True
