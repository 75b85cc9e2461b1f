"""Read-ahead hints on load: from a device that reads ahead little, the
stored chunks of a compressed section are asked for
(``posix_fadvise(WILLNEED)``) before they are read, a bounded window ahead;
from one that reads far ahead, only the chunk headers checked one by one
are; a section of one chunk is asked for nothing, and a refused hint never
fails a load."""

import errno
import os
import pathlib
import threading
from types import SimpleNamespace

import numpy as np
import pytest

import cpersist
from cpersist.container import readahead, sections
from cpersist.container.reader import ContainerReader
from cpersist.container.sources import MemorySource, local

needs_fadvise = pytest.mark.skipif(not hasattr(os, "posix_fadvise"),
                                   reason="the system takes no read-ahead advice")


def _device_reads_ahead(monkeypatch, nbytes):
    """Every local file's device reads ``nbytes`` ahead by itself."""
    monkeypatch.setattr(local, "device_read_ahead", lambda device: nbytes)


def _record_asks(monkeypatch):
    """The hints given, as ``(offset, length, advice)``, from here on."""
    asked, fadvise = [], os.posix_fadvise

    def advised(fd, offset, length, advice):
        asked.append((offset, length, advice))
        return fadvise(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", advised)
    return asked


def _compressed_file(tmp_path):
    """A file whose one array section is about 20 zstd chunks."""
    rng = np.random.default_rng(0)
    arr = np.cumsum(rng.integers(-3, 4, size=400_000), dtype=np.int64)
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path, compress=3, chunk_size=160_000)
    with open(path, "rb") as f:
        section = max(ContainerReader(f).sections, key=lambda s: s.raw_size)
    assert len(section.chunks) >= 16
    return arr, path, section.chunks


@needs_fadvise
@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("checked_claim", [False, True])
def test_every_chunk_asked_for_before_it_is_read(tmp_path, monkeypatch, n_threads,
                                                 checked_claim):
    arr, path, chunks = _compressed_file(tmp_path)
    _device_reads_ahead(monkeypatch, 128 << 10)
    if checked_claim:  # the chunks' headers are read first, one by one
        monkeypatch.setattr(sections, "CHECKED_CLAIM", 0)
    events, lock = [], threading.Lock()
    fadvise, preadv = os.posix_fadvise, os.preadv

    def advised(fd, offset, length, advice):
        with lock:
            events.append(("ask", offset, length, advice))
        return fadvise(fd, offset, length, advice)

    def read(fd, buffers, offset, *args):
        with lock:
            events.append(("read", offset, sum(len(memoryview(b)) for b in buffers)))
        return preadv(fd, buffers, offset, *args)

    monkeypatch.setattr(os, "posix_fadvise", advised)
    monkeypatch.setattr(os, "preadv", read)
    if checked_claim:  # as a section's bytes are read whole (a large pickle stream)
        with open(path, "rb") as f:
            reader = ContainerReader(f)
            section = max(reader.sections, key=lambda s: s.raw_size)
            assert bytes(reader.read_bytes(section, n_threads=n_threads)) == arr.tobytes()
    else:
        loaded = cpersist.load(path, n_threads=n_threads)
        assert loaded.dtype == arr.dtype and loaded.shape == arr.shape
        assert loaded.tobytes() == arr.tobytes()

    asked = [e for e in events if e[0] == "ask"]
    assert all(e[3] == os.POSIX_FADV_WILLNEED for e in asked)
    assert all(0 < e[2] <= readahead.PIECE for e in asked)
    for k, chunk in enumerate(chunks):
        # (The reads of the file's tail, before the index is known, may
        # cover the last chunks: only the chunk's own reads count.) The
        # first chunk is read before anything is asked for, unless its
        # header was read first. With two threads, one may read a chunk
        # that the other has just taken on to ask for, or has read already
        # (the second): asked for after its read, or not at all.
        first_read = next(j for j, e in enumerate(events)
                          if e[0] == "read" and e[1] == chunk.offset)
        before = events[:first_read] if n_threads == 1 else events
        asked_before = any(e[1] <= chunk.offset < e[1] + e[2] for e in before
                           if e[0] == "ask")
        assert asked_before or k < (0 if checked_claim else n_threads), \
            f"chunk {k} read before it was asked for"
    # Each stored byte is asked for once by the decoders' read-ahead (and,
    # with the headers checked first, the first ones once more by that check).
    whole = sum(e[2] for e in asked)
    stored = sum(c.length for c in chunks)
    assert stored - sum(c.length for c in chunks[:n_threads]) <= whole
    assert whole <= 2 * stored + len(chunks) * 4096


