"""`tag bench` as product code: the benchmark suite and the published comparison, runnable from a wheel.

    suite.py              cases, options, run_suite (every baseline, the searched plan, the ideal bound)
    ideal.py              the ideal column: the compute bound 1 / sum_d (1 / T_d); the FLOPs bound; the per-group LP
    suite_format.py       the suite's table of ratios, per-topology summary and JSON
    published_rows.py     the published tables as typed rows
    published_predict.py  one row's predicted samples/s (catalog cost model, dp-even, simulate)
    published.py          the comparison (and the calibration fit of tag/cost/calibrate.py)
    published_format.py   the comparison's tables and JSON
    data.py               package data (quick models and topologies, published tables) and datasets/ lookup
"""
