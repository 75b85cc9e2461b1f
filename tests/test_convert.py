"""cpersist.convert: re-encoding sections without unpickling the object."""

import os
import sys
import textwrap

import numpy as np
import pytest

import cpersist
from cpersist.container import FORMAT_MAJOR, ContainerReader

from ._fresh import run_code
from .conftest import assert_same, make_matrix, random_array


def sample_object():
    """Arrays of several kinds, big enough to span several chunks."""
    rng = np.random.default_rng(1)
    smooth = np.cumsum(rng.standard_normal(300_000)).astype(np.float32)
    return {
        "smooth": smooth,                                   # 1.2 MB, compressible
        "fortran": np.asfortranarray(smooth[:200_000].reshape(400, 500)),
        "strided": np.arange(200_000.0).reshape(400, 500)[:, ::3],
        "record": random_array([("x", "<f4"), ("y", ">i8")], (5000,)),
        "small": np.arange(10, dtype=np.int16),
        "empty": np.zeros((0, 4)),
        "matrix": make_matrix([[1.0, 2.0], [3.0, 4.0]]),
        "masked": np.ma.masked_array(np.arange(6.0), mask=[0, 1, 0, 0, 1, 0]),
        "objects": np.array([{"a": 1}, None, "x"], dtype=object),
        "shared": [smooth, smooth],
        "text": ["hello", 3, {"k": (1, 2)}],
    }


def codecs_of(path):
    """Codec configs (None for raw) of every section of a file, and the root."""
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        return [s.codec.get_config() if s.codec else None for s in reader.sections], reader.root


# Converting hands each chunk and its item size to the codec, as a dump does
# (every codec is round-tripped in test_roundtrip.py): a plain codec, one
# that shuffles by item size and the default, which probes each chunk.
@pytest.mark.parametrize("codec", ["zstd", "blosc:lz4", "zstd-auto"])
def test_raw_to_codec_to_raw(tmp_path, codec):
    obj = sample_object()
    raw, packed, back = tmp_path / "raw.cp", tmp_path / "packed.cp", tmp_path / "back.cp"
    cpersist.dump(obj, raw, chunk_size=256 << 10)
    stats = cpersist.convert(raw, packed, (codec, 5))
    configs, root = codecs_of(packed)
    assert all(c == {"id": codec, "level": 5} for c in configs)
    assert stats["stored_bytes_after"] < stats["stored_bytes_before"]
    assert_same(obj, cpersist.load(packed))

    cpersist.convert(packed, back, 0)
    configs, _ = codecs_of(back)
    assert configs == [None] * len(configs)
    loaded = cpersist.load(back, mmap_mode="r")
    assert_same(obj, loaded, mmap=True)
    assert isinstance(loaded["smooth"], np.memmap)
    assert loaded["shared"][0] is loaded["shared"][1] is loaded["smooth"]
    # raw -> codec -> raw gives back the very same array bytes
    with open(raw, "rb") as a, open(back, "rb") as b:
        ra, rb = ContainerReader(a, "a"), ContainerReader(b, "b")
        assert [s.meta for s in ra.sections] == [s.meta for s in rb.sections]
        for sa, sb in zip(ra.sections, rb.sections):
            assert ra.read_bytes(sa) == rb.read_bytes(sb)


def test_compressed_to_compressed_and_chunk_size(tmp_path):
    obj = sample_object()
    src, dst = tmp_path / "a.cp", tmp_path / "b.cp"
    cpersist.dump(obj, src, compress=("zlib", 1))
    cpersist.convert(src, dst, "blosc:zstd", chunk_size=100_003, n_threads=2)
    with open(dst, "rb") as file:
        reader = ContainerReader(file, "b")
        big = max(reader.sections, key=lambda s: s.raw_size)
        assert big.raw_size > 100_000
        # cut on whole float32 elements: 100_003 bytes -> 25_000 elements
        raws = [raw for _, _, raw, _, _ in big.chunks]
        assert raws == [100_000] * (len(raws) - 1) + [big.raw_size - 100_000 * (len(raws) - 1)]
        assert 0 < raws[-1] <= 100_000
        assert reader.info["converted_by"].startswith("cpersist ")
    assert_same(obj, cpersist.load(dst))


