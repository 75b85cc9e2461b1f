"""Files of several dumps written one after another (``open(path, "ab")``,
then ``cpersist.dump`` again and again): read by path as a sequence of
records, as a record log is; a dump cut short at the end is a torn tail,
ignored and kept by readers, cut by repair; damage anywhere else is
reported, and not cut. A file object reads one
dump at a time, from where it is."""

import json

import numpy as np
import pytest

import cpersist
from cpersist.cli import main
from cpersist.container.layout import HEADER, RECORD_SIZE

from .conftest import assert_same


def dumped():
    """``(object, dump options)``: every kind of dump (raw arrays in both
    orders and byte orders, compressed arrays, a compact dump, a tiny one)."""
    return [
        ({"w": np.arange(12.0).reshape(3, 4),
          "f": np.asfortranarray(np.arange(6, dtype=">i2").reshape(2, 3))}, {}),
        ({"step": 1, "tags": ["a", "b"]}, {}),
        ({"x": np.linspace(0, 1, 50_000, dtype=np.float32)}, {"compress": 3}),
        ("a tiny dump " * 20, {"compress": "max"}),
        ([1, 2.5, None], {}),
    ]


def write_dumps(path, items):
    """Dump each object to ``path`` opened ``"ab"``; returns where each
    dump starts, and the file's size after the last."""
    offsets = []
    for obj, options in items:
        with open(path, "ab") as file:
            offsets.append(file.tell())
            cpersist.dump(obj, file, **options)
    return offsets + [path.stat().st_size]


