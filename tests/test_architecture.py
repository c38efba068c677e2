"""The import rules of the house, read from the source with :mod:`ast`.

Imports run one way: the portable types (``portable.storage``, ``portable.messaging``, ...)
build on the driver protocols (``portable.driver.*``), never the other way round; no two portable
modules import each other, directly or through others; adapters and contrib use only the public
surface of ``portable`` (no ``portable._*`` module, no ``_name`` of a portable module). No module
of ``portable/`` or ``adapters/`` is over 800 lines. Every import statement counts wherever it sits (module level, inside a
function, a class body or a ``try``), because a function-level import kept only to dodge a cycle
is the cycle all the same. Imports under ``if TYPE_CHECKING:`` do not count: they never run.

Importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first, so it counts as
importing ``a`` and ``a.b`` too, except for the packages that contain the importing module (they
are already running when it runs). ``from pkg import name`` imports ``pkg.name`` when that is a
module, and ``pkg.<module>`` when ``pkg`` resolves ``name`` lazily through a module-level
``_LAZY = {"name": "module", ...}`` table (PEP 562, as ``portable/__init__.py`` does); otherwise it
imports ``pkg`` itself. Imports by string (``importlib.import_module``, the scheme registry's
``"module:attribute"`` table) are not followed: they are how plugins are found.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The portable types: a ``portable.driver`` module imports none of these (nor their submodules).
TYPE_MODULES = (
    "portable.storage",
    "portable.messaging",
    "portable.compute",
    "portable.idempotency",
    "portable.aio",
    "portable.fsspec",
    "portable.transfer",
    "portable.outbox",
)
MAX_MODULE_LINES = 800
_SKIPPED_DIRS = {"__pycache__", "build", "dist", "node_modules"}


# -- the walker ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """One import statement that runs, resolved to the module it loads."""

    importer: str  #: dotted name of the module holding the statement
    target: str  #: absolute dotted name of the module the statement loads
    path: Path
    line: int
    scope: str  #: "module level", "in def f", "in class C", "in def C.f", ...
    statement: str  #: the statement as written (shortened)
    names: tuple[str, ...] = ()  #: for ``from target import a, b``: the names that are not modules

    def where(self, root: Path) -> str:
        """``file:line (scope): statement``, the file relative to ``root`` when it is inside."""
        try:
            shown = self.path.relative_to(root)
        except ValueError:
            shown = self.path
        return f"{shown}:{self.line} ({self.scope}): {self.statement}"


def source_files(directory: Path) -> Iterator[Path]:
    """Every .py file under ``directory``, skipping caches, build output and hidden folders."""
    for path in sorted(directory.rglob("*.py")):
        parts = path.relative_to(directory).parts[:-1]
        if not any(part in _SKIPPED_DIRS or part.startswith(".") for part in parts):
            yield path


def module_name(path: Path, import_root: Path) -> str:
    """Dotted module name of ``path`` when ``import_root`` is on ``sys.path``."""
    parts = list(path.relative_to(import_root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_under(package_dir: Path) -> dict[str, Path]:
    """``{dotted name: path}`` of every module of the package at ``package_dir``."""
    return {module_name(path, package_dir.parent): path for path in source_files(package_dir)}


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def resolve_relative(importer: str, is_package: bool, level: int, name: str | None) -> str:
    """Absolute name of ``from <level dots><name> import ...`` written in module ``importer``."""
    if level == 0:
        return name or ""
    parts = importer.split(".")
    if not is_package:
        parts = parts[:-1]
    if level - 1 > len(parts) - 1:
        raise ValueError(f"relative import beyond the top-level package in {importer}")
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, name] if name else parts)


def lazy_tables(modules: Mapping[str, Path]) -> dict[str, dict[str, str]]:
    """``{package: {name: absolute module}}`` from each package's module-level ``_LAZY`` dict."""
    tables: dict[str, dict[str, str]] = {}
    for name, path in modules.items():
        if path.name != "__init__.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if not any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in targets):
                continue
            try:
                table = ast.literal_eval(value)
            except ValueError:
                continue
            if isinstance(table, dict):
                tables[name] = {str(k): f"{name}.{v}" for k, v in table.items()}
    return tables


