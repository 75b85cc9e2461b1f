"""Buffer blocks (format 2.5): a sectioned protocol-5 dump keeps the bytes of
its small arrays of 1 KiB and more out of its pickle stream, in blocks of at
most 4 MiB, and a load makes those arrays views of one fresh block each."""

import io
import pickle

import ml_dtypes
import numpy as np
import pytest

import cpersist
from cpersist.codecs.registry import UnknownCodecError, codec_from_config
from cpersist.container import ContainerReader
from cpersist.container.layout import BLOCKS_STUB, HEADER, TRAILER
from cpersist.pickling.buffer_blocks import BLOCK_BYTES, OUT_OF_BAND_FROM, block_offsets

from cpersist.pickling.unpickler import ArrayUnpickler

from ._forge import forge, split
from .conftest import assert_same


def many_small_arrays():
    """700 arrays of 0.5-60 KB (over 4 MiB in all: several blocks) beside
    arrays of every kind a model's small arrays come in."""
    rng = np.random.default_rng(5)
    frozen = np.arange(400, dtype=np.int32)
    frozen.flags.writeable = False
    twice = rng.standard_normal(300)
    base = np.arange(3000, dtype=np.float64)
    record = np.dtype([("x", "<f8"), ("n", "<i4"), ("tag", "S3")])
    return {
        "weights": [rng.standard_normal(int(n)) for n in rng.integers(60, 7500, 700)],
        "fortran": np.asfortranarray(rng.standard_normal((30, 40))),
        "frozen": frozen,
        "empty": np.zeros((0, 5)),
        "tiny": np.arange(3, dtype=np.uint8),
        "records": np.zeros(200, dtype=record),
        "bfloat16": np.arange(900, dtype=np.float32).astype(ml_dtypes.bfloat16),
        "twice": [twice, twice],
        "view": base[10:1500],
        "strided": base[::3],
        "big": np.ones(70_000),  # a section of its own, as before
    }


def _block_metas(data):
    _, index = split(data)
    return [s["meta"] for s in index["sections"] if s.get("meta", {}).get("kind") == "buffers"]


def _dumped(obj, how, compress, tmp_path):
    """``(bytes of the dump, loaded object)`` through ``how``."""
    if how == "bytes":
        data = cpersist.dumps(obj, compress)
        return data, cpersist.loads(data)
    path = tmp_path / "obj.cp"
    if how == "path":
        cpersist.dump(obj, path, compress)
        return path.read_bytes(), cpersist.load(path)
    with open(path, "wb") as file:
        cpersist.dump(obj, file, compress)
    with open(path, "rb") as file:
        return path.read_bytes(), cpersist.load(file)


@pytest.mark.parametrize("how, compress", [("path", 0), ("path", 3), ("file", 0), ("file", 3),
                                           ("bytes", 3)])
def test_round_trip(how, compress, tmp_path):
    obj = many_small_arrays()
    data, out = _dumped(obj, how, compress, tmp_path)
    assert HEADER.unpack(data[:HEADER.size])[1:3] == (2, 5)
    assert len(_block_metas(data)) >= 2  # the arrays cross a block boundary
    assert_same(obj, out)
    assert out["twice"][0] is out["twice"][1]
    for arr in out["weights"]:
        assert arr.flags.writeable


def test_blocks_are_capped_and_hold_only_buffers_of_1_kib_and_more(tmp_path):
    obj = many_small_arrays()
    cpersist.dump(obj, tmp_path / "obj.cp")
    metas = _block_metas((tmp_path / "obj.cp").read_bytes())
    sizes = [n for meta in metas for n in meta["sizes"]]
    assert min(sizes) >= OUT_OF_BAND_FROM
    for meta in metas:
        offsets, end = block_offsets(meta["sizes"])
        assert end <= BLOCK_BYTES and all(at % 64 == 0 for at in offsets)
    # Every block but the last is full: the next buffer would not fit.
    for meta, after in zip(metas, metas[1:]):
        assert block_offsets(meta["sizes"] + after["sizes"][:1])[1] > BLOCK_BYTES
    # The arrays under 1 KiB stay in the stream.
    small = sum(1 for a in obj["weights"] if a.nbytes < OUT_OF_BAND_FROM)
    assert small and len(sizes) <= len(obj["weights"]) - small + 8


def test_the_bytes_between_buffers_are_zeros(tmp_path):
    # A first dump fills the block memory the thread keeps with 0xff, as
    # buffers of multiples of 64 bytes (no padding); the second's buffers
    # leave padding, which must not show what the memory held.
    cpersist.dump([np.full(n, 0xFF, np.uint8) for n in [2048] * 700], tmp_path / "a.cp")
    cpersist.dump([np.ones(n, np.uint8) for n in [1500] * 700], tmp_path / "b.cp")
    with open(tmp_path / "b.cp", "rb") as file:
        reader = ContainerReader(file, "b")
        blocks = [s for s in reader.sections if s.meta.get("kind") == "buffers"]
        assert blocks
        for section in blocks:
            data = bytearray(section.raw_size)
            reader.read_into(section, memoryview(data))
            offsets, _ = block_offsets(section.meta["sizes"])
            for at, n in zip(offsets, section.meta["sizes"]):
                assert data[at:at + n] == b"\x01" * n
                data[at:at + n] = bytes(n)
            assert not any(data)


