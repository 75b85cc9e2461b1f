"""numpy arrays of the ml_dtypes types (bfloat16, the float8, float6 and
float4 families, the small integers, the 32-bit complex types): sections
recorded under their type's name, loaded back as the same dtype by every
path (compressed or not, mapped, sliced lazily, restricted), named by
``info`` without ml_dtypes, and never a reason to import anything else."""

import os
import pickle
import sys

import numpy as np
import pytest

import cpersist
from cpersist.container import ContainerReader
from cpersist.format import named_dtypes

from ._forge import call, container_bytes, forge, proto, s, stack_global
from ._fresh import ROOT, run_code
from .conftest import COMPRESSIONS, assert_same, assert_same_result

ml_dtypes = pytest.importorskip("ml_dtypes")

#: Every type ml_dtypes has, by name.
ML_TYPES = sorted(name for name, value in vars(ml_dtypes).items()
                  if isinstance(value, type) and issubclass(value, np.generic))


def values(name, shape, seed=0):
    """Values of the type ``name`` spread over its range (converted from
    float64 or int64 as a user's would be)."""
    scalar = getattr(ml_dtypes, name)
    rng = np.random.default_rng(seed)
    if np.dtype(scalar).kind == "W":  # complex32, bcomplex32
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(scalar)
    try:
        info = ml_dtypes.iinfo(scalar)
    except (TypeError, ValueError):
        info = ml_dtypes.finfo(scalar)
        low, high = max(float(info.min), -4.0), min(float(info.max), 4.0)
        return rng.uniform(low, high, shape).astype(scalar)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(scalar)


def arrays_of(name, seed=0):
    """Each layout of an array of type ``name``: at ``chunk_size=1024``,
    ``"c"`` is a section of several chunks, the others are kept in a
    compressed file's pickle stream."""
    big = values(name, (16, 80), seed)
    return {"c": big, "f": np.asfortranarray(values(name, (5, 4, 3), seed + 1)),
            "view": big[::2, ::-4], "zero_d": big[1, 2, ...],
            "empty": np.zeros((0, 3), getattr(ml_dtypes, name))}


def test_every_type_of_ml_dtypes_is_stored_by_name():
    assert len(ML_TYPES) >= 20  # ml_dtypes 0.6
    for name in ML_TYPES:
        assert named_dtypes.ITEMSIZES.get(name) == np.dtype(getattr(ml_dtypes, name)).itemsize


@pytest.mark.parametrize("compress", COMPRESSIONS)
@pytest.mark.usefixtures("sections")
def test_every_type_round_trips_at_every_compress_setting(compress, tmp_path):
    obj = {name: arrays_of(name, seed) for seed, name in enumerate(ML_TYPES)}
    path = tmp_path / "ml.cp"
    cpersist.dump(obj, path, compress=compress, chunk_size=1024)
    assert_same(obj, cpersist.load(path))
    # Nothing to allow: the file names no ml_dtypes (nor numpy) global.
    assert_same(obj, cpersist.load(path, trusted=False))
    info = cpersist.inspect(path)
    assert set(info["globals"]) <= {"cpersist.pickler.inline_array", "numpy.asfortranarray"}
    named = {a["path"]: a["dtype"] for a in info["arrays"] + info["inline_arrays"]}
    assert named == {f"obj[{name!r}][{key!r}]": name for name in ML_TYPES
                     for key in obj[name]}
    sections = {a["path"] for a in info["arrays"]}
    if compress == 0:
        assert len(sections) == len(named)
    elif compress != "max":  # max may keep every array in the stream
        assert sections == {f"obj[{name!r}]['c']" for name in ML_TYPES}


@pytest.mark.usefixtures("sections")
def test_raw_arrays_are_memory_mapped_as_their_type(tmp_path):
    obj = {name: values(name, (300, 40), seed) for seed, name in enumerate(ML_TYPES)}
    path = tmp_path / "mapped.cp"
    cpersist.dump(obj, path)
    back = cpersist.load(path, mmap_mode="r")
    assert_same(obj, back, mmap=True)
    for arr in back.values():
        assert isinstance(arr, np.memmap) and not arr.flags.writeable


