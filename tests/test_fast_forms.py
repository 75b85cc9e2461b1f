"""zstd-auto's fast form at levels 1-3, and files of many one-chunk
compressed sections (a checkpoint's tensors) written and read on several
threads."""

import io

import numpy as np
import pytest

import cpersist
from cpersist.container import ENCODED, ContainerReader

from .conftest import assert_same

#: Where a Blosc2 chunk's extended header lists its filters, and the code
#: of the bit shuffle filter.
_FILTERS = slice(16, 22)
_BITSHUFFLE = 2


def bf16_like(n, seed=0):
    """Random-normal weights as bfloat16 bits, in uint16 (what a bfloat16
    tensor's storage is stored as)."""
    weights = np.random.default_rng(seed).standard_normal(n).astype(np.float32) * 0.02
    return (weights.view(np.uint32) >> 16).astype(np.uint16)


def encoded_heads(path):
    """The first 32 bytes of every encoded chunk of the file's array sections."""
    heads = []
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        for section in reader.sections:
            if section.meta.get("kind") != "array":
                continue
            for chunk in section.chunks:
                if chunk.flag == ENCODED:
                    file.seek(reader.base + chunk.offset)
                    heads.append(file.read(32))
    return heads


@pytest.mark.parametrize("level", [1, 3, 4])
def test_16_bit_weights_take_the_fast_form_at_fast_levels(tmp_path, level):
    arr = bf16_like(3 << 20)
    path = tmp_path / "w.cp"
    cpersist.dump({"w": arr}, path, compress=level)
    heads = encoded_heads(path)
    assert heads
    fast = [_BITSHUFFLE in head[_FILTERS] for head in heads]
    # Levels 1-3 keep the bit shuffle + LZ4 form, 6% larger than the
    # smallest; level 4 keeps the smallest.
    assert all(fast) if level <= 3 else not any(fast)
    assert arr.nbytes / path.stat().st_size > 1.3
    assert_same(arr, cpersist.load(path)["w"])
    with cpersist.open(path) as handle:
        assert_same(arr[5:1 << 20], handle.arrays["obj['w']"][5:1 << 20])


def test_data_the_fast_form_does_not_suit_keeps_the_smallest(tmp_path):
    # A counter: shuffle + byte delta + Zstandard is many times smaller.
    arr = np.arange(1 << 21, dtype=np.int16)
    path = tmp_path / "c.cp"
    cpersist.dump({"c": arr}, path, compress=3)
    heads = encoded_heads(path)
    assert heads and not any(_BITSHUFFLE in head[_FILTERS] for head in heads)
    assert_same(arr, cpersist.load(path)["c"])


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
