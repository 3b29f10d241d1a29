"""Read the fenced code blocks and tables of a docs/ page (helpers for the docs tests)."""

from __future__ import annotations

import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")

_FENCE = re.compile(r"^```(\w*)\s*\n(.*?)^```\s*$", re.S | re.M)


def fences(page: str, lang: str) -> list[tuple[int, str]]:
    """(1-based line of the opening fence, body) of every ```lang block of docs/<page>."""
    text = open(os.path.join(DOCS, page)).read()
    return [(text.count("\n", 0, m.start()) + 1, m.group(2)) for m in _FENCE.finditer(text) if m.group(1) == lang]


def json_fences(page: str) -> list[tuple[int, object]]:
    """(line, parsed JSON) of every ```json block; a block that is not JSON fails the calling test."""
    out = []
    for line, body in fences(page, "json"):
        try:
            out.append((line, json.loads(body)))
        except json.JSONDecodeError as e:
            raise AssertionError(f"docs/{page}:{line}: the ```json block is not JSON: {e}") from None
    return out


def required_keys(page: str) -> list[str]:
    """First-column keys of the page's table rows that mark a cell exactly `**required**` (unconditionally)."""
    keys = []
    for line in open(os.path.join(DOCS, page)):
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if cells and any(c == "**required**" or c.startswith("**required**,") for c in cells[1:]):
            keys.append(cells[0].strip("`"))
    return keys


def required_by_section(page: str) -> list[tuple[str, str]]:
    """(## section title, key) for every key of a table row marked exactly `**required**`; a first cell
    naming several keys (`` `fwd_ms`, `bwd_ms` ``) gives one pair per key."""
    out, section = [], ""
    for line in open(os.path.join(DOCS, page)):
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if cells and any(c == "**required**" or c.startswith("**required**,") for c in cells[1:]):
            out += [(section, k.strip().strip("`")) for k in cells[0].split(",")]
    return out


def table_rows(page: str, header: str) -> list[list[str]]:
    """The cells of the markdown table of docs/`page` whose header row starts with `| header |`."""
    with open(os.path.join(DOCS, page)) as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def example_plan(page: str) -> dict:
    """A copy of the page's first JSON example without the keys readers ignore (predicted, baselines, search)."""
    import copy

    plan = copy.deepcopy(json_fences(page)[0][1])
    for key in ("predicted", "baselines", "search"):
        plan.pop(key, None)
    return plan


def check_documented_mistakes(page: str, header: str, mistakes: dict, tmp_path, monkeypatch, capsys) -> None:
    """Every row of the page's `header` table ("mistake | message") names a key of `mistakes` (a change to the page's
    example plan) and each change makes `tag simulate` exit 2 printing exactly the row's message, one line."""
    import json

    from tag.cli import main

    rows = table_rows(page, header)
    assert {r[0] for r in rows} == set(mistakes)
    example = json_fences(page)[0][1]
    model, topo = (os.path.join(ROOT, example[k]["path"]) for k in ("model", "topology"))
    monkeypatch.chdir(tmp_path)
    for mistake, message in rows:
        plan = example_plan(page)
        mistakes[mistake](plan)
        (tmp_path / "p.json").write_text(json.dumps(plan))
        code = main(["simulate", model, topo, "--plan", "p.json", "--json"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, (mistake, err)
        assert err.strip() == message.strip("`"), mistake