@pytest.mark.parametrize("compress", [0, 3])
def test_lazy_slices_read_only_what_they_select(compress, tmp_path):
    obj = {name: values(name, (500, 64), seed) for seed, name in enumerate(ML_TYPES)}
    path = tmp_path / "lazy.cp"
    cpersist.dump(obj, path, compress=compress, chunk_size=4096)
    with cpersist.open(path, trusted=False) as f:
        for name in ML_TYPES:
            lazy = f.arrays[f"obj[{name!r}]"]
            assert lazy.dtype == obj[name].dtype and lazy.shape == (500, 64)
            assert name in repr(lazy)
            for index in (np.s_[100:140, ::7], np.s_[-1], np.s_[..., 3], np.s_[::-50, 60:]):
                assert_same_result(obj[name][index], lazy[index], f"{name}{index}")
        loaded = f.load(lazy=True)
        assert_same(obj, {name: np.asarray(lazy) for name, lazy in loaded.items()})


def _chunk_tables(path):
    """Per section: its codec and each chunk's stored and raw lengths,
    checksum of the stored bytes and flag (everything but where it is)."""
    with open(path, "rb") as file:
        reader = ContainerReader(file, str(path))
        return [(None if s.codec is None else s.codec.get_config(),
                 [tuple(chunk[1:]) for chunk in s.chunks]) for s in reader.sections]


def _bf16_weights(n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 0.02).astype(ml_dtypes.bfloat16)


def test_convert_compresses_and_names_as_a_dump_does(tmp_path):
    obj = {"w": _bf16_weights(1 << 20), "f8": values("float8_e4m3fn", (3000, 100))}
    raw, dumped, converted = (tmp_path / f"{n}.cp" for n in ("raw", "dumped", "converted"))
    cpersist.dump(obj, raw)
    cpersist.dump(obj, dumped, compress=3)
    cpersist.convert(raw, converted, compress=3)
    # Sections 0 and 1, the arrays: the same codec, form and bytes.
    assert _chunk_tables(converted)[:2] == _chunk_tables(dumped)[:2]
    assert [a["dtype"] for a in cpersist.inspect(converted)["arrays"]] == [
        "bfloat16", "float8_e4m3fn"]
    assert_same(obj, cpersist.load(converted, trusted=False))


@pytest.mark.parametrize("level", [3, 6])
def test_bf16_arrays_compress_as_torch_bf16_tensors_of_the_same_bits(level, tmp_path):
    torch = pytest.importorskip("torch")
    weights = _bf16_weights(3 << 18)  # 1.5 MiB: two chunks
    tensor = torch.from_numpy(weights.view(np.int16)).view(torch.bfloat16)
    cpersist.dump({"w": weights}, tmp_path / "array.cp", compress=level, chunk_size=1 << 20)
    cpersist.dump({"w": tensor}, tmp_path / "tensor.cp", compress=level, chunk_size=1 << 20)
    array_section = _chunk_tables(tmp_path / "array.cp")[0]
    assert array_section == _chunk_tables(tmp_path / "tensor.cp")[0]
    assert len(array_section[1]) == 2


# -- without ml_dtypes, and what a file may name -------------------------------------------

