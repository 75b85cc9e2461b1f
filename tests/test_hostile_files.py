"""Hostile files against every reader: chunk tables claiming sizes their
chunks do not decode to, genuine decompression bombs, claims too large to
allocate, forged shapes.

Each file is read by every tool (load, restricted load, inspect, ``cpersist
info``, verify, ``open().arrays``, lazy slices and full reads) in a
subprocess under an address-space limit (``resource.setrlimit``) and a time
limit. A tool may succeed or raise a cpersist error; any other exception, a
crash, a timeout or a peak resident memory beyond the bound fails the test.
Peak memory is the kernel's high-water mark (``VmHWM``), reset before each
tool.
"""

import gc
import io
import json
import os
import shutil
import struct

import numpy as np
import pytest

import cpersist
from cpersist.codecs import codec_from_config
from cpersist.container import (EDITED, ENCODED, FLAGS_AT, TRAILER, ContainerReader,
                                ContainerWriter, checksum)
from cpersist.container.layout import INDEX_EDITED, INDEX_UNEDITED

from ._fresh import ROOT, run_code
from .conftest import assert_same
MiB = 1 << 20
GiB = 1 << 30
#: Every tool that reads a file a stranger sent.
TOOLS = ("load", "load_restricted", "inspect", "info", "verify", "arrays", "slice_head",
         "slice_tail", "read_all")

_RUNNER = r"""
import gc, io, json, os, resource, sys, time, contextlib
import numpy as np
import cpersist, cpersist.cli
import bz2, lzma, zlib, zstandard, lz4.block  # every codec's module, before the limit
from cpersist.codecs.blosc_blocks import cbuffer_sizes

path, budget, tools = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
try:
    cbuffer_sizes(bytes(32))  # loads the Blosc library before the limit
except ValueError:
    pass


def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024


def first_array(f):
    arrays = list(f.arrays.values())
    return arrays[0] if arrays else np.zeros(10)  # no array listed: nothing to read


def run(tool):
    if tool == "load":
        cpersist.load(path)
    elif tool == "load_restricted":
        cpersist.load(path, trusted=False)
    elif tool == "inspect":
        cpersist.inspect(path)
    elif tool == "info":
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = cpersist.cli.main(["info", path])
        if code:
            raise cpersist.CorruptFileError(err.getvalue())
    elif tool == "verify":
        cpersist.verify(path)
    else:
        with cpersist.open(path) as f:
            if tool == "arrays":
                list(f.arrays)
            elif tool == "slice_head":
                first_array(f)[:10]
            elif tool == "slice_tail":
                first_array(f)[-10:]
            elif tool == "read_all":
                np.asarray(first_array(f))


# Room for what the tools need beyond the imports: the budget given, and the
# threads' stacks and malloc arenas.
limit = status("VmSize") + budget + (512 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
results = {}
for tool in tools:
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    before = status("VmRSS")
    start = time.perf_counter()
    try:
        run(tool)
        outcome = "ok"
    except cpersist.CpersistError as exc:
        outcome = type(exc).__name__ + ": " + str(exc)[:300]
    except BaseException as exc:
        outcome = "BARE " + type(exc).__name__ + ": " + str(exc)[:300]
    results[tool] = {"outcome": outcome, "seconds": time.perf_counter() - start,
                     "peak": status("VmHWM") - before}
print(json.dumps(results))
"""


