"""Checksums of the pieces of chunks kept verbatim: a slice of such a chunk
reads and checks only the pieces it touches."""

import base64
import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xxhash import xxh3_64_intdigest

import cpersist
from cpersist.storage.open import open_source
from cpersist.container import ContainerReader
from cpersist.container.layout import PIECE_SIZE, pieces_text

from ._forge import forge
from ._fresh import run_cli
from .conftest import assert_same_result, spy_reads

ROW = 1000  # bytes per row of the arrays below

#: Selections of the rows ``part`` of the arrays below: contiguous in the
#: stored bytes, or not (read group by group).
SELECTIONS = {
    "rows": lambda part: part,
    "columns": lambda part: (part, slice(5, 10)),
    "reversed columns": lambda part: (part, slice(None, None, -3)),
    "every other row": lambda part: slice(part.start, part.stop, 2),
}


def _noise(rows, seed=0):
    """Random bytes: kept verbatim even when compression is asked for."""
    return np.random.default_rng(seed).integers(0, 256, size=(rows, ROW), dtype=np.uint8)


def _noise_file(tmp_path, compress=0):
    """(array, path, its chunk 1) of a dump of 10 MB of noise: three chunks
    kept verbatim, with piece checksums."""
    arr = _noise(10_000)
    path = tmp_path / "n.cp"
    cpersist.dump({"a": arr}, path, compress=compress)
    return arr, path, _section(path).chunks[1]


def _section(path):
    """The array section of a file of one array, its chunk table read."""
    reader = ContainerReader(open_source(path))
    try:
        section = next(s for s in reader.sections if s.index != reader.root)
        section.chunks
        return section
    finally:
        reader.source.close()


@pytest.mark.parametrize("compress", [0, 3, "blosc:lz4"])
def test_verbatim_chunks_carry_the_checksums_of_their_pieces(tmp_path, compress):
    arr = _noise(10_000)  # 10 MB: chunks of 4 MiB, 4 pieces each
    path = tmp_path / "n.cp"
    cpersist.dump({"a": arr}, path, compress=compress)
    section = _section(path)
    data = path.read_bytes()
    assert section.piece_size == PIECE_SIZE
    assert len(section.chunks) == 3
    for i, chunk in enumerate(section.chunks):
        stored = data[chunk.offset:chunk.offset + chunk.length]
        expected = [xxh3_64_intdigest(stored[k:k + PIECE_SIZE])
                    for k in range(0, chunk.length, PIECE_SIZE)]
        assert section.pieces(i) == expected
        assert xxh3_64_intdigest(stored) == chunk.checksum


def test_encoded_and_small_chunks_have_none(tmp_path):
    smooth = np.arange(3_000_000, dtype=np.int64)
    path = tmp_path / "s.cp"
    cpersist.dump({"a": smooth, "b": _noise(100)}, path, compress=3)
    data = path.read_bytes()
    offset, length = np.frombuffer(data[-32:-16], dtype="<u8")
    index = json.loads(data[int(offset):int(offset) + int(length)])
    assert not any("pieces" in s for s in index["sections"])  # encoded, or 100 KB
    reader = ContainerReader(open_source(path))
    try:
        assert all(s.pieces(0) is None for s in reader.sections)
    finally:
        reader.source.close()


@pytest.mark.parametrize("compress", [0, 3])
@pytest.mark.parametrize("order", ["C", "F"])
@settings(max_examples=25)
@given(data=st.data())
def test_slices_through_pieces_equal_numpy(tmp_path_factory, compress, order, data):
    arr = np.asfortranarray(_noise(9_000, seed=1)) if order == "F" else _noise(9_000, seed=1)
    path = tmp_path_factory.getbasetemp() / f"pieces-{compress}-{order}.cp"
    if not path.exists():  # one file for all examples
        cpersist.dump({"a": arr}, path, compress=compress)
    axis = 0 if order == "C" else 1
    n = arr.shape[axis]
    start = data.draw(st.integers(0, n - 1))
    stop = data.draw(st.integers(start + 1, min(n, start + 3000)))
    # A step, or a part of the other axis, makes the selection
    # non-contiguous in the stored bytes.
    step = data.draw(st.sampled_from([1, 1, 2, 7, -1, -3]))
    slow = (slice(start, stop, step) if step > 0
            else slice(stop - 1, start - 1 if start else None, step))
    other = data.draw(st.sampled_from([slice(None), slice(5, 10), slice(None, None, -3),
                                       slice(400, 300, -1), 17]))
    index = (slow, other) if axis == 0 else (other, slow)
    with cpersist.open(path) as f:
        assert_same_result(arr[index], f.arrays["obj['a']"][index])


