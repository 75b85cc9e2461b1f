"""Format 2: a dump says where it ends, so several share a stream; files
edited through a writable map stay loadable and can be resealed."""

import gc
import io
import os
import pathlib
import re
import shutil
import socket
import subprocess
import textwrap
import threading
import types
import warnings

import numpy as np
import pytest

import cpersist
from cpersist.container import EDITED, FLAGS_AT, MAGIC, TRAILER, ContainerReader
from cpersist.container.framing import DATA, END, parse_record
from cpersist.container.layout import HEADER, PAGE, PAGE_ALIGNED_FROM, RECORD_SIZE
from cpersist.container.reader import TAIL_READ

from ._forge import forge, split
from ._fresh import ROOT, run_cli, start_python
from .conftest import assert_same, pipe_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")


def objects():
    """Three objects: raw arrays (one large: a padding record before its
    section), compressed chunks, no arrays at all."""
    return [
        ({"a": np.arange(20_000.0).reshape(100, 200), "large": np.arange(140_000.0),
          "s": "first"}, 0),
        ([np.arange(300_000, dtype=np.int32) % 7, {"n": 2}], ("zstd", 3)),
        ("third, no arrays", 0),
    ]


def write_dumps(file, gap=b""):
    """Each object dumped to ``file``, with ``gap`` before, between and after."""
    file.write(gap)
    for obj, compress in objects():
        cpersist.dump(obj, file, compress=compress, chunk_size=1 << 16)
        file.write(gap)


def load_dumps(file, gap=b""):
    """Load the objects back in order, checking the stream is left after each."""
    assert file.read(len(gap)) == gap
    for obj, _ in objects():
        assert_same(obj, cpersist.load(file))
        assert file.read(len(gap)) == gap


@pytest.mark.parametrize("gap", [b"", b"other bytes\n"], ids=["adjacent", "with_gaps"])
def test_several_dumps_in_one_bytesio(gap):
    buf = io.BytesIO()
    write_dumps(buf, gap)
    buf.seek(0)
    load_dumps(buf, gap)
    assert buf.read() == b""


@pytest.mark.parametrize("gap", [b"", b"x" * 13], ids=["adjacent", "with_gaps"])
def test_several_dumps_in_one_open_file(gap, tmp_path):
    path = tmp_path / "many.bin"
    with open(path, "wb") as file:
        write_dumps(file, gap)
    with open(path, "rb") as file:
        load_dumps(file, gap)
        assert file.read() == b""
        # memory-mapped from the middle of the file
        file.seek(len(gap))
        mapped = cpersist.load(file, mmap_mode="r")
        assert isinstance(mapped["a"], np.memmap)
        assert_same(objects()[0][0], mapped, mmap=True)
        assert file.read(len(gap)) == gap


def test_dumps_from_a_subprocess_pipe():
    code = textwrap.dedent("""
        import sys
        from tests.test_streams import write_dumps
        write_dumps(sys.stdout.buffer, b"--")
        sys.stdout.buffer.write(b"the end")
        sys.stdout.buffer.flush()
    """)
    with start_python("-c", code, stdout=subprocess.PIPE, cwd=ROOT) as proc:
        load_dumps(proc.stdout, b"--")
        assert proc.stdout.read() == b"the end"
    assert proc.returncode == 0


def test_socket_left_open():
    """The sender keeps the connection open and waits for an answer after
    each dump: loading must read exactly one dump, never wait for more."""
    ours, theirs = socket.socketpair()
    ours.settimeout(60)
    theirs.settimeout(60)
    answers = []

    def sender():
        with theirs.makefile("wb") as out, theirs.makefile("rb") as back:
            for obj, compress in objects():
                cpersist.dump(obj, out, compress=compress)
                out.flush()
                answers.append(back.readline())

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    try:
        with ours.makefile("rb") as stream, ours.makefile("wb") as reply:
            for i, (obj, _) in enumerate(objects()):
                assert_same(obj, cpersist.load(stream))
                reply.write(b"got %d\n" % i)
                reply.flush()
        thread.join(60)
        assert not thread.is_alive()
        assert answers == [b"got 0\n", b"got 1\n", b"got 2\n"]
    finally:
        ours.close()
        theirs.close()


