"""The import graph of the ``cpersist`` package, read from its source with :mod:`ast`.

Nothing is imported: each module's ``import`` statements are parsed and
resolved to the package's modules. An import at module level (also inside
``if``/``try`` or a class body) runs when the module is imported; one inside
a function runs when the function is called. Cycles are counted on both
kinds together: a function-level import that closes a loop is still two
modules that each need the other.

``python -m tests._import_graph [PACKAGE_DIR]`` prints a summary: modules,
lines per subpackage, cycles, upward imports from the self-contained
subpackages, and modules over :data:`MAX_LINES` lines.
"""

import ast
import os
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "cpersist"
#: Left out of the graph: the benchmark the package ships is read on its own.
EXCLUDED = ("cpersist.benchmarks",)
#: Subpackages that import nothing of the package outside themselves but these:
#: the process services and the exceptions, and for the container the codecs
#: it decodes chunks with (they know nothing of the container). The stream
#: walker and the format's names and limits sit below the pickling, which
#: imports both: neither imports it back. Storage (the resolver and the
#: remote backends) builds the container's byte sources and nothing above.
SELF_CONTAINED = {"cpersist.container": ("cpersist._runtime", "cpersist.exceptions",
                                         "cpersist.codecs"),
                  "cpersist.codecs": ("cpersist._runtime", "cpersist.exceptions"),
                  "cpersist.format": ("cpersist.exceptions",),
                  "cpersist.storage": ("cpersist._runtime", "cpersist.exceptions",
                                       "cpersist.container"),
                  "cpersist.stream": ("cpersist._runtime", "cpersist.exceptions",
                                      "cpersist.format")}
MAX_LINES = 400
#: Most private names the package's modules may import from one another.
MAX_PRIVATE_IMPORTS = 15


def _inside(module, package):
    return module == package or module.startswith(package + ".")


def module_files(package_dir=None, excluded=EXCLUDED):
    """``{module name: file path}`` of every module of the package."""
    package_dir = package_dir or os.path.join(ROOT, PACKAGE)
    base = os.path.dirname(os.path.abspath(package_dir))
    found = {}
    for folder, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            parts = os.path.relpath(path, base)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            module = ".".join(parts)
            if not any(_inside(module, e) for e in excluded):
                found[module] = path
    return found


def _imports(tree, module, is_package):
    """``(imported module or module.name, at module level?)`` for each import."""
    package = module if is_package else module.rpartition(".")[0]

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, [], not in_function
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[:len(base) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module
                yield target, [a.name for a in child.names], not in_function
            yield from visit(child, nested)

    yield from visit(tree, False)


class Graph:
    """The package's modules, their line counts and import edges."""

    def __init__(self, package_dir=None, excluded=EXCLUDED):
        self.files = module_files(package_dir, excluded)
        self.lines = {}
        #: ``{module: {imported module: at module level?}}``
        self.edges = defaultdict(dict)
        #: ``(module, target)`` of imports naming no module of the package
        self.unresolved = []
        for module, path in self.files.items():
            with open(path, encoding="utf-8") as f:
                source = f.read()
            self.lines[module] = source.count("\n")
            tree = ast.parse(source, path)
            is_package = path.endswith("__init__.py")
            for target, names, top in _imports(tree, module, is_package):
                if not _inside(target, PACKAGE):
                    continue
                if target not in self.files:
                    if not any(_inside(target, e) for e in excluded):
                        self.unresolved.append((module, target))
                    continue
                targets = [f"{target}.{n}" for n in names if f"{target}.{n}" in self.files]
                if len(targets) < len(names) or not names:
                    targets.append(target)
                for t in targets:
                    if t in self.files and t != module:
                        self.edges[module][t] = self.edges[module].get(t, False) or top

    def cycles(self):
        """The strongly connected components of more than one module (Tarjan)."""
        index, low, stack, on_stack, found = {}, {}, [], set(), []

        def connect(v):
            index[v] = low[v] = len(index)
            stack.append(v)
            on_stack.add(v)
            for w in self.edges.get(v, ()):
                if w not in index:
                    connect(w)
                    low[v] = min(low[v], low[w])
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

        sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
        for v in sorted(self.files):
            if v not in index:
                connect(v)
        return sorted(found)

    def upward_imports(self, rules=SELF_CONTAINED):
        """``(module, imported)`` pairs where a self-contained subpackage reaches outside."""
        bad = []
        for package, allowed in rules.items():
            for module, targets in sorted(self.edges.items()):
                if not _inside(module, package):
                    continue
                for target in sorted(targets):
                    if not (_inside(target, package) or any(_inside(target, a) for a in allowed)):
                        bad.append((module, target))
        return bad

    def too_long(self, limit=MAX_LINES):
        return sorted((m, n) for m, n in self.lines.items() if n > limit)

    def private_imports(self):
        """``(module, imported from, name)`` for each private name (one
        underscore, not a dunder) a module imports from another."""
        found = []
        for module, path in self.files.items():
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    found.extend((module, "." * node.level + (node.module or ""), alias.name)
                                 for alias in node.names
                                 if alias.name.startswith("_") and not alias.name.startswith("__"))
        return sorted(found)

    def package_of(self, module):
        """``cpersist.container`` for anything in it; ``cpersist`` for top-level modules."""
        parts = module.split(".")
        if len(parts) > 2 or self.files[module].endswith("__init__.py"):
            return ".".join(parts[:2])
        return parts[0]

    def lines_per_package(self):
        """``{package: (lines, modules)}``, top-level modules under ``cpersist``."""
        totals = defaultdict(lambda: [0, 0])
        for module, n in self.lines.items():
            total = totals[self.package_of(module)]
            total[0] += n
            total[1] += 1
        return {k: tuple(v) for k, v in sorted(totals.items())}


def summary(graph):
    out = []
    out.append(f"modules: {len(graph.files)}, lines: {sum(graph.lines.values())}")
    out.append("lines per (sub)package:")
    for package, (n, count) in graph.lines_per_package().items():
        out.append(f"  {package:<24} {n:>6}  ({count} modules)")
    out.append(f"imports naming no module of the package: {len(graph.unresolved)}")
    for module, target in graph.unresolved:
        out.append(f"  {module} -> {target}")
    cycles = graph.cycles()
    out.append(f"import cycles (module-level and function-level imports): {len(cycles)}")
    for c in cycles:
        out.append("  " + " <-> ".join(c))
    upward = graph.upward_imports()
    out.append(f"upward imports from {', '.join(SELF_CONTAINED)}: {len(upward)}")
    for module, target in upward:
        out.append(f"  {module} -> {target}")
    long = graph.too_long()
    out.append(f"modules over {MAX_LINES} lines: {len(long)}")
    for module, n in long:
        out.append(f"  {module} {n}")
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(Graph(sys.argv[1] if len(sys.argv) > 1 else None)))
