"""Codecs as an extension point: registration, entry points, lazy imports, help.

Third-party codecs reach cpersist through :func:`cpersist.codecs.register_codec`
or the ``cpersist.codecs`` entry-point group; the entry-point tests install a
real distribution (a ``.dist-info`` directory) on ``sys.path``.
"""

import importlib.metadata
import os
import sys
import textwrap
import zlib

import numpy as np
import pytest

import cpersist
from cpersist.cli import main
from cpersist.codecs import (ENTRY_POINT_GROUP, Codec, UnknownCodecError, available_codecs,
                             get_codec, register_codec)
from cpersist.codecs import registry
from cpersist.container import ENCODED, ContainerReader

from ._fresh import fresh_env, run_code
from .conftest import assert_same, random_array

_XOR = bytes(b ^ 0x5A for b in range(256))


class Toy(Codec):
    """zlib with every byte XORed by 0x5A: it compresses, yet no other codec reads it."""

    codec_id = "toy"
    max_expansion = 1032  # zlib's

    def encode(self, buf, typesize=1, hint=None):
        return zlib.compress(buf, self.level).translate(_XOR)

    def decode_into(self, src, out):
        try:
            data = zlib.decompress(bytes(src).translate(_XOR))
        except zlib.error as exc:
            raise self._invalid(exc) from None
        if len(data) != len(out):
            raise self._wrong_size(len(data), len(out))
        out[:] = data


@pytest.fixture
def toy():
    register_codec(Toy)
    yield Toy
    registry._registry.pop("toy", None)


