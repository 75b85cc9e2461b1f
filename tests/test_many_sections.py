"""Files of many one-chunk
compressed sections (a checkpoint's tensors) written and read on several
threads."""

import io

import numpy as np
import pytest

import cpersist
from cpersist.container import ContainerReader

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
