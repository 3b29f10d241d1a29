"""The import graph of `tag/` (built with `ast`, without importing anything) is acyclic, and the app layer
(`tag.cli`) is imported by nothing below it.

Edges counted: `import a.b` (to the deepest module of the dotted name that exists), `from a.b import c` (to the
submodule `a.b.c` when it exists, else to `a.b`), relative imports, imports inside functions and classes, and
`importlib.import_module("literal")`. Not counted: imports in the body of `if TYPE_CHECKING:` (its `else:`
counts), and the implicit import of a module's parent packages (every package would otherwise be a cycle with
its own submodules; an explicit `from tag.x import name` is an edge to `tag.x`'s `__init__`).
"""

from __future__ import annotations

import ast
import os
import textwrap

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# Modules below the app layer that are also documented script entry points and parse their own command line.
SCRIPT_ENTRY_POINTS = {
    "tag.deploy.worker": "python -m tag.deploy.worker (multi-node launch: `tag deploy --print-launch`)",
    "tag.gnn.value_fit": "python -m tag.gnn.value_fit (how the shipped value weights were fitted)",
}


def module_files(src_dir: str, package: str) -> dict[str, str]:
    """{dotted module name: file path} of every .py file under `src_dir/package` (a package's name for __init__)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(os.path.join(src_dir, package)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            path = os.path.join(dirpath, fn)
            parts = os.path.relpath(path, src_dir)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk_runtime(node: ast.AST):
    """ast.walk, skipping the bodies of `if TYPE_CHECKING:` (their `else:` branches are walked)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, ast.If) and _is_type_checking(n.test):
            stack.append(n.test)
            stack.extend(n.orelse)
            continue
        stack.extend(ast.iter_child_nodes(n))


def imported_names(module: str, path: str, is_package: bool) -> list[tuple[str, int, str | None]]:
    """(absolute dotted name, line, imported attribute or None) of every runtime import in the file."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module if is_package else module.rpartition(".")[0]
    out = []
    for n in _walk_runtime(tree):
        if isinstance(n, ast.Import):
            out.extend((a.name, n.lineno, None) for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (n.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            out.extend((base, n.lineno, a.name) for a in n.names)
        elif (isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant)
              and isinstance(n.args[0].value, str)
              and ((isinstance(n.func, ast.Attribute) and n.func.attr == "import_module")
                   or (isinstance(n.func, ast.Name) and n.func.id in ("import_module", "__import__")))):
            out.append((n.args[0].value, n.lineno, None))
    return out


def _resolve(name: str, mods: dict[str, str]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(src_dir: str, package: str) -> dict[str, dict[str, int]]:
    """{module: {imported module of the same package: first line importing it}} (no self edges)."""
    mods = module_files(src_dir, package)
    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for m, path in mods.items():
        for name, line, attr in imported_names(m, path, path.endswith("__init__.py")):
            full = f"{name}.{attr}" if attr and attr != "*" else None
            target = full if full in mods else _resolve(name, mods)
            if target and target != m:
                graph[m].setdefault(target, line)
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module, each sorted, in sorted order."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def a_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """A shortest cycle through the first module of `component` (breadth-first inside it), closed: [a, ..., a]."""
    start, inside = component[0], set(component)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, start]
                if w in inside and w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {component}")


def describe_cycles(graph: dict[str, dict[str, int]]) -> str:
    lines = []
    for comp in strongly_connected(graph):
        cyc = a_cycle(graph, comp)
        hops = " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cyc, cyc[1:]))
        lines.append(f"cycle: {hops} -> {cyc[-1]}   [component: {', '.join(comp)}]")
    return "\n".join(lines)


# ---- the checker can fail: a synthetic package written by hand ----------------------------------------------


def _write(root, files: dict[str, str]) -> str:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return str(root)


def test_checker_finds_a_cycle_through_function_level_relative_and_submodule_imports(tmp_path):
    src = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import helper\n",  # a -> b
        "pkg/b.py": "def helper():\n    from . import c\n    return c\n",  # b -> c, inside a function, relative
        "pkg/c.py": "import pkg.a\n",  # c -> a
        "pkg/sub/__init__.py": "from .. import a\n",  # sub -> a (level 2 from a package's __init__)
        "pkg/sub/d.py": "from pkg import sub\nimport os\n",  # d -> sub (the package), os is outside
    })
    graph = import_graph(src, "pkg")
    assert graph == {"pkg": {}, "pkg.a": {"pkg.b": 1}, "pkg.b": {"pkg.c": 2}, "pkg.c": {"pkg.a": 1},
                     "pkg.sub": {"pkg.a": 1}, "pkg.sub.d": {"pkg.sub": 1}}
    assert strongly_connected(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert a_cycle(graph, ["pkg.a", "pkg.b", "pkg.c"]) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    assert "pkg.b (line 2) -> pkg.c" in describe_cycles(graph)


def test_checker_ignores_type_checking_imports_but_not_their_else_branch(tmp_path):
    src = _write(tmp_path, {
        "q/__init__.py": "",
        "q/x.py": "from q.y import Y\n",
        "q/y.py": """\
            from typing import TYPE_CHECKING
            import typing
            if TYPE_CHECKING:
                from q.x import X
            if typing.TYPE_CHECKING:
                import q.x
            else:
                import q.z
            """,
        "q/z.py": "import importlib\nm = importlib.import_module('q.x')\n",
    })
    graph = import_graph(src, "q")
    assert graph["q.y"] == {"q.z": 8} and graph["q.z"] == {"q.x": 2}
    assert strongly_connected(graph) == [["q.x", "q.y", "q.z"]]  # through the else branch and import_module


# ---- the real package ------------------------------------------------------------------------------------------


def test_tag_import_graph_is_acyclic():
    graph = import_graph(ROOT, "tag")
    assert len(graph) > 50 and "tag.cli" in graph and "tag.sim.engine" in graph  # the walk saw the package
    assert not strongly_connected(graph), "import cycles in tag/:\n" + describe_cycles(graph)


def test_nothing_below_the_app_layer_imports_it():
    graph = import_graph(ROOT, "tag")
    bad = [f"{m} line {line} imports {t}" for m, edges in sorted(graph.items()) for t, line in sorted(edges.items())
           if not _in_cli(m) and _in_cli(t)]
    assert not bad, "modules below the app layer import tag.cli:\n" + "\n".join(bad)


def test_only_the_app_layer_and_script_entry_points_parse_command_lines():
    mods = module_files(ROOT, "tag")
    bad = []
    for m, path in sorted(mods.items()):
        if _in_cli(m) or m in SCRIPT_ENTRY_POINTS:
            continue
        for name, line, _ in imported_names(m, path, path.endswith("__init__.py")):
            if name == "argparse" or name.startswith("argparse."):
                bad.append(f"{m} line {line} imports argparse")
        with open(path, encoding="utf-8") as f:
            for n in ast.walk(ast.parse(f.read(), path)):
                if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr" and n.args
                        and isinstance(n.args[0], ast.Name) and n.args[0].id == "args"):
                    bad.append(f"{m} line {n.lineno} reads a flag with getattr(args, ...)")
    bad.sort(key=lambda s: (s.split(" line ")[0], int(s.split(" line ")[1].split()[0])))
    assert not bad, "command-line parsing below the app layer (build typed options in tag/cli/):\n" + "\n".join(bad)
    assert all(m in mods for m in SCRIPT_ENTRY_POINTS)  # the allow-list names real modules


def _in_cli(module: str) -> bool:
    return module == "tag.cli" or module.startswith("tag.cli.")