def test_without_ml_dtypes_loads_say_what_to_install_and_info_names_the_type(tmp_path):
    sections, inline = tmp_path / "sections.cp", tmp_path / "inline.cp"
    cpersist.dump({"w": values("bfloat16", (300, 300))}, sections)
    cpersist.dump({"b": values("float8_e5m2", (10,))}, inline, compress=3)
    code = f"""
import sys
sys.modules["ml_dtypes"] = None  # as if it were not installed: importing it fails
import cpersist
from cpersist.cli import main
for path, name in (({str(sections)!r}, "bfloat16"), ({str(inline)!r}, "float8_e5m2")):
    info = cpersist.inspect(path)
    assert [a["dtype"] for a in info["arrays"] + info["inline_arrays"]] == [name], info
    cpersist.verify(path)
    assert main(["info", path]) == 0
    for trusted in (True, False):
        try:
            cpersist.load(path, trusted=trusted)
        except cpersist.DtypeLibraryError as exc:
            assert isinstance(exc, ImportError)
            print("ERROR", exc)
        else:
            raise AssertionError("loaded without ml_dtypes")
"""
    out = run_code(code)
    assert out.returncode == 0, out.stderr
    errors = [line for line in out.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 4
    assert all("pip install ml_dtypes" in line for line in errors)
    assert all(str(sections) in line and "ml_dtypes.bfloat16" in line for line in errors[:2])
    assert all("ml_dtypes.float8_e5m2" in line for line in errors[2:])
    assert "bfloat16" in out.stdout and "float8_e5m2" in out.stdout  # info's tables


@pytest.mark.usefixtures("sections")
def test_a_name_outside_the_table_is_refused_and_imports_nothing(tmp_path):
    unimported = "wave"  # a standard module no test imports
    assert unimported not in sys.modules
    cpersist.dump({"w": values("bfloat16", (100,))}, tmp_path / "w.cp")

    def rename(index):
        index["sections"][0]["meta"]["dtype"] = repr(unimported)

    forged = tmp_path / "forged.cp"
    forged.write_bytes(forge((tmp_path / "w.cp").read_bytes(), rename))
    inline = tmp_path / "inline.cp"
    inline.write_bytes(container_bytes(proto(4, call(
        stack_global("cpersist.pickler", "inline_array"),
        pickle.SHORT_BINBYTES + b"\x02\0\0", s(unimported),
        pickle.BININT1 + b"\x02" + pickle.TUPLE1, s("C")))))
    for path in (forged, inline):
        for trusted in (True, False):
            with pytest.raises(cpersist.CorruptFileError):
                cpersist.load(path, trusted=trusted)
    with pytest.raises(cpersist.CorruptFileError, match="bad array description"):
        cpersist.inspect(forged)
    assert unimported not in sys.modules


# -- files written before --------------------------------------------------------------------

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "ml_dtypes-2.2")


def _steady(name, shape):
    """Values of type ``name`` that every numpy version makes alike (no
    random generator, whose streams may change)."""
    scalar = getattr(ml_dtypes, name)
    n = int(np.prod(shape))
    if np.dtype(scalar).kind == "W":
        ramp = np.linspace(-3.0, 3.0, n)
        return (ramp + 1j * ramp[::-1]).astype(scalar).reshape(shape)
    try:
        info = ml_dtypes.iinfo(scalar)
    except (TypeError, ValueError):
        info = ml_dtypes.finfo(scalar)
        low, high = max(float(info.min), -4.0), min(float(info.max), 4.0)
        return np.linspace(low, high, n).astype(scalar).reshape(shape)
    span = int(info.max) - int(info.min) + 1
    return (np.arange(n) % span + int(info.min)).astype(scalar).reshape(shape)


def fixture_object():
    """What the files under ``fixtures/ml_dtypes-2.2`` hold (written by
    format 2.2, the first to store ml_dtypes arrays as sections, with
    :func:`write_fixtures`): a section and an inline array of every type."""
    obj = {name: {"big": _steady(name, (16, 64)), "small": _steady(name, (7,))}
           for name in sorted(named_dtypes.ITEMSIZES)}
    obj["step"] = 7
    return obj


def write_fixtures(directory=FIXTURES):
    os.makedirs(directory, exist_ok=True)
    cpersist.dump(fixture_object(), os.path.join(directory, "raw.cp"))
    cpersist.dump(fixture_object(), os.path.join(directory, "zstd3.cp"),
                  compress=("zstd", 3), chunk_size=512)


@pytest.mark.parametrize("name", ["raw.cp", "zstd3.cp"])
def test_files_written_by_format_2_2_load(name):
    path = os.path.join(FIXTURES, name)
    assert cpersist.inspect(path)["format"] == "2.2"
    assert_same(fixture_object(), cpersist.load(path, trusted=False))
    if name == "raw.cp":
        assert_same(fixture_object(), cpersist.load(path, mmap_mode="r"), mmap=True)

