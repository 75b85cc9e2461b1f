"""joblib's codec names (gzip, bz2, lzma, xz) and the ``max`` codec."""

import bz2
import gzip
import lzma
import zlib

import numpy as np
import pytest

import cpersist
from cpersist.codecs import get_codec, parse_compress
from cpersist.codecs import max as max_codec
from cpersist.exceptions import CorruptFileError

from .conftest import assert_same


def random_walk(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.integers(-3, 4, n)).astype(dtype)


RAW = memoryview(random_walk(20000, np.int64).tobytes())

#: Each codec's chunk, read back by the standard tool for its format, and
#: what that tool writes at the same level (the level mapping joblib uses).
STANDARD = {
    "gzip": (gzip.decompress, lambda raw, level: zlib.decompress(
        zlib.compress(raw, level, 31), 31)),
    "bz2": (bz2.decompress, lambda raw, level: bz2.compress(raw, level)),
    "lzma": (lambda c: lzma.decompress(c, format=lzma.FORMAT_ALONE),
             lambda raw, level: lzma.compress(raw, format=lzma.FORMAT_ALONE, preset=level)),
    "xz": (lambda c: lzma.decompress(c, format=lzma.FORMAT_XZ),
           lambda raw, level: lzma.compress(raw, format=lzma.FORMAT_XZ, preset=level)),
}


@pytest.mark.parametrize("level", [1, 6, 9])
@pytest.mark.parametrize("name", sorted(STANDARD))
def test_joblib_codec_chunks_are_standard_streams_at_the_native_level(name, level):
    codec = get_codec(name, level)
    encoded = bytes(codec.encode(RAW, 8))
    read, write = STANDARD[name]
    assert read(encoded) == RAW
    if name == "gzip":  # gzip's header records no level-dependent bytes but XFL
        assert zlib.compress(RAW, level, 31) == encoded
    else:
        assert write(RAW, level) == encoded


@pytest.mark.parametrize("name", sorted(STANDARD))
def test_joblib_names_round_trip_a_multi_chunk_object(name, tmp_path):
    obj = {"walk": random_walk(300000, np.int32), "text": ["word"] * 20000}
    path = tmp_path / "j.cp"
    cpersist.dump(obj, path, compress=(name, 9), chunk_size=1 << 18)
    assert_same(obj, cpersist.load(path))
    assert cpersist.inspect(path)["arrays"][0]["codec"] == name


def test_max_defaults_to_level_9():
    assert parse_compress("max") == get_codec("max", 9)
    assert parse_compress(("max", 4)).level == 4


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1001])
@pytest.mark.parametrize("typesize", [1, 2, 3, 4, 8, 32, 300])
def test_every_way_of_max_round_trips_and_leaves_the_input_alone(n, typesize):
    rng = np.random.default_rng(n * 1000 + typesize)
    raw = bytearray(rng.integers(0, 4, n, dtype=np.uint8).tobytes())
    original = bytes(raw)
    codec = get_codec("max")
    for way in codec._ways(typesize):
        encoded = codec._encode_with(memoryview(raw), way)
        assert bytes(raw) == original, way
        out = bytearray(n)
        codec.decode_into(encoded, memoryview(out))
        assert out == original, way


def test_max_is_no_larger_than_any_way_it_tries_on_a_small_chunk():
    codec = get_codec("max")
    for data, typesize in [(random_walk(8000, np.int64), 8),
                           (np.sin(np.linspace(0, 9, 16000, dtype=np.float32)), 4)]:
        raw = memoryview(data.tobytes())
        best = len(codec.encode(raw, typesize))
        sizes = [len(codec._encode_with(raw, way)) for way in codec._ways(typesize)]
        assert best == min(sizes)
        # ... and so no larger than bz2, xz and zstd at their top levels.
        assert best <= max_codec.HEADER.size + len(bz2.compress(raw, 9))
        assert best <= max_codec.HEADER.size + len(get_codec("xz", 9).encode(raw))


def test_max_beats_every_other_codec_at_level_9(tmp_path):
    obj = {"walk": random_walk(40000, np.int64), "nan": np.where(
        random_walk(20000, np.int64, 1) % 7 == 0, 1.5, np.nan)}
    sizes = {}
    for name in cpersist.available_codecs():
        path = tmp_path / f"{name.replace(':', '_')}.cp"
        cpersist.dump(obj, path, compress=(name, 9))
        sizes[name] = path.stat().st_size
    assert_same(obj, cpersist.load(tmp_path / "max.cp"))
    assert sizes["max"] == min(sizes.values()), sizes


@pytest.fixture(scope="module")
def max_encoded_raw():
    """RAW as "max" encodes it: slow to make, so made once."""
    return bytes(get_codec("max").encode(RAW, 8))


@pytest.mark.parametrize("edit, match", [
    (lambda h: bytes([9]) + h[1:], "unknown method"),
    (lambda h: h[:1] + bytes([200]) + h[2:], "unknown method"),
    (lambda h: h[:3] + bytes([1]) + h[4:], "unknown method"),
    (lambda h: h[:4] + (123).to_bytes(8, "little"), "decompressed to 123 bytes"),
])
def test_max_header_is_checked(edit, match, max_encoded_raw):
    codec = get_codec("max")
    encoded = max_encoded_raw
    head = edit(encoded[:max_codec.HEADER.size])
    with pytest.raises(CorruptFileError, match=match):
        codec.check_header(head, len(encoded), len(RAW))
    with pytest.raises(CorruptFileError, match=match):
        codec.decode_into(head + encoded[max_codec.HEADER.size:], memoryview(bytearray(len(RAW))))
