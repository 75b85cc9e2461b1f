"""The ``cpersist`` command line.

Each command runs through :func:`cpersist.cli.main`, what the console script
calls, in this process (its output captured); ``python -m cpersist`` itself
is run in a fresh interpreter by the tests of help and version.
"""

import argparse
import contextlib
import io
import json
import os
import re
import subprocess

import numpy as np
import pytest

import cpersist
from cpersist.cli import main, parse_compress_spec, parse_storage_option
from cpersist.container import FORMAT_MAJOR, FORMAT_MINOR, ContainerReader

from ._fresh import ROOT, run_cli, run_code
from .conftest import assert_same

VERBS = ["info", "verify", "convert", "bench"]


def run(*args, cwd=None):
    """``cpersist ARGS`` through :func:`cpersist.cli.main` in this process,
    in folder ``cwd``; a CompletedProcess with its exit code and output."""
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["cpersist", *argv], code, out.getvalue(), err.getvalue())


def run_fresh(*args):
    """``python -m cpersist ARGS`` in a fresh interpreter (text mode)."""
    return run_cli(*args, timeout=120)


class Model:
    """A plain class instance, as a fitted estimator would be."""

    def __init__(self):
        rng = np.random.default_rng(0)
        self.coef_ = np.cumsum(rng.standard_normal((200, 300)), axis=1)   # 480 KB
        self.classes_ = np.array(["a", "b", "c"])                         # small
        self.history = {"loss": np.linspace(1, 0, 100_000, dtype=np.float32)}


def sample_object():
    return {
        "weights": np.asfortranarray(np.arange(120_000, dtype=np.float32).reshape(300, 400)),
        "layers": [np.ones((256, 256), dtype=np.int16), np.zeros(3)],
        "model": Model(),
        "name": "demo",
    }


@pytest.fixture
def raw_file(tmp_path):
    path = tmp_path / "raw.cp"
    cpersist.dump(sample_object(), path)
    return path


# -- help, usage errors --------------------------------------------------------

