"""Growing object files (format 2.4): ``dump(..., growing=True)``, then
``cpersist.open(path, "a")`` appends rows to arrays and replaces them, one
commit each, without rewriting what is stored; every reader reads the last
complete commit; a commit cut at any byte leaves the state before it;
``cpersist compact`` rewrites the file without superseded data."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cpersist
from cpersist.cli import main
from cpersist.container.frames import (FRAME_TRAILER, OBJECT_FRAMES_AT, OBJECT_STUB_INDEX,
                                       PENDING, RECORD)
from cpersist.container.framing import walk_records
from cpersist.container.index import parse_index
from cpersist.container.layout import (HEADER, TRAILER, VerbatimText, checksum, extended_text,
                                       index_text, verbatim)

from .conftest import assert_same

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "format-2.4", "growing.cp")
X = "obj['x']"


def batches(dtype, order, n_rows, seed):
    """Row batches of ``n_rows`` each (rows along the first axis in C order,
    the last in F order): half smooth, half noise."""
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate(n_rows):
        shape = (n, 3, 2) if order == "C" else (3, 2, n)
        if i % 2:
            values = rng.standard_normal(shape) * 100
        else:
            values = np.cumsum(np.ones(shape), axis=0 if order == "C" else -1) + i
        arr = values.astype(dtype)
        out.append(np.asfortranarray(arr) if order == "F" else arr)
    return out


def grown(parts, order):
    whole = np.concatenate(parts, axis=0 if order == "C" else -1).astype(parts[0].dtype)
    return np.asfortranarray(whole) if order == "F" else whole


@pytest.mark.parametrize("compress", [0, 3, "lz4"])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, ">i2", np.dtype([("a", "<i4"), ("b", "<f8")])])
def test_appended_rows_read_back_by_every_reader(tmp_path, compress, order, dtype):
    path = tmp_path / "grow.cp"
    if np.dtype(dtype).names:
        parts = [np.zeros(n, dtype) for n in (5, 3000, 1, 70)]
        for i, part in enumerate(parts):
            part["a"] = np.arange(len(part)) + i
            part["b"] = np.linspace(0, 1, len(part))
        order = "C"
    else:
        parts = batches(dtype, order, (5, 3000, 1, 0, 70), seed=1)
    other = np.arange(10.0)
    cpersist.dump({"x": parts[0], "other": other, "note": "kept"}, path, compress=compress,
                  chunk_size=1 << 14, growing=True)
    with cpersist.open(path, "a") as f:
        for part in parts[1:]:
            f.append(X, part)
        assert f.arrays[X].shape == grown(parts, order).shape
    expected = {"x": grown(parts, order), "other": other, "note": "kept"}
    assert_same(expected, cpersist.load(path))
    if not compress:
        # a grown raw array is read, not mapped: its chunks are not one run
        mapped = cpersist.load(path, mmap_mode="r")
        assert_same(expected, mapped, mmap=True)
        assert type(mapped["x"]) is np.ndarray and isinstance(mapped["other"], np.memmap)
    with cpersist.open(path) as f:
        lazy = f.arrays[X]
        whole = expected["x"]
        n = whole.shape[0] if order == "C" else whole.shape[-1]
        for lo, hi in [(0, n), (3, 3010), (4, 6), (3004, n)]:
            cut = (slice(lo, hi),) if order == "C" else (Ellipsis, slice(lo, hi))
            assert_same(np.ascontiguousarray(whole[cut]), np.ascontiguousarray(lazy[cut]))
    assert cpersist.verify(path)["sections"] == 3


def smooth_beside_noise(first_row, n_rows):
    """Rows of 64 smooth float32 columns beside 64 of noise, each row much
    like the one before, neighbouring values not close."""
    t = np.arange(first_row, first_row + n_rows, dtype=np.float32)[:, None]
    smooth = np.sin(t / 2000 + np.arange(64, dtype=np.float32) / 10)
    noise = np.random.default_rng(first_row).random((n_rows, 64), dtype=np.float32)
    return np.concatenate([smooth, noise], axis=1)


def blosc_filters(path):
    """The filters of every Blosc chunk of the file's arrays (its header's
    bytes 16-21), one tuple per chunk."""
    from cpersist.container import ContainerReader
    from cpersist.container.sources import source_for

    found = []
    with open(path, "rb") as file:
        reader = ContainerReader(source_for(file, str(path)), str(path), whole=True)
        for section in reader.sections:
            if section.index != reader.root:
                for chunk in section.chunks:
                    file.seek(reader.base + chunk.offset)
                    head = file.read(32)
                    assert head[:4] != b"\x28\xb5\x2f\xfd"  # a Blosc chunk, not a frame
                    found.append(tuple(head[16:22]))
    return found


def test_growing_arrays_also_try_the_byte_shuffle_alone(tmp_path):
    # On such rows the byte delta adds noise: the shuffle alone is smaller.
    # A growing file's chunks take it, those of its first commit and of an
    # append; a dump's keep the shuffle and byte delta. The codec recorded
    # is the same, and every chunk reads back.
    shuffle_alone, shuffle_and_delta = (1, 0, 0, 0, 0, 0), (1, 35, 0, 0, 0, 0)
    parts = [smooth_beside_noise(0, 2048), smooth_beside_noise(2048, 2048)]
    path, dumped = tmp_path / "grow.cp", tmp_path / "dump.cp"
    cpersist.dump({"x": parts[0]}, path, compress=3, growing=True)
    with cpersist.open(path, "a") as f:
        f.append(X, parts[1])
    cpersist.dump({"x": grown(parts, "C")}, dumped, compress=3, chunk_size=1 << 20)
    assert blosc_filters(path) == [shuffle_alone] * 2
    assert blosc_filters(dumped) == [shuffle_and_delta] * 2
    assert_same({"x": grown(parts, "C")}, cpersist.load(path))
    with cpersist.open(path) as f:
        assert_same(grown(parts, "C")[2000:2100], f.arrays[X][2000:2100])
    assert [(row["codec"], row["level"]) for row in cpersist.inspect(path)["arrays"]] == [
        ("zstd-auto", 3)]


def test_a_lazy_grown_array_reads_through_dask(tmp_path):
    da = pytest.importorskip("dask.array")
    path = tmp_path / "grow.cp"
    parts = batches(np.float32, "C", (100, 250, 3), seed=2)
    cpersist.dump({"x": parts[0]}, path, compress=3, chunk_size=4096, growing=True)
    with cpersist.open(path, "a") as f:
        for part in parts[1:]:
            f.append(X, part)
    with cpersist.open(path) as f:
        lazy = f.arrays[X].to_dask()
        assert isinstance(lazy, da.Array)
        assert_same(grown(parts, "C"), lazy.compute())


def test_an_append_writes_after_the_end_and_rewrites_nothing(tmp_path):
    path = tmp_path / "grow.cp"
    cpersist.dump({"x": np.zeros((4, 3)), "y": np.ones(5)}, path, growing=True)
    before = path.read_bytes()
    mapped = cpersist.load(path, mmap_mode="r")
    with cpersist.open(path, "a") as f:
        f.append(X, np.ones((2, 3)))
        f.replace("obj['y']", np.arange(3, dtype=np.uint8))
    after = path.read_bytes()
    assert after[:len(before)] == before and len(after) > len(before)
    assert_same({"x": np.zeros((4, 3)), "y": np.ones(5)}, mapped, mmap=True)
    # a raw array that never grew is one run still, and maps
    assert isinstance(cpersist.load(path, mmap_mode="r")["y"], np.memmap)
    with open(path, "rb") as file:  # read whole from a file object, left at its end
        assert_same({"x": np.r_[np.zeros((4, 3)), np.ones((2, 3))],
                     "y": np.arange(3, dtype=np.uint8)}, cpersist.load(file))
        assert file.tell() == len(after)


def test_replace_takes_any_shape_dtype_and_order_and_keeps_the_rest(tmp_path):
    path = tmp_path / "grow.cp"
    keep = np.arange(12.0).reshape(3, 4)
    cpersist.dump({"x": np.zeros(5), "keep": keep}, path, compress=3, growing=True)
    new = np.asfortranarray(np.arange(24, dtype=">i4").reshape(2, 3, 4))
    with cpersist.open(path, "a") as f:
        kept_before = f.arrays["obj['keep']"]
        f.replace(X, new)
        assert f.arrays[X].shape == (2, 3, 4)
        assert_same(keep, kept_before[:])  # an array the change left as it was reads on
    assert_same({"x": new, "keep": keep}, cpersist.load(path))
    with cpersist.open(path, "a") as f:
        f.append(X, np.full((2, 3, 1), 7, ">i4"))  # an F-order array grows on its last axis
    assert_same({"x": grown([new, np.full((2, 3, 1), 7, ">i4")], "F"), "keep": keep},
                cpersist.load(path))


ASSIGNMENTS = [
    ((slice(10, 20),), 7.0),  # rows, a float64 scalar into float32
    ((Ellipsis, slice(250, None, -3)), np.arange(200.0)[:, None]),  # a negative step, broadcast
    ((5, 7), -1),  # one element
    ((slice(None, None, -1), slice(3, 4)), np.full((200, 1), 2.5, np.float32)),
    ((None, 3, slice(None)), np.arange(300.0)),  # None, one row
    (Ellipsis, np.float32(0.5)),  # the whole array
    ((slice(10, 10),), 1.0),  # nothing
]


@pytest.mark.parametrize("compress", [0, 3])
@pytest.mark.parametrize("order", ["C", "F"])
def test_assign_sets_a_basic_index_as_numpy_does(tmp_path, compress, order):
    path = tmp_path / "grow.cp"
    x = np.arange(60_000, dtype=np.float32).reshape(200, 300)
    x = np.asfortranarray(x) if order == "F" else x
    cpersist.dump({"x": x, "other": np.arange(5), "n": 1}, path, compress=compress,
                  chunk_size=1 << 14, growing=True)
    expected = x.copy(order="K")
    with cpersist.open(path, "a") as f:
        for index, value in ASSIGNMENTS:
            f.assign(X, index, value)
            expected[index] = value
        # rows appended, then assigned across the batches
        rows = np.full((3, 300), 4, np.float32) if order == "C" else \
            np.full((200, 3), 4, np.float32, order="F")
        f.append(X, rows)
        expected = grown([expected, rows], order)
        part = expected[190:, 1:].shape
        value = np.arange(part[0] * part[1], dtype=np.int16).reshape(part)
        f.assign(X, (slice(190, None), slice(1, None)), value)
        expected[190:, 1:] = value
        assert_same(np.ascontiguousarray(expected[150:, 200:]),
                    np.ascontiguousarray(f.arrays[X][150:, 200:]))
    assert_same({"x": expected, "other": np.arange(5), "n": 1}, cpersist.load(path))
    assert cpersist.verify(path)["sections"] == 3
    cpersist.compact(path)
    loaded = cpersist.load(path, mmap_mode=None if compress else "r")
    assert_same({"x": expected, "other": np.arange(5), "n": 1}, loaded, mmap=not compress)


def test_assign_rewrites_only_the_chunks_it_touches(tmp_path):
    path = tmp_path / "grow.cp"
    x = np.random.default_rng(4).standard_normal((1000, 64))
    cpersist.dump({"x": x}, path, compress=3, chunk_size=1 << 14, growing=True)
    with cpersist.open(path, "a") as f:
        before = os.path.getsize(path)
        f.assign(X, slice(40, 41), 0.0)  # one row, in the chunk of rows 32 to 63
    index = last_index(path)
    table = json.loads(next(s for s in index["sections"] if s["meta"].get("path") == X)["chunks"])
    assert len(table) == 32  # 512,000 bytes in chunks of 16 KiB
    # every chunk but the second stays where the dump put it
    written = [row for row in table if row[4] >= before]
    assert len(written) == 1 and table.index(written[0]) == 1
    assert written[0][1] == 1 << 14  # whole rows, as before
    assert os.path.getsize(path) - before < (1 << 14) + 16_000  # the chunk and the index
    x[40] = 0.0
    assert_same(x, cpersist.load(path)["x"])


def test_assign_to_raw_chunks_with_piece_checksums(tmp_path):
    """Raw chunks longer than a piece carry a checksum per piece: those of
    the rewritten chunks are spliced into the index with them."""
    path = tmp_path / "grow.cp"
    x = np.random.default_rng(5).standard_normal((1500, 1000))  # 12 MB: 3 chunks
    cpersist.dump({"x": x}, path, growing=True)
    with cpersist.open(path, "a") as f:
        f.assign(X, (slice(None, None, 7), 3), -2)
        f.assign(X, slice(600, 700), 1.5)
    x[::7, 3] = -2
    x[600:700] = 1.5
    section = next(s for s in last_index(path)["sections"] if s["meta"].get("path") == X)
    assert section["layout"] == "placed" and section["pieces"].count(",") == 2
    assert cpersist.verify(path)["sections"] == 2
    with cpersist.open(path) as f:
        assert_same(x[595:605], f.arrays[X][595:605])
    assert_same(x, cpersist.load(path)["x"])


def last_index(path):
    data = path.read_bytes()
    trailer_at = len(data) - FRAME_TRAILER.size - TRAILER.size
    offset, length, _, _ = TRAILER.unpack(data[trailer_at:trailer_at + TRAILER.size])
    return json.loads(data[offset:offset + length])


def test_assign_to_0d_structured_and_empty_arrays(tmp_path):
    path = tmp_path / "grow.cp"
    st = np.zeros(5, [("a", "<i4"), ("b", ">f8")])
    cpersist.dump({"z": np.array(2.0), "st": st, "e": np.zeros((0, 3))}, path, compress=3,
                  growing=True)
    with cpersist.open(path, "a") as f:
        f.assign("obj['z']", (), 5)
        f.assign("obj['st']", slice(1, 3), np.array([(1, 2.0), (3, 4.0)], st.dtype))
        f.assign("obj['e']", slice(None), 1.0)
        old = f.arrays["obj['st']"]
        f.assign("obj['st']", -1, np.array((9, 9.5), st.dtype))
        f.arrays  # noqa: B018 - reads the new state
        with pytest.raises(cpersist.FileChangedError):
            old[:]
    st[1:3] = [(1, 2.0), (3, 4.0)]
    st[-1] = (9, 9.5)
    assert_same({"z": np.array(5.0), "st": st, "e": np.zeros((0, 3))}, cpersist.load(path))


def test_bad_assignments_are_refused_naming_the_problem(tmp_path):
    path = tmp_path / "grow.cp"
    cpersist.dump({"x": np.zeros((4, 3), np.float32), "u": np.zeros(3, np.uint8)}, path,
                  compress=3, growing=True)
    before = path.read_bytes()
    with cpersist.open(path, "a") as f:
        with pytest.raises(TypeError, match="only basic indices"):
            f.assign(X, [0, 2], 1.0)
        with pytest.raises(TypeError, match="only basic indices"):
            f.assign(X, np.array([True, False, True, False]), 1.0)
        with pytest.raises(IndexError, match=r"of shape \(4, 3\)"):
            f.assign(X, (4, 0), 1.0)
        with pytest.raises(ValueError, match=r"value of shape \(2, 2\) to a part of obj\['x'\] "
                                             r"of shape \(2, 3\)"):
            f.assign(X, slice(0, 2), np.ones((2, 2)))
        with pytest.raises(TypeError, match="cannot assign complex128 values"):
            f.assign(X, 0, np.ones(3, complex))
        with pytest.raises(TypeError, match="cannot assign 300"):
            f.assign("obj['u']", 0, 300)
        with pytest.raises(TypeError, match="Python objects"):
            f.assign(X, 0, [object(), 1, 2])
        with pytest.raises(cpersist.ArrayNotFoundError):
            f.assign("obj['nope']", 0, 1)
    assert path.read_bytes() == before


@pytest.mark.parametrize("compress", [0, 3])
def test_update_and_replace_object_change_the_object_and_keep_the_arrays(tmp_path, compress):
    path = tmp_path / "grow.cp"
    w, b, layer = np.arange(100_000.0), np.ones(3), np.asfortranarray(np.eye(300, dtype="<f4"))
    cpersist.dump({"w": w, "b": b, "lr": 0.1, "layers": [layer, {"name": "l1"}]}, path,
                  compress=compress, growing=True)
    stored = path.read_bytes()
    with cpersist.open(path, "a") as f:
        f.update("lr", 0.01)
        f.update("epochs", {"done": [1, 2]})
        obj = f.load(lazy=True)
        obj["layers"][1]["name"] = "renamed"
        obj["small"] = np.arange(3, dtype=">i2")  # small: kept in the pickle stream
        obj["again"] = obj["w"]  # one stored array, twice
        f.replace_object(obj)
        assert f.load()["layers"][1] == {"name": "renamed"}
    expected = {"w": w, "b": b, "lr": 0.01, "layers": [layer, {"name": "renamed"}],
                "epochs": {"done": [1, 2]}, "small": np.arange(3, dtype=">i2"), "again": w}
    loaded = cpersist.load(path)
    assert_same(expected, loaded)
    assert loaded["again"] is loaded["w"]
    assert_same(expected, cpersist.load(path, trusted=False))
    data = path.read_bytes()
    assert data[:len(stored)] == stored
    assert len(data) - len(stored) < 8000  # the pickle streams and indexes, no array
    assert cpersist.verify(path)["sections"] == 4
    cpersist.compact(path)
    assert_same(expected, cpersist.load(path))


def test_bad_object_changes_are_refused_and_change_nothing(tmp_path):
    path = tmp_path / "grow.cp"
    cpersist.dump({"w": np.arange(10_000.0), "lr": 0.1}, path, compress=3, growing=True)
    other = tmp_path / "other.cp"
    cpersist.dump({"w": np.arange(10_000.0)}, other, growing=True)
    before = path.read_bytes()
    with cpersist.open(path, "a") as f, cpersist.open(other) as o:
        with pytest.raises(ValueError, match=r"leaves out obj\['w'\]"):
            f.update("w", 1)
        with pytest.raises(TypeError, match="80,000 bytes that the file does not hold"):
            f.update("big", np.zeros(10_000))
        with pytest.raises(ValueError, match="lazy array of another file"):
            f.replace_object({"w": f.arrays[X.replace("x", "w")], "o": o.arrays["obj['w']"]})
        with pytest.raises(cpersist.UnpicklableError):
            f.update("f", lambda: 1)
    assert path.read_bytes() == before
    cpersist.dump([np.zeros(3)], other, growing=True)
    with cpersist.open(other, "a") as f, pytest.raises(TypeError, match="holds a list"):
        f.update("k", 1)


def test_lazy_arrays_of_a_changed_array_say_so(tmp_path):
    path = tmp_path / "grow.cp"
    cpersist.dump({"x": np.zeros(5)}, path, growing=True)
    with cpersist.open(path, "a") as f:
        old = f.arrays[X]
        f.append(X, np.ones(2))
        assert_same(np.zeros(5), old[:])  # the state it was taken from
        assert_same(np.r_[np.zeros(5), np.ones(2)], f.arrays[X][:])
        with pytest.raises(cpersist.FileChangedError, match="open the file again"):
            old[:]


def test_bad_rows_and_keys_are_refused_naming_the_problem(tmp_path):
    path = tmp_path / "grow.cp"
    cpersist.dump({"x": np.zeros((4, 3), np.float32), "s": np.float64(1.0)}, path,
                  growing=True)
    before = path.read_bytes()
    with cpersist.open(path, "a") as f:
        with pytest.raises(ValueError, match=r"rows are appended along its first axis: \(n, 3\)"):
            f.append(X, np.zeros((2, 4)))
        with pytest.raises(TypeError, match="cannot append complex128 rows"):
            f.append(X, np.zeros((2, 3), complex))
        with pytest.raises(cpersist.ArrayNotFoundError):
            f.append("obj['nope']", np.zeros((2, 3)))
        with pytest.raises(TypeError, match="Python objects"):
            f.replace(X, np.array([object()]))
    assert path.read_bytes() == before
    with pytest.raises(ValueError, match="mmap_mode='r\\+' is not available for a growing"):
        cpersist.load(path, mmap_mode="r+")


def test_a_growing_file_is_read_from_a_url_and_changed_only_at_a_path(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    path = tmp_path / "grow.cp"
    cpersist.dump({"x": np.arange(10.0)}, path, compress=3, growing=True)
    with cpersist.open(path, "a") as f:
        f.append(X, np.arange(3.0))
    url = "memory://growing-test/grow.cp"
    fsspec.filesystem("memory").pipe_file(url, path.read_bytes())
    expected = np.r_[np.arange(10.0), np.arange(3.0)]
    assert_same({"x": expected}, cpersist.load(url))
    with cpersist.open(url) as f:
        assert_same(expected[8:12], f.arrays[X][8:12])
    with pytest.raises(cpersist.UnwritableTargetError, match="cannot append to an object"):
        cpersist.open(url, "a")
    with pytest.raises(cpersist.UnwritableTargetError, match="object stores cannot change"):
        cpersist.dump({"x": np.zeros(3)}, "s3://bucket/grow.cp", growing=True)


def test_what_is_not_a_local_growing_file_is_refused(tmp_path):
    with open(tmp_path / "f.cp", "wb") as file, pytest.raises(
            cpersist.UnwritableTargetError, match="local path"):
        cpersist.dump({"x": np.zeros(3)}, file, growing=True)
    plain = tmp_path / "plain.cp"
    cpersist.dump({"x": np.zeros(3)}, plain)
    with pytest.raises(cpersist.UnwritableTargetError, match="growing=True"):
        cpersist.compact(plain)
    with pytest.raises(cpersist.UnwritableTargetError, match="a cpersist dump, not a record log"):
        cpersist.open(plain, "a")


def test_a_second_writer_waits_or_is_refused(tmp_path):
    path = tmp_path / "grow.cp"
    cpersist.dump({"x": np.zeros(3)}, path, growing=True)
    with cpersist.open(path, "a"):
        with pytest.raises(cpersist.FileLockedError, match="another writer"):
            cpersist.open(path, "a", timeout=0.1)
        with pytest.raises(cpersist.FileLockedError):
            cpersist.compact(path, timeout=0.1)


CHANGES = {
    "append": (lambda f: f.append(X, np.arange(4, dtype=np.int16) + 100),
               {"x": np.r_[np.arange(6), np.arange(4) + 100].astype(np.int16), "t": "state"}),
    "assign": (lambda f: f.assign(X, slice(2, 4), [-7, -8]),
               {"x": np.array([0, 1, -7, -8, 4, 5], np.int16), "t": "state"}),
    "update": (lambda f: f.update("t", ["changed", 2]),
               {"x": np.arange(6, dtype=np.int16), "t": ["changed", 2]}),
}


def commits(path, change="append"):
    """A file with states A, then B (one ``change``): ``(bytes, end of A, A, B)``."""
    cpersist.dump({"x": np.arange(6, dtype=np.int16), "t": "state"}, path, compress=3,
                  growing=True)
    end_a = os.path.getsize(path)
    with cpersist.open(path, "a") as f:
        CHANGES[change][0](f)
    a = {"x": np.arange(6, dtype=np.int16), "t": "state"}
    return path.read_bytes(), end_a, a, CHANGES[change][1]


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_commit_cut_at_any_byte_leaves_the_state_before_it(tmp_path, change):
    path = tmp_path / "grow.cp"
    data, end_a, a, b = commits(path, change)
    assert_same(b, cpersist.load(path))
    cut = tmp_path / "cut.cp"
    for size in range(end_a, len(data)):
        cut.write_bytes(data[:size])
        assert_same(a, cpersist.load(cut))
    # Every byte written but the length that commits it: still A.
    pending = bytearray(data)
    pending[end_a:end_a + 8] = RECORD.pack(6 << 56 | PENDING)
    cut.write_bytes(bytes(pending))
    assert_same(a, cpersist.load(cut))
    with cpersist.open(cut) as f:
        assert f.arrays[X].shape == (6,)
    assert cpersist.inspect(cut)["torn_bytes"] == len(data) - end_a
    repaired = tmp_path / "repaired.cp"
    shutil.copy(cut, repaired)
    assert cpersist.repair(repaired) == {"records": None, "cut_bytes": len(data) - end_a}
    assert repaired.read_bytes() == data[:end_a]
    # The next writer cuts the torn tail off and commits after A.
    with cpersist.open(cut, "a") as f:
        assert f.torn_bytes == len(data) - end_a
        CHANGES[change][0](f)
    assert cut.read_bytes() == data


def test_a_reader_reads_on_when_a_writer_cuts_the_torn_tail_it_saw(tmp_path):
    from cpersist.container import ContainerReader
    from cpersist.container.sources import source_for

    path = tmp_path / "grow.cp"
    data, end_a, a, _ = commits(path)
    path.write_bytes(data[:-5])  # the second commit cut short: a torn tail
    with open(path, "rb") as file:
        source = source_for(file, "grow.cp")  # sees the torn tail
        os.truncate(path, end_a)  # a writer opening the file cuts it off
        reader = ContainerReader(source, whole=True)
        assert (reader.commit_end, reader.torn) == (end_a, 0)
    assert_same(a, cpersist.load(path))


def test_a_commit_that_fails_leaves_the_file_as_it_was(tmp_path):
    """A write refused partway (the file size limit here, a full disk
    elsewhere) raises, and the file is cut back to its last commit."""
    path = tmp_path / "grow.cp"
    cpersist.dump({"x": np.arange(5.0)}, path, growing=True)
    before = path.read_bytes()
    most = len(before) + 4096
    script = textwrap.dedent(f"""
        import resource, signal, numpy as np, cpersist
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        with cpersist.open({str(path)!r}, "a") as f:
            limit = ({most}, resource.RLIM_INFINITY)
            resource.setrlimit(resource.RLIMIT_FSIZE, limit)
            try:
                f.append("obj['x']", np.ones(1 << 17))
            except OSError as exc:
                print("refused", exc.errno)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.stdout.startswith("refused"), done.stderr
    assert path.read_bytes() == before


