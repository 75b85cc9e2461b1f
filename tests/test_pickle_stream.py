"""The pickle stream: small arrays inside it, its chunking, its encoding on
several threads (:class:`EncodedStream`, :func:`run_claimed`), and the
buffers a raw one is kept in between dumps and between loads."""

import io
import os
import pickle
import re
import struct
import threading
import time
import tracemalloc

import numpy as np
import pytest

import cpersist
from cpersist import container
from cpersist.container import encode
from cpersist._runtime.parallel import run_claimed
from cpersist.pickling.arrays import to_inline
from cpersist.cli import file_info
from cpersist.tools.report import format_info
from cpersist.codecs import get_codec
from cpersist.container import ENCODED, VERBATIM, EncodedStream

from ._forge import call, container_bytes, proto, s
from ._hostile import binbytes, glob, integer, tup
from .conftest import assert_same, random_array

# Pieces the way the C pickler writes them: mostly frames of up to 64 KiB,
# some empty, one larger than a whole batch, one ending on a chunk boundary.
PIECE_SIZES = [0, 1, 65536, 70000, 3, 0, 5 * 4096, 4096 - 3, 300000, 65536, 17, 0, 4096]


def pieces(sizes, seed=0):
    """``bytes`` pieces of the given sizes: compressible text, some noise."""
    rng = np.random.default_rng(seed)
    out = []
    for k, n in enumerate(sizes):
        if k % 3 == 2:
            out.append(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        else:
            out.append((b"cpersist pickle stream %d " % k * (n // 20 + 1))[:n])
    return out


def stream_chunks(parts, codec, chunk_size, n_threads):
    stream = EncodedStream(codec, chunk_size, n_threads)
    for part in parts:
        assert stream.write(part) == len(part)
    return stream.encoded_chunks()


def decoded(codec, encoded):
    """The bytes back from encoded chunks, each checked against its checksum."""
    out = bytearray()
    for stored, raw_len, checksum, flag in encoded:
        assert container.checksum(stored) == checksum
        if flag == VERBATIM:
            assert len(stored) == raw_len
            out += stored
        else:
            assert flag == ENCODED and len(stored) < raw_len
            target = bytearray(raw_len)
            codec.decode_into(stored, memoryview(target))
            out += target
    return bytes(out)


@pytest.mark.parametrize("n_threads", [1, 2, 3, 8])
@pytest.mark.parametrize("codec_name", [None, "zstd", "lz4", "zstd-auto"])
@pytest.mark.parametrize("chunk_size", [4096, 5000, 1 << 20])
def test_stream_chunks_hold_every_byte_in_order(codec_name, n_threads, chunk_size):
    codec = get_codec(codec_name) if codec_name else None
    parts = pieces(PIECE_SIZES)
    whole = b"".join(parts)
    encoded = stream_chunks(parts, codec, chunk_size, n_threads)
    # Every chunk but the last is full: the chunking does not depend on the
    # pieces' sizes, the batches or the threads.
    assert [raw for _, raw, _, _ in encoded] == [
        min(chunk_size, len(whole) - start) for start in range(0, len(whole), chunk_size)]
    assert decoded(codec, encoded) == whole
    if codec is not None and chunk_size == 4096:
        assert {flag for *_, flag in encoded} == {VERBATIM, ENCODED}


def test_an_empty_stream_has_no_chunks():
    assert stream_chunks([b"", b""], get_codec("zstd"), 4096, 2) == []


def test_a_batch_is_encoded_by_every_thread(monkeypatch):
    """The calling thread and the pool's workers share each batch."""
    threads = set()
    real = encode.encode_chunk

    def spy(codec, chunk, typesize=1):
        threads.add(threading.current_thread().name)
        time.sleep(0.005)  # long enough for the worker to wake and claim
        return real(codec, chunk, typesize)
    monkeypatch.setattr(encode, "encode_chunk", spy)
    codec = get_codec("zstd")
    parts = pieces([4096] * 40)
    encoded = stream_chunks(parts, codec, 4096, 2)
    assert decoded(codec, encoded) == b"".join(parts)
    # This thread and the pool's workers (the one helper of each batch may
    # be either of the pool's two).
    caller = threading.current_thread().name
    assert caller in threads and len(threads) >= 2
    assert all(name.startswith("cpersist") for name in threads - {caller})
    threads.clear()
    stream_chunks(parts, codec, 4096, 1)
    assert threads == {caller}


def test_pieces_are_held_until_a_batch_is_full(monkeypatch):
    """Encoding waits for a batch of chunks per thread (so each thread has
    several to claim), and one thread encodes chunk by chunk."""
    batches = []
    real = EncodedStream._encode
    monkeypatch.setattr(EncodedStream, "_encode",
                        lambda self, chunks: (batches.append(len(chunks)), real(self, chunks)))
    parts = pieces([1024] * 100)
    stream_chunks(parts, get_codec("zstd"), 4096, 2)
    full = 2 * encode.BATCH_CHUNKS
    assert batches == [full, full, full, 1]  # 25 chunks: 3 batches and the rest
    batches.clear()
    stream_chunks(parts, get_codec("zstd"), 4096, 1)
    assert batches == [1] * 25
    batches.clear()
    stream_chunks(parts, get_codec("zstd"), 1024, 64)
    assert batches[0] == encode.MAX_BATCH_CHUNKS


def test_a_failing_encode_stops_the_dump(tmp_path, monkeypatch):
    """A codec error on any thread ends the dump with that error, no other
    chunk is taken after it, and no file is left."""
    codec_type = type(get_codec("zstd"))
    calls = []
    real = codec_type.encode

    def failing(self, buf, typesize=1, hint=None):
        first = not calls
        calls.append(1)
        time.sleep(0.01)
        if first:
            raise MemoryError("the first encode fails")
        return real(self, buf, typesize, hint)
    monkeypatch.setattr(codec_type, "encode", failing)
    obj = [b"x%d" % i * 3000 for i in range(2000)]  # about 9 MB of pickle stream
    path = tmp_path / "a.cp"
    with pytest.raises(MemoryError, match="the first encode fails"):
        cpersist.dump(obj, path, compress="zstd", n_threads=2)
    assert list(tmp_path.iterdir()) == []
    assert len(calls) <= 3  # of 9 chunks: the other thread stopped


def test_run_claimed_gives_each_item_once():
    for n_threads, n_items in [(1, 10), (2, 0), (2, 1), (2, 100), (5, 3), (8, 1000)]:
        seen = []
        lock = threading.Lock()

        def task(claims):
            for i in claims:
                with lock:
                    seen.append((i, threading.get_ident()))
        run_claimed(task, n_items, n_threads)
        assert sorted(i for i, _ in seen) == list(range(n_items))
        if n_threads == 1:
            assert {t for _, t in seen} <= {threading.get_ident()}


def test_run_claimed_raises_the_first_error_after_every_thread_stopped():
    running = []
    finished = []

    def task(claims):
        running.append(1)
        for i in claims:
            time.sleep(0.01)
            if i == 0:
                # Fail only once the other thread runs too (a loaded machine
                # may not have started it 10 ms in), so both are stopped.
                deadline = time.monotonic() + 10
                while len(running) < 2 and time.monotonic() < deadline:
                    time.sleep(0.001)
                raise KeyError("item 0")
            finished.append(i)
    with pytest.raises(KeyError, match="item 0"):
        run_claimed(task, 50, 2)
    count = len(finished)
    time.sleep(0.05)
    assert len(finished) == count <= 2  # the other thread took at most one more
    assert len(running) == 2


SMALL_ARRAYS = {
    "c": random_array("<f8", (30, 7), seed=1),
    "f": random_array(">i4", (9, 11), order="F", seed=2),
    "strided": random_array("u2", (40, 40), seed=3)[::3, 1::2],
    "read_only": np.arange(500, dtype=np.int16),
    "empty": np.zeros((0, 3), dtype="f4"),
    "record": random_array([("a", "<i8"), ("b", "S3")], (20,), seed=4),
    "scalar_shape": np.array(2.5),
}
SMALL_ARRAYS["read_only"].flags.writeable = False


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("compress", ["zstd", 3, 0])
def test_small_arrays_inside_the_pickle_stream(tmp_path, protocol, compress):
    """Small arrays of a compressed or raw file travel in the pickle stream
    (as a buffer of their own memory at protocol 5, a copy below) and come
    back exact, writeable and sharing memory with no other."""
    path = tmp_path / "a.cp"
    cpersist.dump(SMALL_ARRAYS, path, compress=compress, protocol=protocol)
    info = file_info(str(path))
    assert info["arrays"] == []  # no section: all inside the pickle stream
    inline = {a["path"]: a for a in info["inline_arrays"]}
    assert set(inline) == {f"obj[{name!r}]" for name in SMALL_ARRAYS}
    for name, arr in SMALL_ARRAYS.items():
        entry = inline[f"obj[{name!r}]"]
        assert tuple(entry["shape"]) == arr.shape, name
        if arr.dtype.fields is None:
            assert (np.dtype(entry["dtype"]), entry["raw_bytes"]) == (arr.dtype, arr.nbytes)
        else:  # the scan does not rebuild dtypes with fields (documented)
            assert entry["dtype"] == "?"
    # cpersist info marks them, each with the dtype as numpy names it
    rows = {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line.strip())
                                              for line in format_info(info).splitlines()
                                              if line.startswith("  obj["))}
    assert rows["obj['c']"] == ["float64", "(30, 7)", "1.6 KiB", "in stream"]
    assert rows["obj['f']"][0] == "int32 (big-endian)"
    assert rows["obj['record']"][0] == "?"  # unknown (not numpy's code for bool)
    for trusted in (True, False):
        out = cpersist.load(path, trusted=trusted)
        assert_same(SMALL_ARRAYS, out)
        for name, arr in out.items():
            assert type(arr) is np.ndarray and arr.flags.writeable, name
            assert not any(np.shares_memory(arr, other) for other_name, other in out.items()
                           if other_name != name), name
    # Pickling a buffer of the array's memory did not leave it changed or
    # exported (a resize fails while a buffer is exported).
    arr = np.arange(10.0)
    cpersist.dump([arr], tmp_path / "b.cp", compress="zstd", protocol=protocol)
    arr.resize(20, refcheck=False)


def test_raw_file_keeps_arrays_under_the_threshold_in_the_stream(tmp_path):
    """In a raw file, an array of fewer than RAW_INLINE_BELOW bytes is kept
    in the pickle stream and loads into memory, also with mmap_mode; one of
    that many bytes has a section and is mapped."""
    from cpersist.pickling.write import RAW_INLINE_BELOW

    items = RAW_INLINE_BELOW // 8
    obj = {"small": np.arange(items - 1, dtype="<f8"), "section": np.arange(items, dtype="<f8")}
    path = tmp_path / "raw.cp"
    cpersist.dump(obj, path)
    report = cpersist.inspect(path)
    assert [a["path"] for a in report["arrays"]] == ["obj['section']"]
    assert [a["path"] for a in report["inline_arrays"]] == ["obj['small']"]
    for trusted in (True, False):
        assert_same(obj, cpersist.load(path, trusted=trusted))
    mapped = cpersist.load(path, mmap_mode="r")
    assert type(mapped["section"]) is np.memmap and type(mapped["small"]) is np.ndarray
    assert_same(obj["small"], mapped["small"])
    with cpersist.open(path) as handle:
        assert list(handle.arrays) == ["obj['section']"]


#: Raw dumps whose pickle stream passes the size a dump is made in memory
#: below: the stream alone, a section after a frame of it, a section after
#: more than a chunk of it (read back from the file), a buffer of the object.
STREAM_FIRST = {
    "stream alone": ({"words": ["word %d" % i for i in range(200_000)],
                      "small": np.arange(100.0)}, "add_section"),
    "array after a frame": ({"words": [str(i) for i in range(30_000)],
                             "a": np.arange(100_000.0)}, "withdraw"),
    "array after 2 MiB": ([bytes(range(256)) * 4000 for _ in range(3)] + [np.arange(20_000.0)],
                          "withdraw"),
    "buffer of the object": ([bytearray(b"y" * 200_000), "z" * 100_000, np.arange(9.0)],
                             "add_section"),
}


@pytest.mark.parametrize("target", ["path", "w+b file object after bytes"])
@pytest.mark.parametrize("name", list(STREAM_FIRST))
def test_a_raw_stream_written_into_the_file_as_pickled_has_the_same_bytes(
        tmp_path, monkeypatch, name, target):
    """A raw stream goes straight into a file it can read back while no
    array section is written, and is taken back out of it for the first one:
    the file holds the very bytes of one gathered in memory (a dump to a
    BytesIO)."""
    from cpersist.container.stream_in_file import InFileStream

    obj, ending = STREAM_FIRST[name]
    ends = []
    for method in ("add_section", "withdraw"):
        original = getattr(InFileStream, method)
        monkeypatch.setattr(InFileStream, method, lambda self, *args, _original=original,
                            _method=method, **kwargs: ends.append(_method)
                            or _original(self, *args, **kwargs))
    path = tmp_path / "raw.cp"
    if target == "path":
        cpersist.dump(obj, path, compress=0)
        data = path.read_bytes()
    else:
        with open(path, "w+b") as file:
            file.write(b"before")
            cpersist.dump(obj, file, compress=0)
            file.flush()
            assert file.tell() == os.path.getsize(path)
        data = path.read_bytes()
        assert data[:6] == b"before"
        data = data[6:]
    assert ends == [ending]
    gathered = io.BytesIO()
    cpersist.dump(obj, gathered, compress=0)
    assert data == gathered.getvalue()
    assert_same(obj, cpersist.loads(data))


def test_short_writes_of_a_raw_stream_into_the_file_are_completed(tmp_path, monkeypatch):
    """The kernel may write less than asked (a signal, a write past 2 GiB):
    the rest of each write is written after it."""
    writev = os.writev
    short = []

    def write_part(fd, parts):
        # A part and a half at most, never all of several.
        n = parts[0].nbytes + (parts[1].nbytes // 2 if len(parts) > 1 else 0)
        short.append(n)
        return writev(fd, [parts[0], parts[1][:n - parts[0].nbytes]] if len(parts) > 1
                      else parts)

    monkeypatch.setattr(os, "writev", write_part)
    obj, _ = STREAM_FIRST["stream alone"]
    cpersist.dump(obj, tmp_path / "raw.cp", compress=0)
    assert len(short) > 1
    gathered = io.BytesIO()
    cpersist.dump(obj, gathered, compress=0)
    assert (tmp_path / "raw.cp").read_bytes() == gathered.getvalue()


def test_a_short_write_of_a_whole_dump_made_in_memory_is_completed(tmp_path, monkeypatch):
    """A small dump is made in memory and written in one call: what the
    kernel leaves of it is written after it."""
    write = os.write
    short = []

    def write_half(fd, data):
        n = write(fd, memoryview(data)[:max(1, len(data) // 2)])
        short.append(n)
        return n

    monkeypatch.setattr(os, "write", write_half)
    obj = {"a": list(range(1000)), "b": "text" * 100}
    cpersist.dump(obj, tmp_path / "small.cp")
    monkeypatch.undo()
    assert short and short[0] < len((tmp_path / "small.cp").read_bytes())
    assert (tmp_path / "small.cp").read_bytes() == cpersist.dumps(obj)


def test_inline_data_is_a_buffer_only_at_protocol_5():
    arr = np.arange(12, dtype="<i4").reshape(3, 4, order="F")
    data, order = to_inline(arr, 5)
    assert isinstance(data, pickle.PickleBuffer) and order == "F"
    assert bytes(data.raw()) == arr.T.tobytes()  # the memory, in its order
    data, order = to_inline(arr, 4)
    assert type(data) is bytearray and bytes(data) == arr.T.tobytes()


def _inline(data_ops, dtype, shape_ops, order="C"):
    """A stream calling ``inline_array`` on the bytes ``data_ops`` pushes."""
    return proto(5, call(glob("cpersist.pickler", "inline_array"), data_ops, s(dtype),
                         tup(*shape_ops), s(order)))


def _bytearray8(data):
    return pickle.BYTEARRAY8 + struct.pack("<Q", len(data)) + data


#: Inline arrays whose parts disagree, and what the message says of them.
_MALFORMED_INLINE = {
    "too few bytes": (_bytearray8(bytes(15)), "<f8", [integer(2)], "C",
                      "15 bytes for float64 (2,)"),
    "too many bytes": (_bytearray8(bytes(24)), "<f8", [integer(2)], "C",
                       "24 bytes for float64 (2,)"),
    "a negative extent": (_bytearray8(bytes(8)), "<f8", [integer(-1)], "C",
                          "8 bytes for float64 (-1,)"),
    "a float extent": (_bytearray8(bytes(16)), "<f8",
                       [pickle.BINFLOAT + struct.pack(">d", 2.0)], "C", "(2.0,)"),
    "an extent beyond memory": (_bytearray8(bytes(16)), "<f8", [integer(1 << 62)] * 2, "C",
                                "too big"),
    "an object dtype": (_bytearray8(bytes(16)), "O", [integer(2)], "C", "object dtype"),
    "an unknown dtype": (_bytearray8(bytes(16)), "<f9", [integer(2)], "C", "not understood"),
    "a bad order": (_bytearray8(bytes(16)), "<f8", [integer(2)], "K", "order 'K'"),
    "data not bytes": (s("abcdefghabcdefgh"), "<f8", [integer(2)], "C", "data of str"),
}


@pytest.mark.parametrize("case", sorted(_MALFORMED_INLINE))
def test_a_trusted_load_refuses_a_malformed_inline_array(case):
    data, dtype, shape, order, says = _MALFORMED_INLINE[case]
    with pytest.raises(cpersist.CorruptFileError, match="bad inline array: .*" + re.escape(says)):
        cpersist.loads(container_bytes(_inline(data, dtype, shape, order)))


@pytest.mark.parametrize("data", ["bytearray", "bytes"])
def test_an_inline_array_views_its_bytearray_and_copies_bytes(data):
    raw = struct.pack("<4d", 1.5, -2.0, 3.0, 4.25)
    ops = _bytearray8(raw) if data == "bytearray" else binbytes(raw)
    arr = cpersist.loads(container_bytes(_inline(ops, "<f8", [integer(2), integer(2)], "F")))
    assert arr.dtype == np.float64 and arr.shape == (2, 2) and arr.flags.f_contiguous
    assert arr.flags.writeable and arr.T.tobytes() == raw
    assert type(arr.base) is bytearray if data == "bytearray" else arr.flags.owndata



class Zeroes:
    """Zeroes a bytearray when pickled: pickling must keep what came before."""

    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        self.target[:] = bytes(len(self.target))
        return bytes, (b"zeroed",)


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("compress", [0, "zstd"])
@pytest.mark.parametrize("content", ["noise", "text"])
@pytest.mark.parametrize("size", [100_000, 3_000_000])
def test_buffers_changed_later_in_the_dump_keep_their_pickled_bytes(
        tmp_path, n_threads, compress, content, size):
    """The pickler hands a large bytearray over as it is, not as a copy; what
    is stored is its content when pickled, as with pickle.dumps."""
    def fresh():
        if content == "noise":
            data = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8).tobytes()
        else:
            data = (b"some text to compress " * (size // 22 + 1))[:size]
        ba = bytearray(data)
        return [ba, Zeroes(ba), "after"]
    expected = pickle.loads(pickle.dumps(fresh(), protocol=5))
    assert expected[0] != bytes(size) and expected[1] == b"zeroed"
    path = tmp_path / "a.cp"
    cpersist.dump(fresh(), path, compress=compress, n_threads=n_threads)
    assert cpersist.load(path) == expected


def _inline_arrays(value, n=50):
    """Arrays of 32,000 bytes each: a raw dump keeps them in its pickle stream."""
    return {f"a{i}": np.full(4000, value + i, dtype="<f8") for i in range(n)}


def test_arrays_kept_in_a_raw_stream_outlive_the_next_load(tmp_path):
    """A raw load reads its pickle stream into a buffer kept for the next
    load: the arrays it gives hold their own bytes, which later loads of
    other files leave alone."""
    first, second = _inline_arrays(1.0), _inline_arrays(-100.5)
    cpersist.dump(first, tmp_path / "1.cp", compress=0)
    cpersist.dump(second, tmp_path / "2.cp", compress=0)
    assert len(cpersist.inspect(tmp_path / "1.cp")["inline_arrays"]) == 50
    for trusted in (True, False):
        one = cpersist.load(tmp_path / "1.cp", trusted=trusted)
        two = [cpersist.load(tmp_path / "2.cp", trusted=trusted) for _ in range(2)]
        assert_same(first, one)
        assert_same(second, two[0])


def test_a_section_file_gives_the_unpickler_its_rest_and_ends_after_stop():
    """The unpickler peeks at the rest of a section's bytes and reads its
    way through them with a pointer: it takes the stream's frames and the
    large arrays between them (sent outside frames) from that one view,
    calls ``read`` once, to move past what it took, and leaves the file
    right after STOP, the bytes after it (and those of the buffer beyond the
    section) unread."""
    from cpersist.container.section_file import SectionFile

    reads = []

    class Counted(SectionFile):
        __slots__ = ()

        def read(self, n=-1):
            reads.append("read")
            return super().read(n)

        def readinto(self, target):
            reads.append("readinto")
            return super().readinto(target)

    obj = {"small": [np.arange(i, dtype="<i4") for i in range(200)],
           "large": [random_array("<f8", (70_000,), seed=i) for i in range(3)]}
    stream = pickle.dumps(obj, protocol=5)
    buffer = bytearray(stream + b"after STOP" + b"beyond the section")
    file = Counted(buffer, len(stream) + len(b"after STOP"))
    assert_same(obj, pickle.Unpickler(file).load())
    assert reads == ["read"]
    assert bytes(file.peek()) == bytes(file.read()) == b"after STOP"


def test_restricted_load_allocates_arrays_kept_in_a_raw_stream_once(tmp_path):
    """A restricted load walks the pickle stream in the buffer it was read
    into, and an array kept in the stream views the bytearray its bytes
    were copied into: beside the stream, the load allocates the arrays'
    bytes once (not a copy of the stream, nor a second of each array)."""
    obj = _inline_arrays(1.0)
    cpersist.dump(obj, tmp_path / "a.cp", compress=0)
    total = sum(arr.nbytes for arr in obj.values())
    tracemalloc.start()
    try:
        out = cpersist.load(tmp_path / "a.cp", trusted=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_same(obj, out)
    assert peak < 2.5 * total, peak / total


class _KeepingFile:
    """A file object that keeps what ``write`` is given, not a copy of it."""

    def __init__(self):
        self.parts = []

    def write(self, data):
        self.parts.append(data)
        return memoryview(data).nbytes


def test_a_file_object_keeping_what_it_is_given_keeps_its_dump(tmp_path):
    """A raw dump's pickle stream is copied into buffers kept for the next
    dump only when the file object copies what it writes: one that keeps the
    buffers it is given still holds its dump after the next dump."""
    first, second = _KeepingFile(), _KeepingFile()
    cpersist.dump(_inline_arrays(1.0), first, compress=0)
    cpersist.dump(_inline_arrays(-100.5), second, compress=0)
    cpersist.dump(_inline_arrays(7.0), tmp_path / "3.cp", compress=0)
    for kept, value in ((first, 1.0), (second, -100.5)):
        data = b"".join(bytes(memoryview(part).cast("B")) for part in kept.parts)
        assert_same(_inline_arrays(value), cpersist.loads(data))
