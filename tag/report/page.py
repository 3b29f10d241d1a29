"""The report page: a header with the iteration time, then the sections, as one self-contained HTML file.

No network: styles, the SVG figures and a few lines of script (expand / collapse every <details>) are inline.
The iteration time is in ``<span id="iteration-ms" data-ms="...">`` as text with one decimal.
"""

from __future__ import annotations

import math

from tag.report.classes import device_classes
from tag.report.cluster_graph import cluster_svg, legend_html, links_table
from tag.report.compare import compare_html
from tag.report.memory import memory_html
from tag.report.pipeline import pipeline_html
from tag.report.placement import placement_html
from tag.report.search import search_html
from tag.report.svg import attrs, esc, fmt_ms, num
from tag.report.timeline import timeline_svg

CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px 24px;color:#222;max-width:1400px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:22px 0 6px;border-bottom:1px solid #ddd}
.head{font-size:15px} .big{font-size:26px;font-weight:bold;color:#2166AC}
.note{color:#666;font-size:12px} small{color:#666}
.chip{display:inline-block;margin-right:12px;font-size:12px}
.dot{display:inline-block;width:11px;height:11px;border-radius:50%;margin-right:4px;vertical-align:-1px}
.bar{display:inline-block;width:18px;height:9px;margin:0 3px;vertical-align:0}
table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
.placement td.cell{text-align:center;min-width:34px} .placement th.cls{font-weight:normal;vertical-align:top}
.scroll{overflow-x:auto} .ids{max-width:220px;max-height:160px;overflow:auto;font-size:11px}
.mem,.cmp{position:relative;height:22px;margin:3px 0} .lbl{display:inline-block;width:260px;font-size:12px}
.mem .track{position:absolute;left:260px;top:3px;height:15px;border:1px dashed #888;box-sizing:border-box}
.mem .fill,.cmp .fill{position:absolute;left:260px;top:4px;height:13px}
.mem .val,.cmp .val{position:absolute;top:2px;font-size:12px;white-space:nowrap;margin-left:260px}
.cmp .val{position:static;margin-left:8px} .cmp{display:flex;align-items:center}
.cmp .fill{position:static;display:inline-block;height:14px}
details summary{cursor:pointer;font-size:12px;color:#2166AC} .kv th{width:140px}
button{font-size:12px;margin-right:6px}
"""

JS = """
function setAll(open){document.querySelectorAll('details').forEach(function(d){d.open=open;});}
"""


def _n(count: int, one: str, many: str | None = None) -> str:
    """'1 machine', '4 machines'."""
    return f"{count:,} {one if count == 1 else (many or one + 's')}"


def _section(id_: str, title: str, body: str, lead: str = "") -> str:
    lead_html = f'<p class="note">{esc(lead)}</p>' if lead else ""
    return f'<section id="{id_}"><h2>{esc(title)}</h2>{lead_html}{body}</section>'


def report_html(data) -> str:
    """The whole page for `data` (a `tag.report.data.ReportData`)."""
    cluster, res = data.cluster, data.result
    classes = device_classes(cluster, data.strategy, res)
    ms = res.iteration_ms
    headline = (f'<span id="iteration-ms" class="big"{attrs(data_ms=num(ms), data_fit_ms=num(res.fit_iteration_ms))}>'
                f'{esc(fmt_ms(ms))}</span>')
    if math.isfinite(ms):
        headline += f" per iteration, {res.samples_per_s:,.0f} samples/s"
    else:
        headline += (f" on {', '.join(res.oom_devices[:4])}{' …' if len(res.oom_devices) > 4 else ''}; "
                     f"the iteration would take {res.fit_iteration_ms:.1f} ms if it fit")
    n_groups = len(data.strategy.decisions)
    facts = (f"model {data.model_path}: batch {data.batch_size}, {n_groups} op groups, optimizer {data.optimizer}; "
             f"cluster {cluster.name}: {_n(cluster.n_devices, 'device')} on {_n(len(cluster.machines), 'machine')} "
             f"({_n(len(classes), 'class', 'classes')} of identical devices); precision {data.precision}; "
             f"cost model {data.cost_model}"
             + (f"; plan {data.plan_path}" if data.plan_path else ""))
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>tag report: {esc(data.model_path)} on {esc(cluster.name)}</title>",
        f"<style>{CSS}</style><script>{JS}</script></head><body>",
        f'<h1>tag plan report</h1><p class="head">{headline}</p><p class="note">{esc(facts)}</p>',
        '<p><button onclick="setAll(true)">expand all</button><button onclick="setAll(false)">collapse all</button></p>',
        _section("compare", "Plan vs baselines", compare_html(data),
                 "Simulated iteration time of the plan and of every baseline on the same inputs (shorter is faster)."),
        _section("cluster", "Cluster and traffic",
                 legend_html(cluster, res) + cluster_svg(cluster, data.strategy, res) + links_table(cluster, res),
                 "Machines hold their devices (coloured by type); a line's width and colour give the bytes one "
                 "iteration of the plan moves over that link. Hover for figures."),
        _section("placement", "Placement", placement_html(data, classes),
                 "Op groups (rows) by classes of identical devices (columns): same type, machine kind, rows, memory "
                 "and busy time."),
        *([_section("pipeline", "Pipeline", pipeline_html(data),
                    "The plan's stages, in pipeline order; each runs its groups on its own devices, one micro-batch "
                    "at a time.")] if getattr(data.strategy, "pipeline", None) is not None else []),
        _section("timeline", "Timeline of one iteration", timeline_svg(data, classes),
                 "One block per device class, drawn from its first device. Hover a bar for the task."),
        _section("memory", "Memory", memory_html(data, classes),
                 "Simulated peak memory against usable memory (0.92 x the device's memory), in GB (10^9 bytes)."),
        _section("search", "Search", search_html(data.plan)),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_report(path: str, data) -> int:
    """Write the page for `data` to `path` atomically; its size in bytes."""
    from tag.fileio import write_text_atomic

    html = report_html(data)
    write_text_atomic(path, html)
    return len(html.encode("utf-8"))