def test_damage_to_the_last_commit_is_not_taken_for_a_state(tmp_path):
    path = tmp_path / "grow.cp"
    data, end_a, a, _ = commits(path)
    damaged = bytearray(data)
    damaged[-20] ^= 1  # the commit's dump trailer: its frame checksum fails
    path.write_bytes(bytes(damaged))
    assert_same(a, cpersist.load(path))


def test_compact_reclaims_what_info_says_and_keeps_the_state(tmp_path):
    path = tmp_path / "grow.cp"
    parts = batches(np.float32, "C", (50, 40, 30), seed=3)
    cpersist.dump({"x": parts[0], "y": np.arange(1000.0), "z": np.ones(7)}, path,
                  growing=True)
    with cpersist.open(path, "a") as f:
        for part in parts[1:]:
            f.append(X, part)
        f.replace("obj['y']", np.arange(5.0))
    expected = cpersist.load(path)
    info = cpersist.inspect(path)
    assert info["layout"] == "growing" and info["reclaimable_bytes"] > 8000
    reader = open(path, "rb")  # a reader that has the file open reads on
    result = cpersist.compact(path)
    assert result["reclaimed_bytes"] == info["reclaimable_bytes"]
    assert result["bytes_after"] == os.path.getsize(path)
    assert cpersist.inspect(path)["reclaimable_bytes"] == 0
    loaded = cpersist.load(path, mmap_mode="r")
    assert_same(expected, loaded, mmap=True)
    assert isinstance(loaded["x"], np.memmap)  # one run again
    assert_same(expected, cpersist.load(reader))
    reader.close()
    with cpersist.open(path, "a") as f:
        f.append(X, parts[0])
    assert_same(grown(parts + parts[:1], "C"), cpersist.load(path)["x"])


