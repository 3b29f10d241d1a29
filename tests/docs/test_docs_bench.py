"""docs/bench.md: its column table is `tag bench --ablate`'s columns and their `tag plan` flags, and its key table
names every key of a results line, no more."""

import os
import re

from tag.bench.ablate import PART_FLAGS, PARTS, AblationCase
from tag.bench.ablate_results import case_record
from docs_fences import DOCS


def _table_rows(header_first_cell: str) -> list[list[str]]:
    """The cells of the rows of the page's table whose header row starts with `header_first_cell`."""
    rows, inside = [], False
    for line in open(os.path.join(DOCS, "bench.md")):
        if not line.startswith("|"):
            inside = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == header_first_cell:
            inside = True
        elif inside and not set(cells[0]) <= set("-"):
            rows.append(cells)
    return rows


def test_the_column_table_is_the_ablations_columns_and_flags():
    rows = _table_rows("column")
    assert [r[0].strip("`") for r in rows] == list(PARTS)
    for r in rows:
        flags = "" if r[1] == "(none)" else r[1].strip("`")
        assert flags == PART_FLAGS[r[0].strip("`")], r


def test_the_key_table_names_every_key_of_a_results_line():
    documented = set()
    for r in _table_rows("key"):
        documented.update(re.findall(r"`([a-z_]+)`", r[0]))
    written = set(case_record(AblationCase("mlp", "cpu4")))
    assert documented == written - {"format"}  # "format" is named in the text above the table
    assert '"format": "tag-ablate-case-v1"' in open(os.path.join(DOCS, "bench.md")).read()
