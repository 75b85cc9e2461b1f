"""Record logs: records appended one at a time (``cpersist.append``, an open
``cpersist.open(path, "a")``) read back in order, by number or all at once
by every reader; a torn tail is ignored by readers and cut off by the next
writer or ``cpersist repair``; two writers never interleave; a reader of
format 2.2 refuses the file rather than read anything."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from fractions import Fraction

import numpy as np
import pytest

import cpersist
from cpersist.cli import main
from cpersist.container.frames import FRAMES_AT, STUB_INDEX
from cpersist.container.framing import walk_records
from cpersist.container.index import parse_index
from cpersist.container.layout import HEADER, RECORD_SIZE, TRAILER, checksum

from .conftest import assert_same, every_array_a_section

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "format-2.3", "records.cpl")


def fixture_records():
    """The records of the format-2.3 fixture, in order: ones stored as their
    pickle stream, one whose arrays are raw sections, one compressed."""
    return [
        {"step": 0, "loss": 0.5, "tags": ["a", "b"]},
        {"w": np.arange(12.0).reshape(3, 4), "f": np.asfortranarray(
            np.arange(6, dtype=">i2").reshape(2, 3)), "name": "raw"},
        "a string",
        ({"x": np.linspace(0, 1, 50_000, dtype=np.float32)}, 3),
        {"step": 2, "loss": Fraction(1, 4)},
    ]


def write_records(path, records):
    """Append ``records`` (a ``(record, compress)`` pair for a compressed
    one) to the log at ``path``."""
    for record in records:
        record, compress = record if isinstance(record, tuple) else (record, 0)
        cpersist.append(record, path, compress)


def plain(records):
    return [r[0] if isinstance(r, tuple) else r for r in records]


def make_fixture(path=FIXTURE):
    """Write the fixture: ``python -c 'from tests.test_record_logs import
    make_fixture; make_fixture()'``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_records(path, fixture_records())


def test_the_fixture_loads_and_the_writer_still_writes_its_bytes(tmp_path):
    expected = plain(fixture_records())
    assert_same(expected, cpersist.load(FIXTURE))
    # The fixture's writer gave each array a section; today's keeps the
    # small ones in the pickle stream, a log that loads the same.
    with every_array_a_section():
        write_records(tmp_path / "again.cpl", fixture_records())
    with open(FIXTURE, "rb") as file:
        assert (tmp_path / "again.cpl").read_bytes() == file.read()
    write_records(tmp_path / "now.cpl", fixture_records())
    assert_same(expected, cpersist.load(tmp_path / "now.cpl"))


def test_a_format_2_2_reader_refuses_a_record_log():
    """What a reader of format 2.2 does with the fixture, step by step: the
    file holds one complete dump (the preamble) and bytes after it, which a
    path load refuses; read from a file object, the preamble's index names a
    codec no such reader has, which it refuses naming it."""
    with open(FIXTURE, "rb") as file:
        data = file.read()
    _, major, minor, flags = HEADER.unpack(data[:HEADER.size])
    assert (major, minor, flags) == (2, 3, 4)  # 2.2 reads 2.x, ignores flag bit 2
    end = walk_records(lambda at, n: data[at:at + n], len(data), "log")
    assert end == FRAMES_AT < len(data)  # a path holding more: "trailing data"
    offset, length, digest, _ = TRAILER.unpack(data[end - TRAILER.size:end])
    assert data[offset:offset + length] == STUB_INDEX and digest == checksum(STUB_INDEX)
    with pytest.raises(cpersist.CorruptFileError, match="format-2.3-record-log"):
        parse_index(data[offset:offset + length], digest, offset, "log")


def test_a_record_log_of_a_later_minor_version_is_refused(tmp_path):
    """It may hold frames this version would take for a torn tail."""
    path = tmp_path / "later.cpl"
    with open(FIXTURE, "rb") as file:
        data = bytearray(file.read())
    data[10] = 5  # the header's minor version (2.4 is the growing object file)
    path.write_bytes(bytes(data))
    for use in (cpersist.load, cpersist.open, cpersist.verify,
                lambda p: cpersist.append(1, p)):
        with pytest.raises(cpersist.UnsupportedVersionError, match="format 2.5, newer"):
            use(path)
    assert path.read_bytes() == data


