"""`tag report`: one self-contained HTML page that shows a plan at a glance.

Sections, one module each: the plan against every baseline (`compare`), the cluster as a graph with the plan's
traffic (`cluster_graph`), the placement map (`placement`), the simulated timeline per device (`timeline`), memory
per device (`memory`), and the search (`search`). `data.gather` simulates once; `classes` aggregates identical
devices, groups and machines so the page stays readable (and small) from 1 to 1,024 devices; `page` assembles.

Every figure's exact number is kept in a ``data-*`` attribute (``data-ms``, ``data-bytes``, ``data-rows``,
``data-peak-gb``) so the page can be checked by a parser.
"""

from tag.report.data import ReportData, gather
from tag.report.page import report_html, write_report

__all__ = ["ReportData", "gather", "report_html", "write_report"]
