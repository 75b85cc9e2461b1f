"""Errors a newcomer meets: each names the path the user gave and says what to do."""

import io
import os
import pickle

import numpy as np
import pytest

import cpersist
from cpersist.codecs import parse_compress

from ._fresh import ROOT, run_cli

OBJ = {"w": np.arange(1000.0)}


def test_dump_to_a_directory_is_refused_before_writing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkdir("adir")
    for target, error in (("adir", IsADirectoryError), ("adir/", IsADirectoryError),
                          ("nodir/x.cp", FileNotFoundError)):
        with pytest.raises(error) as info:
            cpersist.dump(OBJ, target)
        assert info.value.filename == target  # the path given, not a temporary file's
        assert "cpersist-tmp" not in str(info.value)
    with open("afile", "wb"):
        pass
    with pytest.raises(NotADirectoryError, match="'afile' is not a directory"):
        cpersist.dump(OBJ, "afile/x.cp")
    assert sorted(os.listdir()) == ["adir", "afile"] and os.listdir("adir") == []
    with pytest.raises(IsADirectoryError, match="names a directory"):
        cpersist.dump(OBJ, "new/")
    assert not os.path.exists("new")


def test_dump_to_a_text_or_read_only_file_object(tmp_path):
    path = tmp_path / "t.cp"
    with open(path, "w") as text:
        with pytest.raises(cpersist.UnwritableTargetError, match="text mode.*'wb'"):
            cpersist.dump(OBJ, text)
        with pytest.raises(TypeError):  # still a TypeError for code that caught the old one
            cpersist.dump(OBJ, text)
    assert path.read_bytes() == b""
    with open(path, "rb") as read_only:
        with pytest.raises(cpersist.UnwritableTargetError, match="reading only"):
            cpersist.dump(OBJ, read_only)
    assert path.read_bytes() == b""
    out = io.BytesIO()
    cpersist.dump(OBJ, out)  # a writable binary object still works
    assert np.array_equal(cpersist.loads(out.getvalue())["w"], OBJ["w"])


class _Model:
    pass


@pytest.mark.parametrize("compress", [0, 3])
def test_unpicklable_part_is_named_by_its_path(tmp_path, compress):
    model = _Model()
    model.weights = np.ones(10)
    with open(__file__, "rb") as handle:
        model.log = handle
        obj = {"model": model, "callbacks": [print, np.zeros(3), lambda x: x]}
        with pytest.raises(cpersist.UnpicklableError) as info:
            cpersist.dump(obj, tmp_path / "o.cp", compress=compress)
    assert info.value.path == "obj['model'].log" and isinstance(info.value, TypeError)
    assert "BufferedReader" in str(info.value)
    with pytest.raises(pickle.PicklingError, match=r"obj\['callbacks'\]\[2\].*lambda"):
        cpersist.dump({"callbacks": [print, np.zeros(3), lambda x: x]}, tmp_path / "o.cp")
    assert os.listdir(tmp_path) == []


def test_arrays_key_error_gives_the_form_and_nearest_keys(tmp_path):
    path = tmp_path / "h.cp"
    cpersist.dump({"w": np.zeros((300, 300)), "b": np.ones(90000)}, path)
    with cpersist.open(path) as handle:
        with pytest.raises(cpersist.ArrayNotFoundError) as info:
            handle.arrays["w"]
        assert "obj['w']" in str(info.value) and "paths from the object" in str(info.value)
        assert "nearest: \"obj['w']\"" in str(info.value)
        assert handle.arrays.get("w") is None and "obj['w']" in handle.arrays


def test_arrays_key_of_an_array_kept_in_the_pickle_stream_says_how_to_read_it(tmp_path):
    path = tmp_path / "s.cp"
    cpersist.dump({"a": np.arange(100.0), "b": np.arange(1e6)}, path, compress=3)
    with cpersist.open(path) as handle:
        assert list(handle.arrays) == ["obj['b']"]  # obj['a'] is inside the pickle stream
        for key in ("obj['a']", "a"):
            with pytest.raises(cpersist.ArrayNotFoundError) as info:
                handle.arrays[key]
            assert isinstance(info.value, KeyError) and info.value.in_stream == "obj['a']"
            assert type(info.value).__module__ == "cpersist.exceptions"
            message = str(info.value)
            assert "obj['a'] is a small array that the dump kept inside the pickle" in message
            assert "handle.load(lazy=True)['a']" in message
            assert "nearest" not in message
        # The way the message gives reads it.
        assert np.array_equal(handle.load(lazy=True)["a"], np.arange(100.0))
        with pytest.raises(KeyError) as info:  # a key naming nothing: the nearest, and a hint
            handle.arrays["c"]
        assert info.value.in_stream is None
        assert "nearest: \"obj['b']\"; 1 small array(s) kept inside the pickle stream" in str(
            info.value)


def test_load_of_other_files_says_what_they_are_and_what_to_run(tmp_path):
    import joblib

    files = {"j.joblib": ("joblib file", "cpersist convert", "--trust-pickles"),
             "p.pkl": ("pickle (protocol", "cpersist convert", "--trust-pickles"),
             "v.npy": ("numpy .npy file", "numpy.load", "mmap_mode"),
             "z.npz": ("npz", "numpy.load", "z.npz")}
    joblib.dump({"a": np.arange(10)}, tmp_path / "j.joblib", compress=3)
    with open(tmp_path / "p.pkl", "wb") as f:
        pickle.dump({"a": 1}, f, protocol=4)
    np.save(tmp_path / "v.npy", np.zeros(3))
    np.savez(tmp_path / "z.npz", a=np.zeros(3))
    for name, expected in files.items():
        path = str(tmp_path / name)
        for reader in (cpersist.load, cpersist.open, cpersist.inspect, cpersist.verify):
            with pytest.raises(cpersist.CorruptFileError) as info:
                reader(path)
            message = str(info.value)
            assert message.startswith(path) and "not a cpersist file" in message
            for words in expected:
                assert words in message, (name, message)


def test_one_spelling_of_compress_everywhere(tmp_path):
    assert parse_compress("zstd:9") == parse_compress(("zstd", 9))
    assert parse_compress(" ZSTD:9 ").level == 9
    assert parse_compress("raw") is None and parse_compress("0") is None
    assert parse_compress("blosc:lz4:5").level == 5
    cpersist.dump(OBJ, tmp_path / "a.cp", compress="zstd:9")
    cpersist.dump(OBJ, tmp_path / "t.cp", compress=("zstd", 9))
    cpersist.dump(OBJ, tmp_path / "z.cp", compress=("zstd", 1))
    assert (tmp_path / "a.cp").read_bytes() == (tmp_path / "t.cp").read_bytes()
    assert (tmp_path / "a.cp").read_bytes() != (tmp_path / "z.cp").read_bytes()
    for bad in ("zstd:22", ("zstd", 22), 12):
        with pytest.raises(ValueError, match="level (22|12) is out of range; levels are 1-9"):
            parse_compress(bad)
    cli = run_cli("convert", tmp_path / "a.cp", tmp_path / "b.cp", "-c", "zstd:22", cwd=ROOT)
    assert cli.returncode == 2
    assert "'zstd:22': level 22 is out of range; levels are 1-9" in cli.stderr
    assert not (tmp_path / "b.cp").exists()
