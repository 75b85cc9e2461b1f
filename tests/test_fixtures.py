"""Files written by every released format version load, inspect, verify and convert.

The files under ``tests/fixtures/format-X.Y/`` were written once by the
commit that last wrote that format (``tests/fixtures/make_fixtures.py``);
``tests/fixtures/objects.py`` builds the objects they must load to.
"""

import glob
import json
import os
import re
import shutil
import struct
import warnings

import numpy as np
import pytest

import cpersist
from cpersist.container import FORMAT_MAJOR, FORMAT_MINOR, MAGIC
from cpersist.container.layout import BLOCKS_MINOR

from ._fresh import run_cli
from .conftest import assert_same
from .fixtures import objects

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
#: Format versions whose fixtures must be present (every released one).
RELEASED_FORMATS = ["2.0", "2.1"]  # 2.2 (dumps without blocks), 2.5: below
#: The dumps of each version, listed in its MANIFEST.json; the growing files
#: of formats 2.3 and 2.4 have test files of their own (test_record_logs,
#: test_growing_files).
FILES = sorted(path for path in glob.glob(os.path.join(FIXTURES, "format-*", "*.cp"))
               if os.path.exists(os.path.join(os.path.dirname(path), "MANIFEST.json")))


def _manifest(version):
    with open(os.path.join(FIXTURES, f"format-{version}", "MANIFEST.json")) as file:
        return json.load(file)


def _entry(path):
    """``(format version, manifest entry)`` of a fixture file."""
    version = os.path.basename(os.path.dirname(path))[len("format-"):]
    entries = {e["file"]: e for e in _manifest(version)["files"]}
    return version, entries[os.path.basename(path)]


def _format_read(path):
    """The format version a reader reports for a fixture: its directory's,
    but 2.0 for a tiny dump, which has no version of its own (the layout
    is unchanged since 2.0)."""
    version, entry = _entry(path)
    return "2.0" if entry["object"] == "tiny" else version


def _expected(path):
    return objects.OBJECTS[_entry(path)[1]["object"]]()


def _arrays(obj):
    """Every ndarray inside ``obj`` (dicts, lists and tuples walked into)."""
    if isinstance(obj, np.ndarray):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [a for item in obj for a in _arrays(item)]
    return []


def _ids(paths):
    return [os.path.relpath(p, FIXTURES) for p in paths]


RAW_FILES = [p for p in FILES if _entry(p)[1]["codec"] is None]
COMPRESSED_FILES = [p for p in FILES if p not in RAW_FILES]
#: Dumps holding buffer blocks (format 2.5).
BLOCK_FILES = [p for p in FILES if _entry(p)[1]["object"] == "blocks"]
fixture_file = pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
raw_file = pytest.mark.parametrize("path", RAW_FILES, ids=_ids(RAW_FILES))
compressed_file = pytest.mark.parametrize("path", COMPRESSED_FILES, ids=_ids(COMPRESSED_FILES))


@pytest.mark.parametrize("version", RELEASED_FORMATS)
def test_every_released_format_has_its_fixtures(version):
    manifest = _manifest(version)
    assert manifest["format"] == version
    assert re.fullmatch(r"[0-9a-f]{40}", manifest["commit"]), manifest["commit"]
    assert manifest["writer"].startswith("cpersist ")
    listed = sorted(e["file"] for e in manifest["files"])
    on_disk = sorted(os.path.basename(p)
                     for p in glob.glob(os.path.join(FIXTURES, f"format-{version}", "*.cp")))
    assert listed == on_disk
    assert {"raw.cp", "mmap.cp", "zstd-3.cp", "zlib-3.cp", "lz4-3.cp",
            "blosc_lz4-3.cp"} <= set(listed)
    for entry in manifest["files"]:
        path = os.path.join(FIXTURES, f"format-{version}", entry["file"])
        assert os.path.getsize(path) == entry["bytes"]
        if entry["object"] == "compressed":  # one file per codec
            assert entry["file"] == objects.file_name(entry["codec"])


def test_the_format_written_now_has_its_fixtures():
    version = f"{FORMAT_MAJOR}.{BLOCKS_MINOR}"
    manifest = _manifest(version)
    assert manifest["format"] == version
    assert any(os.path.dirname(p).endswith(f"format-{version}") for p in FILES)


@fixture_file
def test_loads_equal(path):
    assert_same(_expected(path), cpersist.load(path))


@fixture_file
def test_restricted_load(path):
    # The fixtures hold only numpy arrays, scalars and builtins: the default
    # allowlist of a restricted load covers them.
    assert_same(_expected(path), cpersist.load(path, trusted=False))


@raw_file
def test_raw_memory_mapped(path):
    expected = _expected(path)
    out = cpersist.load(path, mmap_mode="r")
    assert_same(expected, out, mmap=True)
    arrays = _arrays(out)
    assert len(arrays) == len(_arrays(expected)) > 0
    if path in BLOCK_FILES:  # small arrays, in the stream or a block: never mapped
        assert not any(isinstance(arr, np.memmap) for arr in arrays)
        return
    for arr in arrays:  # every array of a raw file is a section: all are mapped
        assert isinstance(arr, np.memmap), type(arr)
        assert not arr.flags.writeable


