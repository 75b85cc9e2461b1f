"""What a one-shot script pays for: a compressed dump and its load in a
fresh interpreter import only the libraries they use."""

from .test_codec_registry import imported_after

#: python-blosc2 and what its import pulls in (an HTTP client, a terminal
#: formatter, a command-line parser, an event loop), plus the thread pool's
#: logging, which cpersist's own pool does not need.
HEAVY = ("blosc2", "httpx", "rich", "click", "asyncio", "concurrent.futures", "logging",
         "tempfile")


def test_a_compressed_dump_and_its_load_import_no_heavy_module(tmp_path):
    path = tmp_path / "model.cp"
    code = (f"import numpy as np, cpersist\n"
            f"obj = {{'w': np.cumsum(np.ones(3_000_000)), 'meta': {{'n': 3}},  # 6 chunks: the pool\n"
            f"       'counts': np.arange(10**6, dtype=np.int32) % 7}}\n"
            f"cpersist.dump(obj, {str(path)!r}, compress=3)\n"
            f"back = cpersist.load({str(path)!r})\n"
            f"assert all(np.array_equal(back[k], obj[k]) for k in ('w', 'counts'))\n"
            f"from cpersist.container import ContainerReader\n"
            f"from cpersist.container.sources import MemorySource\n"
            f"reader = ContainerReader(MemorySource(memoryview(open({str(path)!r}, 'rb').read()), 'f'))\n"
            f"assert {{s.codec.codec_id for s in reader.sections if s.codec}} == {{'zstd-auto'}}")
    assert imported_after(code, HEAVY) == set()


def test_a_dump_imports_nothing_of_the_reading_side(tmp_path):
    code = (f"import numpy as np, cpersist\n"
            f"cpersist.dump({{'w': np.arange(1e5)}}, {str(tmp_path / 'w.cp')!r}, compress=3)")
    reading = ("pickletools", "cpersist.pickling.read", "cpersist.pickling.unpickler",
               "cpersist.stream.symbolic", "cpersist.container.foreign", "cpersist.container.reader",
               "cpersist.container.sources")
    assert imported_after(code, reading) == set()


def test_a_plain_dump_imports_nothing_of_streamed_arrays_or_growing_files(tmp_path):
    code = (f"import numpy as np, cpersist\n"
            f"cpersist.dump({{'w': np.arange(1e5), 'n': {{'a': 1}}}}, {str(tmp_path / 'w.cp')!r})")
    streamed = ("cpersist.pickling.dask_arrays", "cpersist.pickling.row_batches",
                "cpersist.container.commits", "cpersist.growfile")
    assert imported_after(code, streamed) == set()


def test_a_trusted_load_imports_nothing_of_the_restricted_machine(tmp_path):
    path = str(tmp_path / "w.cp")
    code = (f"import numpy as np, cpersist\n"
            f"cpersist.dump({{'w': np.arange(1e5), 'n': {{'a': 1}}}}, {path!r}, compress=3)\n"
            f"cpersist.load({path!r})\n"
            f"cpersist.loads(cpersist.dumps({{'a': 1}}))")
    restricted = ("cpersist.pickling.allowlist", "cpersist.pickling.builders",
                  "cpersist.pickling.checks", "cpersist.pickling.machine",
                  "cpersist.pickling.restricted", "uuid")
    assert imported_after(code, restricted) == set()


def test_cpersist_info_reads_no_package_metadata(tmp_path):
    """Listing installed codecs reads every package's entry points: only
    ``convert --help``, which names them, does."""
    import numpy as np

    import cpersist

    path = tmp_path / "c.cp"
    cpersist.dump({"w": np.cumsum(np.ones((300, 1000)), axis=1)}, path, compress=3)
    code = f"from cpersist.cli import main\nassert main(['info', {str(path)!r}]) == 0"
    assert imported_after(code, HEAVY + ("importlib.metadata",)) == set()