def read_with_every_tool(path, budget, tools=TOOLS, timeout=120):
    """``{tool: {"outcome", "seconds", "peak"}}``: each tool run on ``path``
    in one subprocess whose address space may grow by ``budget`` bytes (and
    room for threads)."""
    done = run_code(_RUNNER, path, budget, ",".join(tools), timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def assert_bounded(results, peak, seconds=30):
    """Every tool succeeded or raised a cpersist error, within ``peak``
    bytes of new resident memory and ``seconds``."""
    for tool, got in results.items():
        assert not got["outcome"].startswith("BARE"), (tool, got)
        assert got["peak"] <= peak, (tool, got["peak"] / MiB, got)
        assert got["seconds"] <= seconds, (tool, got)


# -- building hostile files ---------------------------------------------------

def _encoded(codec_id, data):
    """``data`` as one genuine chunk of ``codec_id``."""
    if codec_id == "zstd-nosize":  # a frame that does not state its size
        import zstandard

        return zstandard.ZstdCompressor(write_content_size=False).compress(data)
    codec = codec_from_config({"id": codec_id, "level": 1})
    return bytes(codec.encode(memoryview(data), 1))


def blosc_zeros(nbytes):
    """A genuine Blosc chunk of ``nbytes`` zeros: Blosc's 32-byte special
    chunk, whose header states its size."""
    codec = codec_from_config({"id": "blosc:lz4", "level": 1})
    chunk = bytearray(codec.encode(memoryview(bytes(1 << 16)), 1))
    assert len(chunk) == 32
    struct.pack_into("<i", chunk, 4, nbytes)
    return bytes(chunk)


def _small_object_file():
    """(root pickle stream, meta of its one array section) of a raw dump of
    a small uint8 array."""
    buf = io.BytesIO()
    cpersist.dump({"a": np.arange(100, dtype=np.uint8)}, buf)
    reader = ContainerReader(buf.getvalue())
    root = reader.sections[reader.root]
    array = next(s for s in reader.sections if s.index != reader.root)
    return bytes(reader.read_bytes(root)), dict(array.meta)


def hostile_file(path, codec_id, chunks, *, what="root"):
    """A file whose root pickle stream (``what="root"``) or one array section
    (``"array"``) is the encoded ``chunks``: ``(stored bytes, claimed
    decoded length)`` each, the index consistent with itself."""
    codec = codec_from_config({"id": "zstd" if codec_id == "zstd-nosize" else codec_id,
                               "level": 1})
    encoded = [(stored, claim, checksum(stored), ENCODED) for stored, claim in chunks]
    total = sum(claim for _, claim in chunks)
    with open(path, "wb") as f:
        writer = ContainerWriter(f)
        if what == "root":
            root = writer.add_encoded_section(encoded, codec=codec, meta={"kind": "pickle"})
        else:
            stream, meta = _small_object_file()
            meta["shape"] = [total]
            writer.add_encoded_section(encoded, codec=codec, meta=meta)
            root = writer.add_section([memoryview(stream)], meta={"kind": "pickle"})
        writer.finish(root)
    return path


#: Codecs as the index names them; "zstd-nosize": Zstandard frames that do
#: not state their decoded size.
CODECS = ("blosc:lz4", "zstd", "zstd-nosize", "zlib", "gzip", "lz4", "bz2", "lzma", "xz",
          "max", "zstd-auto")


@pytest.mark.parametrize("what", ["root", "array"])
@pytest.mark.parametrize("codec_id", CODECS)
@pytest.mark.usefixtures("sections")
def test_claims_chunks_cannot_live_up_to(tmp_path, codec_id, what):
    """Two genuine 1 KB chunks, each claiming to decode to 2 GiB: refused
    with a cpersist error, at the cost of what they decode to (not of the 4
    GiB claimed), by every tool."""
    chunk = _encoded(codec_id, bytes(range(256)) * 4)
    path = hostile_file(tmp_path / "claims.cp", codec_id, [(chunk, 2 * GiB)] * 2, what=what)
    results = read_with_every_tool(path, budget=4 * GiB)
    assert_bounded(results, peak=64 * MiB)
    for tool in ("load", "verify") + (("inspect", "info") if what == "root" else
                                      ("slice_head", "slice_tail", "read_all")):
        assert "CorruptFileError" in results[tool]["outcome"], (tool, results[tool])


@pytest.mark.parametrize("start", ["zeros", "proto"])
def test_genuine_bomb_costs_at_most_what_it_declares(tmp_path, start):
    """A file of a few hundred bytes whose root is genuine Blosc chunks of
    zeros declaring 256 MiB (what ``info`` shows). All zeros, it is no
    pickle stream, refused from its first bytes; after a ``PROTO`` opcode,
    a damaged pickle stream found at the cost of one decoded copy (two for
    the tools that walk the stream)."""
    declared = 256 * MiB
    head = b"\x80\x05" + bytes((1 << 16) - 2)
    chunks = [(blosc_zeros(declared // 2), declared // 2)] * 2
    if start == "proto":
        chunks[0] = (_encoded("blosc:lz4", head), len(head))
    path = hostile_file(tmp_path / "bomb.cp", "blosc:lz4", chunks)
    tools = ("load", "load_restricted", "inspect", "verify")
    results = read_with_every_tool(path, budget=3 * declared, tools=tools)
    for tool in tools:
        assert "CorruptFileError" in results[tool]["outcome"], (tool, results[tool])
    if start == "zeros":
        assert_bounded(results, peak=64 * MiB)
        return
    assert_bounded(results, peak=2 * declared + 96 * MiB)
    assert results["load"]["peak"] <= declared + 96 * MiB, results["load"]


def test_claim_beyond_memory_is_a_cpersist_error(tmp_path):
    """A 3 KB file of genuine Blosc chunks declaring 8 GiB, read where only
    1 GiB more may be mapped: a CorruptFileError saying the claim cannot be
    allocated, never a bare MemoryError, by every tool."""
    chunk = (1 << 31) - 64
    path = hostile_file(tmp_path / "8g.cp", "blosc:lz4", [(blosc_zeros(chunk), chunk)] * 4)
    assert path.stat().st_size < 4096
    results = read_with_every_tool(path, budget=GiB)
    assert_bounded(results, peak=GiB)
    for tool in ("load", "inspect", "verify"):
        assert "cannot be allocated" in results[tool]["outcome"], (tool, results[tool])


# -- the edited mark ------------------------------------------------------------

def _index_start(path):
    data = path.read_bytes()
    offset, length, _, _ = TRAILER.unpack(data[-TRAILER.size:])
    return data[offset:offset + len(INDEX_EDITED)]


def _edit_through_map(path):
    obj = cpersist.load(path, mmap_mode="r+")
    obj["w"][:3] = -1.0
    obj["w"].flush()
    del obj
    gc.collect()


def test_one_damaged_header_bit_does_not_turn_checking_off(tmp_path):
    """The header's edited flag set by damage, and a byte of a raw array
    changed: every reader reports the damage (format 2.1 goes by the
    index's mark, which a checksum covers)."""
    path = tmp_path / "w.cp"
    cpersist.dump({"w": np.full(1000, 500.0)}, path)
    data = bytearray(path.read_bytes())
    data[FLAGS_AT] |= EDITED
    data[ContainerReader(bytes(data)).sections[0].offset + 7] ^= 0x40
    path.write_bytes(bytes(data))
    def sliced(p):
        with cpersist.open(p) as f:
            return f.arrays["obj['w']"][:]

    for read in (cpersist.load, lambda p: cpersist.loads(p.read_bytes()), cpersist.verify,
                 sliced):
        with pytest.raises(cpersist.CorruptFileError, match="checksum mismatch"):
            read(path)


@pytest.mark.usefixtures("sections")
def test_edit_through_a_writable_map_marks_the_index(tmp_path):
    """A writable map sets the index's mark (and the header's flag, for
    readers of format 2.0); the mark holds without the header's flag, and
    reseal clears both."""
    path = tmp_path / "w.cp"
    cpersist.dump({"w": np.full(1000, 500.0)}, path)
    assert _index_start(path) == INDEX_UNEDITED
    _edit_through_map(path)
    assert _index_start(path) == INDEX_EDITED
    data = bytearray(path.read_bytes())
    assert data[FLAGS_AT] & EDITED
    data[FLAGS_AT] &= ~EDITED  # the header's flag lost: the index still says
    path.write_bytes(bytes(data))
    assert cpersist.load(path)["w"][:4].tolist() == [-1.0, -1.0, -1.0, 500.0]
    assert cpersist.verify(path)["unchecked"] == [0]
    assert cpersist.reseal(path)["resealed"] == [0]
    assert _index_start(path) == INDEX_UNEDITED
    assert not path.read_bytes()[FLAGS_AT] & EDITED
    assert cpersist.verify(path)["unchecked"] == []


def test_format_2_0_keeps_its_header_flag(tmp_path):
    """A format-2.0 file (no mark in its index) edited through a map is
    marked in its header, as its writer did, and loads with the new values."""
    path = tmp_path / "old.cp"
    shutil.copyfile(os.path.join(ROOT, "tests", "fixtures", "format-2.0", "mmap.cp"), path)
    before = _index_start(path)
    obj = cpersist.load(path, mmap_mode="r+")
    key = next(k for k, v in obj.items() if isinstance(v, np.memmap))
    obj[key].reshape(-1, order="A").view(np.uint8)[0] ^= 0xFF  # a view, in either order
    obj[key].flush()
    expected = np.array(obj[key])
    del obj
    gc.collect()
    assert _index_start(path) == before and path.read_bytes()[FLAGS_AT] & EDITED
    assert_same(expected, cpersist.load(path)[key])
    assert cpersist.verify(path)["unchecked"]


# -- shapes and steps -------------------------------------------------------------

@pytest.mark.parametrize("compress", [0, 3])
def test_huge_steps_give_numpy_s_result(tmp_path, compress):
    """Steps of any size on lazy arrays of either order, as numpy takes them."""
    for order in "CF":
        arr = np.arange(24000.0).reshape(40, 600).copy(order=order)  # a section of its own
        path = tmp_path / f"{order}.cp"
        cpersist.dump({"a": arr}, path, compress=compress)
        with cpersist.open(path) as f:
            lazy = f.arrays["obj['a']"]
            for index in [np.s_[::10**20], np.s_[:, ::-10**20], np.s_[::10**20, ::-10**20],
                          np.s_[10**20:-10**20:-10**19], np.s_[1, ::-2**63]]:
                assert_same(arr[index], lazy[index])


@pytest.mark.usefixtures("sections")
def test_shape_beyond_numpy_is_a_damaged_index(tmp_path):
    """A zero-size array whose other axis numpy cannot address: refused
    when the file is opened, by every reader."""
    from ._forge import forge

    path = tmp_path / "shape.cp"
    cpersist.dump({"a": np.zeros((0, 4))}, path)

    def edit(index):
        next(s for s in index["sections"] if s["meta"].get("kind") == "array")[
            "meta"]["shape"] = [0, 2**63]

    path.write_bytes(forge(path.read_bytes(), edit))

    def listed(p):
        with cpersist.open(p) as f:
            return f.arrays

    for read in (cpersist.load, cpersist.inspect, listed):
        with pytest.raises(cpersist.CorruptFileError, match="numpy can address"):
            read(path)