def test_tcp_socket_left_open():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(60)
    done = threading.Event()

    def sender():
        with socket.create_connection(server.getsockname(), timeout=60) as conn:
            with conn.makefile("wb") as out:
                write_dumps(out)
            done.wait(60)  # the connection stays open until the loads are over

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    try:
        conn, _ = server.accept()
        conn.settimeout(60)
        with conn, conn.makefile("rb") as stream:
            load_dumps(stream)
    finally:
        done.set()
        thread.join(60)
        server.close()


def test_a_large_raw_section_starts_at_a_page_of_the_file(tmp_path):
    """Its data at a multiple of PAGE: a DATA record of zeros that no section
    refers to opens the way (readers walk over it as over any record); the
    file maps, verifies and converts. (Readers of streams, pipes and files
    of several dumps walk it in the tests above.)"""
    obj = {"small": np.arange(1000.0), "large": np.arange(300_000.0) % 17,
           "exact": np.ones(PAGE_ALIGNED_FROM, np.uint8), "after": np.arange(9000.0)}
    path = tmp_path / "paged.cp"
    cpersist.dump(obj, path)
    data = path.read_bytes()
    with open(path, "rb") as file:
        reader = ContainerReader(file)
        sections = [(s.offset, s.raw_size) for s in reader.sections]
    large = [offset for offset, size in sections if size >= PAGE_ALIGNED_FROM]
    assert len(large) == 2 and all(offset % PAGE == 0 for offset in large)
    assert any(offset % PAGE for offset, size in sections if size < PAGE_ALIGNED_FROM)
    padding = _padding_records(data, {offset for offset, _ in sections})
    assert len(padding) == 2 and all(length <= PAGE + RECORD_SIZE for length in padding)
    mapped = cpersist.load(path, mmap_mode="r")
    assert isinstance(mapped["large"], np.memmap)
    assert_same(obj, mapped, mmap=True)
    assert cpersist.verify(path)["unchecked"] == []
    cpersist.convert(path, tmp_path / "z.cp", compress=3)
    assert_same(obj, cpersist.load(tmp_path / "z.cp"))


def _padding_records(data, starts):
    """The lengths of the records of the dump ``data`` whose payload is no
    section's (of ``starts``), each checked to be a DATA record of zeros."""
    padding, position = [], HEADER.size
    while True:
        kind, start, end = parse_record(data, position, "dump", at=position)
        if kind == END:
            return padding
        if start not in starts:
            assert kind == DATA and not any(data[start:end])
            padding.append(end - position)
        position = end


PADDED_FIXTURE = os.path.join(FIXTURES, "padding-2.2", "raw.cp")


def padded_fixture_object():
    """What ``fixtures/padding-2.2/raw.cp`` holds (written by
    :func:`write_padded_fixture` with the first writer that pads a large
    raw section to a page of the file)."""
    return {"small": np.arange(1000.0), "large": np.arange(140_000.0) % 17}


def write_padded_fixture(path=PADDED_FIXTURE):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    cpersist.dump(padded_fixture_object(), path)


def test_a_file_with_a_padding_record_written_before_loads():
    """Files with padding records load forever: trusted, restricted, mapped,
    verified, their large section where the padding put it."""
    obj = padded_fixture_object()
    assert cpersist.inspect(PADDED_FIXTURE)["format"] == "2.2"
    with open(PADDED_FIXTURE, "rb") as file:
        sections = ContainerReader(file).sections
        starts = {s.offset for s in sections}
        assert [s.offset % PAGE for s in sections if s.raw_size >= PAGE_ALIGNED_FROM] == [0]
    data = pathlib.Path(PADDED_FIXTURE).read_bytes()
    assert len(_padding_records(data, starts)) == 1
    assert_same(obj, cpersist.load(PADDED_FIXTURE))
    assert_same(obj, cpersist.load(PADDED_FIXTURE, trusted=False))
    assert_same(obj, cpersist.load(PADDED_FIXTURE, mmap_mode="r"), mmap=True)
    assert cpersist.verify(PADDED_FIXTURE)["unchecked"] == []


