"""Seeded fuzzing: damaged files either load exactly or raise a cpersist error.

Valid small files of several kinds (raw, every codec, many small arrays,
object-heavy) are truncated and mutated at random; each case must load data
equal to the original or raise :class:`cpersist.CpersistError` — never
another exception, a crash or wrong data. The run stops after ``FUZZ_CASES``
cases or ``FUZZ_SECONDS`` seconds, whichever comes first, and must have run
at least 10,000 cases. Set ``CPERSIST_FUZZ_CASES`` / ``CPERSIST_FUZZ_SECONDS``
to fuzz longer, ``CPERSIST_FUZZ_SEED`` to change the seed.

A failure message names the kind, seed and case: add it to
``REPRODUCERS`` below (it then runs as a regular test).
"""

import io
import os
import random
import time

import numpy as np
import pytest

import cpersist
from cpersist.codecs import get_codec
from cpersist.exceptions import CorruptFileError, CpersistError

from .conftest import assert_same

SEED = int(os.environ.get("CPERSIST_FUZZ_SEED", "20261122"))
FUZZ_CASES = int(os.environ.get("CPERSIST_FUZZ_CASES", "30000"))
FUZZ_SECONDS = float(os.environ.get("CPERSIST_FUZZ_SECONDS", "60"))
MIN_CASES = 10_000
#: Cases read from a file on 2 threads (each writes the file: slower).
WORKER_FUZZ_CASES = int(os.environ.get("CPERSIST_WORKER_FUZZ_CASES", "3000"))


def _objects():
    rng = np.random.default_rng(0)
    base = {
        "a": (np.arange(300) % 17).astype(np.float64),
        "f": np.asfortranarray((np.arange(60) % 5).reshape(6, 10).astype(np.int16)),
        "r": rng.integers(0, 255, 200, dtype=np.uint8),
        "s": "text",
    }
    small = [np.full(i + 1, i, dtype=np.int32) for i in range(40)]
    objects = {"words": ["w%d" % i for i in range(150)],
               "nested": [{"k": i, "v": (i, str(i), [None, 1.5])} for i in range(60)],
               "arr": np.array([1, "x", None], dtype=object)}
    counters = {"c": np.cumsum(rng.integers(-3, 4, 4096), dtype=np.int64)}
    return {"arrays": base, "many-small": small, "object-heavy": objects,
            "counters": counters}


# kind -> (object name, compress[, chunk size])
KINDS = {"raw": ("arrays", 0), "many-small-raw": ("many-small", 0),
         "object-heavy": ("object-heavy", 0),
         "many-small-zstd": ("many-small", "zstd"),
         "object-heavy-lz4": ("object-heavy", "lz4"),
         # Chunks large enough for zstd-auto to shuffle + delta them.
         "zstd-auto-filtered": ("counters", "zstd-auto", 4096)}
KINDS.update({f"codec-{c}": ("arrays", (c, 5)) for c in cpersist.available_codecs()})


def _files():
    objects = _objects()
    files = {}
    for kind, (obj_name, compress, *chunk_size) in KINDS.items():
        buf = io.BytesIO()
        # Small chunks: every section has several, each checksummed.
        cpersist.dump(objects[obj_name], buf, compress=compress,
                      chunk_size=chunk_size[0] if chunk_size else 256, n_threads=1)
        files[kind] = (objects[obj_name], buf.getvalue())
    return files


FILES = _files()


def mutate(data, rng):
    """A damaged copy of ``data`` and a description of the damage."""
    data = bytearray(data)
    n = len(data)
    how = rng.randrange(7)
    if how == 0:
        cut = rng.randrange(n)
        return bytes(data[:cut]), f"truncate to {cut}"
    if how == 1:
        i = rng.randrange(n)
        bit = 1 << rng.randrange(8)
        data[i] ^= bit
        return bytes(data), f"flip bit {bit} at {i}"
    if how == 2:
        edits = [(rng.randrange(n), rng.randrange(256)) for _ in range(rng.randint(1, 8))]
        for i, v in edits:
            data[i] = v
        return bytes(data), f"set bytes {edits}"
    if how == 3:
        i = rng.randrange(n)
        k = rng.randint(1, 64)
        data[i:i + k] = bytes(k)
        return bytes(data), f"zero {k} bytes at {i}"
    if how == 4:
        i = rng.randrange(n)
        k = rng.randint(1, 16)
        del data[i:i + k]
        return bytes(data), f"delete {k} bytes at {i}"
    if how == 5:
        i = rng.randrange(n)
        k = rng.randint(1, 16)
        data[i:i] = bytes(rng.randrange(256) for _ in range(k))
        return bytes(data), f"insert {k} bytes at {i}"
    # Damage near the end, where the index and trailer live.
    i = n - 1 - rng.randrange(min(n, 400))
    data[i] = (data[i] + rng.randint(1, 255)) % 256
    return bytes(data), f"change byte {i} (near the end)"