@compressed_file
def test_compressed_mmap_mode_loads_into_memory(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = cpersist.load(path, mmap_mode="r")
    assert any("cannot be memory-mapped" in str(w.message) for w in caught)
    assert_same(_expected(path), out)
    assert not any(isinstance(a, np.memmap) for a in _arrays(out))


@fixture_file
def test_inspect_and_verify(path):
    version, entry = _entry(path)
    manifest = _manifest(version)
    report = cpersist.inspect(path)
    assert report["format"] == _format_read(path)
    assert report["file_bytes"] == entry["bytes"]
    totals = cpersist.verify(path)
    if entry["object"] == "tiny":
        # No index, so no writer info; the array is inside the pickle stream.
        assert report["layout"] == "tiny"
        assert not report["arrays"]
        assert [a["shape"] for a in report["inline_arrays"]] == [[4, 5, 7]]
        assert totals["sections"] == 1
        return
    assert report["info"]["writer"] == manifest["writer"]
    if entry["codec"] == "max" and not report["arrays"]:
        # max keeps the smallest of its layouts: here the whole stream in one chunk.
        assert report["inline_arrays"] and totals["sections"] == 1
        return
    blocks = report["buffer_blocks"]["count"]
    assert blocks == (path in BLOCK_FILES)
    if blocks:  # the raw one's arrays are all in the stream or its block
        assert report["buffer_blocks"]["buffers"] > 0
    else:
        assert report["arrays"], "the fixture has array sections"
    assert {a["codec"] for a in report["arrays"]} <= {entry["codec"]}
    # and the pickle stream
    assert totals["sections"] == len(report["arrays"]) + blocks + 1
    if entry["chunk_size"] is not None:
        assert totals["chunks"] > totals["sections"], "several chunks per section"


@fixture_file
def test_listing_gives_the_walk_s_paths(path):
    """A file of many arrays lists the paths its index records; others walk
    their pickle stream: either way, the paths ``cpersist info`` prints."""
    from cpersist.stream.paths import array_paths
    from cpersist.filehandle import _recorded_paths

    with cpersist.open(path) as f:
        listed = {lazy._index: name for name, lazy in f.arrays.items()}
        reader = f._reader()
        walked = array_paths(f._root_stream(reader).getbuffer())
        recorded = _recorded_paths(reader)
    assert listed == {i: walked.get(i, f"<section {i}>") for i in listed}
    assert sorted(a["path"] for a in cpersist.inspect(path)["arrays"]) == sorted(listed.values())
    # Writers of format 2.0 recorded paths from 64 array sections on, later
    # ones from one: the many-array file has them in any version.
    assert (recorded is not None) >= (_entry(path)[1]["object"] == "many")


@fixture_file
def test_piece_checksums(path):
    """The file written with piece checksums is sliced through them; the
    others have none."""
    expected = _expected(path)
    with cpersist.open(path) as f:
        arrays = dict(f.arrays)
        with_pieces = []
        for name, lazy in arrays.items():
            section = lazy._bind().section
            if any(section.pieces(i) for i in range(len(section.chunks))):
                with_pieces.append(name)
    assert bool(with_pieces) == (_entry(path)[1]["object"] in ("pieces", "wide-pieces"))
    if with_pieces:
        assert with_pieces == ["obj['wide']"]
        with cpersist.open(path) as f:
            lazy = f.arrays["obj['wide']"]
            assert_same(expected["wide"][30_000:30_100], lazy[30_000:30_100])
        cpersist.verify(path)


@fixture_file
@pytest.mark.parametrize("compress", [0, ("zstd", 3)], ids=["raw", "zstd"])
def test_convert(path, compress, tmp_path):
    out_path = tmp_path / "converted.cp"
    cpersist.convert(path, out_path, compress)
    minor = BLOCKS_MINOR if path in BLOCK_FILES else FORMAT_MINOR  # blocks kept
    assert cpersist.inspect(out_path)["format"] == f"{FORMAT_MAJOR}.{minor}"
    codecs = {a["codec"] for a in cpersist.inspect(out_path)["arrays"]}
    if not cpersist.inspect(path)["arrays"]:  # its arrays stay in the pickle stream (tiny, max)
        assert codecs == set()
    else:
        assert codecs == ({None} if compress == 0 else {"zstd"})
    cpersist.verify(out_path)
    assert_same(_expected(path), cpersist.load(out_path))


def test_cli_info_and_verify():
    # one process for all files: each file's own report is checked
    assert FILES
    info = run_cli("info", "--json", *FILES)
    assert info.returncode == 0, info.stderr
    reports = json.loads(info.stdout)
    assert [r["file"] for r in reports] == FILES
    for path, report in zip(FILES, reports):
        assert str(report["format"]) == _format_read(path), path
    plain = run_cli("info", *FILES)
    assert plain.returncode == 0, plain.stderr
    verify = run_cli("verify", *FILES)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    lines = verify.stdout.splitlines()
    assert len(lines) == len(FILES)
    for path, line in zip(FILES, lines):
        assert line.startswith(f"{path}: OK"), line


@pytest.mark.parametrize("version", RELEASED_FORMATS)
def test_newer_major_version_refused(version, tmp_path):
    path = tmp_path / "newer.cp"
    shutil.copyfile(os.path.join(FIXTURES, f"format-{version}", "raw.cp"), path)
    data = bytearray(path.read_bytes())
    major, minor = struct.unpack_from("<HH", data, len(MAGIC))
    assert f"{major}.{minor}" == version
    newer = FORMAT_MAJOR + 1
    struct.pack_into("<H", data, len(MAGIC), newer)
    path.write_bytes(bytes(data))
    for func in (cpersist.load, cpersist.inspect, cpersist.verify):
        with pytest.raises(cpersist.UnsupportedVersionError) as info:
            func(path)
        message = str(info.value)
        assert str(path) in message
        assert f"{newer}.{minor}" in message  # the file's version
        assert re.search(rf"\b{FORMAT_MAJOR}\.(x|{FORMAT_MINOR})\b", message), message