@pytest.mark.usefixtures("sections")
def test_records_come_back_in_order_by_number_and_all_at_once(tmp_path):
    path = tmp_path / "log.cpl"
    records = fixture_records()
    write_records(path, records[:2])
    with cpersist.open(path, "a", compress=3) as log:
        for record in plain(records[2:]):
            log.append(record)
        assert len(log) == 5
        log.append({"last": True})
    expected = plain(records) + [{"last": True}]
    assert_same(expected, cpersist.load(path))
    with cpersist.open(path) as log:
        assert len(log) == 6
        assert_same(expected, list(log))
        assert_same(expected[3], log[3])
        assert_same(expected[-1], log[-1])
        assert_same(expected[1:4], log[1:4])
        with pytest.raises(IndexError, match="no record 6: the log holds 6"):
            log[6]
        mapped = log.load(1, mmap_mode="r")
        assert isinstance(mapped["w"], np.memmap) and mapped["f"].flags.f_contiguous
        assert_same(expected[1], mapped, mmap=True)
        with pytest.raises(ValueError, match="for reading only"):
            log.append(1)
    with pytest.warns(UserWarning, match="compressed arrays, which cannot be memory-mapped"):
        mapped_all = cpersist.load(path, mmap_mode="r")
    assert isinstance(mapped_all[1]["w"], np.memmap)


def test_a_long_record_without_arrays_is_stored_as_a_dump(tmp_path):
    """A pickle stream over 1 MiB goes in a dump frame, whose trailer is
    checked without reading it (as every append checks the last frame)."""
    path = tmp_path / "log.cpl"
    long_record = list(range(400_000))
    write_records(path, [{"a": 1}, long_record])
    with cpersist.open(path) as log:
        assert log.dump_at(0) is None and log.dump_at(1) is not None
        assert log[1] == long_record
        assert list(log) == [{"a": 1}, long_record]  # read alone, not in a block


class Point:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return type(other) is Point and other.x == self.x


@pytest.mark.usefixtures("sections")
def test_a_restricted_load_applies_to_every_record(tmp_path):
    path = tmp_path / "log.cpl"
    write_records(path, [{"a": 1}, Point(3), {"w": np.arange(4)}])
    with pytest.raises(cpersist.UntrustedObjectError, match="test_record_logs.Point"):
        cpersist.load(path, trusted=False)
    with cpersist.open(path, trusted=False) as log:
        assert log[0] == {"a": 1}
        assert_same({"w": np.arange(4)}, log[2])
        with pytest.raises(cpersist.UntrustedObjectError):
            log[1]
    assert cpersist.load(path, trusted=[(__name__, "Point")])[1] == Point(3)
    report = cpersist.inspect(path)
    assert report["records"] == 3 and report["globals"] == [f"{__name__}.Point"]
    assert report["restricted_load"]["refusal"].startswith("record 1: UntrustedObjectError")
    assert [a["record"] for a in report["arrays"]] == [2]


@pytest.mark.parametrize("last", ["light", "dump"])
def test_a_torn_tail_is_ignored_then_cut_by_the_next_writer_or_repair(tmp_path, last):
    path = tmp_path / "log.cpl"
    write_records(path, [{"a": 1}, {"b": 2}])
    whole = path.read_bytes()
    write_records(path, [{"c": 3} if last == "light" else {"w": np.arange(1000.0)}])
    full = path.read_bytes()
    # every byte of a light frame; of a dump's, its first and last bytes and
    # every 97th between
    cuts = range(len(whole) + 1, len(full))
    if last == "dump":
        cuts = sorted({*cuts[:80], *cuts[-80:], *cuts[::97]})
    for cut in cuts:
        path.write_bytes(full[:cut])
        assert cpersist.load(path) == [{"a": 1}, {"b": 2}]
        assert cpersist.verify(path)["torn_bytes"] == cut - len(whole)
    assert cpersist.repair(path) == {"records": 2, "cut_bytes": len(full) - 1 - len(whole)}
    assert path.read_bytes() == whole
    path.write_bytes(full[:-1])
    cpersist.append({"d": 4}, path)
    assert cpersist.load(path) == [{"a": 1}, {"b": 2}, {"d": 4}]


