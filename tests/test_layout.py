"""The package's layout: its import graph has no cycles, the lower layers
(container, codecs, the stream walker, the format's names and limits) reach
nothing above them, and no module grows past 400 lines
(read from the source by :mod:`tests._import_graph`, nothing imported)."""

import pathlib

import pytest

from ._import_graph import MAX_LINES, MAX_PRIVATE_IMPORTS, Graph


@pytest.fixture(scope="module")
def graph():
    return Graph()


def test_every_import_names_a_module_of_the_package(graph):
    assert graph.unresolved == []


def test_no_import_cycles(graph):
    # Imports inside functions count too: a deferred import that closes a
    # loop still makes two modules that each need the other.
    assert graph.cycles() == []


def test_lower_layers_import_nothing_above_them(graph):
    assert graph.upward_imports() == []


def test_no_module_over_the_line_limit(graph):
    assert graph.too_long() == [], f"modules over {MAX_LINES} lines"


def test_few_private_names_are_imported_across_modules(graph):
    # A private name another module needs is part of an interface: name it
    # publicly, or keep the work where the name lives.
    private = graph.private_imports()
    assert len(private) <= MAX_PRIVATE_IMPORTS, private


def test_the_graph_sees_what_it_checks(graph):
    # The checks above would pass on an empty graph: it must hold the package.
    assert {"cpersist.api", "cpersist.container.reader", "cpersist.codecs.registry",
            "cpersist._runtime.fork"} <= set(graph.files)
    assert "cpersist.container.layout" in graph.edges["cpersist.container.reader"]
    assert not any(m.startswith("cpersist.benchmarks") for m in graph.files)


#: Lines the installed benchmark (``cpersist/benchmarks/*.py``, all of it in
#: the wheel) may hold: what users of ``python -m cpersist.benchmarks`` run.
#: The maintainers' lab (acceptance bounds, investigations, publishing) lives
#: in ``benchmarks/``, outside the wheel.
MAX_BENCHMARK_LINES = 4465


def test_the_installed_benchmark_stays_lean():
    folder = pathlib.Path(__file__).resolve().parents[1] / "cpersist" / "benchmarks"
    files = sorted(folder.glob("*.py"))
    assert len(files) > 20 and not list(folder.glob("*/*.py"))  # the folder, flat as shipped
    lines = {f.name: f.read_bytes().count(b"\n") for f in files}
    assert sum(lines.values()) <= MAX_BENCHMARK_LINES, sorted(lines.items(), key=lambda kv: -kv[1])


def test_every_module_imports(graph):
    # A relative import written for a module's old place fails only when run.
    import importlib

    for module in sorted(graph.files):
        importlib.import_module(module)


def test_the_checks_find_a_cycle_and_an_upward_import(tmp_path):
    package = tmp_path / "cpersist"
    for folder in (package, package / "container", package / "codecs"):
        folder.mkdir()
        (folder / "__init__.py").write_text("")
    (package / "api.py").write_text("from .container import writer\n")
    (package / "container" / "writer.py").write_text(
        "def f():\n    from .. import api\n"          # a deferred import closing a loop
        "from ..codecs import zstd\n")                 # allowed: the codecs
    (package / "codecs" / "zstd.py").write_text("from ..container import layout\n"
                                                "from ..missing import name\n")
    (package / "container" / "layout.py").write_text("x = 1\n" * (MAX_LINES + 1))
    found = Graph(str(package))
    assert found.cycles() == [["cpersist.api", "cpersist.container.writer"]]
    assert sorted(found.upward_imports()) == [("cpersist.codecs.zstd", "cpersist.container.layout"),
                                              ("cpersist.container.writer", "cpersist.api")]
    assert found.too_long() == [("cpersist.container.layout", MAX_LINES + 1)]
    assert found.unresolved == [("cpersist.codecs.zstd", "cpersist.missing")]
    assert found.private_imports() == []
    (package / "api.py").write_text("from .container.writer import _write\n")
    assert Graph(str(package)).private_imports() == [("cpersist.api", ".container.writer", "_write")]
