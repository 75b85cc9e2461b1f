"""Integrity: checksums, other formats, forged indexes, sizes checked before
allocation. Every failure is a documented cpersist exception naming the file."""

import gzip
import io
import json
import pickle
import zipfile

import numpy as np
import pytest

import cpersist
from cpersist import CorruptFileError, UnsupportedVersionError
from cpersist.container import CHECKED_CLAIM, FORMAT_MAJOR, MAX_CHUNK_SIZE, TRAILER
from cpersist.container.framing import DATA, END, record_header
from cpersist.container.layout import RECORD_SIZE

from ._forge import forge, proto, set_version, split, with_index
from .conftest import assert_same


def _dump(obj, path, **kwargs):
    cpersist.dump(obj, path, **kwargs)
    return path.read_bytes()


def _load_bytes(tmp_path, data, **kwargs):
    path = tmp_path / "bad.cp"
    path.write_bytes(data)
    return cpersist.load(path, **kwargs), path


def _expect_corrupt(tmp_path, data, match=None, **kwargs):
    path = tmp_path / "bad.cp"
    path.write_bytes(data)
    with pytest.raises(CorruptFileError, match=match) as info:
        cpersist.load(path, **kwargs)
    assert str(path) in str(info.value)
    return info.value


# -- other formats -------------------------------------------------------------

def _other_formats(tmp_path):
    import joblib
    out = {"empty": b"", "random": np.random.default_rng(1).bytes(5000),
           "text": b"hello world\n" * 20, "one byte": b"\x89",
           "magic only": b"\x89CPS\r\n\x1a\n", "pickle": pickle.dumps({"a": 1}),
           "gzip": gzip.compress(b"x" * 1000)}
    buf = io.BytesIO()
    np.save(buf, np.arange(10))
    out["npy"] = buf.getvalue()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("a.txt", "content")
    out["zip"] = buf.getvalue()
    buf = io.BytesIO()
    np.savez_compressed(buf, a=np.arange(10))
    out["npz"] = buf.getvalue()
    joblib.dump({"a": np.arange(10)}, tmp_path / "j.joblib")
    out["joblib"] = (tmp_path / "j.joblib").read_bytes()
    joblib.dump({"a": np.arange(10)}, tmp_path / "jz.joblib", compress=3)
    out["joblib compressed"] = (tmp_path / "jz.joblib").read_bytes()
    return out


def test_other_formats_rejected(tmp_path):
    for what, data in _other_formats(tmp_path).items():
        exc = _expect_corrupt(tmp_path, data)
        assert "not a cpersist file" in str(exc) or "truncated" in str(exc) or (
            "empty" in str(exc)), (what, exc)
        for func in (cpersist.inspect, cpersist.verify):
            with pytest.raises(CorruptFileError):
                func(tmp_path / "bad.cp")


def test_zero_length(tmp_path):
    assert "empty" in str(_expect_corrupt(tmp_path, b""))


def test_newer_major_version(tmp_path):
    data = set_version(_dump([1], tmp_path / "a.cp"), FORMAT_MAJOR + 1)
    with pytest.raises(UnsupportedVersionError, match="upgrade"):
        _load_bytes(tmp_path, data)


def test_newer_minor_version_loads(tmp_path):
    data = set_version(_dump([1, np.arange(3)], tmp_path / "a.cp"), FORMAT_MAJOR, 7)
    out, _ = _load_bytes(tmp_path, data)
    assert out[0] == 1 and np.array_equal(out[1], np.arange(3))


# -- checksums -----------------------------------------------------------------