def compressible(dtype, shape, order="C", seed=0):
    """Random values of ``dtype``, each repeated 16 times: zlib halves them."""
    n = int(np.prod(shape))
    base = random_array(dtype, (max(1, -(-n // 16)),), seed=seed)
    flat = np.repeat(base, 16)[:n]
    return np.asarray(flat.reshape(shape), order=order)


DTYPES = ["?", "u1", "<i2", ">i4", "<u8", ">f2", "<f4", ">f8", "<c8", ">c16", "<M8[s]",
          ">m8[ms]", "S5", "<U3", "V4", [("a", "<i4"), ("b", ">f8", (2,))], "O"]
SHAPES = [(), (0,), (7,), (300, 201), (3, 0, 5), (40, 30, 20)]


def sample(toy_dtypes=DTYPES):
    obj = {}
    for i, dtype in enumerate(toy_dtypes):
        for j, shape in enumerate(SHAPES):
            obj[f"{i}-{j}-C"] = compressible(dtype, shape, "C", seed=i + j)
            if len(shape) > 1:
                obj[f"{i}-{j}-F"] = compressible(dtype, shape, "F", seed=i + j)
    big = compressible("<f8", (512, 300))
    obj["strided"] = big[::3, 1::2]
    obj["text"] = "not an array"
    return obj


def encoded_codecs(path):
    """The codec ids of the sections that hold at least one encoded chunk."""
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        return [s.codec.codec_id for s in reader.sections
                if any(flag == ENCODED for *_, flag in s.chunks)]


# -- register_codec ---------------------------------------------------------------

@pytest.mark.parametrize("compress", ["toy", ("toy", 1), ("toy", 9)])
def test_registered_codec_round_trips_every_dtype_and_shape(tmp_path, toy, compress):
    obj = sample()
    path = tmp_path / "toy.cp"
    cpersist.dump(obj, path, compress=compress, chunk_size=64 << 10)
    codecs = encoded_codecs(path)
    assert len(codecs) > 20 and set(codecs) == {"toy"}
    level = 3 if compress == "toy" else compress[1]
    report = cpersist.inspect(path)
    assert {(a["codec"], a["level"]) for a in report["arrays"]} <= {("toy", level), (None, None)}
    assert_same(obj, cpersist.load(path))
    assert cpersist.verify(path)["chunks"] > len(codecs)


def test_registered_codec_is_listed_and_converted_to(tmp_path, toy):
    assert "toy" in available_codecs() and "toy" in cpersist.available_codecs()
    obj = {"a": compressible("<i8", (100_000,)), "b": compressible(">f4", (50, 60), "F")}
    src, dst = tmp_path / "src.cp", tmp_path / "dst.cp"
    cpersist.dump(obj, src, compress="zstd")
    cpersist.convert(src, dst, "toy")
    assert set(encoded_codecs(dst)) == {"toy"}
    assert_same(obj, cpersist.load(dst))


def test_registered_codec_via_the_command_line(tmp_path, toy, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping inside codec names
    assert main(["convert", "--help"]) == 0
    assert "toy" in capsys.readouterr().out
    obj = {"a": compressible("<u2", (70_000,))}
    src, dst = tmp_path / "src.cp", tmp_path / "dst.cp"
    cpersist.dump(obj, src)
    assert main(["convert", str(src), str(dst), "--compress", "toy:7"]) == 0
    assert set(encoded_codecs(dst)) == {"toy"}
    assert {a["level"] for a in cpersist.inspect(dst)["arrays"]} == {7}
    assert_same(obj, cpersist.load(dst))


def test_register_codec_is_a_class_decorator_and_idempotent(toy):
    assert register_codec(Toy) is Toy
    assert type(get_codec("toy", 5)) is Toy and get_codec("toy", 5).level == 5


class Abstract(Codec):
    codec_id = "abstract"

    def encode(self, buf, typesize=1, hint=None):
        return bytes(buf)


@pytest.mark.parametrize("cls", [Toy(3), "toy", int, Codec, Abstract])
def test_register_codec_refuses_what_is_not_a_concrete_codec_class(cls):
    with pytest.raises(TypeError, match="Codec subclass|does not implement decode_into"):
        register_codec(cls)
    assert "abstract" not in available_codecs()


@pytest.mark.parametrize("codec_id", [None, "", "Toy", "toy:3", "toy:", "to y", ":toy", 7,
                                      "blosc"])
def test_register_codec_refuses_bad_names(codec_id):
    cls = type("Named", (Toy,), {"codec_id": codec_id})
    with pytest.raises(ValueError, match="not a valid codec name|is an alias"):
        register_codec(cls)
    assert codec_id not in registry._registry


@pytest.mark.parametrize("name", ["zstd", "blosc:lz4", "toy"])
def test_register_codec_refuses_to_replace_a_taken_name_silently(toy, name):
    other = type("Other", (Toy,), {"codec_id": name})
    with pytest.raises(ValueError, match=f"codec name '{name}' is already registered.*replace=True"):
        register_codec(other)
    assert type(get_codec(name)) is not other


def test_register_codec_replace_true_replaces_a_builtin(tmp_path):
    other = type("OtherZlib", (Toy,), {"codec_id": "zlib"})
    builtin = type(get_codec("zlib"))
    try:
        assert register_codec(other, replace=True) is other
        assert type(get_codec("zlib")) is other
        path = tmp_path / "f.cp"
        obj = compressible("<i4", (50_000,))
        cpersist.dump(obj, path, compress="zlib")
        assert_same(obj, cpersist.load(path))
        with pytest.raises(ValueError, match="already registered"):
            register_codec(builtin)  # replacing back also needs replace=True
        register_codec(builtin, replace=True)
    finally:
        registry._registry.pop("zlib")  # back to the lazily imported built-in
    assert type(get_codec("zlib")) is builtin


def test_unknown_codec_name_lists_the_accepted_ones():
    with pytest.raises(UnknownCodecError, match="unknown codec 'nope'.*zstd-auto"):
        get_codec("nope")
    with pytest.raises(ValueError, match="invalid compress='nope'.*blosc:zstd"):
        cpersist.dump(1, os.devnull, compress="nope")


def test_file_with_a_codec_not_available_here_names_it(tmp_path, toy):
    path = tmp_path / "toy.cp"
    cpersist.dump({"a": compressible("<i4", (100_000,))}, path, compress="toy")
    registry._registry.pop("toy")
    for read in (cpersist.load, cpersist.inspect, cpersist.verify):
        with pytest.raises(cpersist.CorruptFileError) as info:
            read(path)
        message = str(info.value)
        assert message.startswith(f"{path}: ")
        assert "codec 'toy'" in message and "not available" in message
        assert f"'{ENTRY_POINT_GROUP}' entry point named 'toy'" in message
    assert main(["info", str(path)]) == 1


# -- entry points ---------------------------------------------------------------

TOY_MODULE = '''
import zlib

from cpersist.codecs import Codec

_XOR = bytes(b ^ 0xA5 for b in range(256))


class ToyEP(Codec):
    """zlib with every byte XORed by 0xA5."""

    codec_id = "toy-ep"

    def encode(self, buf, typesize=1, hint=None):
        return zlib.compress(buf, self.level).translate(_XOR)

    def decode_into(self, src, out):
        out[:] = zlib.decompress(bytes(src).translate(_XOR))


class Misnamed(ToyEP):
    codec_id = "something-else"
'''


@pytest.fixture
def toycodec(tmp_path, monkeypatch):
    """A real distribution, toycodec 0.0, declaring entry points in cpersist.codecs."""
    site = tmp_path / "site"
    info = site / "toycodec-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toycodec\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(f"""\
        [{ENTRY_POINT_GROUP}]
        toy-ep = toycodec:ToyEP
        toy-missing = toycodec_nowhere:Nothing
        toy-misnamed = toycodec:Misnamed
        """))
    (site / "toycodec.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(site))
    yield site
    for name in ("toy-ep", "toy-missing", "toy-misnamed"):
        registry._registry.pop(name, None)
    sys.modules.pop("toycodec", None)


def test_entry_point_codec_is_loaded_by_name_on_demand(tmp_path, toycodec):
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    assert {"toy-ep", "toy-missing"} <= {ep.name for ep in found}
    assert {"toy-ep", "toy-missing", "toy-misnamed"} <= set(available_codecs())
    assert "toycodec" not in sys.modules  # listed from metadata, not imported
    obj = {"a": compressible("<f8", (200, 300)), "b": compressible("S4", (9000,))}
    path = tmp_path / "ep.cp"
    cpersist.dump(obj, path, compress=("toy-ep", 6))
    assert "toycodec" in sys.modules
    assert set(encoded_codecs(path)) == {"toy-ep"}
    assert type(get_codec("toy-ep")).__module__ == "toycodec"
    assert_same(obj, cpersist.load(path))
    # A fresh process finds it the same way, from the file's codec id alone.
    code = ("import sys, cpersist; cpersist.load(sys.argv[1]); "
            "print(sorted(m for m in sys.modules if m.startswith('toycodec')))")
    out = run_code(code, path, env=fresh_env(toycodec), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['toycodec']"


def test_entry_point_that_fails_to_load_is_named(toycodec):
    with pytest.raises(ImportError) as info:
        get_codec("toy-missing")
    message = str(info.value)
    assert "toy-missing = toycodec_nowhere:Nothing" in message
    assert "package toycodec 0.0" in message and "failed to load" in message
    with pytest.raises(ImportError, match="toy-misnamed = toycodec:Misnamed.*codec_id 'toy-misnamed'"):
        get_codec("toy-misnamed")
    with pytest.raises(ImportError, match="toy-missing"):
        cpersist.dump(1, os.devnull, compress="toy-missing")


def test_file_whose_entry_point_fails_to_load_names_it(tmp_path, toycodec):
    path = tmp_path / "f.cp"
    cpersist.dump({"a": compressible("<i4", (100_000,))}, path, compress="toy-ep")
    registry._registry.pop("toy-ep")
    (toycodec / "toycodec.py").write_text("raise RuntimeError('toycodec is broken')\n")
    sys.modules.pop("toycodec")
    with pytest.raises(cpersist.CorruptFileError) as info:
        cpersist.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "codec 'toy-ep': entry point toy-ep = toycodec:ToyEP" in message
    assert "package toycodec 0.0" in message and "RuntimeError: toycodec is broken" in message


def test_entry_points_never_shadow_builtin_codecs(tmp_path, toycodec):
    (toycodec / "toycodec-0.0.dist-info" / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nzstd = toycodec:ToyEP\n")
    assert available_codecs().count("zstd") == 1
    assert type(get_codec("zstd")).__module__ == "cpersist.codecs.zstd"
    assert "toycodec" not in sys.modules


# -- lazy imports -----------------------------------------------------------------

CODEC_LIBRARIES = ("blosc2", "zstandard", "lz4")


def imported_after(code, watched=CODEC_LIBRARIES + ("numpy",)):
    """The modules of ``watched`` and the benchmark modules a fresh process
    imported after running ``code``."""
    probe = (f"import sys; print('MODULES:', *(sorted(set(sys.modules) & {set(watched)!r}) + "
             f"sorted(m for m in sys.modules if m.startswith('cpersist.benchmarks'))))")
    out = run_code(f"{code}\n{probe}", timeout=120)
    assert out.returncode == 0, out.stderr
    modules = [line for line in out.stdout.splitlines() if line.startswith("MODULES:")]
    return set(modules[-1].split()[1:])


def test_import_cpersist_imports_no_codec_library_nor_numpy():
    assert imported_after("import cpersist") == set()


def test_raw_dump_and_load_import_no_codec_library(tmp_path):
    path = tmp_path / "raw.cp"
    code = (f"import numpy as np, cpersist\n"
            f"obj = {{'a': np.arange(10**6), 'b': [np.ones((3, 4), 'f4'), 'text']}}\n"
            f"cpersist.dump(obj, {str(path)!r}, compress=0)\n"
            f"back = cpersist.load({str(path)!r})\n"
            f"assert (back['a'] == obj['a']).all()\n"
            f"cpersist.verify({str(path)!r}); cpersist.inspect({str(path)!r})")
    assert imported_after(code) == {"numpy"}


def test_a_load_imports_only_what_reading_needs(tmp_path):
    """A script that loads a model once pays for every module the load
    imports: not python-blosc2 (reading goes through its C library), nor
    numpy.ma, secrets or tempfile, which only writing or other sources need."""
    path = tmp_path / "model.cp"
    model = {"coef": np.cumsum(np.ones((1000, 1000), np.float32), axis=1), "n": 3}
    cpersist.dump(model, path, compress="zstd-auto")
    code = (f"import numpy as np, cpersist\n"
            f"back = cpersist.load({str(path)!r})\n"
            f"assert np.array_equal(back['coef'], np.cumsum(np.ones((1000, 1000), np.float32), 1))")
    assert imported_after(code, ("blosc2", "numpy.ma", "secrets", "tempfile")) == set()


@pytest.mark.parametrize("codec, libraries", [
    ("zlib", set()), ("zstd", {"zstandard"}), ("lz4", {"lz4"}), ("blosc:zstd", set()),
])
def test_a_codec_imports_only_its_own_library(tmp_path, codec, libraries):
    path = tmp_path / "f.cp"
    code = (f"import numpy as np, cpersist\n"
            f"cpersist.dump(np.arange(10**5), {str(path)!r}, compress={codec!r})\n"
            f"assert (cpersist.load({str(path)!r}) == np.arange(10**5)).all()")
    assert imported_after(code) == {"numpy"} | libraries


def test_zstd_auto_imports_only_zstandard(tmp_path):
    """Its filtered chunks are Blosc chunks, made through the shipped C
    library, never through python-blosc2."""
    path = tmp_path / "f.cp"
    objects = "{'names': ['x'] * 100000, 'table': {i: str(i) for i in range(20000)}}"
    code = (f"import numpy as np, cpersist\n"
            f"obj = {objects}\n"
            f"cpersist.dump(obj, {str(path)!r}, compress=3)\n"
            f"assert cpersist.load({str(path)!r}) == obj")
    assert imported_after(code) == {"numpy", "zstandard"}
    code = (f"import numpy as np, cpersist\n"
            f"cpersist.dump(np.arange(10**6), {str(path)!r}, compress=3)")
    assert {"numpy", "zstandard"} == imported_after(code)


@pytest.mark.parametrize("args", [["--help"], ["convert", "--help"], ["--version"]])
def test_command_line_help_imports_no_numpy_codec_or_benchmark(args):
    code = (f"import sys; from cpersist.cli import main\n"
            f"try:\n    main({args!r})\nexcept SystemExit:\n    pass")
    assert imported_after(code) == set()


# -- help texts ------------------------------------------------------------------

def test_convert_help_lists_the_default_and_every_codec_name(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    assert main(["convert", "--help"]) == 0
    out = capsys.readouterr().out
    assert f"default codec ({registry.DEFAULT_CODEC})" in out
    assert registry.DEFAULT_CODEC == "zstd-auto"
    names = ", ".join(available_codecs() + sorted(registry.ALIASES))
    assert f"a codec name ({names}) at level 3" in out


def test_bench_help_names_the_cpersist_bench_verb(capsys):
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: cpersist bench ")
    assert "python -m cpersist.benchmarks" not in out.split("\n\n")[0]