@needs_fadvise
@pytest.mark.parametrize("n_threads", [1, 2])
def test_device_reading_far_ahead_is_asked_only_for_the_headers(tmp_path, monkeypatch,
                                                                n_threads):
    # Its own read-ahead follows the chunks read in order; the headers,
    # read one by one far apart before the section, it cannot foresee.
    arr, path, chunks = _compressed_file(tmp_path)
    _device_reads_ahead(monkeypatch, readahead.KERNEL_ENOUGH)
    asked = _record_asks(monkeypatch)
    assert cpersist.load(path, n_threads=n_threads).tobytes() == arr.tobytes()
    assert asked == []
    monkeypatch.setattr(sections, "CHECKED_CLAIM", 0)
    with open(path, "rb") as f:
        reader = ContainerReader(f)
        section = max(reader.sections, key=lambda s: s.raw_size)
        header_size = section.codec.header_size
        assert bytes(reader.read_bytes(section, n_threads=n_threads)) == arr.tobytes()
    assert asked == [(reader.source.base + c.offset, header_size, os.POSIX_FADV_WILLNEED)
                     for c in chunks]


def test_reads_ahead_is_the_device_read_ahead_linux_states(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x")
    device = os.stat(path).st_dev
    with open(path, "rb") as f:
        source = local.LocalFileSource(f, str(path), f.fileno())
        stated = local.device_read_ahead(device)
        assert source.reads_ahead == stated
    known = pathlib.Path(f"/sys/class/bdi/{os.major(device)}:{os.minor(device)}/read_ahead_kb")
    if known.exists():
        assert stated == int(known.read_text()) << 10


@needs_fadvise
def test_one_chunk_asked_for_nothing(tmp_path, monkeypatch):
    arr = np.arange(100_000, dtype=np.int64)
    path = tmp_path / "one.cp"
    cpersist.dump({"a": arr, "b": arr[::-1].copy()}, path, compress=3)
    _device_reads_ahead(monkeypatch, 128 << 10)
    asked = []
    monkeypatch.setattr(os, "posix_fadvise", lambda *args: asked.append(args))
    loaded = cpersist.load(path, n_threads=2)
    assert loaded["a"].tobytes() == arr.tobytes()
    assert loaded["b"].tobytes() == arr[::-1].tobytes()
    assert asked == []


@needs_fadvise
def test_refused_advice_fails_no_load(tmp_path, monkeypatch):
    arr, path, _ = _compressed_file(tmp_path)
    _device_reads_ahead(monkeypatch, 128 << 10)
    refused = []

    def refuse(fd, offset, length, advice):
        refused.append(offset)
        raise OSError(errno.EINVAL, "advice not taken")

    monkeypatch.setattr(os, "posix_fadvise", refuse)
    for n_threads in (1, 2):
        assert cpersist.load(path, n_threads=n_threads).tobytes() == arr.tobytes()
    assert refused


class _Asked(MemorySource):
    """A source in memory that notes what it is asked for."""

    def __init__(self):
        super().__init__(b"", "asked")
        self.asked = []

    def will_need(self, offset, length):
        self.asked.append((offset, length))


def test_window_stays_bounded_and_covers_every_chunk():
    # 100 chunks of 700 KB, with a gap after every tenth (chunks a dump
    # wrote elsewhere): asked for in order, never more than the window
    # past the chunk just read, each stored byte but the first chunk's
    # once, no byte between.
    chunks, at = [], 0
    for k in range(100):
        chunks.append(SimpleNamespace(offset=at, length=700_000))
        at += 700_000 + (4096 if k % 10 == 9 else 0)
    source = _Asked()
    ahead = readahead.ReadAhead(source, chunks)
    for i, chunk in enumerate(chunks):
        before = len(source.asked)
        ahead.read(i)
        new = source.asked[before:]
        assert sum(length for _, length in new) <= readahead.STEP + chunk.length
        assert all(offset + length <= chunk.offset + readahead.WINDOW + chunk.length
                   for offset, length in new)
        assert i + 1 == len(chunks) or ahead.asked > i + 1  # the next is asked for
    assert all(0 < length <= readahead.PIECE for _, length in source.asked)
    merged = []
    for offset, length in source.asked:  # in file order, each after the last
        if merged and merged[-1][1] == offset:
            merged[-1][1] = offset + length
        else:
            assert not merged or merged[-1][1] < offset
            merged.append([offset, offset + length])
    runs = [[c.offset, c.offset + c.length] for c in chunks]
    assert merged == [[runs[max(k, 1)][0], runs[k + 9][1]] for k in range(0, 100, 10)]