@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("compress", [0, "zlib", "lz4", "zstd", "blosc:lz4"])
def test_damaged_chunk_detected(tmp_path, compress, n_threads):
    arr = (np.arange(200_000) % 1000).astype(np.float64)
    data = bytearray(_dump({"a": arr}, tmp_path / "a.cp", compress=compress,
                           chunk_size=1 << 16))
    _, index = split(bytes(data))
    section = next(s for s in index["sections"] if s["meta"].get("kind") == "array")
    # Damage the middle of the second chunk.
    offset = section["offset"] + section["chunks"][0][0] + section["chunks"][1][0] // 2
    data[offset] ^= 0x10
    _expect_corrupt(tmp_path, bytes(data), match="checksum mismatch in section",
                    n_threads=n_threads)
    with pytest.raises(CorruptFileError, match="checksum mismatch in section"):
        cpersist.load(io.BytesIO(bytes(data)), n_threads=n_threads)
    with pytest.raises(CorruptFileError, match="checksum"):
        cpersist.verify(tmp_path / "bad.cp")
    if compress == 0:
        # verify=False skips the checksums: the damaged byte comes through.
        out, _ = _load_bytes(tmp_path, bytes(data), verify=False)
        assert not np.array_equal(out["a"], arr)
        # A memory map is not read at load time; verify() finds the damage.
        out, path = _load_bytes(tmp_path, bytes(data), mmap_mode="r")
        assert not np.array_equal(out["a"], arr)
        del out


@pytest.mark.usefixtures("sections")
def test_index_larger_than_the_tail_read(tmp_path):
    """The trailer and index are read from the file's last TAIL_READ bytes
    at once; a larger index is read on its own, and checked the same."""
    from cpersist.container.reader import TAIL_READ

    obj = [np.full(3, i) for i in range(1000)]
    data = _dump(obj, tmp_path / "a.cp")
    _, length, _, _ = TRAILER.unpack(data[-TRAILER.size:])
    assert length > TAIL_READ
    out, _ = _load_bytes(tmp_path, data)
    assert_same(obj, out)
    damaged = bytearray(data)
    damaged[-TRAILER.size - length + 10] ^= 1  # inside the index, before the tail
    _expect_corrupt(tmp_path, bytes(damaged), match="index checksum")


@pytest.mark.usefixtures("sections")
def test_damaged_pickle_stream_and_index(tmp_path):
    # An array: an object without any would be a compact dump, with no JSON index.
    data = _dump({"key": "value" * 50, "a": np.arange(3)}, tmp_path / "a.cp", compress=0)
    body, index = split(data)
    root = index["sections"][index["root"]]
    damaged = bytearray(data)
    damaged[root["offset"] + 20] ^= 1
    _expect_corrupt(tmp_path, bytes(damaged), match="checksum mismatch")
    # Read from memory, the stream is a view of the bytes given, checked all the same.
    with pytest.raises(CorruptFileError, match="checksum mismatch"):
        cpersist.loads(bytes(damaged))
    damaged = bytearray(data)
    damaged[len(body) + 5] ^= 1  # inside the index JSON
    _expect_corrupt(tmp_path, bytes(damaged), match="index checksum")


def test_verify_reports_totals(tmp_path):
    obj = {"a": np.arange(100_000.0), "b": np.ones(10, np.int8)}
    cpersist.dump(obj, tmp_path / "a.cp", compress="zstd", chunk_size=1 << 16)
    report = cpersist.verify(tmp_path / "a.cp")
    assert report["raw_bytes"] >= 800_000 and report["chunks"] >= 13
    assert report["stored_bytes"] < report["raw_bytes"]


# -- forged indexes ------------------------------------------------------------

def _array_file(tmp_path, compress, n=4096):
    return _dump({"a": np.zeros(n)}, tmp_path / "a.cp", compress=compress,
                 chunk_size=1 << 14)


def _first_array(index):
    return next(s for s in index["sections"] if s["meta"].get("kind") == "array")