def test_dump_to_a_pipe_loads_from_path_and_file(tmp_path):
    """Written to a non-seekable target, then saved: the same bytes."""
    obj = objects()[0][0]
    buf = io.BytesIO()
    cpersist.dump(obj, buf)
    reader, thread = pipe_bytes(buf.getvalue())
    with reader:
        assert_same(obj, cpersist.load(reader))
    thread.join_checked()
    path = tmp_path / "a.cp"
    path.write_bytes(buf.getvalue() * 2)
    with open(path, "rb") as file:
        assert_same(obj, cpersist.load(file))
        assert file.tell() == len(buf.getvalue())
        assert_same(obj, cpersist.load(file))


# -- what follows a complete dump, loaded from a path ---------------------------

def _one_dump(tmp_path, version=None, name="raw.cp"):
    if version is None:
        path = tmp_path / "one.cp"
        cpersist.dump(objects()[0][0], path)
        return path
    return os.path.join(FIXTURES, f"format-{version}", name)


@pytest.mark.parametrize("version", [None, "2.0"], ids=["new", "2.0"])
def test_trailing_data_named(version, tmp_path):
    data = pathlib.Path(_one_dump(tmp_path, version)).read_bytes()
    path = tmp_path / "appended.cp"
    path.write_bytes(data + b"12345678")
    for func in (cpersist.load, cpersist.inspect, cpersist.verify):
        with pytest.raises(cpersist.CorruptFileError) as info:
            func(path)
        message = str(info.value)
        assert str(path) in message
        assert "trailing data after a complete dump (8 bytes" in message, message
    with open(path, "rb") as file:  # read from a file object, and left before them
        cpersist.load(file)
        assert file.read() == b"12345678"


@pytest.mark.parametrize("version", [None, "2.0"], ids=["new", "2.0"])
def test_a_path_of_two_dumps_loads_as_their_list(version, tmp_path):
    source = _one_dump(tmp_path, version)
    data = pathlib.Path(source).read_bytes()
    path = tmp_path / "two.cp"
    path.write_bytes(data + data)
    one = cpersist.load(source)
    assert_same([one, one], cpersist.load(path))


def test_truncated_dump_named(tmp_path):
    data = _one_dump(tmp_path).read_bytes()
    path = tmp_path / "cut.cp"
    path.write_bytes(data[:-40])
    with pytest.raises(cpersist.CorruptFileError, match="truncated"):
        cpersist.load(path)
    buf = io.BytesIO(data[:-40])
    with pytest.raises(cpersist.CorruptFileError, match="truncated"):
        cpersist.load(buf)


def _record_headers(data):
    """Offsets of the record headers of the dump ``data``, but its END's."""
    position, found = HEADER.size, []
    while True:
        kind, _, end = parse_record(data[position:position + RECORD_SIZE], position, "x")
        if kind == END:
            return found
        found.append(position)
        position = end


def _load_opened(path):
    with cpersist.open(path) as handle:
        return handle.load()


def _load_from_file_object(path):
    with open(path, "rb") as file:
        return cpersist.load(file)


def _load_from_pipe(data):
    file, thread = pipe_bytes(data)
    try:
        with file:
            return cpersist.load(file)
    finally:
        thread.join_checked()


