"""The adaptive default codec and the container's compress-or-store probe."""

import numpy as np
import pytest

import cpersist
from cpersist.codecs import DEFAULT_CODEC, get_codec
from cpersist.container import VERBATIM, ContainerReader

from .conftest import assert_same

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def counter(n, seed=0):
    """An int64 series with small random steps: shuffle + delta's best case."""
    steps = np.random.default_rng(seed).integers(-3, 4, n)
    return np.cumsum(steps, dtype=np.int64) + 1_000_000_000


def smooth_map(n, seed=0):
    """A float32 signal quantised to a few levels: plain zstd's best case."""
    x = np.linspace(0, 40, n, dtype=np.float64)
    return np.round(np.sin(x) * 8).astype(np.float32)


def chunk_heads(path, size=4):
    """For each section of a file, in order: per chunk, ``(flag, its first
    size stored bytes)``."""
    heads = []
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        for section in reader.sections:
            section_heads = []
            for offset, _, _, _, flag in section.chunks:
                file.seek(reader.base + offset)
                section_heads.append((flag, file.read(size)))
            heads.append(section_heads)
    return heads


def chunk_kinds(path):
    """For each section of a file: a list with, per chunk, 'stored',
    'zstd' (a plain frame) or 'blosc' (the shuffled + delta encoding)."""
    return [["stored" if flag == VERBATIM else "zstd" if head == ZSTD_MAGIC else "blosc"
             for flag, head in section] for section in chunk_heads(path)]


def test_default_codec_is_zstd_auto():
    assert DEFAULT_CODEC == "zstd-auto"
    assert cpersist.codecs.parse_compress(3) == get_codec("zstd-auto", 3)


def test_counter_chunks_are_filtered_and_smaller_than_plain_zstd(tmp_path):
    arr = counter(1 << 20)
    auto, plain = tmp_path / "auto.cp", tmp_path / "plain.cp"
    cpersist.dump(arr, auto, compress=3, chunk_size=1 << 20)
    cpersist.dump(arr, plain, compress=("zstd", 3), chunk_size=1 << 20)
    assert set(chunk_kinds(auto)[0]) == {"blosc"}
    assert set(chunk_kinds(plain)[0]) == {"zstd"}
    # Shuffle + delta leaves the high bytes constant: far smaller than zstd.
    assert auto.stat().st_size * 2 < plain.stat().st_size
    assert_same(arr, cpersist.load(auto))


def test_smooth_float_chunks_stay_plain_zstd(tmp_path):
    arr = smooth_map(1 << 20)
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path, compress=3, chunk_size=1 << 20)
    assert set(chunk_kinds(path)[0]) == {"zstd"}
    assert_same(arr, cpersist.load(path))


