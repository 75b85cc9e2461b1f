"""``dump`` to a file object in every mode: the dump lands where the file's
next write goes (its end, in append mode) with the bytes it has anywhere, and
loads back from there; what the file held before is never touched. A file
positioned before its end is refused before a byte is written, and a dump
that fails partway is taken back from a seekable file."""

import io
import os
import socket

import numpy as np
import pytest

import cpersist

from .conftest import _Thread, assert_same

#: Large enough that single writes pass 64 KiB (where blocks are reserved
#: ahead), one raw, one compressed in several chunks, and a small object
#: (written from memory in one call); one raw whose pickle stream, several
#: chunks long, comes before its array (written straight into a file that
#: reads back, then taken back out of it: :mod:`cpersist.container.stream_in_file`).
OBJECTS = [
    ({"x": np.arange(100_000.0), "f": np.asfortranarray(np.arange(60_000, dtype="<i2")
                                                         .reshape(200, 300)), "s": "raw"}, 0),
    ({"words": ["w%d" % i for i in range(100_000)], "a": np.arange(20_000.0)}, 0),
    ([np.random.default_rng(0).random(150_000).astype(">f4"), {"n": 2}], ("zstd", 3)),
    ("no arrays", 0),
]
CHUNK_SIZE = 1 << 18


def dump_bytes(obj, compress):
    buf = io.BytesIO()
    cpersist.dump(obj, buf, compress=compress, chunk_size=CHUNK_SIZE)
    return buf.getvalue()


def previous_content():
    """What a file holds before: a dump, then bytes of the caller's own."""
    obj = {"before": np.arange(50_000, dtype=np.int16)}
    return obj, dump_bytes(obj, 0) + b"the caller's bytes"


def _fdopen(path, flags, mode, **kwargs):
    return os.fdopen(os.open(path, flags), mode, **kwargs)


#: name -> (open the file at ``path``, whether opening truncates it, whether
#: ``dump`` reports the file's path: a file from os.fdopen has no name).
MODES = {
    "wb": (lambda p: open(p, "wb"), True, True),
    "w+b": (lambda p: open(p, "w+b"), True, True),
    "wb unbuffered": (lambda p: open(p, "wb", buffering=0), True, True),
    "ab": (lambda p: open(p, "ab"), False, True),
    "a+b": (lambda p: open(p, "a+b"), False, True),
    "ab unbuffered": (lambda p: open(p, "ab", buffering=0), False, True),
    # Sought back for reading: the dump still goes to the end.
    "a+b sought to its start": (lambda p: _seek(open(p, "a+b"), 0), False, True),
    "fsspec's local 'ab' sought to its start": (
        lambda p: _seek(_fsspec_local().open(p, "ab"), 0), False, True),
    "r+b at its end": (lambda p: _at_end(open(p, "r+b")), False, True),
    "r+b unbuffered at its end": (lambda p: _at_end(open(p, "r+b", buffering=0)), False, True),
    # Opened "wb" on a descriptor with O_APPEND: positioned at 0, yet every
    # write goes to the end.
    "O_APPEND": (lambda p: _fdopen(p, os.O_WRONLY | os.O_APPEND, "wb"), False, False),
    "O_APPEND|O_RDWR unbuffered": (
        lambda p: _fdopen(p, os.O_RDWR | os.O_APPEND, "r+b", buffering=0), False, False),
}


def _fsspec_local():
    import fsspec  # a dependency of the tests (the remote extra)

    return fsspec.filesystem("file")


def _at_end(file):
    file.seek(0, os.SEEK_END)
    return file


class Unpicklable:
    def __reduce__(self):
        raise TypeError("not this one")


def failing_objects():
    """Fail once a large array is written, and once a raw stream is (in a
    file that reads back, straight into it): dumps that fail partway."""
    return [{"x": np.arange(200_000.0), "then": Unpicklable()},
            {"words": ["w%d" % i for i in range(100_000)], "then": Unpicklable()}]


@pytest.mark.parametrize("before", [False, True], ids=["empty", "holding a dump"])
@pytest.mark.parametrize("mode", list(MODES))
def test_every_file_mode_adds_loadable_dumps_after_what_is_there(mode, before, tmp_path):
    open_file, truncates, named = MODES[mode]
    path = tmp_path / "file.cp"
    previous_obj, previous = previous_content() if before else (None, b"")
    path.write_bytes(b"" if truncates else previous)
    expected = previous + b"".join(dump_bytes(obj, c) for obj, c in OBJECTS)
    with open_file(str(path)) as file:
        if truncates:
            file.write(previous)  # through the file, maybe still in its buffer
        for failing in failing_objects():
            with pytest.raises(cpersist.UnpicklableError):
                cpersist.dump(failing, file)
            file.flush()
            assert path.read_bytes() == previous, "a failed dump was not taken back"
        for obj, compress in OBJECTS:
            returned = cpersist.dump(obj, file, compress=compress, chunk_size=CHUNK_SIZE)
            assert returned == ([str(path)] if named else [])
    # The very bytes each dump has anywhere, one after another after what
    # the file held: nothing reserved, moved or overwritten.
    assert path.read_bytes() == expected
    with open(path, "rb") as file:
        if before:
            assert_same(previous_obj, cpersist.load(file))
            assert file.read(len(b"the caller's bytes")) == b"the caller's bytes"
        for obj, _ in OBJECTS:
            assert_same(obj, cpersist.load(file))
        assert file.read() == b""