def test_compact_refuses_damage_and_changes_nothing(tmp_path):
    path = tmp_path / "grow.cp"
    cpersist.dump({"x": np.arange(1000.0)}, path, growing=True)
    with cpersist.open(path, "a") as f:
        f.append(X, np.arange(10.0))
    data = bytearray(path.read_bytes())
    data[OBJECT_FRAMES_AT + 200] ^= 0xFF  # inside the array's first chunk
    path.write_bytes(bytes(data))
    with pytest.raises(cpersist.CorruptFileError, match="nothing was compacted"):
        cpersist.compact(path)
    assert path.read_bytes() == data
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".cpersist-tmp")]


def test_a_writer_waiting_for_a_compaction_changes_the_compacted_file(tmp_path):
    """compact renames its file onto the path while holding the old file's
    lock: a writer that waited for that lock locks the new file instead."""
    import fcntl

    path = tmp_path / "grow.cp"
    cpersist.dump({"x": np.arange(3.0)}, path, growing=True)
    newer = tmp_path / "newer.cp"
    shutil.copy(path, newer)
    held = os.open(path, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    done = []

    def append():
        with cpersist.open(path, "a") as f:
            f.append(X, np.ones(2))
        done.append(True)

    thread = threading.Thread(target=append)
    thread.start()
    thread.join(0.3)
    assert not done  # waiting for the lock
    os.replace(newer, path)
    fcntl.flock(held, fcntl.LOCK_UN)
    os.close(held)
    thread.join(10)
    assert done
    assert_same(np.r_[np.arange(3.0), np.ones(2)], cpersist.load(path)["x"])


def test_the_command_line_compacts_and_info_reports_reclaimable_bytes(tmp_path, capsys):
    path = tmp_path / "grow.cp"
    cpersist.dump({"x": np.arange(1000.0)}, path, growing=True)
    with cpersist.open(path, "a") as f:
        f.replace(X, np.arange(3.0))
    assert main(["info", str(path)]) == 0
    reclaimable = cpersist.inspect(path)["reclaimable_bytes"]
    assert f"{reclaimable:,} of them superseded" in capsys.readouterr().out
    assert main(["compact", str(path)]) == 0
    assert f"OK ({reclaimable:,} bytes reclaimed" in capsys.readouterr().out
    assert main(["compact", str(tmp_path / "missing.cp")]) == 1


# -- the format-2.4 fixture ---------------------------------------------------


def fixture_steps():
    """The object the fixture is dumped from, and its changes."""
    first = {"x": np.arange(12, dtype=np.float32).reshape(4, 3),
             "f": np.asfortranarray(np.arange(6, dtype=">i2").reshape(3, 2)),
             "z": np.linspace(0, 1, 20_000), "name": "fixture"}
    changes = [("append", X, np.full((2, 3), 7, np.float32)),
               ("append", "obj['f']", np.full((3, 1), -1, ">i2")),
               ("replace", "obj['z']", np.arange(5, dtype=np.uint8)),
               ("append", X, np.full((1, 3), 8, np.float32))]
    expected = {"x": grown([first["x"], changes[0][2], changes[3][2]], "C"),
                "f": grown([first["f"], changes[1][2]], "F"),
                "z": changes[2][2], "name": "fixture"}
    return first, changes, expected


def make_fixture(path=FIXTURE):
    """Write the fixture: ``python -c 'from tests.test_growing_files import
    make_fixture; make_fixture()'``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    first, changes, _ = fixture_steps()
    cpersist.dump(first, path, compress=3, growing=True)
    with cpersist.open(path, "a") as f:
        for what, key, value in changes:
            getattr(f, what)(key, value)


def test_the_fixture_loads_and_the_writer_still_writes_its_bytes(tmp_path):
    _, _, expected = fixture_steps()
    assert_same(expected, cpersist.load(FIXTURE))
    make_fixture(tmp_path / "again.cp")
    with open(FIXTURE, "rb") as file:
        assert (tmp_path / "again.cp").read_bytes() == file.read()


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x200)), st.text(max_size=8))
def test_texts_written_as_they_are_are_the_json_of_themselves(text, tail):
    """A commit writes its chunk tables and piece checksums unescaped
    (VerbatimText): only what JSON would write as itself between quotes is
    taken as one, and the index is the bytes ``json.dumps`` would give."""
    marked = verbatim(text)
    if type(marked) is VerbatimText:
        assert json.dumps(text) == '"' + text + '"'
    extended = extended_text(marked, tail, cut=1)
    assert extended == text[:len(text) - 1] + tail
    if type(extended) is VerbatimText:
        assert json.dumps(extended) == '"' + extended + '"'
    sections = [{"chunks": extended, "meta": {"path": text}}, {"pieces": marked, "n": [1.5]}]
    plain = [{key: str(value) if isinstance(value, str) else value for key, value in entry.items()}
             for entry in sections]
    assert index_text(0, sections, {}, pack=False) == index_text(0, plain, {}, pack=False)
    assert json.loads(index_text(0, sections, {}, pack=False))["sections"] == plain


def test_readers_of_earlier_versions_refuse_the_fixture():
    """What a reader of format 2.3 or 2.2 does with a growing object file:
    2.3 reads a growing file of a later minor version as nothing but
    UnsupportedVersionError; 2.2 (which ignores flag bit 2) walks the
    records from the header, meets the preamble's END record first, and
    refuses the bytes after it at a path, or the stub index's codec from a
    file object."""
    with open(FIXTURE, "rb") as file:
        data = file.read()
    _, major, minor, flags = HEADER.unpack(data[:HEADER.size])
    assert (major, minor, flags) == (2, 4, 4)
    end = walk_records(lambda at, n: data[at:at + n], len(data), "grow")
    assert end == OBJECT_FRAMES_AT < len(data)
    offset, length, digest, _ = TRAILER.unpack(data[end - TRAILER.size:end])
    assert data[offset:offset + length] == OBJECT_STUB_INDEX
    assert digest == checksum(OBJECT_STUB_INDEX)
    with pytest.raises(cpersist.CorruptFileError, match="format-2.4-growing-object"):
        parse_index(data[offset:offset + length], digest, offset, "grow")
    # The commit's own index states 2.4 and lists grown arrays' chunks by offset.
    trailer_at = len(data) - FRAME_TRAILER.size - TRAILER.size
    offset, length, _, _ = TRAILER.unpack(data[trailer_at:trailer_at + TRAILER.size])
    index = json.loads(data[offset:offset + length])
    assert index["format"] == [2, 4]
    assert {s.get("layout") for s in index["sections"]} >= {"placed"}