@pytest.mark.parametrize("compress", [0, 3])
@pytest.mark.parametrize("selection", SELECTIONS)
def test_a_slice_reads_only_the_pieces_it_touches(tmp_path, monkeypatch, compress, selection):
    arr, path, chunk = _noise_file(tmp_path, compress)
    with cpersist.open(path) as f:
        lazy = f.arrays["obj['a']"]
        rows = lazy.chunks[0][0]
        index = SELECTIONS[selection](slice(rows + 1234, rows + 1234 + 600))  # 600 KB, chunk 1
        reads = spy_reads(monkeypatch)
        assert_same_result(arr[index], lazy[index])
    in_chunk = sum(r.length for r in reads
                   if chunk.offset <= r.offset < chunk.offset + chunk.length)
    assert 600 * ROW <= in_chunk <= 600 * ROW + 2 * PIECE_SIZE
    assert in_chunk < chunk.length // 2


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("compress", [0, 3])
@pytest.mark.parametrize("selection", SELECTIONS)
def test_damage_in_a_piece_read_is_caught_and_named(tmp_path, compress, selection):
    arr, path, chunk = _noise_file(tmp_path, compress)
    with cpersist.open(path) as f:
        rows = f.arrays["obj['a']"].chunks[0][0]
    part = SELECTIONS[selection](slice(rows + 1000, rows + 1100))  # bytes 1.0-1.1 MB of chunk 1
    # Outside the part, inside piece 0 (0-1,048,575), which the slice reads.
    _flip(path, chunk.offset + 900_000)
    with cpersist.open(path) as f:
        with pytest.raises(cpersist.CorruptFileError,
                           match=r"n\.cp.*section 0, chunk 1, piece 0"):
            f.arrays["obj['a']"][part]
    with cpersist.open(path, verify=False) as f:
        assert_same_result(arr[part], f.arrays["obj['a']"][part])


@pytest.mark.parametrize("compress", [0, 3])
@pytest.mark.parametrize("selection", SELECTIONS)
def test_damage_in_a_piece_not_read_is_left_to_whole_reads(tmp_path, compress, selection):
    """A slice vouches for the pieces it reads; a load, a whole chunk and
    verify check the rest."""
    arr, path, chunk = _noise_file(tmp_path, compress)
    _flip(path, chunk.offset + chunk.length - 10)  # the last piece
    with cpersist.open(path) as f:
        lazy = f.arrays["obj['a']"]
        rows = lazy.chunks[0][0]
        index = SELECTIONS[selection](slice(rows + 10, rows + 20))
        assert_same_result(arr[index], lazy[index])
        with pytest.raises(cpersist.CorruptFileError, match="chunk 1: damaged|chunk 1, piece"):
            lazy[rows:2 * rows]
    with pytest.raises(cpersist.CorruptFileError, match="checksum mismatch"):
        cpersist.load(path)
    with pytest.raises(cpersist.CorruptFileError, match="checksum mismatch"):
        cpersist.verify(path)


def _edit_pieces(edit):
    """An index edit: ``edit(fields, piece_size)`` gives the section's new
    ``pieces`` value (the per-chunk fields of its text) and piece size."""
    def apply(index):
        for section in index["sections"]:
            if "pieces" in section:
                section["pieces"], section["piece_size"] = edit(
                    section["pieces"].split(","), section["piece_size"])
    return apply