@pytest.mark.parametrize("verb", VERBS)
def test_help_on_every_verb(verb):
    result = run(verb, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
    if verb != "bench":
        assert f"cpersist {verb}" in result.stdout


def test_top_level_help_lists_the_verbs():
    result = run_fresh("--help")
    assert result.returncode == 0
    for verb in VERBS:
        assert verb in result.stdout


def test_version():
    result = run_fresh("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"cpersist {cpersist.__version__}"


@pytest.mark.parametrize("args", [[], ["frobnicate"], ["info"], ["verify"],
                                  ["convert", "a.cp"], ["info", "--bogus", "x.cp"]])
def test_usage_errors_exit_2(args):
    result = run(*args)
    assert result.returncode == 2
    assert "usage:" in result.stderr
    assert "error:" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("args,message", [
    (["verify", "--reseal", "-"], "--reseal rewrites files: it cannot read standard input"),
    (["verify", "--reseal", "s3://bucket/model.cp"],
     "s3://bucket/model.cp: --reseal rewrites local files in place, not objects in remote storage"),
    (["info", "--storage-option", "anon", "x.cp"], "expected KEY=VALUE, got 'anon'"),
    (["convert", "a.cp", "b.cp", "-c", "3", "--threads", "two"],
     "expected a positive integer, got 'two'"),
])
def test_bad_option_values_exit_2_naming_the_problem(args, message):
    result = run(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_console_script_entry_point():
    """setup.py declares cpersist=cpersist.cli:main; main returns exit codes."""
    with open(os.path.join(ROOT, "setup.py")) as f:
        assert '"cpersist=cpersist.cli:main"' in f.read()
    assert main(["--version"]) == 0
    assert main(["no-such-verb"]) == 2


@pytest.mark.parametrize("verb", ["info", "verify"])
def test_missing_file(verb, tmp_path):
    missing = tmp_path / "missing.cp"
    result = run(verb, missing)
    assert result.returncode == 1
    assert "no such file" in (result.stdout + result.stderr)
    assert str(missing) in (result.stdout + result.stderr)


@pytest.mark.parametrize("verb", ["info", "verify"])
def test_not_a_cpersist_file(verb, tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.arange(3))
    result = run(verb, path)
    assert result.returncode == 1
    assert "not a cpersist file" in (result.stdout + result.stderr)


def test_directory_is_refused(tmp_path):
    result = run("info", tmp_path)
    assert result.returncode == 1
    assert "is a directory" in result.stderr


# -- info --------------------------------------------------------------------

@pytest.mark.usefixtures("sections")
def test_info_json_matches_what_was_dumped(raw_file):
    obj = sample_object()
    result = run("info", "--json", raw_file)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["file"] == str(raw_file)
    assert info["format"] == f"{FORMAT_MAJOR}.{FORMAT_MINOR}"
    arrays = {a["path"]: a for a in info["arrays"]}
    expected = {
        "obj['weights']": obj["weights"],
        "obj['layers'][0]": obj["layers"][0],
        "obj['layers'][1]": obj["layers"][1],
        "obj['model'].coef_": obj["model"].coef_,
        "obj['model'].classes_": obj["model"].classes_,
        "obj['model'].history['loss']": obj["model"].history["loss"],
    }
    assert sorted(arrays) == sorted(expected)
    for path, arr in expected.items():
        entry = arrays[path]
        assert np.dtype(entry["dtype"]) == arr.dtype, path
        assert tuple(entry["shape"]) == arr.shape, path
        assert entry["order"] == ("F" if path == "obj['weights']" else "C"), path
        assert entry["codec"] is None and entry["level"] is None
        assert entry["raw_bytes"] == entry["stored_bytes"] == arr.nbytes, path
        assert entry["ratio"] == 1.0
    assert info["inline_arrays"] == []
    assert info["pickle"]["raw_bytes"] > 0
    assert f"{__name__}.Model" in info["globals"]
    assert "cpersist.pickler.stored_array" not in info["globals"]
    # The section numbers given are the ones in the file.
    with open(raw_file, "rb") as file:
        reader = ContainerReader(file, "f")
        for entry in info["arrays"]:
            assert reader.sections[entry["section"]].raw_size == entry["raw_bytes"]


def test_info_json_compressed_file(tmp_path):
    obj = sample_object()
    path = tmp_path / "z.cp"
    cpersist.dump(obj, path, compress=("blosc:zstd", 5))
    result = run("info", "--json", path)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    by_path = {a["path"]: a for a in info["arrays"]}
    loss = by_path["obj['model'].history['loss']"]
    assert (loss["codec"], loss["level"]) == ("blosc:zstd", 5)
    assert loss["stored_bytes"] < loss["raw_bytes"] == 400_000
    assert loss["ratio"] == round(loss["raw_bytes"] / loss["stored_bytes"], 3) > 1
    # Small arrays go inside the pickle stream of a compressed file: they are
    # listed separately, with their path, shape and dtype.
    inline = {a["path"]: a for a in info["inline_arrays"]}
    assert set(by_path) | set(inline) == {
        "obj['weights']", "obj['layers'][0]", "obj['layers'][1]", "obj['model'].coef_",
        "obj['model'].classes_", "obj['model'].history['loss']",
    }
    small = inline["obj['layers'][1]"]
    assert (small["dtype"], small["shape"], small["raw_bytes"]) == ("<f8", [3], 24)


def test_info_text(raw_file, tmp_path):
    result = run("info", raw_file)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"{raw_file}: cpersist format {FORMAT_MAJOR}.{FORMAT_MINOR}, written by cpersist ")
    assert "obj['model'].coef_" in out
    # the dtype as numpy names it, the size in memory, the codec
    assert re.search(r"^  obj\['weights'\] +float32 +\(300, 400\) +468.8 KiB +raw$", out, re.M)
    assert "<f4" not in out and not re.search(r"^ +section +path", out, re.M)
    assert "pickle stream:" in out
    assert f"{__name__}.Model" in out
    details = run("info", "--details", raw_file).stdout
    assert details.startswith(out.rstrip("\n"))  # the same, then how each array is stored
    assert re.search(r"^ +0 +obj\['weights'\] +\(300, 400\) +<f4 +F +raw ", details, re.M)
    # several files, one failing: the good one is still described, exit 1
    result = run("info", raw_file, tmp_path / "nope.cp")
    assert result.returncode == 1
    assert "obj['model'].coef_" in result.stdout
    assert "nope.cp: no such file" in result.stderr


def test_info_does_not_unpickle(tmp_path):
    """The file's classes need not be importable: nothing is executed."""
    path = tmp_path / "evil.cp"
    code = (
        "import cpersist, numpy as np, os\n"
        "class Boom:\n"
        "    def __reduce__(self):\n"
        "        return (os.system, ('touch pwned',))\n"
        f"cpersist.dump({{'x': Boom(), 'a': np.ones(10)}}, {str(path)!r})\n"
    )
    run_code(code, check=True, cwd=tmp_path)
    for verb in (["info"], ["info", "--json"], ["verify"]):
        result = run(*verb, path, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    assert not (tmp_path / "pwned").exists()
    info = json.loads(run("info", "--json", path).stdout)
    assert any(g in info["globals"] for g in ("os.system", "posix.system"))


# -- verify ------------------------------------------------------------------

def test_verify_ok_and_damaged(tmp_path, raw_file):
    damaged = tmp_path / "damaged.cp"
    data = bytearray(raw_file.read_bytes())
    with open(raw_file, "rb") as file:
        section = ContainerReader(file, "f").sections[0]
    data[section.offset + 100] ^= 0x01  # one bit of an array's raw bytes
    damaged.write_bytes(bytes(data))
    truncated = tmp_path / "truncated.cp"
    truncated.write_bytes(bytes(data[: len(data) // 2]))

    good = run("verify", raw_file)
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.startswith(f"{raw_file}: OK")
    assert len(good.stdout.splitlines()) == 1

    result = run("verify", raw_file, damaged, truncated)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(f"{raw_file}: OK")
    assert lines[1].startswith(f"{damaged}: FAILED") and "checksum" in lines[1]
    assert lines[2].startswith(f"{truncated}: FAILED")
    # a memory-mapped load does not read the damaged bytes; verify does
    cpersist.load(damaged, mmap_mode="r")


# -- convert -----------------------------------------------------------------

def test_convert_roundtrip_raw_zstd_raw(tmp_path, raw_file):
    obj = sample_object()
    packed, back = tmp_path / "packed.cp", tmp_path / "back.cp"
    result = run("convert", raw_file, packed, "--compress", "zstd:7")
    assert result.returncode == 0, result.stderr
    assert str(packed) in result.stdout
    assert packed.stat().st_size < raw_file.stat().st_size
    info = json.loads(run("info", "--json", packed).stdout)
    assert {(a["codec"], a["level"]) for a in info["arrays"]} == {("zstd", 7)}
    assert_same(obj, cpersist.load(packed))

    result = run("convert", packed, back, "-c", "raw")
    assert result.returncode == 0, result.stderr
    info = json.loads(run("info", "--json", back).stdout)
    assert {a["codec"] for a in info["arrays"]} == {None}
    loaded = cpersist.load(back, mmap_mode="r")
    assert_same(obj, loaded, mmap=True)
    assert isinstance(loaded["model"].coef_, np.memmap)
    assert run("verify", packed, back).returncode == 0


@pytest.mark.parametrize("spec,expected", [
    ("3", ("zstd-auto", 3)), ("lz4", ("lz4", 3)), ("blosc:lz4:9", ("blosc:lz4", 9)),
    ("zlib:1", ("zlib", 1)), ("blosc", ("blosc:lz4", 3)),
])
def test_convert_specs(tmp_path, raw_file, spec, expected):
    out = tmp_path / "out.cp"
    result = run("convert", raw_file, out, "--compress", spec, "--chunk-size", "65536",
                 "--threads", "2")
    assert result.returncode == 0, result.stderr
    with open(out, "rb") as file:
        reader = ContainerReader(file, "out")
        for section in reader.sections:
            assert (section.codec.codec_id, section.codec.level) == expected
            assert all(raw <= 65536 for _, _, raw, _, _ in section.chunks)
    assert_same(sample_object(), cpersist.load(out))


@pytest.mark.parametrize("spec", ["bogus", "zstd:12", "10", "zstd:", ""])
def test_convert_bad_compress_exits_2(tmp_path, raw_file, spec):
    out = tmp_path / "out.cp"
    result = run("convert", raw_file, out, "--compress", spec)
    assert result.returncode == 2
    assert "--compress" in result.stderr
    assert not out.exists()


def test_convert_errors(tmp_path, raw_file):
    out = tmp_path / "out.cp"
    missing = run("convert", tmp_path / "nope.cp", out, "-c", "3")
    assert missing.returncode == 1 and "no such file" in missing.stderr
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    wrong = run("convert", text, out, "-c", "3")
    assert wrong.returncode == 1 and "not a cpersist file" in wrong.stderr
    no_compress = run("convert", raw_file, out)
    assert no_compress.returncode == 2 and "--compress" in no_compress.stderr
    bad_chunk = run("convert", raw_file, out, "-c", "3", "--chunk-size", "0")
    assert bad_chunk.returncode == 2
    no_dir = run("convert", raw_file, tmp_path / "no" / "such" / "dir.cp", "-c", "3")
    assert no_dir.returncode == 1 and "cannot write, no directory" in no_dir.stderr
    assert not out.exists()


def test_parse_compress_spec():
    assert parse_compress_spec("raw") == 0
    assert parse_compress_spec("0") == 0
    assert parse_compress_spec(" ZSTD:9 ") == ("zstd", 9)
    assert parse_compress_spec("blosc:zstd") == "blosc:zstd"
    assert parse_compress_spec("blosc:zstd:1") == ("blosc:zstd", 1)
    with pytest.raises(ValueError, match="invalid compress"):
        parse_compress_spec("zstd:0:1")


def test_parse_storage_option():
    assert parse_storage_option("anon=true") == ("anon", True)
    assert parse_storage_option('client_kwargs={"region_name": "eu-west-1"}') == (
        "client_kwargs", {"region_name": "eu-west-1"})
    # Not JSON: kept as the text given.
    assert parse_storage_option("endpoint_url=http://localhost:9000") == (
        "endpoint_url", "http://localhost:9000")
    for bad in ("=true", "anon"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected KEY=VALUE"):
            parse_storage_option(bad)


# -- bench -------------------------------------------------------------------

def test_bench_forwards_arguments():
    result = run("bench", "--list")
    assert result.returncode == 0, result.stderr
    assert "cpersist" in result.stdout and "np.save" in result.stdout
    bad = run("bench", "--no-such-option")
    assert bad.returncode == 2
    assert "--no-such-option" in bad.stderr


# -- where arrays sit in the object (the paths info prints) -------------------

def _pickle_stream(path):
    with open(path, "rb") as file:
        reader = ContainerReader(file, "f")
        return reader.read_bytes(reader.sections[reader.root])


class _Holder:
    pass


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.usefixtures("sections")
def test_array_paths_all_protocols(tmp_path, protocol):
    from collections import OrderedDict

    from cpersist.stream.paths import array_paths

    from .conftest import make_matrix

    h = _Holder()
    shared = np.arange(5.0)
    h.coef_ = shared
    h.nested = {"a": [1, "x", np.ones(2), (np.zeros(3),)], 7: np.ones(1)}
    h.mat = make_matrix([[1.0, 2.0]])
    h.masked = np.ma.masked_array([1.0, 2.0], mask=[0, 1])
    h.od = OrderedDict(z=np.ones(4))
    obj = {"model": h, "again": shared, "top": np.ones((2, 2))[:, ::2]}
    path = tmp_path / "p.cp"
    cpersist.dump(obj, path, protocol=protocol)
    paths = array_paths(_pickle_stream(path))
    assert sorted(paths.values()) == sorted([
        "obj['again']",                        # shared with .coef_: the shortest path
        "obj['model'].nested['a'][2]", "obj['model'].nested['a'][3][0]",
        "obj['model'].nested[7]", "obj['model'].mat", "obj['model'].masked",
        "obj['model'].masked.mask", "obj['model'].od['z']", "obj['top']",
    ])
    with open(path, "rb") as file:
        n_sections = len(ContainerReader(file, "f").sections)
    assert len(paths) == n_sections - 1  # every array section, none twice


@pytest.mark.usefixtures("sections")
def test_array_paths_never_raise():
    from cpersist.stream.paths import array_paths, scan_arrays

    assert array_paths(b"") == {}
    assert array_paths(b"not a pickle at all") == {}
    buffer = io.BytesIO()
    cpersist.dump({"a": np.ones(10)}, buffer)
    buffer.seek(0)
    reader = ContainerReader(buffer, "buf")
    stream = bytes(reader.read_bytes(reader.sections[reader.root]))
    assert array_paths(stream) == {0: "obj['a']"}
    for cut in range(len(stream)):  # every truncation: a dict, no exception
        assert isinstance(scan_arrays(stream[:cut]), dict)