def test_a_dump_frame_being_written_is_not_a_record(tmp_path):
    """An ENTRY_DUMP frame says PENDING until its trailer is written: its
    dump complete, the frame is still not a record (nor is its trailer
    alone)."""
    path = tmp_path / "log.cpl"
    write_records(path, [{"a": 1}, {"w": np.arange(10)}])
    data = bytearray(path.read_bytes())
    with cpersist.open(path) as log:
        start = log._extent(1)[0]
    data[start:start + 7] = b"\xff" * 7  # the length of a frame being written
    path.write_bytes(bytes(data))
    assert cpersist.load(path) == [{"a": 1}]
    assert cpersist.repair(path)["cut_bytes"] == len(data) - start


def test_damage_is_reported_not_cut(tmp_path):
    path = tmp_path / "log.cpl"
    write_records(path, [{"a": 1}, {"b": 2}, {"c": 3}])
    data = bytearray(path.read_bytes())
    with cpersist.open(path) as log:
        middle = log._extent(1)[0]
    data[middle + RECORD_SIZE + 3] ^= 1
    path.write_bytes(bytes(data))
    with cpersist.open(path) as log:
        assert len(log) == 3 and log[2] == {"c": 3}
        with pytest.raises(cpersist.CorruptFileError, match=f"offset {middle}: its checksum"):
            log[1]
    with pytest.raises(cpersist.CorruptFileError):
        cpersist.verify(path)
    # bytes after the last record that are no frame: refused by a writer,
    # cut by repair, which the user asks for
    path.write_bytes(bytes(data) + bytes(range(200, 216)))
    with pytest.raises(cpersist.CorruptFileError, match="16 bytes at offset .* repair"):
        cpersist.append(1, path)
    assert cpersist.repair(path)["cut_bytes"] == 16


def test_a_failed_append_leaves_the_file_as_it_was(tmp_path):
    path = tmp_path / "log.cpl"
    write_records(path, [{"a": 1}])
    before = path.read_bytes()
    with pytest.raises(cpersist.UnpicklableError, match=r"obj\['f'\]"):
        cpersist.append({"w": np.arange(100.0), "f": lambda: 1}, path)
    with pytest.raises(cpersist.UnpicklableError):
        cpersist.append({"f": lambda: 1}, path)
    assert path.read_bytes() == before


def test_targets_that_cannot_be_appended_to(tmp_path):
    with pytest.raises(cpersist.UnwritableTargetError, match="cannot append to an object in "
                                                              "place; append to a local"):
        cpersist.append(1, "s3://bucket/log.cpl")
    with pytest.raises(cpersist.UnwritableTargetError, match="takes a local path"):
        with open(tmp_path / "f", "wb") as file:
            cpersist.append(1, file)
    cpersist.dump({"a": 1}, tmp_path / "dump.cp")
    before = (tmp_path / "dump.cp").read_bytes()
    with pytest.raises(cpersist.UnwritableTargetError, match="not a record log"):
        cpersist.append(1, tmp_path / "dump.cp")
    assert (tmp_path / "dump.cp").read_bytes() == before
    with pytest.raises(ValueError, match="mode must be"):
        cpersist.open(tmp_path / "x.cpl", "w")


def test_a_second_writer_waits_for_the_lock_or_is_refused(tmp_path):
    path = tmp_path / "log.cpl"
    with cpersist.open(path, "a") as log:
        log.append(1)
        with pytest.raises(cpersist.FileLockedError, match="for 0.05 s: another writer"):
            cpersist.append(2, path, timeout=0.05)
        log.append(3)
    cpersist.append(4, path, timeout=0.05)
    assert cpersist.load(path) == [1, 3, 4]