def test_convert_in_place(tmp_path):
    obj = sample_object()
    path = tmp_path / "model.cp"
    cpersist.dump(obj, path)
    size_raw = os.path.getsize(path)
    cpersist.convert(path, path, 9)
    assert os.path.getsize(path) < size_raw
    assert codecs_of(path)[0][0] == {"id": "zstd-auto", "level": 9}
    assert_same(obj, cpersist.load(path))
    assert [p.name for p in tmp_path.iterdir()] == ["model.cp"]  # no temp file left


def test_convert_from_file_object(tmp_path):
    obj = {"a": np.arange(1000)}
    src = tmp_path / "embedded.bin"
    with open(src, "wb") as file:
        file.write(b"some prefix")
        cpersist.dump(obj, file)
    with open(src, "rb") as file:
        file.seek(len(b"some prefix"))
        cpersist.convert(file, tmp_path / "out.cp", "lz4")
    assert_same(obj, cpersist.load(tmp_path / "out.cp"))


def test_damaged_source_writes_nothing(tmp_path):
    src, dst = tmp_path / "a.cp", tmp_path / "b.cp"
    cpersist.dump({"a": np.arange(100_000.0)}, src)
    data = bytearray(src.read_bytes())
    data[1000] ^= 0xFF  # inside the array's raw section
    src.write_bytes(bytes(data))
    with pytest.raises(cpersist.CorruptFileError, match="checksum mismatch"):
        cpersist.convert(src, dst, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.cp"]


def test_not_a_cpersist_file(tmp_path):
    src = tmp_path / "a.npy"
    np.save(src, np.arange(3))
    with pytest.raises(cpersist.CorruptFileError, match="not a cpersist file"):
        cpersist.convert(src, tmp_path / "b.cp", 3)


@pytest.mark.parametrize("bad", [{"compress": "nope"}, {"compress": 12},
                                 {"compress": 3, "chunk_size": 0},
                                 {"compress": 3, "n_threads": 0}])
def test_bad_arguments(tmp_path, bad):
    src = tmp_path / "a.cp"
    cpersist.dump([1], src)
    with pytest.raises(ValueError):
        cpersist.convert(src, tmp_path / "b.cp", **bad)


def test_newer_minor_version_is_refused(tmp_path):
    src = tmp_path / "a.cp"
    cpersist.dump({"a": np.ones(3)}, src)
    data = bytearray(src.read_bytes())
    data[10] = 99  # minor version 99 (the header is not checksummed)
    src.write_bytes(bytes(data))
    assert_same({"a": np.ones(3)}, cpersist.load(src))  # still readable
    with pytest.raises(cpersist.UnsupportedVersionError, match=f"{FORMAT_MAJOR}.99"):
        cpersist.convert(src, tmp_path / "b.cp", 3)


def test_convert_never_unpickles(tmp_path):
    """A file whose classes cannot even be imported here converts fine."""
    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "cp_secretmod.py").write_text(textwrap.dedent("""
        import numpy as np
        class Model:
            def __init__(self):
                self.weights = np.linspace(0, 1, 50_000)
    """))
    src, dst = tmp_path / "a.cp", tmp_path / "b.cp"
    code = (f"import sys, cpersist; sys.path.insert(0, {str(module_dir)!r}); "
            f"import cp_secretmod; cpersist.dump(cp_secretmod.Model(), {str(src)!r})")
    run_code(code, check=True)
    # cp_secretmod is not importable in this process: unpickling fails...
    with pytest.raises(ModuleNotFoundError):
        cpersist.load(src)
    # ... but converting does not unpickle.
    cpersist.convert(src, dst, "zstd")
    assert codecs_of(dst)[0][0] == {"id": "zstd", "level": 3}
    sys.path.insert(0, str(module_dir))
    try:
        loaded = cpersist.load(dst)
        assert type(loaded).__name__ == "Model"
        np.testing.assert_array_equal(loaded.weights, np.linspace(0, 1, 50_000))
    finally:
        sys.path.remove(str(module_dir))
        sys.modules.pop("cp_secretmod", None)