def check_case(kind, damaged, restricted, path=None):
    """Load ``damaged``: equal data or a CpersistError.

    Without ``path`` it is read from a BytesIO on one thread; with one it is
    written there and read from the open file on 2 threads.
    """
    expected, _ = FILES[kind]
    options = {"trusted": False if restricted else True}
    try:
        if path is None:
            name = "BytesIO"
            out = cpersist.load(io.BytesIO(damaged), n_threads=1, **options)
        else:
            name = str(path)
            path.write_bytes(damaged)
            with open(path, "rb") as file:
                out = cpersist.load(file, n_threads=2, **options)
    except CpersistError as exc:
        assert name in str(exc) or isinstance(exc, cpersist.UntrustedObjectError), exc
        return "error"
    assert_same(expected, out)
    return "equal"


def run_case(kind, seed, case, path=None):
    rng = random.Random(f"{seed}-{kind}-{case}")
    damaged, what = mutate(FILES[kind][1], rng)
    try:
        return check_case(kind, damaged, restricted=case % 4 == 0, path=path)
    except CpersistError:
        raise
    except BaseException as exc:
        raise AssertionError(
            f"fuzz case kind={kind!r} seed={SEED} case={case} ({what}): "
            f"{type(exc).__name__}: {exc}. Reproduce with "
            f"run_case({kind!r}, {seed}, {case}{', path' if path else ''}) "
            f"and add it to REPRODUCERS"
        ) from exc


#: (kind, seed, case) of past fuzz failures, kept as regular tests.
REPRODUCERS = []


def test_reproducers():
    for kind, seed, case in REPRODUCERS:
        run_case(kind, seed, case)


@pytest.mark.parametrize("codec_id", [c for c in cpersist.available_codecs()
                                      if c.startswith("blosc")])
def test_truncated_blosc_chunk(codec_id):
    """Found by test_fuzz_decoders: blosc2.decompress trusted the compressed
    size in a truncated chunk's header and read past the buffer (segfault)."""
    codec = get_codec(codec_id, 5)
    raw = ((np.arange(20000) % 97).astype(np.int32)).tobytes()
    encoded = bytes(codec.encode(memoryview(raw), 4))
    out = memoryview(bytearray(len(raw)))
    for cut in (16, 19, 20, 28, 32, len(encoded) // 2, len(encoded) - 1):
        with pytest.raises(CorruptFileError):
            codec.decode_into(encoded[:cut], out)


def test_fuzz_damaged_files():
    kinds = sorted(FILES)
    start = time.monotonic()
    counts = {"equal": 0, "error": 0}
    case = 0
    while case < FUZZ_CASES and time.monotonic() - start < FUZZ_SECONDS:
        kind = kinds[case % len(kinds)]
        counts[run_case(kind, SEED, case)] += 1
        case += 1
    print(f"fuzz: {case} cases in {time.monotonic() - start:.1f} s: {counts}")
    assert case >= MIN_CASES, f"only {case} fuzz cases ran in {FUZZ_SECONDS} s"
    # Both outcomes occur: damage in padding loads fine, the rest is caught.
    assert counts["error"] > case // 2 and counts["equal"] > 0


def test_fuzz_damaged_files_read_by_workers(tmp_path):
    """The same damage read from a file on 2 threads (chunks checked and
    decoded on the pool): both ways must agree on every case."""
    kinds = sorted(FILES)
    path = tmp_path / "damaged.cp"
    counts = {"equal": 0, "error": 0}
    for case in range(WORKER_FUZZ_CASES):
        kind = kinds[case % len(kinds)]
        outcome = run_case(kind, SEED, case, path)
        assert outcome == run_case(kind, SEED, case), (kind, case)
        counts[outcome] += 1
    assert counts["error"] > WORKER_FUZZ_CASES // 2 and counts["equal"] > 0, counts


@pytest.mark.parametrize("kind", sorted(FILES))
def test_every_truncation(kind):
    """Truncated at every byte: always a CorruptFileError naming the file."""
    data = FILES[kind][1]
    for cut in range(len(data)):
        with pytest.raises(CorruptFileError, match="BytesIO"):
            cpersist.load(io.BytesIO(data[:cut]), n_threads=1)


@pytest.mark.parametrize("kind", sorted(FILES))
def test_fuzz_inspect_and_verify(kind):
    """inspect() and verify() on damaged files: a result or a cpersist error."""
    data = FILES[kind][1]
    rng = random.Random(f"{SEED}-inspect-{kind}")
    for _ in range(150):
        damaged, what = mutate(data, rng)
        for func in (cpersist.inspect, cpersist.verify):
            try:
                func(io.BytesIO(damaged))
            except CpersistError:
                pass


@pytest.mark.parametrize("codec_id", cpersist.available_codecs())
def test_fuzz_decoders(codec_id):
    """Decoders on damaged chunks (what verify=False or a forged checksum
    lets through): fill the output exactly or raise CorruptFileError; never
    crash or write past the output."""
    codec = get_codec(codec_id, 5)
    raw = ((np.arange(30000) % 251) * 3).astype(np.int32).tobytes()
    encoded = bytes(codec.encode(memoryview(raw), 4))
    rng = random.Random(f"{SEED}-{codec_id}")
    guard = 64
    for case in range(1500):
        damaged, what = mutate(encoded, rng)
        buf = bytearray(len(raw) + guard)
        buf[len(raw):] = b"\xa5" * guard
        try:
            codec.decode_into(damaged, memoryview(buf)[:len(raw)])
        except CorruptFileError:
            pass
        assert buf[len(raw):] == b"\xa5" * guard, f"{codec_id} wrote past its output ({what})"
