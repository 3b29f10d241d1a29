"""The benchmark suite, kept as a lab entry point: `python benchmarks/suite.py ARGS` is `tag bench ARGS`.

The suite itself is product code in `tag/bench/` (suite.py, ideal.py, suite_format.py); see `tag bench --help`.
    python benchmarks/suite.py --quick
    python benchmarks/suite.py --budget 20 --out benchmarks/suite_results.md
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from tag.cli import main

    sys.exit(main(["bench", *sys.argv[1:]]))