@pytest.mark.usefixtures("sections")
def test_dumps_one_after_another_read_as_records(tmp_path, capsys):
    path = tmp_path / "dumps.cp"
    items = dumped()
    expected = [obj for obj, _ in items]
    offsets = write_dumps(path, items)
    assert path.read_bytes()[offsets[3]:offsets[3] + 4] == b"\x89CPT"  # a tiny dump
    assert_same(expected, cpersist.load(path))
    with cpersist.open(path) as log:
        assert isinstance(log, cpersist.RecordLog) and log.dumps
        assert (len(log), log.torn_bytes, log.committed_bytes) == (5, 0, offsets[-1])
        assert_same(expected, list(log))
        assert_same(expected[3], log[3])
        assert_same(expected[-1], log[-1])
        assert_same(expected[1:4], log[1:4])
        assert [log.dump_at(i) for i in range(5)] == offsets[:-1]
        mapped = log.load(0, mmap_mode="r")
        assert isinstance(mapped["w"], np.memmap) and mapped["f"].flags.f_contiguous
        assert_same(expected[0], mapped, mmap=True)
        with pytest.raises(ValueError, match="for reading only"):
            log.append(1)
    assert_same(expected, cpersist.load(path, trusted=False))
    with pytest.raises(cpersist.UnwritableTargetError, match="a cpersist dump, not a record log"):
        cpersist.append(1, path)  # a record log's writer leaves a file of dumps alone

    info = cpersist.inspect(path)
    assert (info["layout"], info["format"], info["records"], info["records_with_arrays"],
            info["torn_bytes"]) == ("dumps", "2.2", 5, 2, 0)
    assert [(a["record"], a["path"], a["shape"]) for a in info["arrays"]] == [
        (0, "obj['w']", (3, 4)), (0, "obj['f']", (2, 3)), (2, "obj['x']", (50_000,))]
    report = cpersist.verify(path)
    assert (report["records"], report["torn_bytes"], report["sections"]) == (5, 0, 8)
    assert main(["info", str(path)]) == 0
    assert ("5 dumps one after another, read as records (2 with arrays)"
            in capsys.readouterr().out)
    assert main(["info", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 5
    assert main(["verify", str(path)]) == 0
    assert "OK (8 sections" in capsys.readouterr().out

    # A file object reads one dump at a time, from where it is, as always.
    with open(path, "rb") as file:
        for i, obj in enumerate(expected):
            assert file.tell() == offsets[i]
            assert_same(obj, cpersist.load(file))
        assert file.read() == b""
        file.seek(offsets[2])
        assert cpersist.inspect(file)["arrays"][0]["path"] == "obj['x']"


def test_a_single_dump_still_loads_as_its_object(tmp_path):
    path = tmp_path / "one.cp"
    obj, options = dumped()[0]
    write_dumps(path, [(obj, options)])
    assert_same(obj, cpersist.load(path))
    with cpersist.open(path) as f:
        assert isinstance(f, cpersist.FileHandle)
    assert "records" not in cpersist.verify(path)


@pytest.mark.parametrize("last", ["raw", "tiny"])
def test_a_dump_cut_short_at_the_end_is_a_torn_tail(tmp_path, last):
    path = tmp_path / "dumps.cp"
    items = dumped()[1:3] + [dumped()[0] if last == "raw" else dumped()[3]]
    offsets = write_dumps(path, items)
    data = path.read_bytes()
    committed = offsets[-2]
    # every cut in the header, the first records and the end record, some
    # in between
    cuts = {*range(committed + 1, committed + 96), *range(len(data) - 96, len(data)),
            *range(committed + 1, len(data), 17)}
    for cut in sorted(c for c in cuts if committed < c < len(data)):
        path.write_bytes(data[:cut])
        assert_same([items[0][0], items[1][0]], cpersist.load(path))
        report = cpersist.verify(path)
        assert (report["records"], report["torn_bytes"]) == (2, cut - committed), cut
        assert path.stat().st_size == cut  # reported, never cut by a reader
    half = (len(data) - committed) // 2
    path.write_bytes(data[:committed + half])
    with cpersist.open(path) as log:
        assert (len(log), log.torn_bytes) == (2, half)
        with open(path, "ab") as file:  # a dump being written meanwhile
            file.write(data[committed + half:])
        assert log.refresh() == 3
        assert_same(items[2][0], log[2], mmap=True)
    assert main(["verify", str(path)]) == 0
    # repair cuts the torn dump off, after which dumping again is safe
    path.write_bytes(data[:committed + half])
    assert cpersist.repair(path) == {"records": 2, "cut_bytes": half}
    assert path.read_bytes() == data[:committed]
    assert cpersist.repair(path) == {"records": 2, "cut_bytes": 0}
    write_dumps(path, items[2:])
    assert_same([obj for obj, _ in items], cpersist.load(path))
    # the first dump cut short is a truncated dump, as before, which repair
    # leaves alone
    path.write_bytes(data[:offsets[1] - 1])
    with pytest.raises(cpersist.CorruptFileError, match="truncated"):
        cpersist.load(path)
    with pytest.raises(cpersist.CorruptFileError, match="nothing was cut"):
        cpersist.repair(path)
    assert path.stat().st_size == offsets[1] - 1


def test_damage_between_or_inside_dumps_is_reported(tmp_path, capsys):
    path = tmp_path / "dumps.cp"
    items = dumped()[:3]
    offsets = write_dumps(path, items)
    data = path.read_bytes()

    # bytes that are no dump between two dumps
    junk = b"\x89CPS-not-a-dump"
    path.write_bytes(data[:offsets[2]] + junk + data[offsets[2]:])
    for read in (cpersist.load, cpersist.verify, cpersist.inspect, len_of_open):
        with pytest.raises(cpersist.CorruptFileError,
                           match=f"bytes at offset {offsets[2]} .* are not a dump"):
            read(path)
    path.write_bytes(data[:offsets[1]] + junk + data[offsets[1]:])
    with pytest.raises(cpersist.CorruptFileError, match="trailing data after a complete dump"):
        cpersist.load(path)
    assert main(["verify", str(path)]) == 1
    assert "FAILED: trailing data after a complete dump" in capsys.readouterr().out
    path.write_bytes(data[:offsets[2]] + junk + data[offsets[2]:])
    assert main(["repair", str(path)]) == 1  # damage is not cut
    assert "FAILED: damaged file of dumps" in capsys.readouterr().out
    assert path.stat().st_size == len(data) + len(junk)

    # the middle dump's first record header damaged: its end cannot be found
    damaged = bytearray(data)
    damaged[offsets[1] + HEADER.size + RECORD_SIZE - 1] = 0x7F  # an unknown record kind
    path.write_bytes(bytes(damaged))
    with pytest.raises(cpersist.CorruptFileError, match="record"):
        cpersist.load(path)

    # its end record's length changed: no trailer where it says it ends
    damaged = bytearray(data)
    damaged[offsets[2] - 40] ^= 8
    path.write_bytes(bytes(damaged))
    with pytest.raises(cpersist.CorruptFileError,
                       match=f"damaged record header at offset {offsets[2] - 40} "):
        cpersist.load(path)

    # a byte of the middle dump's data flipped: that record, and no other
    damaged = bytearray(data)
    damaged[offsets[2] - 41] ^= 1  # before its end record
    path.write_bytes(bytes(damaged))
    with cpersist.open(path) as log:
        assert len(log) == 3 and log.torn_bytes == 0
        assert_same(items[0][0], log[0])
        assert_same(items[2][0], log[2])
        with pytest.raises(cpersist.CorruptFileError):
            log[1]
    with pytest.raises(cpersist.CorruptFileError):
        cpersist.load(path)
    with pytest.raises(cpersist.CorruptFileError):
        cpersist.verify(path)


def len_of_open(path):
    with cpersist.open(path) as log:
        return len(log)