def test_a_damaged_record_header_is_refused_alike_by_every_source(tmp_path):
    """Each byte of each record header but the END's (which every reader
    reads to find the index), changed in turn: nothing covers these bytes
    (checksums cover the chunks and the index) and a stream is cut into
    dumps by them alone, so every source refuses the file with the same
    CorruptFileError, a path read by the trailer as a file object read by a
    walk of its records. Dumps smaller than the bytes a remote reader reads
    at its ends, which are all it checks (a request per record costs more
    than a load)."""
    fsspec = pytest.importorskip("fsspec")  # in the test extra
    path = tmp_path / "d.cp"
    url = f"memory://cpersist-records-{os.getpid()}/d.cp"
    sources = {
        "path": lambda: cpersist.load(path),
        "path mapped": lambda: cpersist.load(path, mmap_mode="r"),
        "path restricted": lambda: cpersist.load(path, trusted=False),
        "path opened": lambda: _load_opened(path),
        "verify": lambda: cpersist.verify(path),
        "inspect": lambda: cpersist.inspect(path),
        "file object": lambda: _load_from_file_object(path),
        "BytesIO": lambda: cpersist.load(io.BytesIO(path.read_bytes())),
        "loads": lambda: cpersist.loads(path.read_bytes()),
        "loads restricted": lambda: cpersist.loads(path.read_bytes(), trusted=False),
        "pipe": lambda: _load_from_pipe(path.read_bytes()),
        "remote": lambda: cpersist.load(url),
    }

    def outcome(read):
        try:
            read()
        except cpersist.CorruptFileError as exc:
            name, _, what = str(exc).partition(": ")
            return what
        return "read"

    fs = fsspec.filesystem("memory")
    cases = [({"a": np.arange(1000.0), "b": np.arange(300, dtype=np.int32), "c": "x"}, 0),
             ({"a": np.arange(20_000.0), "c": "x"}, 3)]  # an encoded section
    try:
        for obj, compress in cases:
            data = cpersist.dumps(obj, compress=compress)
            assert len(data) <= TAIL_READ
            headers = _record_headers(data)
            assert len(headers) == (3 if compress == 0 else 2)
            for position in headers:
                for at in range(position, position + RECORD_SIZE):
                    for change in (0x01, 0x80):
                        damaged = bytearray(data)
                        damaged[at] ^= change
                        path.write_bytes(damaged)
                        fs.pipe(url, bytes(damaged))
                        found = {name: outcome(read) for name, read in sources.items()}
                        first = found["path"]
                        assert found == dict.fromkeys(sources, first), (compress, at, change)
                        assert "damaged record" in first or "truncated" in first, first
    finally:
        if fs.exists(url):
            fs.rm(url)


def test_open_walks_the_record_headers_at_the_first_read_of_data(tmp_path):
    """``cpersist.open`` reads the index alone: listing the arrays of a file
    of many of them costs no read per record. A damaged record header is
    refused before any data is given out: reading an array, a load, a lazy
    load, and a listing that walks the pickle stream (paths not recorded, as
    for arrays held by an object's attributes) all raise, each time."""
    arrays = {"a": np.arange(8192.0), "b": np.arange(8192.0) * 2}  # sections of their own
    path = tmp_path / "d.cp"
    for obj, recorded in ((arrays, True), (types.SimpleNamespace(**arrays), False)):
        cpersist.dump(obj, path)
        data = path.read_bytes()
        damaged = bytearray(data)
        damaged[_record_headers(data)[0] + 7] = 0x7F  # an unknown record kind
        path.write_bytes(damaged)
        with cpersist.open(path) as handle:
            if recorded:
                lazy = handle.arrays["obj['a']"]  # from the index, which checks out
                assert (lazy.shape, lazy.dtype) == ((8192,), np.float64)
                reads = [lazy.read, lambda: lazy[:10], handle.load,
                         lambda: handle.load(lazy=True)]
            else:
                reads = [lambda: handle.arrays]
            for read in reads * 2:
                with pytest.raises(cpersist.CorruptFileError, match="damaged record header"):
                    read()
        path.write_bytes(data)
        with cpersist.open(path) as handle:
            assert_same(handle.load(), obj)
            assert_same(handle.arrays["obj['a']" if recorded else "obj.a"][:10], arrays["a"][:10])


# -- r+ edits -------------------------------------------------------------------