def test_a_reader_sees_the_records_committed_when_it_looked(tmp_path):
    path = tmp_path / "log.cpl"
    write_records(path, [1, 2])
    with cpersist.open(path) as reader, cpersist.open(path, "a", fsync=True) as writer:
        assert len(reader) == 2
        writer.append(3)
        assert len(reader) == 2 and list(reader) == [1, 2]
        assert reader.refresh() == 3 and reader[-1] == 3


@pytest.mark.usefixtures("sections")
def test_cli_info_verify_and_repair(tmp_path, capsys):
    path = tmp_path / "log.cpl"
    write_records(path, [{"a": 1}, {"w": np.arange(5)}])
    with open(path, "ab") as file:
        file.write(b"\x01\x02\x03")
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "record log of 2 records (1 with arrays)" in out and "torn tail: 3 bytes" in out
    assert main(["info", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 2
    assert main(["verify", str(path)]) == 0
    assert "2 records; 3 bytes of torn tail after record 1" in capsys.readouterr().out
    assert main(["repair", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: OK (2 records, 3 bytes cut off)\n"
    assert main(["repair", str(tmp_path / "missing.cpl")]) == 1


CHILD = textwrap.dedent("""
    import os, sys
    import numpy as np
    import cpersist
    path = sys.argv[1]
    i = len(cpersist.open(path)) if os.path.exists(path) else 0
    with cpersist.open(path, "a") as log:
        while True:
            record = {"i": i, "w": np.full(3000 + i % 7, i)} if i % 5 == 0 else {"i": i}
            log.append(record)
            sys.stdout.write(f"{i}\\n")
            sys.stdout.flush()
            i += 1
""")


def check_log(path, acknowledged):
    """The log loads; its records are 0, 1, ... in order with their values,
    and at least every acknowledged one is there."""
    records = cpersist.load(path)
    for i, record in enumerate(records):
        assert record["i"] == i
        if i % 5 == 0:
            assert_same(np.full(3000 + i % 7, i), record["w"])
    assert len(records) >= acknowledged
    return len(records)


def test_appends_killed_at_random_moments_lose_no_committed_record(tmp_path):
    """A few SIGKILLs of a process appending through an open log (the lab's
    crash script kills it thousands of times)."""
    path = tmp_path / "log.cpl"
    rng = np.random.default_rng(7)
    acknowledged = 0
    for _ in range(4):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)],
                                 stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
        for _ in range(int(rng.integers(20, 200))):
            acknowledged = int(child.stdout.readline()) + 1
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        assert check_log(path, acknowledged) >= acknowledged
    assert cpersist.verify(path)["records"] >= acknowledged


TWO_WRITERS = textwrap.dedent("""
    import sys
    import numpy as np
    import cpersist
    path, writer = sys.argv[1], int(sys.argv[2])
    for k in range(150):
        record = {"writer": writer, "k": k}
        if k % 10 == 0:
            record["w"] = np.full(5000, writer * 1000 + k)
        cpersist.append(record, path)
""")


def test_two_processes_appending_at_once_are_never_interleaved(tmp_path):
    path = tmp_path / "log.cpl"
    writers = [subprocess.Popen([sys.executable, "-c", TWO_WRITERS, str(path), str(w)],
                                cwd=os.getcwd()) for w in (1, 2)]
    assert [w.wait() for w in writers] == [0, 0]
    records = cpersist.load(path)
    assert len(records) == 300
    for writer in (1, 2):
        mine = [r for r in records if r["writer"] == writer]
        assert [r["k"] for r in mine] == list(range(150))
        for r in mine[::10]:
            assert_same(np.full(5000, writer * 1000 + r["k"]), r["w"])
    assert cpersist.verify(path)["torn_bytes"] == 0
