"""A trusted load of a local file of one raw array (``cpersist.pickling.single``):
which files it takes, and that it loads every file, forged or damaged, as
the general way (``load_source``) does."""

import os
import pickle
import random

import numpy as np
import pytest

import cpersist
from cpersist.container.single import single_raw_array
from cpersist.format import names
from cpersist.pickling.single import _StoredArray

from ._forge import call, container_bytes, proto, s, stack_global
from .conftest import assert_same
from .test_fuzz import mutate


def _taken(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return single_raw_array(fd, os.fstat(fd).st_size, str(path)) is not None
    finally:
        os.close(fd)


def _general(monkeypatch):
    """Loads from now on go the general way."""
    monkeypatch.setattr("cpersist.pickling.single.single_raw_array", lambda *args: None)


def _outcome(load):
    try:
        return load()
    except Exception as exc:  # noqa: BLE001 - the outcome compared
        return type(exc), str(exc)


RNG = np.random.default_rng(0)
ONE_ARRAY = {
    "float64": RNG.random(125_000),
    "fortran int16": np.asfortranarray(RNG.integers(-9, 9, (300, 400), dtype=np.int16)),
    "bool": RNG.random(300_000) > 0.5,
    "on a page": RNG.random(400_000),  # past a padding record
    "in a dict": {"weights": RNG.random((256, 512)).astype(np.float32), "name": "w",
                  "small": np.arange(5)},
    "twice": [RNG.random(20_000)] * 2,
    "a view": RNG.random(40_000)[::2],
}
#: Dumps of a bare ndarray, whose stream is only its stored_array call.
BARE = {"float64", "fortran int16", "bool", "on a page"}


@pytest.mark.parametrize("name", ONE_ARRAY)
def test_a_file_of_one_raw_array_is_read_from_its_two_ends(tmp_path, monkeypatch, name):
    path = tmp_path / "one.cp"
    obj = ONE_ARRAY[name]
    cpersist.dump(obj, path)
    assert _taken(path)

    def refuse(*args, **kwargs):
        raise AssertionError("the general reader was used")

    monkeypatch.setattr("cpersist.pickling.read.ContainerReader", refuse)
    if name in BARE:  # returned as read, its stream never unpickled
        monkeypatch.setattr("cpersist.pickling.single.ArrayUnpickler", refuse)
    loaded = cpersist.load(path)
    assert_same(obj, loaded)
    if name == "twice":
        assert loaded[0] is loaded[1]


def test_every_other_file_goes_the_general_way(tmp_path):
    big = RNG.random(125_000)
    kinds = {
        "compressed": lambda p: cpersist.dump(big, p, compress=3),
        "two arrays": lambda p: cpersist.dump([big, big + 1], p),
        "several chunks": lambda p: cpersist.dump(RNG.random(1_250_000), p),
        "one chunk of 6 MB": lambda p: cpersist.dump(RNG.random(750_000), p,
                                                     chunk_size=8 << 20),
        "small (compact)": lambda p: cpersist.dump(np.arange(10), p),
        "two dumps": lambda p: (cpersist.dump(big, p), _append_bytes(p, cpersist.dumps(big))),
        "edited": lambda p: (cpersist.dump(big, p), cpersist.load(p, mmap_mode="r+")),
        "record log": lambda p: cpersist.append(big, p),
    }
    for kind, make in kinds.items():
        path = tmp_path / f"{kind}.cp"
        make(path)
        assert not _taken(path), kind
        loaded = cpersist.load(path)
        assert isinstance(loaded, (np.ndarray, list)), kind


def _append_bytes(path, data):
    with open(path, "ab") as file:
        file.write(data)


def _stored_array(index):
    return call(stack_global(*names.STORED_ARRAY.rsplit(".", 1)),
                pickle_int(index))


def pickle_int(n):
    return b"J" + n.to_bytes(4, "little", signed=True)


@pytest.mark.parametrize("stream", [
    proto(4, _stored_array(0)),   # the array, as a dump asks for it
    proto(4, _stored_array(1)),   # the pickle stream's own section
    proto(4, _stored_array(7)),   # no such section
    # Both bare-array streams as dumps write them: the array's, and one
    # naming the stream's section.
    pickle.dumps(_StoredArray(0), pickle.HIGHEST_PROTOCOL),
    pickle.dumps(_StoredArray(1), pickle.HIGHEST_PROTOCOL),
    proto(4, call(stack_global(*names.STORED_ARRAY.rsplit(".", 1)), s("0"))),
    proto(4, s("never asks for the array")),
    b"\x80\x04not a pickle stream",
])
def test_a_forged_stream_is_loaded_or_refused_as_the_general_way_does(
        tmp_path, monkeypatch, stream):
    data = np.arange(20_000, dtype=np.float64)
    meta = {"kind": "array", "dtype": "'<f8'", "shape": [20_000], "order": "C", "path": "obj"}
    path = tmp_path / "forged.cp"
    path.write_bytes(container_bytes(stream, [(data.tobytes(), meta)]))
    assert _taken(path)
    quick = _outcome(lambda: cpersist.load(path))
    _general(monkeypatch)
    general = _outcome(lambda: cpersist.load(path))
    if isinstance(general, tuple):
        assert quick == general
    else:
        assert_same(general, quick)


def test_damaged_files_load_or_are_refused_as_the_general_way_does(tmp_path, monkeypatch):
    """Seeded damage, most of it outside the array's bytes (the header, the
    records, the stream, the index and the trailer): each file loads to the
    same object, or is refused with the same error, by both ways."""
    original = {"a": RNG.random(8192), "label": "x"}  # a section of 64 KiB
    data = cpersist.dumps(original, compress=0)
    path = tmp_path / "damaged.cp"
    path.write_bytes(data)
    assert _taken(path)
    rng = random.Random(20261130)
    cases = []
    for case in range(1500):
        damaged, what = mutate(data, rng)
        if case % 3:  # bytes outside the array's
            at = rng.choice([rng.randrange(200), len(data) - 1 - rng.randrange(900)])
            damaged = bytearray(data)
            damaged[at] ^= 1 << rng.randrange(8)
            damaged, what = bytes(damaged), f"flip a bit at {at}"
        cases.append((damaged, what))
    taken, quick = 0, []
    for damaged, _ in cases:
        path.write_bytes(damaged)
        taken += _taken(path)
        quick.append(_outcome(lambda: cpersist.load(path)))
    _general(monkeypatch)
    loaded = 0
    for (damaged, what), outcome in zip(cases, quick):
        path.write_bytes(damaged)
        general = _outcome(lambda: cpersist.load(path))
        if isinstance(general, tuple):
            assert outcome == general, what
        else:
            assert_same(general, outcome, what)
            loaded += 1
    # Damage in padding loads, in the array's bytes is refused (after the
    # quick way took the file), elsewhere mostly refused.
    assert taken > 0 and 0 < loaded < len(cases)


def test_a_file_of_one_jax_array_goes_the_general_way(tmp_path, monkeypatch):
    """Which reads JAX arrays into memory aligned as jax uses it in place."""
    jnp = pytest.importorskip("jax.numpy")
    from cpersist.pickling import read

    path = tmp_path / "jax.cp"
    array = jnp.arange(20_000, dtype=jnp.float32)
    cpersist.dump(array, path)
    assert _taken(path)
    opened = []
    real = read.ContainerReader
    monkeypatch.setattr(read, "ContainerReader",
                        lambda *args, **kwargs: opened.append(1) or real(*args, **kwargs))
    loaded = cpersist.load(path)
    assert opened == [1] and type(loaded) is type(array)
    assert np.asarray(loaded).tobytes() == np.asarray(array).tobytes()