def _digests(field):
    data = base64.b64decode(field)
    return list(struct.unpack(">%dQ" % (len(data) // 8), data))


def _flipped(fields, size):
    """Every piece checksum with its lowest bit flipped."""
    return pieces_text([[d ^ 1 for d in _digests(f)] for f in fields]), size


@pytest.mark.parametrize("edit", [
    lambda fields, size: (",".join(fields[:-1]), size),                        # a chunk missing
    lambda fields, size: (pieces_text([_digests(f)[:-1] for f in fields]), size),  # a piece
    lambda fields, size: (",".join("!" + f[1:] for f in fields), size),
    lambda fields, size: (",".join(" " + f[1:] for f in fields), size),
    lambda fields, size: (",".join(f[:-4] for f in fields), size),             # cut short
    lambda fields, size: (",".join(fields), size // 2),                       # the wrong count
    lambda fields, size: (",".join(fields), 0),
    lambda fields, size: (fields, size),                                      # not text
], ids=["chunks", "pieces", "alphabet", "space", "short", "size", "zero-size", "list"])
def test_piece_tables_that_do_not_fit_the_chunks_are_damage(tmp_path, edit):
    arr = _noise(10_000)
    path = tmp_path / "n.cp"
    cpersist.dump({"a": arr}, path)
    path.write_bytes(forge(path.read_bytes(), _edit_pieces(edit)))
    with pytest.raises(cpersist.CorruptFileError, match="piece checksums"):
        with cpersist.open(path) as f:
            f.arrays["obj['a']"][5000:5010]
    with pytest.raises(cpersist.CorruptFileError, match="piece checksums"):
        cpersist.verify(path)


def test_wrong_piece_checksums_fail_verify(tmp_path):
    """Piece checksums that do not match sound data (a forged index) fail
    the slices that read them and verify, never pass unnoticed."""
    arr = _noise(10_000)
    path = tmp_path / "n.cp"
    cpersist.dump({"a": arr}, path)
    path.write_bytes(forge(path.read_bytes(), _edit_pieces(_flipped)))
    assert_same_result(arr, cpersist.load(path)["a"])  # the chunks' checksums hold
    with pytest.raises(cpersist.CorruptFileError, match="piece 0"):
        cpersist.verify(path)
    with cpersist.open(path) as f:
        with pytest.raises(cpersist.CorruptFileError, match="piece"):
            f.arrays["obj['a']"][5:10]


def test_reseal_computes_the_pieces_again(tmp_path):
    arr = _noise(10_000)
    path = tmp_path / "n.cp"
    cpersist.dump({"a": arr}, path)
    mapped = cpersist.load(path, mmap_mode="r+")["a"]
    mapped[5000:5010] = 7
    mapped.flush()
    del mapped
    expected = arr.copy()
    expected[5000:5010] = 7
    assert cpersist.reseal(path)["resealed"]
    assert cpersist.verify(path)["unchecked"] == []
    with cpersist.open(path) as f:
        assert_same_result(expected[4990:5020], f.arrays["obj['a']"][4990:5020])
    section = _section(path)
    data = path.read_bytes()
    chunk = section.chunks[1]
    assert section.pieces(1)[0] == xxh3_64_intdigest(data[chunk.offset:chunk.offset + PIECE_SIZE])


def test_cli_verify_checks_pieces(tmp_path):
    arr = _noise(10_000)
    path = tmp_path / "n.cp"
    cpersist.dump({"a": arr}, path)
    path.write_bytes(forge(path.read_bytes(), _edit_pieces(_flipped)))
    done = run_cli("verify", path)
    assert done.returncode != 0
    assert "piece 0" in done.stdout + done.stderr


@pytest.fixture
def memory_url():
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"/cpersist-pieces-{id(fs)}"
    yield f"memory://{root}/n.cp"
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.mark.parametrize("compress", [0, 3])
@pytest.mark.parametrize("where", ["inside", "across"])
@pytest.mark.parametrize("selection", SELECTIONS)
def test_remote_slices_fetch_only_the_pieces(memory_url, compress, where, selection):
    """From remote storage, a slice of verbatim chunks fetches the pieces
    holding it (in one request per run of them), not the whole chunks."""
    arr = _noise(10_000)
    cpersist.dump({"a": arr}, memory_url, compress=compress)
    with cpersist.open(memory_url) as f:
        lazy = f.arrays["obj['a']"]
        rows = lazy.chunks[0][0]
        part = SELECTIONS[selection]({"inside": slice(rows + 1234, rows + 1834),
                                      "across": slice(2 * rows - 300, 2 * rows + 300)}[where])
        source = lazy._bind().reader.source
        fetched = []
        real_into, real_ranges = source.read_into, source.read_ranges
        source.read_into = lambda offset, buffer: (
            fetched.append(memoryview(buffer).nbytes) or real_into(offset, buffer))
        source.read_ranges = lambda ranges: (
            fetched.extend(n for _, n in ranges) or real_ranges(ranges))
        assert_same_result(arr[part], lazy[part])
    assert 600 * ROW <= sum(fetched) <= 600 * ROW + 4 * PIECE_SIZE
    if where == "across":
        assert len(fetched) == 2  # the two chunks' pieces, fetched together


@pytest.mark.parametrize("where", ["inside", "across"])
@pytest.mark.parametrize("selection", SELECTIONS)
def test_remote_damage_in_a_piece_fetched_is_caught(memory_url, where, selection):
    import fsspec

    arr = _noise(10_000)
    cpersist.dump({"a": arr}, memory_url)
    with cpersist.open(memory_url) as f:
        lazy = f.arrays["obj['a']"]
        rows = lazy.chunks[0][0]
        chunk = lazy._bind().section.chunks[1]
    part = SELECTIONS[selection]({"inside": slice(rows + 1000, rows + 1100),
                                  "across": slice(rows - 100, rows + 1100)}[where])
    fs = fsspec.filesystem("memory")
    path = memory_url[len("memory://"):]
    data = bytearray(fs.cat_file(path))
    data[chunk.offset + 900_000] ^= 0x5A  # chunk 1, piece 0: read, outside the part
    fs.pipe_file(path, bytes(data))
    with cpersist.open(memory_url) as f:
        with pytest.raises(cpersist.CorruptFileError, match="chunk 1, piece 0"):
            f.arrays["obj['a']"][part]
