"""The file object a dump to a path writes through (:class:`GatheringFile`):
it holds what a plain file would, keeps nothing of what it is given, and
writes an array's bytes from the array's own memory."""

import io
import os
import tracemalloc

import numpy as np

import cpersist
from cpersist.container.gathering import GATHER_BELOW, WRITE_GATHERED_AT, GatheringFile

from .conftest import assert_same


def _write_both(tmp_path, steps):
    """The bytes of two files given ``steps`` (``("write", data)`` or
    ``("seek", position)``), one through a GatheringFile, one through a
    plain unbuffered file object; asserts that both tell the same position
    after every step."""
    files = []
    for name, make in (("gathered", GatheringFile), ("plain", None)):
        path = tmp_path / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        try:
            file = make(fd) if make else io.FileIO(fd, "r+", closefd=False)
            positions = []
            for step, value in steps:
                if step == "write":
                    assert file.write(value) == memoryview(value).nbytes
                else:
                    file.seek(value)
                positions.append(file.tell())
            file.close()
        finally:
            os.close(fd)
        files.append((path.read_bytes(), positions))
    (gathered, at), (plain, plain_at) = files
    assert at == plain_at
    return gathered, plain


def test_it_writes_what_a_plain_file_does_at_every_size_and_seek(tmp_path):
    rng = np.random.default_rng(0)
    big = rng.integers(0, 256, 3 * GATHER_BELOW, dtype=np.uint8).tobytes()
    floats = rng.random(GATHER_BELOW // 8 + 3)  # a typed memoryview, larger than gathered
    steps = [("write", b""), ("write", b"head"), ("write", big[:GATHER_BELOW - 1]),
             ("write", big[:GATHER_BELOW]), ("write", memoryview(floats)), ("write", b"x")]
    # Small writes enough to be written out by their total alone.
    steps += [("write", bytes([i % 256]) * 1000) for i in range(WRITE_GATHERED_AT // 1000 + 5)]
    written = sum(memoryview(value).nbytes for _, value in steps)
    # Back to rewrite two bytes (as a dump restates its header), then into
    # the written bytes and past their end.
    steps += [("seek", 2), ("write", b"HE"), ("seek", written - 10), ("write", big)]
    gathered, plain = _write_both(tmp_path, steps)
    assert gathered == plain
    assert gathered[:4] == b"heHE" and gathered[written - 10:] == big


def test_it_keeps_nothing_of_what_it_is_given(tmp_path):
    """What a write is given may change once it returns (a pool's buffer
    used again): the file holds the bytes as they were."""
    small, large = bytearray(b"a" * 100), bytearray(b"b" * GATHER_BELOW)
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    try:
        file = GatheringFile(fd)
        file.write(small)
        small[:] = b"c" * 100
        file.write(large)
        large[:] = b"d" * GATHER_BELOW
        file.write(small)
        file.close()
    finally:
        os.close(fd)
    assert path.read_bytes() == b"a" * 100 + b"b" * GATHER_BELOW + b"c" * 100


def test_a_raw_dump_copies_no_array_into_a_buffer(tmp_path):
    """A raw dump of a 1 MB array allocates nothing near its size: its
    bytes go to the file from its own memory (a buffered file would copy
    all of them into a buffer of 1 MiB first)."""
    arr = np.random.default_rng(1).random(125_000)
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path)  # the kept pickler and imports, made before measuring
    tracemalloc.start()
    try:
        cpersist.dump(arr, path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < arr.nbytes / 4, peak
    assert_same(arr, cpersist.load(path))
