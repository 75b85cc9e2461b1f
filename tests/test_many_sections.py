"""Files of many one-chunk
compressed sections (a checkpoint's tensors) written and read on several
threads."""

import io
import os
import pickle

import numpy as np
import pytest

import cpersist
from cpersist.container import ContainerReader
from cpersist.pickling.arrays import byte_view
from cpersist.pickling.read import _read_ahead

from .conftest import assert_same


def bf16_like(n, seed=0):
    """Random-normal weights as bfloat16 bits, in uint16 (what a bfloat16
    tensor's storage is stored as)."""
    weights = np.random.default_rng(seed).standard_normal(n).astype(np.float32) * 0.02
    return (weights.view(np.uint32) >> 16).astype(np.uint16)


def many_sections():
    rng = np.random.default_rng(3)
    obj = {}
    for i in range(12):
        obj[f"{i}.w"] = bf16_like(300_000 + 4_096 * i, seed=i)   # one chunk each
        obj[f"{i}.b"] = rng.standard_normal(700).astype(np.float16)  # kept in the stream
        obj[f"{i}.n"] = np.ones(50_000, np.float32)                  # one tiny chunk
    obj["empty"] = np.zeros((0, 4), np.int16)
    obj["strided"] = np.arange(1 << 20, dtype=np.int32).reshape(1024, 1024)[:, ::3]
    obj["large"] = bf16_like(5 << 20, seed=99)                       # several chunks
    return obj


def test_files_of_many_one_chunk_sections_do_not_depend_on_threads(tmp_path):
    obj = many_sections()
    files = {}
    for n_threads in (1, 2, 3):
        target = io.BytesIO()
        cpersist.dump(obj, target, compress=3, n_threads=n_threads)
        files[n_threads] = target.getvalue()
    assert files[1] == files[2] == files[3]
    path = tmp_path / "m.cp"
    path.write_bytes(files[2])
    for n_threads in (1, 2):
        loaded = cpersist.load(path, n_threads=n_threads)
        assert loaded.keys() == obj.keys()
        for key, value in obj.items():
            assert_same(value, loaded[key])



def test_a_damaged_section_decoded_ahead_names_its_array(tmp_path):
    obj = many_sections()
    path = tmp_path / "m.cp"
    cpersist.dump(obj, path, compress=3, n_threads=2)
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        section = next(s for s in reader.sections if s.meta.get("path") == "obj['5.w']")
        at = reader.base + section.chunks[0].offset + 100
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    for n_threads in (1, 2):
        with pytest.raises(cpersist.CorruptFileError, match=r"checksum.*obj\['5.w'\]"):
            cpersist.load(path, n_threads=n_threads)


def test_tiny_chunks_between_weights_leave_the_weights_in_flight():
    # The encoding window is counted in the largest chunks: a model's biases
    # and norms between two weights must not force the weight being encoded
    # to be waited for, which would leave a worker idle. The count cap still
    # bounds how many tiny chunks wait.
    from cpersist.codecs import codec_from_config
    from cpersist.container import ContainerWriter

    codec = codec_from_config({"id": "zstd-auto", "level": 3})
    writer = ContainerWriter(io.BytesIO(), n_threads=2)
    weight = memoryview(bf16_like(1 << 19).tobytes())    # 1 MiB
    tiny = memoryview(np.ones(256, np.float32).tobytes())
    writer.add_section([weight], codec=codec, typesize=2)
    for _ in range(6):
        writer.add_section([tiny], codec=codec, typesize=4)
    assert len(writer._pending) == 7 and writer._pending[0][1] == weight.nbytes
    for _ in range(100):
        writer.add_section([tiny], codec=codec, typesize=4)
        assert len(writer._pending) <= 2 * 2 * 8
    for _ in range(6):
        writer.add_section([weight], codec=codec, typesize=2)
        assert writer._pending_bytes <= 2 * 2 * weight.nbytes


def small_raw_arrays():
    """Arrays of 64 to 100 KB, each a raw section of its own: dtypes (a
    big-endian one and a struct among them), C and F orders."""
    rng = np.random.default_rng(7)
    dtypes = [np.float64, np.float32, np.int16, np.dtype(">f8"), np.complex64, np.bool_,
              np.dtype([("a", "<i4"), ("b", "<f8")])]
    obj = {}
    for i in range(40):
        dtype = np.dtype(dtypes[i % len(dtypes)])
        rows = (66_000 + 800 * i) // dtype.itemsize // 4
        arr = np.zeros((rows, 4), dtype)
        arr.view(np.uint8)[...] = rng.integers(0, 256, arr.nbytes, np.uint8).reshape(
            arr.view(np.uint8).shape)
        obj[f"w{i}"] = np.asfortranarray(arr) if i % 2 else arr
    return obj


@pytest.mark.parametrize("n_threads", [1, 2])
def test_small_raw_arrays_read_together_stay_independent(tmp_path, n_threads):
    obj = small_raw_arrays()
    path = tmp_path / "m.cp"
    cpersist.dump(obj, path, compress=0)
    loaded = cpersist.load(path, n_threads=n_threads)
    assert_same(obj, loaded)
    arrays = list(loaded.values())
    for arr, before in zip(arrays, obj.values()):
        assert arr.flags.writeable and arr.flags.aligned
        assert arr.flags.f_contiguous == before.flags.f_contiguous
        assert arr.flags.c_contiguous == before.flags.c_contiguous
        # An array pickled again holds its own bytes, not its neighbours'.
        assert len(pickle.dumps(arr, protocol=5)) < arr.nbytes + 1000
    # Several share memory read at once; what one keeps alive is bounded.
    assert all(arr.base is not None and arr.base.nbytes <= 1 << 20 for arr in arrays)
    assert len({id(arr.base) for arr in arrays}) < len(arrays)
    for k, arr in enumerate(arrays):  # each written whole: no other changes
        byte_view(arr)[...] = 0xA5
        for other, before in zip(arrays[k + 1:], list(obj.values())[k + 1:]):
            assert_same(before, other)
    assert all((byte_view(arr) == 0xA5).all() for arr in arrays)