@pytest.mark.parametrize("chunk_size", [4096, 1 << 20])  # whole-chunk choice / sampled
def test_one_array_mixes_both_encodings_chunk_by_chunk(tmp_path, chunk_size):
    n = 8 * chunk_size // 8  # 8 chunks of int64 per half
    bits = smooth_map(n).astype(np.float64).view(np.int64)
    arr = np.concatenate([counter(n), bits])
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path, compress=3, chunk_size=chunk_size, n_threads=2)
    kinds = chunk_kinds(path)[0]
    assert set(kinds[: len(kinds) // 2]) == {"blosc"}
    assert set(kinds[len(kinds) // 2:]) == {"zstd"}
    assert_same(arr, cpersist.load(path, n_threads=2))
    assert cpersist.verify(path)["chunks"] >= len(kinds)


def test_higher_levels_never_lose_to_level_3_on_a_random_walk(tmp_path):
    """After shuffle + delta, zstd 5-9 compress a random walk worse than zstd
    1; levels 4-9 try both, so they are never larger than level 3."""
    arr = counter(1 << 20, seed=3)
    sizes = {}
    for level in (3, 4, 6, 9):
        path = tmp_path / f"{level}.cp"
        cpersist.dump(arr, path, compress=level, chunk_size=1 << 20)
        assert set(chunk_kinds(path)[0]) == {"blosc"}
        assert_same(arr, cpersist.load(path))
        sizes[level] = path.stat().st_size
    assert max(sizes[4], sizes[6], sizes[9]) <= sizes[3], sizes


@pytest.mark.parametrize("level", [1, 3, 4, 6, 9])
@pytest.mark.parametrize("data", ["counter", "smooth", "digits"])
def test_probe_picks_the_smallest_candidate(level, data):
    codec = get_codec("zstd-auto", level)
    if data == "counter":
        sample = counter(8192)
    elif data == "smooth":
        sample = smooth_map(16384)
    else:  # small integers in float64, like sklearn's digits
        sample = np.random.default_rng(1).integers(0, 17, 8192).astype(np.float64)
    size, hint = codec.probe(memoryview(sample).cast("B"), sample.itemsize)
    sizes = {h: len(e) for e, h in codec._candidates(memoryview(sample).cast("B"),
                                                          sample.itemsize)}
    assert len(sizes) == (2 if level <= 3 else 3)  # plain, filtered 1 [, filtered L]
    assert size == sizes[hint] == min(sizes.values())
    encoded = codec.encode(memoryview(sample).cast("B"), sample.itemsize, hint)
    assert len(encoded) == size
    out = np.empty_like(sample)
    codec.decode_into(encoded, memoryview(out).cast("B"))
    assert out.tobytes() == sample.tobytes()


@pytest.mark.parametrize("dtype", ["u1", "i1", "S1", "?"])
def test_single_byte_items_are_never_shuffled(tmp_path, dtype):
    arr = np.frombuffer(counter(1 << 17).astype("<i8").tobytes(), dtype=dtype)
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path, compress=3, chunk_size=1 << 16)
    assert "blosc" not in chunk_kinds(path)[0]
    assert_same(arr, cpersist.load(path))


@pytest.mark.parametrize("dtype", ["<i2", ">i4", "<u8", "<f8", ">c16", "<M8[s]", "S7", "V3"])
def test_filtered_round_trip_every_item_width(tmp_path, dtype):
    ints = counter(300_001)
    arr = ints.astype(dtype) if dtype[1] not in "SV" else np.frombuffer(
        ints.tobytes()[: len(ints) * 8 // int(dtype[1:]) * int(dtype[1:])], dtype=dtype)
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path, compress=9, chunk_size=1 << 18)
    assert_same(arr, cpersist.load(path))


def _skewed_bytes(n, seed=5):
    """Bytes that plain Zstandard shrinks by about 10% (no items to shuffle)."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random(n) < 0.4, rng.integers(0, 16, n),
                    rng.integers(0, 256, n)).astype(np.uint8)


def test_a_small_saving_is_kept_where_it_costs_little_to_decode(tmp_path):
    # Shuffled, float64 noise saves ~10% and its noisy low bytes decode as
    # copies: compressed at the default level. Plain Zstandard saving as
    # much on bytes decodes every byte: stored at the fast levels,
    # compressed at level 9, where size comes first.
    noise = np.random.default_rng(1).standard_normal(1 << 20)
    skewed = _skewed_bytes(1 << 23)
    paths = {name: tmp_path / f"{name}.cp" for name in ("noise3", "bytes3", "bytes9")}
    cpersist.dump(noise, paths["noise3"], compress=3)
    cpersist.dump(skewed, paths["bytes3"], compress=3)
    cpersist.dump(skewed, paths["bytes9"], compress=9)
    assert set(chunk_kinds(paths["noise3"])[0]) == {"blosc"}
    assert paths["noise3"].stat().st_size < 0.92 * noise.nbytes
    assert set(chunk_kinds(paths["bytes3"])[0]) == {"stored"}
    assert set(chunk_kinds(paths["bytes9"])[0]) == {"zstd"}
    assert paths["bytes9"].stat().st_size < 0.92 * skewed.nbytes
    assert_same(noise, cpersist.load(paths["noise3"]))
    for level in (3, 9):
        assert_same(skewed, cpersist.load(paths[f"bytes{level}"]))


@pytest.mark.parametrize("level, plain, filtered_wide", [(1, 0.15, 0.06), (3, 0.15, 0.06),
                                                         (6, 0.05, 0.02), (9, 0.05, 0.02)])
def test_the_saving_needed_scales_with_the_cost_of_decoding(level, plain, filtered_wide):
    from cpersist.codecs.zstd_auto import FAST, PLAIN
    from cpersist.container.encode import saving_needed

    auto, zstd = get_codec("zstd-auto", level), get_codec("zstd", level)
    assert saving_needed(auto, PLAIN, 4) == pytest.approx(plain)
    assert saving_needed(auto, 1, 4) == saving_needed(auto, 1, 8) == pytest.approx(filtered_wide)
    assert saving_needed(auto, 1, 2) == pytest.approx(plain)  # 2-byte items gain less
    assert saving_needed(auto, FAST, 2) == pytest.approx(filtered_wide)
    assert saving_needed(zstd, None, 4) == pytest.approx(plain)  # a codec of one form


def test_memmap_of_a_stored_noise_array_works_even_with_compress(tmp_path):
    arr = np.random.default_rng(2).standard_normal(1 << 20)
    path = tmp_path / "a.cp"
    cpersist.dump({"x": arr}, path, compress=3)
    with pytest.warns(UserWarning):  # the section has a codec, so no memmap
        out = cpersist.load(path, mmap_mode="r")
    assert_same(arr, out["x"])


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_filtered_chunk_is_a_corrupt_file_error(tmp_path, damage):
    codec = get_codec("zstd-auto", 3)
    src = counter(1 << 16)
    data = bytearray(codec.encode(memoryview(src).cast("B"), 8))
    assert data[:4] != ZSTD_MAGIC
    if damage == "truncate":
        data = data[:-5]
    else:
        data[8] ^= 0xFF  # the compressed size in the header
    out = np.empty_like(src)
    with pytest.raises(cpersist.CorruptFileError, match="zstd-auto"):
        codec.decode_into(bytes(data), memoryview(out).cast("B"))


def test_fuzzed_zstd_auto_file_has_filtered_chunks(tmp_path):
    # The fuzzer's "zstd-auto-filtered" kind must really hold Blosc chunks.
    from .test_fuzz import FILES

    path = tmp_path / "a.cp"
    path.write_bytes(FILES["zstd-auto-filtered"][1])
    assert "blosc" in {kind for section in chunk_kinds(path) for kind in section}


def test_zstd_keeps_one_compression_context_per_thread():
    # Contexts are reused per thread (a new one per chunk serialised the
    # threads on malloc), but only for the last level: a level-9 context
    # holds ~15 MB.
    import threading

    from cpersist.codecs import zstd as zstd_module

    data = memoryview(counter(1 << 15)).cast("B")
    seen = {}

    def work():
        for level in (3, 9, 9):
            get_codec("zstd", level).encode(data)
            seen.setdefault(threading.get_ident(), []).append(zstd_module._local.compressor)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    (contexts,) = seen.values()
    assert [level for level, _ in contexts] == [3, 9, 9]
    assert contexts[1][1] is contexts[2][1] and contexts[0][1] is not contexts[1][1]
    main_context = getattr(zstd_module._local, "compressor", None)
    assert main_context is None or main_context[1] is not contexts[2][1]


# The codecs with a decode_part_into of their own, and lz4 for those that
# inherit Codec's (a whole decode, then a copy: zlib, bz2, lzma, max...).
@pytest.mark.parametrize("codec_id", ["lz4", "zstd", "zstd-auto", "blosc:blosclz", "blosc:lz4",
                                      "blosc:zlib", "blosc:zstd"])
def test_decode_part_gives_exact_bytes(codec_id):
    """A part of a chunk (a prefix, a suffix, a middle, any offset) decodes
    to exactly the bytes a full decode gives there, for every way of
    decoding part of a chunk."""
    codec = get_codec(codec_id)
    rng = np.random.default_rng(7)
    smooth = np.cumsum(rng.integers(-2, 3, size=300_000), dtype=np.int32)
    noisy = rng.integers(0, 256, size=200_001, dtype=np.uint8)  # odd length
    for data, typesize in ((smooth, 4), (noisy, 1), (np.zeros(50_000, np.float64), 8)):
        raw = data.view(np.uint8).reshape(-1)
        encoded = bytes(codec.encode(memoryview(raw), typesize=typesize))
        n = raw.size
        cuts = [(0, n), (0, 4), (0, n // 3 // 4 * 4), (n // 2 // 4 * 4, n), (n - 8, n),
                (4, 12), (n // 4 // 4 * 4, n // 4 // 4 * 4 + 40_000), (3, n // 3), (1, 2), (0, 0)]
        for lo, hi in cuts:
            out = bytearray(hi - lo)
            whole = bytearray(n)
            codec.decode_part_into(memoryview(encoded), lo, memoryview(out), memoryview(whole))
            assert bytes(out) == raw[lo:hi].tobytes(), (codec_id, typesize, lo, hi)


@pytest.mark.parametrize("codec_id", ["zstd", "zstd-auto", "blosc:zstd"])
def test_decode_part_of_damaged_chunk_is_an_error(codec_id):
    codec = get_codec(codec_id)
    raw = np.cumsum(np.ones(200_000, np.int32)).view(np.uint8)
    encoded = bytearray(codec.encode(memoryview(raw), typesize=4))
    truncated = memoryview(bytes(encoded[:len(encoded) // 10]))
    for skip, length in ((0, raw.size * 45 // 100), (raw.size // 5 * 2, 4000)):
        with pytest.raises(cpersist.CorruptFileError, match=codec_id):
            codec.decode_part_into(truncated, skip, memoryview(bytearray(length)),
                                   memoryview(bytearray(raw.size)))