def _edit(path, key="a"):
    m = cpersist.load(path, mmap_mode="r+")
    m[key].reshape(-1)[:3] = [-1.0, -2.0, -3.0]
    m[key].flush()
    del m
    gc.collect()


def _flags(path):
    with open(path, "rb") as file:
        return int.from_bytes(file.read(FLAGS_AT + 4)[FLAGS_AT:], "little")


@pytest.mark.parametrize("version", [None, "2.0"], ids=["new", "2.0"])
def test_r_plus_edit_then_plain_load_verify_and_reseal(version, tmp_path):
    path = tmp_path / "edited.cp"
    key = "a" if version is None else "float64_big"
    shutil.copyfile(_one_dump(tmp_path, version, "mmap.cp"), path)
    expected = cpersist.load(path)
    assert _flags(path) == 0
    _edit(path, key)
    assert _flags(path) == EDITED
    expected[key].reshape(-1)[:3] = [-1.0, -2.0, -3.0]
    assert_same(expected, cpersist.load(path))  # no checksum error: the new values
    assert_same(expected, cpersist.load(path, trusted=False))
    report = cpersist.verify(path)
    section = [a["section"] for a in cpersist.inspect(path)["arrays"]
               if a["shape"] == expected[key].shape]
    assert report["unchecked"] == section
    cli = run_cli("verify", path)
    assert cli.returncode == 0, cli.stderr
    assert f"raw array sections {section[0]} were changed through a writable map" in cli.stdout
    assert "--reseal" in cli.stdout
    cli = run_cli("verify", "--reseal", path)
    assert cli.returncode == 0, cli.stderr
    assert "resealed" in cli.stdout
    assert _flags(path) == 0
    assert cpersist.verify(path)["unchecked"] == []
    assert_same(expected, cpersist.load(path))
    # sealed again: damage to the edited array is detected again
    data = bytearray(path.read_bytes())
    start = ContainerReader(bytes(data)).sections[section[0]].offset
    data[start + 100] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(cpersist.CorruptFileError, match="checksum mismatch"):
        cpersist.load(path)


def test_reseal_function(tmp_path):
    path = _one_dump(tmp_path)
    assert cpersist.reseal(path)["resealed"] == []  # never mapped for writing: untouched
    before = path.read_bytes()
    assert cpersist.reseal(path)["resealed"] == [] and path.read_bytes() == before
    _edit(path)
    result = cpersist.reseal(path)
    assert result["unchecked"] == [0] and 0 in result["resealed"]
    assert cpersist.verify(path)["unchecked"] == []
    assert cpersist.load(path)["a"][0, :3].tolist() == [-1.0, -2.0, -3.0]
    with pytest.raises(TypeError, match="path"):
        cpersist.reseal(io.BytesIO(before))
    assert "reseal" in cpersist.__all__


def test_edited_file_still_detects_other_damage(tmp_path):
    """With the edited flag, only raw array sections go unchecked."""
    path = tmp_path / "mixed.cp"
    cpersist.dump({"a": np.arange(20_000.0).reshape(100, 200), "s": "x" * 5000}, path)
    _edit(path)
    good = path.read_bytes()
    body, index = split(good)
    root = index["sections"][index["root"]]
    for where, match in ((root["offset"] + 3, "checksum mismatch"),
                         (len(body) + 5, "index checksum")):
        damaged = bytearray(good)
        damaged[where] ^= 1
        path.write_bytes(bytes(damaged))
        for func in (cpersist.load, cpersist.verify, cpersist.reseal):
            with pytest.raises(cpersist.CorruptFileError, match=match):
                func(path)
        assert path.read_bytes() == bytes(damaged)  # reseal left it as it was