def test_a_kept_array_keeps_one_block(tmp_path):
    cpersist.dump(many_small_arrays(), tmp_path / "obj.cp")
    kept = cpersist.load(tmp_path / "obj.cp")["weights"][-1]
    memory = kept
    while isinstance(memory, np.ndarray) and memory.base is not None:
        memory = memory.base
    memory = memoryview(memory)
    assert kept.nbytes < memory.nbytes <= BLOCK_BYTES


def test_mmap_mode_leaves_arrays_in_blocks_in_memory(tmp_path):
    cpersist.dump(many_small_arrays(), tmp_path / "obj.cp")
    out = cpersist.load(tmp_path / "obj.cp", mmap_mode="r")
    assert isinstance(out["big"], np.memmap)
    assert not any(isinstance(a, np.memmap) for a in out["weights"])
    assert all(a.flags.writeable for a in out["weights"])


def test_a_damaged_block_byte_is_refused(tmp_path):
    path = tmp_path / "obj.cp"
    cpersist.dump(many_small_arrays(), path)
    data = bytearray(path.read_bytes())
    _, index = split(bytes(data))
    block = next(s for s in index["sections"] if s.get("meta", {}).get("kind") == "buffers")
    data[block["offset"] + 1000] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(cpersist.CorruptFileError, match="checksum"):
        cpersist.load(path)


def _not_a_block(meta):
    meta["kind"] = "other"


def _one_size_more(meta):
    meta["sizes"].append(8)


def _sizes_not_a_list(meta):
    meta["sizes"] = "8"


@pytest.mark.parametrize("edit, message", [
    # the last block's buffers not there: the stream asks for more
    (_not_a_block, "asks for more out-of-band buffers than the"),
    (_one_size_more, "buffers fill"),
    (_sizes_not_a_list, "bad sizes"),
])
def test_blocks_that_do_not_fit_are_refused(edit, message, tmp_path):
    path = tmp_path / "obj.cp"
    cpersist.dump(many_small_arrays(), path)

    def on_index(index):
        blocks = [s["meta"] for s in index["sections"]
                  if s.get("meta", {}).get("kind") == "buffers"]
        edit(blocks[-1])

    path.write_bytes(forge(path.read_bytes(), on_index))
    with pytest.raises(cpersist.CorruptFileError, match=message):
        cpersist.load(path)


def test_a_block_claiming_more_than_a_block_holds_is_refused(tmp_path):
    """Two buffers of 4 MiB more in the last block's sizes and its last
    chunk's length (a consistent index; compressed, so that its stored
    bytes need not match): refused for its size before its memory is
    taken, not once the chunk it claims is read."""
    path = tmp_path / "obj.cp"
    cpersist.dump(many_small_arrays(), path, compress=3)

    def on_index(index):
        block = [s for s in index["sections"] if s.get("meta", {}).get("kind") == "buffers"][-1]
        _, end = block_offsets(block["meta"]["sizes"])
        block["meta"]["sizes"] += [BLOCK_BYTES] * 2
        block["chunks"][-1][1] += block_offsets(block["meta"]["sizes"])[1] - end

    path.write_bytes(forge(path.read_bytes(), on_index, consistent=True))
    with pytest.raises(cpersist.CorruptFileError, match="more than a block holds"):
        cpersist.load(path)


@pytest.mark.parametrize("given, message", [(0, "more out-of-band buffers than the 0"),
                                            (2, "uses 1 of the 2 out-of-band")])
def test_a_stream_must_take_every_buffer_once(given, message):
    stream = pickle.dumps(pickle.PickleBuffer(bytearray(2000)), protocol=5,
                          buffer_callback=lambda buffer: False)
    buffers = [memoryview(bytearray(2000)) for _ in range(given)]
    unpickler = ArrayUnpickler(io.BytesIO(stream), None, source="s.cp", buffers=buffers)
    with pytest.raises(cpersist.CorruptFileError, match=message):
        unpickler.load()


def test_dumps_without_blocks_keep_their_format(tmp_path):
    """A compact dump (its stream small), a dump at protocol 4 and one to a
    file in append mode (which cannot go back to restate its header) keep
    their arrays in the stream and say format 2.2, as before."""
    small = {"w": np.arange(300.0), "b": np.arange(2000, dtype=np.int32)}
    for protocol, obj, mode in [(5, small, "wb"), (4, many_small_arrays(), "wb"),
                                (5, many_small_arrays(), "ab")]:
        path = tmp_path / f"p{protocol}{mode}.cp"
        with open(path, mode) as file:
            cpersist.dump(obj, file, protocol=protocol)
        data = path.read_bytes()
        assert HEADER.unpack(data[:HEADER.size])[1:3] == (2, 2)
        assert b'"buffers"' not in data and b"format-2.5" not in data
        assert_same(obj, cpersist.load(path))


def test_readers_of_earlier_versions_refuse_a_dump_with_blocks(tmp_path):
    """The section list ends with a stub whose codec no earlier reader has:
    they refuse the file naming it, rather than calling its stream damaged."""
    path = tmp_path / "obj.cp"
    cpersist.dump(many_small_arrays(), path)
    data = path.read_bytes()
    offset, length, _, _ = TRAILER.unpack(data[-TRAILER.size:])
    raw_index = data[offset:offset + length]
    assert b"format-2.5-buffer-blocks" in raw_index or b"packed_sections" in raw_index
    _, index = split(data)
    assert index["sections"][-1] == BLOCKS_STUB
    with pytest.raises(UnknownCodecError, match="format-2.5-buffer-blocks"):
        codec_from_config(BLOCKS_STUB["codec"])
