"""Tiny dumps: ``compress="max"`` writes one for an object of a few hundred
bytes, and every reader path takes it like any other dump."""

import io
import json
import pathlib

import numpy as np
import pytest
import xxhash

import cpersist
from cpersist.container.tiny import MAX_STREAM, TINY_MAGIC, tiny_dump, tiny_stream
from cpersist.container.tiny_dictionary import DICTIONARY, DICTIONARY_CHECKSUM

from ._fresh import run_cli
from .conftest import assert_same, pipe_bytes


def _volume():
    # A 4x5x7 uint8 NIfTI volume's size and order: nibabel's .nii.gz of it
    # is about a hundred bytes.
    return np.asfortranarray((np.arange(140, dtype=np.uint8) % 3 * 127).reshape(4, 5, 7))


TINY_OBJECTS = {
    "volume": _volume,
    "dict of arrays": lambda: {"a": np.arange(6, dtype="<f8"), "b": np.ones((2, 2), ">i2")},
    "no arrays": lambda: {"k": [1, 2.5, "x"], "t": (None, True)},
    "scalar": lambda: np.float32(2.5),
    "empty array": lambda: np.zeros((0, 3), order="F"),
}


@pytest.mark.parametrize("key", sorted(TINY_OBJECTS))
def test_max_writes_a_tiny_dump_that_round_trips(key, tmp_path):
    obj = TINY_OBJECTS[key]()
    data = cpersist.dumps(obj, compress="max")
    assert data.startswith(TINY_MAGIC)
    path = tmp_path / "t.cp"
    cpersist.dump(obj, path, compress="max")
    assert path.read_bytes() == data
    for loaded in (cpersist.loads(data), cpersist.load(path), cpersist.load(path, trusted=False),
                   cpersist.load(io.BytesIO(data))):
        assert_same(obj, loaded)
    with cpersist.open(path) as handle:
        assert handle.arrays == {}  # arrays inside the pickle stream are not listed
        assert_same(obj, handle.load())
        assert_same(obj, handle.load(lazy=True))


def test_tiny_dump_beats_a_format_2_dump_of_the_volume():
    data = cpersist.dumps(_volume(), compress="max")
    assert len(data) < 98  # nibabel's .nii.gz of such a volume
    assert len(data) < len(cpersist.dumps(_volume(), compress="zstd")) - 100


def test_larger_objects_keep_the_indexed_layout():
    obj = {"a": np.random.default_rng(0).standard_normal(20000)}
    assert not cpersist.dumps(obj, compress="max").startswith(TINY_MAGIC)


def test_dictionary_never_changes():
    assert xxhash.xxh3_64_intdigest(DICTIONARY) == DICTIONARY_CHECKSUM


def test_several_dumps_in_one_stream_and_a_pipe():
    objs = [_volume(), {"big": np.arange(50000.0)}, {"x": 1}, _volume()]
    buf = io.BytesIO()
    for obj, compress in zip(objs, ["max", 3, "max", 0]):
        cpersist.dump(obj, buf, compress=compress)
    data = buf.getvalue()
    buf.seek(0)
    for obj in objs:
        assert_same(obj, cpersist.load(buf))
    assert buf.tell() == len(data)
    reader, thread = pipe_bytes(data)
    with reader:
        for obj in objs:
            assert_same(obj, cpersist.load(reader))
        assert reader.read() == b""  # each load read exactly its dump
    thread.join_checked()


def test_a_path_with_a_dump_after_the_tiny_one_loads_as_their_list(tmp_path):
    data = cpersist.dumps(_volume(), compress="max")
    path = tmp_path / "two.cp"
    path.write_bytes(data + data)
    assert_same([_volume(), _volume()], cpersist.load(path))
    path.write_bytes(data + b"junk")
    with pytest.raises(cpersist.CorruptFileError, match="trailing data"):
        cpersist.load(path)


def test_every_truncation_and_every_flipped_byte_is_refused(tmp_path):
    data = cpersist.dumps(_volume(), compress="max")
    path = tmp_path / "bad.cp"
    for n in range(len(data)):
        path.write_bytes(data[:n])
        with pytest.raises(cpersist.CorruptFileError, match="bad.cp"):
            cpersist.load(path)
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0x10
        path.write_bytes(bytes(damaged))
        with pytest.raises(cpersist.CorruptFileError, match="bad.cp"):
            cpersist.load(path)
        with pytest.raises(cpersist.CorruptFileError):
            cpersist.loads(bytes(damaged))


def test_unknown_codec_and_the_size_bound():
    data = bytearray(cpersist.dumps(_volume(), compress="max"))
    data[len(TINY_MAGIC)] = 9
    with pytest.raises(cpersist.CorruptFileError, match="unknown codec 9"):
        cpersist.loads(bytes(data))
    stream = b"\x80\x05N." + bytes(100)
    assert tiny_stream(tiny_dump(stream), "x") == stream
    with pytest.raises(ValueError):
        tiny_dump(bytes(MAX_STREAM + 1))


def test_restricted_load_refuses_globals_outside_the_allowlist():
    data = cpersist.dumps({"p": pathlib.PurePosixPath("a")}, compress="max")
    assert data.startswith(TINY_MAGIC)
    with pytest.raises(cpersist.UntrustedObjectError, match="pathlib.PurePosixPath"):
        cpersist.loads(data, trusted=False)
    assert cpersist.loads(data, trusted=[("pathlib", "PurePosixPath")]) == {
        "p": pathlib.PurePosixPath("a")}


def test_mmap_mode_reads_into_memory_with_a_warning(tmp_path):
    path = tmp_path / "t.cp"
    cpersist.dump(_volume(), path, compress="max")
    with pytest.warns(UserWarning, match="cannot be memory-mapped"):
        out = cpersist.load(path, mmap_mode="r")
    assert type(out) is np.ndarray
    assert_same(_volume(), out)


def test_info_verify_convert_and_the_cli(tmp_path):
    path = tmp_path / "t.cp"
    cpersist.dump(_volume(), path, compress="max")
    report = cpersist.inspect(path)
    assert report["layout"] == "tiny" and report["file_bytes"] == path.stat().st_size
    assert report["pickle"]["stored_bytes"] == path.stat().st_size
    assert [a["path"] for a in report["inline_arrays"]] == ["obj"]
    assert cpersist.verify(path)["sections"] == 1
    out = tmp_path / "z.cp"
    cpersist.convert(path, out, "zstd")
    assert not out.read_bytes().startswith(TINY_MAGIC)
    assert_same(_volume(), cpersist.load(out))
    run = run_cli("info", "--json", path, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["layout"] == "tiny"
    run = run_cli("info", path, timeout=120)
    assert "tiny dump of" in run.stdout


def test_memory_url():
    import fsspec

    data = cpersist.dumps(_volume(), compress="max")
    fsspec.filesystem("memory").pipe("/tiny-test.cp", data)
    try:
        assert_same(_volume(), cpersist.load("memory://tiny-test.cp"))
        cpersist.dump(_volume(), "memory://tiny-out.cp", compress="max")
        assert fsspec.filesystem("memory").cat("/tiny-out.cp") == data
    finally:
        fsspec.filesystem("memory").rm(["/tiny-test.cp", "/tiny-out.cp"])