def test_edited_compressed_chunks_still_checked(tmp_path):
    path = tmp_path / "c.cp"
    obj = {"raw": np.arange(20_000.0), "z": np.arange(100_000) % 5}
    cpersist.dump(obj, path, compress=("zstd", 3))
    data = bytearray(path.read_bytes())
    data[FLAGS_AT] |= EDITED  # as a writable map of a raw section would leave it
    reader = ContainerReader(bytes(data))
    section = next(s for s in reader.sections if s.codec is not None and s.index != reader.root)
    data[section.chunks[0].offset + 10] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(cpersist.CorruptFileError, match="section"):
        cpersist.load(path)
    with pytest.raises(cpersist.CorruptFileError, match="section"):
        cpersist.verify(path)


# -- mmap_mode warnings -----------------------------------------------------------

def _warnings(path, mode="r"):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cpersist.load(path, mmap_mode=mode)
    return [str(w.message) for w in caught]


def test_mmap_mode_warns_for_compressed_file_with_only_inlined_arrays(tmp_path):
    path = tmp_path / "small.cp"
    cpersist.dump({"a": np.arange(10.0), "b": np.ones(5)}, path, compress=3)
    assert not cpersist.inspect(path)["arrays"]  # all inlined
    messages = _warnings(path)
    assert len(messages) == 1
    assert str(path) in messages[0] and "cannot be memory-mapped" in messages[0]


def test_mmap_mode_never_warns_for_raw_files(tmp_path):
    for i, obj in enumerate([{"a": np.arange(10.0)}, "no arrays", {"a": np.ones(100_000)}]):
        path = tmp_path / f"raw{i}.cp"
        cpersist.dump(obj, path)
        for mode in ("r", "r+", "c"):
            assert _warnings(path, mode) == []


def test_header_magic_starts_every_dump():
    buf = io.BytesIO()
    write_dumps(buf)
    assert buf.getvalue().count(MAGIC) >= 3 and buf.getvalue().startswith(MAGIC)


# -- offsets in messages --------------------------------------------------------

def _first_array(index):
    return next(s for s in index["sections"] if s["meta"].get("kind") == "array")


def _with_trailer_field(data, field, value):
    fields = list(TRAILER.unpack(data[-TRAILER.size:]))
    fields[field] = value
    return data[:-TRAILER.size] + TRAILER.pack(*fields)


DAMAGES = {
    "cut short": lambda data: data[:-40],
    "cut inside a record": lambda data: data[:3000],
    "a damaged record header": lambda data: data[:64 + 7] + b"\x77" + data[64 + 8:],
    "a damaged trailer": lambda data: _with_trailer_field(data, 0, 100),
    "a section at a bad offset": lambda data: forge(
        data, lambda index: _first_array(index).update(offset=65)),
    "a section past the index": lambda data: forge(
        data, lambda index: _first_array(index).update(offset=10**6)),
    "a chunk table past the index": lambda data: forge(
        data, lambda index: _first_array(index)["chunks"][0].__setitem__(
            slice(0, 2), [10**6, 10**6])),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_offsets_in_messages_count_from_the_start_of_the_file(damage, tmp_path):
    """The second of two dumps in a file is damaged: the message loading it
    gives, is the one it gives alone, every offset moved by the first
    dump's length."""
    first_obj = {"a": np.arange(1000.0)}
    first = cpersist.dumps(first_obj)
    second = DAMAGES[damage](cpersist.dumps({"a": np.zeros(4096)}, chunk_size=1 << 14))
    with pytest.raises(cpersist.CorruptFileError) as alone:
        cpersist.load(io.BytesIO(second))
    path = tmp_path / "two.cp"
    path.write_bytes(first + second)
    with open(path, "rb") as file:
        assert_same(first_obj, cpersist.load(file))
        with pytest.raises(cpersist.CorruptFileError) as in_file:
            cpersist.load(file)

    def offsets(exc):
        message = str(exc.value).split(": ", 1)[1]  # after the file's name
        return re.sub(r"offset \d+", "offset N", message), [
            int(n) for n in re.findall(r"offset (\d+)", message)]

    text, found = offsets(in_file)
    text_alone, found_alone = offsets(alone)
    assert found_alone, str(alone.value)
    assert text == text_alone
    assert found == [n + len(first) for n in found_alone], str(in_file.value)