#: name -> open a file over ``path``, which holds a dump, positioned before
#: its end, not in append mode.
BEFORE_THE_END = {
    "r+b at its start": lambda p: open(p, "r+b"),
    "r+b in the middle": lambda p: _seek(open(p, "r+b"), 1000),
    "r+b unbuffered in the middle": lambda p: _seek(open(p, "r+b", buffering=0), 1000),
    "r+b after a buffered write": lambda p: _write(open(p, "r+b"), b"new"),
    "w+b sought back": lambda p: _seek(_write(open(p, "w+b"), previous_content()[1]), 10),
    "wb on a descriptor not truncated": lambda p: _fdopen(p, os.O_WRONLY, "wb"),
}


def _seek(file, position):
    file.seek(position)
    return file


def _write(file, data):
    file.write(data)
    return file


@pytest.mark.parametrize("how", list(BEFORE_THE_END))
def test_a_file_positioned_before_its_end_is_refused_before_a_byte_is_written(how, tmp_path):
    path = tmp_path / "file.cp"
    path.write_bytes(previous_content()[1])
    with BEFORE_THE_END[how](path) as file:
        file.flush()
        content = path.read_bytes()
        position = file.tell()
        for obj, compress in OBJECTS:
            with pytest.raises(cpersist.UnwritableTargetError,
                               match=f"at byte {position} of {len(content)}: a dump there "
                                     f"would overwrite the {len(content) - position} bytes"):
                cpersist.dump(obj, file, compress=compress)
            assert file.tell() == position
    assert path.read_bytes() == content


def test_a_bytesio_positioned_before_its_end_is_refused():
    data = previous_content()[1]
    buf = io.BytesIO(data)
    buf.seek(7)
    with pytest.raises(cpersist.UnwritableTargetError, match="at byte 7 of"):
        cpersist.dump(OBJECTS[0][0], buf)
    assert buf.tell() == 7 and buf.getvalue() == data
    buf.seek(0, os.SEEK_END)
    with pytest.raises(cpersist.UnpicklableError):
        cpersist.dump(failing_objects()[0], buf)
    assert buf.getvalue() == data
    assert buf.tell() == len(data)


def _pipe():
    read_fd, write_fd = os.pipe()
    return os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb")


def _socket():
    ours, theirs = socket.socketpair()
    # Closing a file made by makefile leaves the socket open: the socket is
    # closed with the writing file, so that the reader sees the end.
    reader, writer = ours.makefile("rb"), theirs.makefile("wb", buffering=0)
    ours.close()
    theirs.close()
    return reader, writer


@pytest.mark.parametrize("before", [False, True], ids=["empty", "after a dump"])
@pytest.mark.parametrize("kind", ["pipe", "socket"])
def test_a_stream_takes_dumps_one_after_another(kind, before):
    reader, writer = _pipe() if kind == "pipe" else _socket()
    previous_obj, previous = previous_content() if before else (None, b"")

    def produce():
        with writer:
            writer.write(previous)
            for obj, compress in OBJECTS:
                assert cpersist.dump(obj, writer, compress=compress,
                                     chunk_size=CHUNK_SIZE) == []

    thread = _Thread(produce)
    thread.start()
    with reader:
        try:
            if before:
                assert_same(previous_obj, cpersist.load(reader))
                assert reader.read(len(b"the caller's bytes")) == b"the caller's bytes"
            for obj, _ in OBJECTS:
                assert_same(obj, cpersist.load(reader))
            assert reader.read() == b""
        finally:
            thread.join_checked()


def test_reserving_blocks_keeps_the_bytes_and_fails_quietly_where_it_cannot(tmp_path):
    """Blocks reserved over bytes already written keep them and grow the
    file to the reserved end; a descriptor that cannot reserve (a pipe)
    makes it return False, writing nothing."""
    from cpersist.container.files import reserve_blocks

    path = tmp_path / "f"
    path.write_bytes(b"abc")
    fd = os.open(path, os.O_RDWR)
    try:
        assert reserve_blocks(fd, 0, 1 << 20)
        assert reserve_blocks(fd, 0, 10)  # inside: the size stays
    finally:
        os.close(fd)
    assert path.read_bytes() == b"abc" + bytes((1 << 20) - 3)
    read, write = os.pipe()
    try:
        assert not reserve_blocks(write, 0, 4096)
        os.write(write, b"x")
        assert os.read(read, 10) == b"x"
    finally:
        os.close(read)
        os.close(write)
