"""cpersist.convert of joblib files and pickles: recognised before anything
is loaded, refused unless trusted, converted to the same object."""

import io
import os
import pickle
import re
import struct

import joblib
import numpy as np
import pytest

import cpersist
from cpersist.container import kinds

from ._fresh import run_cli, run_code
from .conftest import assert_same, make_matrix, random_array


class Estimator:
    """A fitted model's shape: an instance holding arrays."""

    def __init__(self):
        rng = np.random.default_rng(3)
        self.coef_ = np.cumsum(rng.standard_normal((300, 400)), axis=1)           # 960 KB
        self.classes_ = np.array(["setosa", "versicolor", "virginica"])
        self.history = {"loss": np.linspace(1, 0, 50_000, dtype=np.float32)}


class OpensAFile:
    """Pickles as a call to ``open(path, "w")``: what loading it runs."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def sample_object():
    rng = np.random.default_rng(7)
    return {
        "model": Estimator(),
        "fortran": np.asfortranarray(rng.integers(0, 1000, (300, 200), dtype=np.int32)),
        "big_endian": np.arange(20_000, dtype=">f8"),
        "record": random_array([("x", "<f4"), ("y", ">i8")], (3000,)),
        "strided": np.arange(60_000.0).reshape(200, 300)[:, ::2],
        "masked": np.ma.masked_array(np.arange(6.0), mask=[0, 1, 0, 0, 1, 0]),
        "objects": np.array([{"a": 1}, None, "x"], dtype=object),
        "small": np.arange(5, dtype=np.uint8),
        "text": ["hello", 3, (1.5, None)],
    }


def joblib_compressors():
    names = [None, "zlib", "gzip", "bz2", "lzma", "xz"]
    try:
        import lz4  # noqa: F401
        names.append("lz4")
    except ImportError:
        pass
    return names


def label(compressor):
    return "joblib file (uncompressed)" if compressor is None \
        else f"joblib file ({compressor}-compressed)"


def dump_joblib(obj, path, compressor):
    joblib.dump(obj, path, compress=(compressor, 3) if compressor else 0)
    return path


def refusal_checked(exc_info, path, what):
    message = str(exc_info.value)
    assert message.startswith(f"{path} is a {what}, not a cpersist file")
    assert "loading a pickle runs code" in message
    assert "--trust-pickles" in message and "trust_pickles=True" in message
    assert "Nothing was written" in message


# -- joblib files -------------------------------------------------------------

@pytest.mark.parametrize("compressor", joblib_compressors())
@pytest.mark.parametrize("compress", [0, 3])
def test_joblib_file_converts_to_the_same_object(tmp_path, compressor, compress):
    obj = sample_object()
    src = dump_joblib(obj, tmp_path / "model.joblib", compressor)
    dst = tmp_path / "model.cp"
    stats = cpersist.convert(src, dst, compress, trust_pickles=True)
    assert stats["source_kind"] == label(compressor)
    assert stats["stored_bytes_before"] == src.stat().st_size
    assert stats["sections"] >= 4
    assert_same(obj, cpersist.load(dst))
    if compress == 0:  # raw: the converted arrays can be mapped
        loaded = cpersist.load(dst, mmap_mode="r")
        assert isinstance(loaded["model"].coef_, np.memmap)
        assert_same(obj, loaded, mmap=True)
    assert cpersist.verify(dst)["sections"] == stats["sections"]


@pytest.mark.parametrize("compressor", joblib_compressors())
def test_joblib_file_refused_without_trust(tmp_path, compressor):
    src = dump_joblib(sample_object(), tmp_path / "model.joblib", compressor)
    dst = tmp_path / "model.cp"
    with pytest.raises(cpersist.UntrustedPickleError) as exc_info:
        cpersist.convert(src, dst, 3)
    refusal_checked(exc_info, src, label(compressor))
    assert isinstance(exc_info.value, cpersist.CpersistError)
    assert not dst.exists()
    assert os.listdir(tmp_path) == ["model.joblib"]  # no temporary file either


def test_joblib_file_object_and_overwriting_the_source(tmp_path):
    obj = sample_object()
    src = dump_joblib(obj, tmp_path / "model.joblib", "xz")
    with open(src, "rb") as file:
        stats = cpersist.convert(file, tmp_path / "from_file.cp", 0, trust_pickles=True)
    assert stats["source_kind"] == "joblib file (xz-compressed)"
    assert_same(obj, cpersist.load(tmp_path / "from_file.cp"))
    # An uncompressed joblib file is read through a map of it, which the
    # rename onto the same path leaves valid.
    same = dump_joblib(obj, tmp_path / "same.bin", None)
    cpersist.convert(same, same, ("zstd", 3), trust_pickles=True)
    assert_same(obj, cpersist.load(same))


def test_joblib_without_arrays_is_a_pickle(tmp_path):
    # joblib writes a plain pickle when the object holds no array.
    src = tmp_path / "plain.joblib"
    joblib.dump({"a": [1, 2, 3]}, src)
    stats = cpersist.convert(src, tmp_path / "plain.cp", 0, trust_pickles=True)
    assert stats["source_kind"] == f"pickle protocol {src.read_bytes()[1]}"
    assert cpersist.load(tmp_path / "plain.cp") == {"a": [1, 2, 3]}


@pytest.mark.parametrize("compressor", [None, "zlib", "lzma"])
def test_damaged_joblib_file_is_named_and_nothing_written(tmp_path, compressor):
    data = dump_joblib(sample_object(), tmp_path / "whole.joblib", compressor).read_bytes()
    src = tmp_path / "half.joblib"
    src.write_bytes(data[: len(data) // 2])
    dst = tmp_path / "out.cp"
    expected = re.escape(f"{src}: could not load this {label(compressor)}: ")
    with pytest.raises(cpersist.CorruptFileError, match=f"^{expected}"):
        cpersist.convert(src, dst, 3, trust_pickles=True)
    assert not dst.exists()


# -- plain pickles ------------------------------------------------------------

@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_pickle_converts_to_the_same_object(tmp_path, protocol):
    # (joblib itself loads an np.matrix as a plain array with numpy 2, so
    # only the pickles hold one)
    obj = {**sample_object(), "matrix": make_matrix([[1.0, 2.0], [3.0, 4.0]])}
    src = tmp_path / "model.pkl"
    with open(src, "wb") as file:
        pickle.dump(obj, file, protocol=protocol)
    dst = tmp_path / "model.cp"
    with pytest.raises(cpersist.UntrustedPickleError) as exc_info:
        cpersist.convert(src, dst, 3)
    refusal_checked(exc_info, src, f"pickle protocol {protocol}")
    assert not dst.exists()

    stats = cpersist.convert(src, dst, 3, trust_pickles=True)
    assert stats["source_kind"] == f"pickle protocol {protocol}"
    # What loading the pickle gives: numpy loads a big-endian array pickled
    # with protocol 2 to 4 in native byte order.
    with open(src, "rb") as file:
        assert_same(pickle.load(file), cpersist.load(dst))
    if protocol == 5:
        assert_same(obj, cpersist.load(dst))


def test_pickle_from_a_stream(tmp_path):
    obj = sample_object()
    data = pickle.dumps(obj, protocol=5)
    stats = cpersist.convert(io.BytesIO(data), tmp_path / "out.cp", 0, trust_pickles=True)
    assert stats["source_kind"] == "pickle protocol 5"
    assert_same(obj, cpersist.load(tmp_path / "out.cp"))


def test_pickle_that_runs_code_is_not_loaded_without_trust(tmp_path):
    witness = tmp_path / "ran"
    src = tmp_path / "evil.pkl"
    src.write_bytes(pickle.dumps(OpensAFile(str(witness)), protocol=4))
    with pytest.raises(cpersist.UntrustedPickleError):
        cpersist.convert(src, tmp_path / "out.cp", 0)
    assert not witness.exists()


# -- cpersist files and unknown input ----------------------------------------

def test_cpersist_input_reports_its_format(tmp_path):
    obj = sample_object()
    cpersist.dump(obj, tmp_path / "a.cp")
    stats = cpersist.convert(tmp_path / "a.cp", tmp_path / "b.cp", 3)
    major, minor = struct.unpack_from("<HH", (tmp_path / "a.cp").read_bytes(), 8)
    assert (major, minor) in ((2, 2), (2, 5))  # 2.5: small arrays in buffer blocks
    assert stats["source_kind"] == f"cpersist format {major}.{minor}"
    assert_same(obj, cpersist.load(tmp_path / "b.cp"))


@pytest.mark.parametrize("content,expected", [
    (b"hello, world\n", r"not a cpersist file, a joblib file or a pickle of protocol 2 "
                        r"or later \(it starts with b'hello, w'\)$"),
    (b"", "empty file"),
    (b"(dp0\nS'a'\np1\nI1\ns.", "a pickle of protocol 0 or 1 is not recognised"),
    (b"\x1f\x8b\x08\x00garbage", "starts like a gzip-compressed file, but does not "
                                  "decompress to a pickle stream"),
    (b"x\x9c" + bytes(range(7, 71)), "starts like a zlib-compressed file"),
])
def test_unknown_input_is_named(tmp_path, content, expected):
    src = tmp_path / "mystery.bin"
    src.write_bytes(content)
    dst = tmp_path / "out.cp"
    for trust in (False, True):
        with pytest.raises(cpersist.CorruptFileError, match=expected) as exc_info:
            cpersist.convert(src, dst, 3, trust_pickles=trust)
        assert str(exc_info.value).startswith(f"{src}: ")
    assert not dst.exists()


def test_detection_reads_no_more_than_needed(tmp_path):
    """A compressed joblib file is recognised from its first bytes; a
    pickle stream is scanned, never loaded."""
    src = dump_joblib(sample_object(), tmp_path / "m.joblib", "zlib")
    from cpersist.storage.open import open_source

    class Counting(io.BytesIO):
        read_bytes = 0

        def readinto(self, buffer):
            count = super().readinto(buffer)
            Counting.read_bytes += count
            return count

        def read(self, size=-1):
            data = super().read(size)
            Counting.read_bytes += len(data)
            return data

    data = src.read_bytes()
    assert len(data) > 4 * kinds.HEAD_BYTES
    with open_source(Counting(data)) as source:
        kind = kinds.detect(source)
    assert kind.label == "joblib file (zlib-compressed)" and kind.compressor == "zlib"
    assert Counting.read_bytes <= kinds.HEAD_BYTES


def test_missing_joblib_is_named(tmp_path):
    src = dump_joblib(sample_object(), tmp_path / "m.joblib", "zlib")
    code = (
        "import sys; sys.modules['joblib'] = None\n"
        "import cpersist\n"
        f"try:\n    cpersist.convert({str(src)!r}, {str(tmp_path / 'o.cp')!r}, 0, "
        "trust_pickles=True)\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    result = run_code(code, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "joblib file (zlib-compressed)" in result.stdout
    assert "pip install joblib" in result.stdout
    assert not (tmp_path / "o.cp").exists()


# -- command line -------------------------------------------------------------

def test_cli_converts_joblib_and_says_what_it_found(tmp_path):
    obj = sample_object()
    src = dump_joblib(obj, tmp_path / "model.joblib", "bz2")
    dst = tmp_path / "model.cp"
    refused = run_cli("convert", src, dst, "-c", "3")
    assert refused.returncode == 1
    assert f"{src} is a joblib file (bz2-compressed)" in refused.stderr
    assert "loading a pickle runs code" in refused.stderr and "--trust-pickles" in refused.stderr
    assert not dst.exists()

    result = run_cli("convert", src, dst, "-c", "3", "--trust-pickles")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{src} (joblib file (bz2-compressed)) -> {dst}: ")
    assert_same(obj, cpersist.load(dst))

    again = run_cli("convert", dst, tmp_path / "raw.cp", "-c", "raw")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"{dst} (cpersist format ")


def test_cli_pickle_from_standard_input(tmp_path):
    obj = sample_object()
    src = tmp_path / "model.pkl"
    src.write_bytes(pickle.dumps(obj, protocol=4))
    dst = tmp_path / "model.cp"
    with open(src, "rb") as stdin:
        result = run_cli("convert", "-", dst, "-c", "0", "--trust-pickles", stdin=stdin,
                         timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"- (pickle protocol 4) -> {dst}: ")
    assert_same(pickle.loads(src.read_bytes()), cpersist.load(dst))


def test_cli_unknown_input(tmp_path):
    src = tmp_path / "notes.txt"
    src.write_text("just text")
    result = run_cli("convert", src, tmp_path / "out.cp", "-c", "3", "--trust-pickles")
    assert result.returncode == 1
    assert f"{src}: not a cpersist file, a joblib file or a pickle" in result.stderr
    assert not (tmp_path / "out.cp").exists()
