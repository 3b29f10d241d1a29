"""`search_cuts`' stage entries share the unlimited rows across in-flight counts (issue 24 must-show 4, part 13):
`_stage_entry`, asked in a random order over blocks and in-flight counts, gives the same entry as the rule written
out directly (the rows for one micro-batch in flight when they fit `in_flight`, else the stage sized for it), and
the memo's fit bounds agree with `StageModel.fits` asked every time."""

import math
import os
import random

from tag.search.pipeline_model import StageModel
from tag.search.pipeline_search import _stage_entry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _direct(model, m, in_flight, lo, hi, dlo, dhi):
    """The entry by the rule, nothing remembered: (StageRows or None, (steady, exposed sync), stage ms)."""
    base = model.stage(lo, hi, dlo, dhi, m, 1)
    st = base if base is None or in_flight == 1 or model.fits(lo, hi, dlo, base.micro_rows, in_flight) \
        else model.stage(lo, hi, dlo, dhi, m, in_flight)
    if st is None:
        return None, (math.inf, math.inf), math.inf
    return st, (st.steady_ms(m), st.exposed_sync_ms()), st.stage_ms(m)


def test_stage_entries_match_the_rule_in_any_order():
    from tag.modelio import ModelOptions, load_inputs

    # gpt2_medium on heterog8 at a large batch: many stages fit one micro-batch in flight but not several
    inp = load_inputs(os.path.join(ROOT, "datasets", "models", "gpt2_medium.onnx"),
                      os.path.join(ROOT, "datasets", "topologies", "heterog8.json"), ModelOptions(batch_size=256))
    order = [d.index for d in inp.cluster.devices]
    model = StageModel(inp.gg, inp.cluster, inp.cost, "adam", inp.batch_size, order)
    rng = random.Random(7)
    n_g, n_d = inp.gg.n_groups, len(order)
    blocks = []
    for _ in range(60):
        lo = rng.randrange(n_g)
        dlo = rng.randrange(n_d)
        blocks.append((lo, rng.randrange(lo + 1, n_g + 1), dlo, rng.randrange(dlo + 1, n_d + 1)))
    kinds = {"base": 0, "sized": 0, "none": 0}
    for m in (1, 4, 16):
        uncapped: dict = {}
        for _ in range(3000):
            blk, f = rng.choice(blocks), rng.randint(1, 12)
            got, want = _stage_entry(model, uncapped, m, min(f, m), *blk), _direct(model, m, min(f, m), *blk)
            assert got == want
            base = model.stage(*blk, m, 1)
            kinds["none" if got[0] is None else "base" if got[0] == base else "sized"] += 1
    assert min(kinds.values()) > 20, kinds  # all three cases were exercised


def test_capped_stage_function_gives_the_same_cuts_as_the_two_parts():
    """`best_capped_cuts` with `capped_ms` (one call per stage, as `search_cuts` passes it) against the same DP on
    steady_ms and tail_ms, on random stage times with infeasible stages."""
    from tag.search.pipeline_dp import best_capped_cuts

    for seed in range(8):
        rng = random.Random(seed)
        table: dict = {}

        def parts(*args):
            if args not in table:
                table[args] = (math.inf if rng.random() < 0.1 else rng.choice([1.0, 2.0, rng.uniform(0, 9)]),
                               rng.choice([0.0, 1.0, rng.uniform(0, 5)]))
            return table[args]

        def capped_ms(cap):
            return lambda *args: parts(*args)[0] if parts(*args)[1] <= cap else math.inf

        gcuts, dcuts = [0, 2, 3, 5, 7, 8], [0, 1, 2, 4]
        caps = [math.inf, 4.0, 1.0, 0.5]
        plain = best_capped_cuts(gcuts, dcuts, 3, lambda *a: parts(*a)[0], lambda *a: parts(*a)[1], caps, parts)
        flat = best_capped_cuts(gcuts, dcuts, 3, lambda *a: parts(*a)[0], lambda *a: parts(*a)[1], caps, parts,
                                capped_ms)
        assert flat == plain and plain