class _ImportCollector(ast.NodeVisitor):
    def __init__(
        self,
        importer: str,
        path: Path,
        known: Mapping[str, Path],
        lazy: Mapping[str, Mapping[str, str]],
    ) -> None:
        self.importer = importer
        self.path = path
        self.is_package = path.name == "__init__.py"
        self.known = known
        self.lazy = lazy
        self.scope: list[tuple[str, str]] = []  # ("def" | "class", name)
        self.found: list[Import] = []

    def _scope_text(self) -> str:
        if not self.scope:
            return "module level"
        kind = "def" if any(k == "def" for k, _ in self.scope) else "class"
        return f"in {kind} " + ".".join(name for _, name in self.scope)

    def _add(self, node: ast.stmt, target: str, names: tuple[str, ...] = ()) -> None:
        statement = ast.unparse(node)
        if len(statement) > 90:
            statement = statement[:87] + "..."
        self.found.append(
            Import(self.importer, target, self.path, node.lineno, self._scope_text(), statement, names)
        )

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:  # the else branch runs
                self.visit(child)
            return
        self.generic_visit(node)

    def _visit_scope(self, kind: str, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.scope.append((kind, node.name))
        for child in node.body:
            self.visit(child)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_scope("def", node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._visit_scope("def", node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._visit_scope("class", node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = resolve_relative(self.importer, self.is_package, node.level, node.module)
        plain: list[str] = []
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in self.known:
                self._add(node, submodule)
            elif alias.name in self.lazy.get(base, {}):
                self._add(node, self.lazy[base][alias.name], (alias.name,))
            else:
                plain.append(alias.name)
        if plain:
            self._add(node, base, tuple(plain))


def imports_of(
    modules: Mapping[str, Path],
    known: Mapping[str, Path] | None = None,
) -> list[Import]:
    """Every import statement that runs in ``modules``, resolved against ``known`` modules."""
    known = modules if known is None else known
    lazy = lazy_tables(known)
    found: list[Import] = []
    for name, path in sorted(modules.items()):
        collector = _ImportCollector(name, path, known, lazy)
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        found.extend(collector.found)
    return found


def _prefixes(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def modules_run_by(imp: Import, known: Iterable[str]) -> list[str]:
    """The known modules whose code ``imp`` may start running, outermost package first.

    The target's enclosing packages count, except those that enclose the importer: they are
    already in ``sys.modules`` when the importer runs. The target itself always counts (a module
    that imports a name from its own package reads that package's namespace).
    """
    known = set(known)
    enclosing = set(_prefixes(imp.importer)[:-1])
    run = []
    for prefix in _prefixes(imp.target):
        if prefix not in known or prefix == imp.importer:
            continue
        if prefix in enclosing and prefix != imp.target:
            continue
        run.append(prefix)
    return run


Graph = dict[str, dict[str, Import]]


def import_graph(found: Iterable[Import], known: Iterable[str]) -> Graph:
    """``{module: {module it runs: the first statement that does}}`` over ``known`` modules."""
    known = set(known)
    graph: Graph = {name: {} for name in known}
    for imp in sorted(found, key=lambda i: (i.importer, i.line)):
        if imp.importer not in known:
            continue
        for target in modules_run_by(imp, known):
            graph[imp.importer].setdefault(target, imp)
    return graph


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:  # iterative, so a deep graph cannot hit the recursion limit
        nonlocal counter
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def shortest_cycle(graph: Graph, start: str, within: set[str]) -> list[str]:
    """The shortest import path from ``start`` back to ``start`` through ``within``."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node]):
            if child not in within:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is on no cycle")


def cycles(graph: Graph) -> list[list[str]]:
    """For each strongly connected component, the shortest cycle through each of its members,
    without repeats, so that every module on a cycle is shown on one."""
    found: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for component in strongly_connected(graph):
        members = set(component)
        for start in component:
            cycle = shortest_cycle(graph, start, members)
            ring = cycle[:-1]
            i = ring.index(min(ring))
            canonical = tuple(ring[i:] + ring[:i])
            if canonical not in seen:
                seen.add(canonical)
                found.append([*canonical, canonical[0]])
    return found


def describe_cycle(cycle: list[str], graph: Graph, root: Path) -> str:
    lines = [" -> ".join(cycle)]
    for here, there in pairwise(cycle):
        imp = graph[here][there]
        via = "" if imp.target == there else f" (which runs {there})"
        lines.append(f"    {here} -> {there}: {imp.where(root)}{via}")
    return "\n".join(lines)


def is_within(name: str, packages: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def private_component(name: str) -> str | None:
    """The first ``_private`` component of a dotted name (dunders such as ``__main__`` are not)."""
    for part in name.split("."):
        if part.startswith("_") and not (part.startswith("__") and part.endswith("__")):
            return part
    return None


def driver_violations(found: Iterable[Import], known: Iterable[str]) -> list[str]:
    known = set(known)
    bad = []
    for imp in found:
        if not is_within(imp.importer, ["portable.driver"]):
            continue
        hits = [m for m in modules_run_by(imp, known) if is_within(m, TYPE_MODULES)]
        if not hits and is_within(imp.target, TYPE_MODULES):
            hits = [imp.target]
        for hit in hits:
            bad.append(f"{imp.importer} imports the portable type module {hit}: {imp.where(ROOT)}")
    return sorted(set(bad))


def private_violations(found: Iterable[Import]) -> list[str]:
    """Imports of a private ``portable`` module, or of a private name from a ``portable`` module."""
    bad = []
    for imp in found:
        if not is_within(imp.target, ["portable"]):
            continue
        if private_component(imp.target) is not None:
            bad.append(f"{imp.importer} imports the private module {imp.target}: {imp.where(ROOT)}")
        for name in imp.names:
            if private_component(name) is not None:
                bad.append(f"{imp.importer} imports the private name {imp.target}.{name}: {imp.where(ROOT)}")
    return sorted(set(bad))


# -- the repository -----------------------------------------------------------------------------


@cache
def portable_modules() -> dict[str, Path]:
    return modules_under(ROOT / "portable")


@cache
def outside_modules() -> dict[str, Path]:
    """Modules of every adapter and contrib distribution (``adapters/<x>/portable_<x>/...``)."""
    found: dict[str, Path] = {}
    for top in ("adapters", "contrib"):
        for dist in sorted((ROOT / top).iterdir()):
            if (dist / "pyproject.toml").is_file():
                for package in sorted(dist.iterdir()):
                    if (package / "__init__.py").is_file():
                        found.update(modules_under(package))
    return found


@cache
def portable_imports() -> tuple[Import, ...]:
    return tuple(imports_of(portable_modules()))


def test_the_walker_sees_the_whole_tree():
    modules = portable_modules()
    assert {"portable", "portable.storage", "portable.driver", "portable.urls"} <= set(modules)
    assert outside_modules(), "no adapter or contrib package found"
    targets = {imp.target for imp in portable_imports()}
    assert "portable.errors" in targets


def test_no_import_cycle_among_portable_modules():
    graph = import_graph(portable_imports(), portable_modules())
    found = cycles(graph)
    assert not found, f"{len(found)} import cycle(s) among portable modules:\n" + "\n".join(
        describe_cycle(cycle, graph, ROOT) for cycle in found
    )


def test_driver_modules_never_import_the_portable_types():
    bad = driver_violations(portable_imports(), portable_modules())
    assert not bad, (
        "portable.driver is the layer below the portable types; it imports none of "
        f"{', '.join(TYPE_MODULES)}:\n" + "\n".join(bad)
    )


def test_adapters_and_contrib_import_no_private_portable_module():
    known = {**portable_modules(), **outside_modules()}
    bad = private_violations(imports_of(outside_modules(), known))
    assert not bad, (
        "adapters and contrib use the public portable.driver surface, never portable._* "
        "(nor a _name of a portable module):\n" + "\n".join(bad)
    )


def test_no_module_over_the_line_limit():
    offenders = []
    for top in ("portable", "adapters"):
        for path in source_files(ROOT / top):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_MODULE_LINES:
                offenders.append((lines, path.relative_to(ROOT).as_posix()))
    assert not offenders, f"modules over {MAX_MODULE_LINES} lines (split them along their seams):\n" + "\n".join(
        f"    {path}: {lines} lines" for lines, path in sorted(offenders, reverse=True)
    )


# -- the walker, on a tree made for it ----------------------------------------------------------


def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_walker_on_a_synthetic_tree(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": '_LAZY = {"Thing": "lazy"}\n',
            "pkg/lazy.py": "class Thing: ...\n",
            "pkg/a.py": "from . import b\n",
            # the cycle a -> b -> c -> a, closed by a function-level import
            "pkg/b.py": "from .sub.c import f\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/c.py": "def f():\n    from ..a import b\n    return b\n",
            # under TYPE_CHECKING: never runs, so no cycle d <-> e; the else branch runs
            "pkg/d.py": (
                "from typing import TYPE_CHECKING\n"
                "import typing\n"
                "from .e import E\n"
                "if TYPE_CHECKING:\n    from .e import F\n"
                "if typing.TYPE_CHECKING:\n    import pkg.e\n"
                "else:\n    from . import lazy\n"
            ),
            "pkg/e.py": "if TYPE_CHECKING:\n    from .d import D\nclass E: ...\nclass F: ...\n",
            # from pkg import Thing loads pkg.lazy through the _LAZY table
            "pkg/f.py": "from pkg import Thing\n",
            "pkg/driver/__init__.py": "",
            "pkg/driver/x.py": "class Box:\n    from ..storage import Bucket\n",
            "pkg/storage/__init__.py": "",
        },
    )
    modules = modules_under(tmp_path / "pkg")
    found = imports_of(modules)
    graph = import_graph(found, modules)

    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]
    # importing pkg.sub.c runs pkg/sub/__init__.py too; pkg itself encloses the importer
    assert set(graph["pkg.b"]) == {"pkg.sub", "pkg.sub.c"}
    closing = graph["pkg.sub.c"]["pkg.a"]
    assert (closing.line, closing.scope) == (2, "in def f")
    assert "pkg.a" not in graph["pkg.sub"]

    assert set(graph["pkg.d"]) == {"pkg.e", "pkg.lazy"}
    assert "pkg.d" not in graph["pkg.e"]
    assert set(graph["pkg.f"]) == {"pkg.lazy"}

    message = describe_cycle(cycles(graph)[0], graph, tmp_path)
    assert "pkg/sub/c.py:2 (in def f): from ..a import b" in message
    assert "pkg.b -> pkg.sub.c: pkg/b.py:1 (module level): from .sub.c import f\n" in message

    class_body = [imp for imp in found if imp.importer == "pkg.driver.x"]
    assert [(imp.target, imp.scope) for imp in class_body] == [("pkg.storage", "in class Box")]


def test_the_rule_checks_on_a_synthetic_tree(tmp_path):
    _write(
        tmp_path,
        {
            "portable/__init__.py": "",
            "portable/_secret.py": "",
            "portable/storage.py": "",
            "portable/messaging/__init__.py": "",
            "portable/messaging/_inner.py": "",
            "portable/driver/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..storage import X\n",
            "portable/driver/ok.py": "from ..errors import E\n",
            "portable/driver/bad.py": "def f():\n    import portable.messaging._inner\n",
            "portable/errors.py": "",
            "portable/__main__.py": "",
            "ext/portable_ext/__init__.py": (
                "from portable import _secret\n"
                "from portable.messaging._inner import thing\n"
                "import portable.__main__\n"
                "from portable.driver import ok\n"
                "from portable.storage import Bucket, _helper\n"
                "from ._own import helper\n"
            ),
            "ext/portable_ext/_own.py": "",
        },
    )
    core = modules_under(tmp_path / "portable")
    outside = modules_under(tmp_path / "ext" / "portable_ext")

    driver = driver_violations(imports_of(core), core)
    assert len(driver) == 2, driver
    assert all(v.startswith("portable.driver.bad imports the portable type module portable.messaging") for v in driver)
    assert any("portable.messaging._inner" in v for v in driver)

    private = private_violations(imports_of(outside, {**core, **outside}))
    assert [v.split(":")[0] for v in private] == [
        "portable_ext imports the private module portable._secret",
        "portable_ext imports the private module portable.messaging._inner",
        "portable_ext imports the private name portable.storage._helper",
    ]