@pytest.mark.parametrize("compress", ["zlib", "lz4", "zstd"])
def test_forged_huge_chunk_beyond_codec_expansion(tmp_path, compress):
    def edit(index):
        section = _first_array(index)
        section["chunks"][0][1] = MAX_CHUNK_SIZE
        section["meta"]["shape"] = [sum(raw_length for _, raw_length, _, _ in section["chunks"])
                                    // 8]
    data = forge(_array_file(tmp_path, compress), edit, consistent=True)
    _expect_corrupt(tmp_path, data, match="more than that codec can produce")


@pytest.mark.parametrize("allocatable", [False, True])
@pytest.mark.parametrize("compress", ["blosc:lz4", "zstd"])
def test_forged_sizes_checked_against_chunk_headers(tmp_path, compress, allocatable):
    """Claims beyond CHECKED_CLAIM are compared with the chunks' own headers:
    one that cannot be allocated (1000 chunks of 2 GiB = 2 TB) before the
    array is allocated, one that can (about 64 MiB) by the codec before it
    decodes the first chunk into it."""
    data = _array_file(tmp_path, compress)
    body, index = split(data)
    section = _first_array(index)
    root = index["sections"][index["root"]]
    length, _, checksum, flag = section["chunks"][0]
    assert flag == 0  # encoded
    chunk = data[section["offset"]:section["offset"] + length]
    pickled = data[root["offset"]:root["offset"]
                   + sum(length for length, _, _, _ in root["chunks"])]
    # A real file holding the chunk 1000 times, each claiming a huge size
    # within what the codec's static bound allows.
    claim = MAX_CHUNK_SIZE if compress.startswith("blosc") else min(
        MAX_CHUNK_SIZE, 32768 * length)
    count = 1000
    if allocatable:
        claim = min(claim, 1 << 20)
        count = CHECKED_CLAIM // claim + 1
    section["chunks"] = [[length, claim, checksum, 0]] * count
    section["meta"]["shape"] = [claim * count // 8]
    new_body = bytearray(body[:64])

    def records(section, chunks):  # each chunk in a record of its own
        section["layout"] = "records"
        section["offset"] = len(new_body) + RECORD_SIZE
        for part in chunks:
            new_body.extend(record_header(DATA, len(part), len(new_body)) + part)

    records(section, [chunk] * count)
    lengths = [length for length, _, _, _ in root["chunks"]]
    starts = [sum(lengths[:k]) for k in range(len(lengths))]
    records(root, [pickled[a:a + n] for a, n in zip(starts, lengths)])
    index["sections"] = [section, root]
    index["root"] = 1
    new_body.extend(record_header(END, 0, len(new_body)))
    exc = _expect_corrupt(tmp_path, with_index(bytes(new_body), index))
    assert "cannot be allocated" not in str(exc)
    assert "decompressed to" in str(exc) or "header says" in str(exc)
    assert CHECKED_CLAIM < count * claim


def test_forged_huge_pickle_stream(tmp_path):
    def edit(index):
        root = index["sections"][index["root"]]
        length = root["chunks"][0][0]
        root["chunks"] = [[length, 32768 * length, 0, 0]] * 200
    data = forge(_dump({"x": "y" * 1000}, tmp_path / "a.cp", compress="zstd"), edit)
    _expect_corrupt(tmp_path, data)


@pytest.mark.parametrize("edit,match", [
    (lambda ix: _first_array(ix).update(offset=10**12), "past the data end"),
    (lambda ix: _first_array(ix).update(offset=8), "bad offset"),
    (lambda ix: _first_array(ix).update(offset=65), "bad offset"),
    (lambda ix: _first_array(ix).update(offset=-64), "damaged index"),
    (lambda ix: _first_array(ix).update(offset=64.0), "damaged index"),
    (lambda ix: _first_array(ix).update(offset=True), "damaged index"),
    (lambda ix: _first_array(ix)["chunks"][0].__setitem__(0, 10**15), "inconsistent"),
    (lambda ix: _first_array(ix)["chunks"][0].__setitem__(0, 10**6) or
     _first_array(ix)["chunks"][0].__setitem__(1, 10**6), "past the data end"),
    (lambda ix: _first_array(ix)["chunks"][0].__setitem__(1, 0), "bad chunk entry"),
    (lambda ix: _first_array(ix)["chunks"][0].__setitem__(1, 2**40), "bad chunk entry"),
    (lambda ix: _first_array(ix)["chunks"][0].__setitem__(3, 7), "bad chunk entry"),
    (lambda ix: _first_array(ix)["chunks"].append([1, 2]), "damaged index"),
    (lambda ix: _first_array(ix).update(chunks="abc"), "damaged index"),
    (lambda ix: _first_array(ix).update(codec={"id": "rot13", "level": 1}), "damaged index"),
    (lambda ix: _first_array(ix).update(codec={"id": "zstd", "level": 99}), "damaged index"),
    (lambda ix: _first_array(ix).update(meta=[1]), "not a mapping"),
    (lambda ix: _first_array(ix)["meta"].update(shape=[10**6]), "needs"),
    (lambda ix: _first_array(ix)["meta"].update(shape=[-1]), "bad array description"),
    (lambda ix: _first_array(ix)["meta"].update(shape=[2**62, 2**62]), "needs"),
    (lambda ix: _first_array(ix)["meta"].update(dtype="'|O'"), "bad array description"),
    (lambda ix: _first_array(ix)["meta"].update(
        dtype="__import__('os').system('false')"), "bad array description"),
    (lambda ix: _first_array(ix)["meta"].update(order="K"), "bad array description"),
    (lambda ix: _first_array(ix)["meta"].update(aligned="yes"), "bad array description"),
    (lambda ix: _first_array(ix)["meta"].update(aligned=[[1]]), "bad array description"),
    # float64 has no struct to align
    (lambda ix: _first_array(ix)["meta"].update(aligned=[[]]), "bad array description"),
    (lambda ix: _first_array(ix)["meta"].update(  # no field "z"
        dtype="[('x', '<f4'), ('y', '<f4')]", shape=[4096], aligned=[["z"]]),
     "bad array description"),
    (lambda ix: _first_array(ix)["meta"].update(  # offset 1 is not aligned for '<i2'
        dtype="[('x', '|u1'), ('y', '<i2'), ('z', '|u1')]", shape=[8192], aligned=[[]]),
     "bad array description"),
    (lambda ix: ix.update(root=99), "bad root"),
    (lambda ix: ix.update(root=0), "not a pickle stream"),
    (lambda ix: ix.update(root="1"), "bad root"),
    (lambda ix: ix.pop("sections"), "damaged index"),
    (lambda ix: ix.update(sections={}), "damaged index"),
])
def test_forged_index(tmp_path, edit, match):
    data = forge(_array_file(tmp_path, 0), edit)
    _expect_corrupt(tmp_path, data, match=match)


@pytest.mark.parametrize("index_bytes", [
    b"not json", b"[]", b"{}", b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe",
    b'{"root": 0, "sections": [' + b'{"offset": 64}, ' * 10 + b'{}]}',
    json.dumps({"root": 0, "sections": [{"offset": 64, "codec": None, "typesize": 1,
                                         "chunks": [[5, 5, 0, 1]] * 10**5,
                                         "meta": {"kind": "pickle"}}]}).encode(),
])
def test_forged_index_json(tmp_path, index_bytes):
    body, _ = split(_array_file(tmp_path, 0))
    _expect_corrupt(tmp_path, with_index(body, None, raw_index=index_bytes))


# -- a packed section list (format 2.2) ------------------------------------------

def _many_arrays(tmp_path):
    """A raw dump of 300 arrays, whose section list the index packs."""
    obj = [np.full(5, i, dtype=np.int64) for i in range(300)]
    return obj, _dump(obj, tmp_path / "many.cp", compress=0)


def _raw_index(data):
    """``(offset, text)`` of the index of a file's bytes."""
    offset, length, _, _ = TRAILER.unpack(data[-TRAILER.size:])
    return offset, data[offset:offset + length]


@pytest.mark.usefixtures("sections")
def test_a_long_section_list_is_packed_and_resealed_packed(tmp_path):
    """The index of a file of many arrays holds its section list compressed,
    with a one-section stub that readers of format 2.1 refuse, naming an
    unknown codec; it loads, maps for writing and re-seals as any file."""
    obj, data = _many_arrays(tmp_path)
    index = json.loads(_raw_index(data)[1])
    assert len(index["packed_sections"]) + 2000 < len(json.dumps(split(data)[1]["sections"]))
    assert index["sections"] == [{"offset": 64, "codec": {
        "id": "format-2.2-packed-sections", "level": 1}}]
    assert_same(obj, cpersist.load(tmp_path / "many.cp"))
    cpersist.load(tmp_path / "many.cp", mmap_mode="r+")[7][:] = -1
    assert cpersist.verify(tmp_path / "many.cp")["unchecked"] == [7]
    assert cpersist.reseal(tmp_path / "many.cp")["resealed"] == list(range(300))
    text = _raw_index((tmp_path / "many.cp").read_bytes())[1]
    assert text.startswith(b'{"edited":false,') and b'"packed_sections"' in text
    assert cpersist.verify(tmp_path / "many.cp")["unchecked"] == []
    assert cpersist.load(tmp_path / "many.cp")[7].tolist() == [-1] * 5


def test_a_section_list_longer_than_writers_pack_stays_plain(tmp_path, monkeypatch):
    """Readers refuse a packed list longer than writers pack: a longer list
    is written plain."""
    from cpersist.container import layout

    monkeypatch.setattr(layout, "PACK_SECTIONS_UP_TO", 5000)
    obj, data = _many_arrays(tmp_path)
    assert b'"packed_sections"' not in _raw_index(data)[1]
    assert_same(obj, cpersist.load(tmp_path / "many.cp"))


@pytest.mark.usefixtures("sections")
def test_a_section_list_compressing_more_than_readers_accept_stays_plain(tmp_path):
    """Empty arrays of one long dtype make a list that compresses over 200
    times, more than readers accept of a packed one: it is written plain."""
    dtype = np.dtype([(f"field_number_{i}", "<f8") for i in range(40)])
    obj = [np.zeros(0, dtype) for _ in range(2000)]
    text = _raw_index(_dump(obj, tmp_path / "empty.cp", compress=0))[1]
    assert len(text) > 1 << 20 and b'"packed_sections"' not in text
    assert_same(obj, cpersist.load(tmp_path / "empty.cp"))


def _repacked(data, edit):
    """``data`` with its packed section list replaced by ``edit(packed
    text, size)`` -> (text, size), the index checksum fixed."""
    offset, text = _raw_index(data)
    index = json.loads(text)
    index["packed_sections"], index["sections_size"] = edit(index["packed_sections"],
                                                            index["sections_size"])
    return with_index(data[:offset], None, raw_index=json.dumps(index).encode())


@pytest.mark.parametrize("edit,match", [
    (lambda text, size: (text, 10**9), "claims to decode to 1000000000, more than writers"),
    (lambda text, size: (text, size - 1), "packed section list"),
    (lambda text, size: (text, size + 1), "packed section list"),
    (lambda text, size: (text[:40] + "AAAA" + text[44:], size), "packed section list"),
    (lambda text, size: (text[:-5], size), "not base64"),
    (lambda text, size: (text, "many"), "bad packed section list"),
    (lambda text, size: (None, size), "bad packed section list"),
])
@pytest.mark.usefixtures("sections")
def test_forged_packed_section_list(tmp_path, edit, match):
    _, data = _many_arrays(tmp_path)
    _expect_corrupt(tmp_path, _repacked(data, edit), match=match)


@pytest.mark.parametrize("field,value,match", [
    (0, 10, "damaged trailer"), (0, 2**63, "damaged trailer"),
    (1, 2**40, "damaged trailer"), (2, 0, "index checksum"),
])
def test_forged_trailer(tmp_path, field, value, match):
    data = _array_file(tmp_path, 0)
    fields = list(TRAILER.unpack(data[-TRAILER.size:]))
    fields[field] = value
    _expect_corrupt(tmp_path, data[:-TRAILER.size] + TRAILER.pack(*fields), match=match)


def test_pickle_stream_errors_wrapped(tmp_path):
    """A well-checksummed but malformed pickle stream: CorruptFileError."""
    from ._forge import write_container
    for stream in (b"", b"\x80\x05", proto(4, b"\xff"), proto(4, b"0"), b"garbage"):
        path = write_container(tmp_path / "p.cp", stream)
        with pytest.raises(CorruptFileError, match="pickle stream"):
            cpersist.load(path)


# -- what must still load ------------------------------------------------------

@pytest.mark.parametrize("compress", cpersist.available_codecs())
def test_extreme_but_genuine_compression_loads(compress):
    """All-zero data compresses far beyond ordinary ratios (zstd ~30000:1,
    Blosc to a 32-byte chunk): the size checks must accept it, through the
    header-checked path (> CHECKED_CLAIM) and the growing pickle buffer."""
    arr = np.zeros(CHECKED_CLAIM // 8 + 4096)
    obj = {"zeros": arr, "blob": bytes(CHECKED_CLAIM + 10)}
    buf = io.BytesIO()
    cpersist.dump(obj, buf, compress=(compress, 1))
    buf.seek(0)
    out = cpersist.load(buf)
    assert out["blob"] == obj["blob"]
    assert_same(arr, out["zeros"])
    buf.seek(0)
    assert cpersist.verify(buf)["raw_bytes"] >= 2 * CHECKED_CLAIM


# -- format 1.1: chunk tables as JSON text, checked on first use ---------------

CHUNK_EDITS = [
    lambda ix: _first_array(ix)["chunks"][0].__setitem__(0, 10**15),
    lambda ix: _first_array(ix)["chunks"][0].__setitem__(1, 0),
    lambda ix: _first_array(ix)["chunks"][0].__setitem__(1, 2**40),
    lambda ix: _first_array(ix)["chunks"][0].__setitem__(2, "not a checksum"),
    lambda ix: _first_array(ix)["chunks"][0].__setitem__(3, 7),
    lambda ix: _first_array(ix)["chunks"].append([1, 2]),
]


@pytest.mark.parametrize("compress", [0, "zstd"])
@pytest.mark.parametrize("edit", CHUNK_EDITS)
def test_consistently_forged_chunk_table_is_caught(tmp_path, compress, edit):
    # Totals that agree with the forged table: only the table check can tell.
    data = forge(_array_file(tmp_path, compress), edit, consistent=True)
    _expect_corrupt(tmp_path, data)


@pytest.mark.parametrize("compress", [0, "zstd"])
def test_totals_that_disagree_with_the_chunk_table(tmp_path, compress):
    def edit(index):
        section = _first_array(index)
        del section["chunks"][-1]
    data = forge(_array_file(tmp_path, compress), edit)
    _expect_corrupt(tmp_path, data, match="totals say")


def test_raw_section_with_unequal_totals(tmp_path):
    data = forge(_array_file(tmp_path, 0), lambda ix: _first_array(ix).update(raw_size=10**12))
    _expect_corrupt(tmp_path, data, match="inconsistent")
    _expect_corrupt(tmp_path, data, match="inconsistent", mmap_mode="r")


def test_chunk_tables_are_parsed_only_when_read(tmp_path):
    from cpersist.container import ContainerReader

    path = tmp_path / "a.cp"
    cpersist.dump(np.arange(100_000.0), path, chunk_size=1 << 16)
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        assert all(section._chunks is None for section in reader.sections)
        array = next(s for s in reader.sections if s.meta.get("kind") == "array")
        assert len(array.chunks) == 13 and array._chunks is not None