def test_a_damaged_array_read_with_its_neighbours_names_itself(tmp_path):
    obj = small_raw_arrays()
    path = tmp_path / "m.cp"
    cpersist.dump(obj, path, compress=0)
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        section = next(s for s in reader.sections if s.meta.get("path") == "obj['w13']")
        at = reader.base + section.offset + section.raw_size - 1
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    for n_threads in (1, 2):
        with pytest.raises(cpersist.CorruptFileError,
                           match=rf"section {section.index}: damaged.*obj\['w13'\]"):
            cpersist.load(path, n_threads=n_threads)
    loaded = cpersist.load(path, verify=False)
    assert byte_view(loaded["w13"])[-1] == byte_view(obj["w13"])[-1] ^ 0xFF
    for key in obj.keys() - {"w13"}:
        assert_same(obj[key], loaded[key])


def _record_header_at(data, section):
    """Where the record header of the raw ``section`` is in ``data``: in
    the 72 bytes before its payload, with its kind (ALIGNED) and length."""
    value = (2 << 56 | section.raw_size).to_bytes(8, "little")
    at = data.rindex(value, section.offset - 72, section.offset)
    assert section.offset == at + 8 + -(at + 8) % 64
    return at


def test_record_headers_between_small_arrays_are_walked_in_their_blocks(tmp_path,
                                                                        monkeypatch):
    obj = small_raw_arrays()
    path = tmp_path / "m.cp"
    cpersist.dump(obj, path, compress=0)
    data = path.read_bytes()
    with open(path, "rb") as file:
        sections = [s for s in ContainerReader(file, str(path)).sections
                    if s.meta.get("kind") == "array"]
    headers = {_record_header_at(data, section) for section in sections}
    preads, pread = [], os.pread
    monkeypatch.setattr(os, "pread", lambda *args: preads.append(args[2]) or pread(*args))
    assert_same(obj, cpersist.load(path))
    assert preads and not headers & set(preads)  # none read alone: all in blocks
    monkeypatch.undo()
    # A damaged header, at the start of a block or between two arrays of
    # one, is still refused by every load, read in blocks or mapped.
    for section in (sections[0], sections[1], sections[-1]):
        at = _record_header_at(data, section)
        for damage in (lambda d: d.__setitem__(at + 7, 0x7F),    # an unknown kind
                       lambda d: d.__setitem__(at, d[at] ^ 64)):  # a length changed
            damaged = bytearray(data)
            damage(damaged)
            path.write_bytes(bytes(damaged))
            for kwargs in ({"n_threads": 1}, {"n_threads": 2}, {"verify": False},
                           {"mmap_mode": "r"}):
                with pytest.raises(cpersist.CorruptFileError, match="damaged record"):
                    cpersist.load(path, **kwargs)


def test_arrays_of_a_block_cut_short_are_read_alone(tmp_path):
    """A file cut (by someone else) after its index was read: the arrays of
    a block before the cut load, those after it say where the file ends."""
    obj = small_raw_arrays()
    path = tmp_path / "m.cp"
    cpersist.dump(obj, path, compress=0)
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        indices = [s.index for s in reader.sections if s.meta.get("kind") == "array"]
        cut = reader.sections[indices[5]]
        os.truncate(path, reader.base + cut.offset + 100)
        read = _read_ahead(reader, indices, verify=True, n_threads=1)
    for k, index in enumerate(indices):
        if k < 5:
            assert_same(obj[f"w{k}"], read[index])
        else:
            assert isinstance(read[index], cpersist.CorruptFileError)
            assert f"truncated in section {index}" in str(read[index])


def test_a_one_chunk_checksum_is_read_only_from_tables_as_written(tmp_path):
    obj = {"one": np.arange(20_000.0), "several": np.arange(600_000.0)}
    raw, packed = tmp_path / "raw.cp", tmp_path / "packed.cp"
    cpersist.dump(obj, raw, compress=0, chunk_size=1 << 20)
    cpersist.dump(obj, packed, compress=3, chunk_size=1 << 20)
    seen = set()
    for path in (raw, packed):
        with open(path, "rb") as file:
            for section in ContainerReader(file, str(path)).sections:
                digest = section.one_chunk_checksum()  # before the table is parsed
                one = section.is_raw and len(section.chunks) == 1
                assert digest == (section.chunks[0].checksum if one else None)
                seen.add((section.is_raw, len(section.chunks) == 1))
    assert seen == {(True, True), (True, False), (False, True), (False, False)}
    with open(raw, "rb") as file:
        reader = ContainerReader(file, str(raw))
    section = next(s for s in reader.sections if s.meta.get("path") == "obj['one']")
    n, rest = section.raw_size, section._check_chunks[1:]
    for text in (f"[[{n},{n},0123,1]]", f"[[{n},{n},{'9' * 21},1]]", f"[[{n},{n},-1,1]]",
                 f"[[{n},{n},١٢٣,1]]", f"[[{n},{n},12,0]]", f"[[{n},{n},12,1,64]]",
                 f"[[{n},{n + 1},12,1]]", f"[[{n},{n},,1]]"):
        section._check_chunks = (text, *rest)
        assert section.one_chunk_checksum() is None, text
