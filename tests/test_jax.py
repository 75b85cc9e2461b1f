"""JAX arrays as sections: stored from their host buffers, loaded back as JAX
arrays (sharded where the devices exist) or as numpy, restricted loads,
memory maps, lazy slices and flax/optax pytrees."""

import os
import pickle
import textwrap

import numpy as np
import pytest

import cpersist

from ._fresh import fresh_env, run_code
from .test_tensors_lean import _modules_after

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")


def _same(loaded, original):
    """Same type, dtype, shape and bytes (and sharding)."""
    assert isinstance(loaded, jax.Array) and type(loaded) is type(original)
    assert loaded.dtype == original.dtype and loaded.shape == original.shape
    assert np.asarray(loaded).tobytes() == np.asarray(original).tobytes()
    assert loaded.sharding == original.sharding


def _every_dtype():
    """One array of each dtype jax has on the CPU (with 64-bit types on),
    of values each type can hold (no NaN, whose payload jax may change)."""
    names = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
             "uint64", "float16", "float32", "float64", "complex64", "complex128",
             "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz",
             "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e3m4", "float8_e4m3",
             "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4", "int2", "uint2"]
    reals = np.linspace(-3, 3, 15).reshape(3, 5)
    arrays = {}
    for name in names:
        dtype = np.dtype(getattr(ml_dtypes, name, None) or name)
        if dtype == np.bool_:
            host = np.arange(15).reshape(3, 5) % 3 == 1
        elif name.startswith(("int", "uint")):
            low = 0 if name.startswith("u") else -2
            host = (np.arange(15).reshape(3, 5) % 4 + low).astype(dtype)
        elif dtype.kind == "c":
            host = (reals + 1j * reals[::-1]).astype(dtype)
        else:
            host = (np.abs(reals) + 0.5 if name == "float8_e8m0fnu" else reals).astype(dtype)
        arrays[name] = jnp.asarray(host)
        assert arrays[name].dtype == dtype
    return arrays


@pytest.mark.parametrize("compress", [0, 3])
def test_every_dtype_round_trips(tmp_path, compress):
    path = tmp_path / "j.cp"
    with jax.enable_x64(True):
        arrays = _every_dtype()
        big = jnp.arange(100_000, dtype=jnp.float32).astype(jnp.bfloat16).reshape(1000, 100)
        obj = {"arrays": arrays, "big": big, "scalar": jnp.float32(2.5), "again": big}
        cpersist.dump(obj, path, compress=compress)
        loaded = cpersist.load(path)
        for name, original in arrays.items():
            _same(loaded["arrays"][name], original)
        _same(loaded["big"], big)
        _same(loaded["scalar"], obj["scalar"])
        assert loaded["again"] is loaded["big"]  # one array referenced twice: stored once
    listed = {entry["path"]: entry for entry in cpersist.inspect(path)["arrays"]}
    assert listed["obj['big']"]["dtype"] == "bfloat16"
    assert listed["obj['big']"]["shape"] == (1000, 100)


def test_a_single_device_array_is_stored_from_its_own_buffer():
    from cpersist.pickling.jax_arrays import JaxReducer

    array = jnp.arange(4096, dtype=jnp.float32).reshape(64, 64)
    func, (data, placement) = JaxReducer(cpersist.pickler.rebuild_jax).reduce(array)
    assert placement is None and isinstance(data, np.ndarray)
    assert data.ctypes.data == array.unsafe_buffer_pointer()  # no copy
    assert func is cpersist.pickler.rebuild_jax


def test_loads_as_numpy_on_request_without_importing_jax(tmp_path):
    path = tmp_path / "j.cp"
    w = jnp.linspace(0, 1, 50_000, dtype=jnp.float32).astype(jnp.bfloat16)
    cpersist.dump({"w": w, "b": jnp.ones(3, jnp.int32)}, path, compress=3)
    loaded = cpersist.load(path, jax_as_numpy=True)
    assert type(loaded["w"]) is np.ndarray and loaded["w"].dtype == ml_dtypes.bfloat16
    assert loaded["w"].tobytes() == np.asarray(w).tobytes()
    assert loaded["b"].tolist() == [1, 1, 1] and loaded["b"].dtype == np.int32
    for trusted in (True, False):  # also from bytes, past the compact dump's shortcut
        small = cpersist.loads(cpersist.dumps({"b": jnp.ones(3)}), trusted=trusted,
                               jax_as_numpy=True)
        assert type(small["b"]) is np.ndarray and small["b"].tolist() == [1, 1, 1]
        _same(cpersist.loads(cpersist.dumps({"b": w}), trusted=trusted)["b"], w)
    check = (f"import cpersist; d = cpersist.load({str(path)!r}, jax_as_numpy=True)\n"
             f"assert d['w'].dtype.name == 'bfloat16'\n"
             f"cpersist.inspect({str(path)!r})")
    assert not any(m == "jax" or m.startswith(("jax.", "jaxlib")) for m in _modules_after(check))
    assert "jax" in _modules_after(f"import cpersist; cpersist.load({str(path)!r})")


def test_without_jax_a_load_says_what_to_install(tmp_path):
    path = tmp_path / "j.cp"
    cpersist.dump({"w": jnp.ones(10_000)}, path)
    code = ("import sys; sys.modules['jax'] = None\n"  # import jax raises ImportError
            "import cpersist\n"
            "try:\n"
            f"    cpersist.load({str(path)!r})\n"
            "except cpersist.DtypeLibraryError as exc:\n"
            "    print('ERROR', exc)\n")
    out = run_code(code, check=True)
    assert "pip install jax" in out.stdout and "jax_as_numpy=True" in out.stdout


def test_restricted_loads_accept_jax_arrays_and_refuse_code(tmp_path):
    path = tmp_path / "j.cp"
    obj = {"w": jnp.arange(30_000, dtype=jnp.float32), "b": jnp.ones((2, 2), jnp.bfloat16)}
    cpersist.dump(obj, path, compress=3)
    loaded = cpersist.load(path, trusted=False)
    _same(loaded["w"], obj["w"])
    _same(loaded["b"], obj["b"])

    class Code:
        def __reduce__(self):
            return eval, ("1 + 1",)

    cpersist.dump({"w": obj["w"], "code": Code()}, path)
    with pytest.raises(cpersist.UntrustedObjectError, match="eval"):
        cpersist.load(path, trusted=False)


class _Forged:
    """Pickles as a call of rebuild_jax with the arguments given."""

    def __init__(self, *args):
        self.args = args

    def __reduce__(self):
        return cpersist.pickler.rebuild_jax, self.args


_PART = np.zeros((2, 4), np.float32)


@pytest.mark.parametrize("data, placement", [
    (("not an array",), None),
    ((_PART, _PART), {"shape": (4, 4), "index": (((0, 2), (0, 4)), ((1, 3), (0, 4)))}),
    ((_PART,), {"shape": (4, 4), "index": (((0, 2), (0, 4)),)}),  # half the array missing
    ((_PART, _PART), {"shape": (4, 4), "index": (((0, 2), (0, 4)), ((2, 4), (0, 5)))}),
    ((_PART, _PART.astype(np.int32)), {"shape": (4, 4),
                                       "index": (((0, 2), (0, 4)), ((2, 4), (0, 4)))}),
    ((_PART, _PART), {"shape": (4, 4), "index": (((0, 2), (0, 4)), ((2, 4), (0, 4))),
                      "mesh": (2,), "axes": ("a",), "axis_types": (), "spec": ("b",)}),
    ((_PART, _PART), {"shape": (4, 4), "index": (((0, 2), (0, 4)), ((2, 4), (0, 4))),
                      "code": "os.system"}),
])
def test_forged_jax_arrays_are_refused(tmp_path, data, placement):
    path = tmp_path / "f.cp"
    cpersist.dump({"x": _Forged(data[0] if placement is None else data, placement)}, path)
    for trusted in (False, True):
        with pytest.raises((cpersist.CorruptFileError, pickle.UnpicklingError),
                           match="bad JAX array"):
            cpersist.load(path, trusted=trusted)


def test_memory_mapped_loads_leave_the_file_as_it_is(tmp_path):
    path = tmp_path / "j.cp"
    w = jnp.arange(200_000, dtype=jnp.float32).reshape(400, 500)
    cpersist.dump({"w": w}, path)
    before = path.read_bytes()
    loaded = cpersist.load(path, mmap_mode="r")
    _same(loaded["w"], w)
    assert float((loaded["w"] + 1).sum()) == float((w + 1).sum())
    # jax may use the map in place: a computation donating the array must
    # neither write to the file nor fault on the read-only map.
    doubled = jax.jit(lambda x: x * 2, donate_argnums=0)(loaded["w"])
    assert float(doubled[0, 3]) == 6.0
    mapped = cpersist.load(path, mmap_mode="r", jax_as_numpy=True)["w"]
    assert isinstance(mapped, np.memmap) and not mapped.flags.writeable
    assert mapped.tobytes() == np.asarray(w).tobytes()
    del loaded, mapped
    assert path.read_bytes() == before


def test_a_stored_jax_array_is_sliced_lazily(tmp_path):
    path = tmp_path / "j.cp"
    w = jnp.arange(300_000, dtype=jnp.float32).astype(jnp.bfloat16).reshape(3000, 100)
    cpersist.dump({"layer": {"w": w}}, path, compress=3)
    with cpersist.open(path) as handle:
        part = handle.arrays["obj['layer']['w']"][1000:1010, 5]
        assert type(part) is np.ndarray and part.dtype == ml_dtypes.bfloat16
        assert part.tobytes() == np.asarray(w)[1000:1010, 5].tobytes()
        lazy = handle.load(lazy=True)["layer"]["w"]
        assert isinstance(lazy, cpersist.LazyArray) and lazy.shape == (3000, 100)
        assert np.asarray(lazy[-1]).tobytes() == np.asarray(w)[-1].tobytes()


def test_prng_key_arrays_keep_jax_pickling(tmp_path):
    # Keys have no numpy data: jax pickles them, which trusted loads run.
    path = tmp_path / "k.cp"
    key = jax.random.key(42)
    cpersist.dump({"key": key, "w": jnp.ones(3)}, path)
    loaded = cpersist.load(path)
    assert jax.random.key_data(loaded["key"]).tolist() == jax.random.key_data(key).tolist()
    with pytest.raises(cpersist.UntrustedObjectError, match="jax"):
        cpersist.load(path, trusted=False)


def test_flax_params_and_optax_adam_state_round_trip(tmp_path):
    flax = pytest.importorskip("flax")
    optax = pytest.importorskip("optax")
    from flax import linen as nn

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(64)(x))
            return nn.Dense(10, param_dtype=jnp.bfloat16)(x)

    params = Model().init(jax.random.key(0), jnp.ones((1, 32)))
    state = optax.adam(1e-3).init(params)
    tree = {"params": params, "frozen": flax.core.freeze(params), "opt": state, "step": 7}
    path = tmp_path / "ckpt.cp"
    cpersist.dump(tree, path, compress=3)
    for trusted in (True, ["flax", "optax"]):
        loaded = cpersist.load(path, trusted=trusted)
        assert jax.tree.structure(loaded) == jax.tree.structure(tree)
        for got, want in zip(jax.tree.leaves(loaded), jax.tree.leaves(tree)):
            if isinstance(want, jax.Array):
                _same(got, want)
            else:
                assert got == want and type(got) is type(want)
        assert type(loaded["opt"][0]) is type(state[0])  # optax's NamedTuple
    # The optimizer state's classes are optax's: a plain restricted load refuses them.
    with pytest.raises(cpersist.UntrustedObjectError, match="optax"):
        cpersist.load(path, trusted=False)


_SHARDED = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp, cpersist, sys
    from jax.sharding import NamedSharding, PartitionSpec as P
    from cpersist.pickler import rebuild_jax
    from cpersist.pickling.jax_arrays import JaxReducer
    path = sys.argv[1]
    mesh = jax.make_mesh((2, 2), ("a", "b"))
    base = jnp.arange(64 * 48, dtype=jnp.float32).reshape(64, 48)
    arrays = {
        "rows": jax.device_put(base, NamedSharding(mesh, P("a", None))),
        "grid": jax.device_put(base.astype(jnp.bfloat16), NamedSharding(mesh, P("b", "a"))),
        "flat": jax.device_put(base, NamedSharding(mesh, P(None, ("a", "b")))),
        "copies": jax.device_put(base, NamedSharding(mesh, P())),
    }
    # Each distinct shard stored from its own device buffer, replicas once.
    _, (shards, placement) = JaxReducer(rebuild_jax).reduce(arrays["rows"])
    assert len(shards) == 2 and placement["spec"] == ("a", None)
    pointers = {s.data.unsafe_buffer_pointer() for s in arrays["rows"].addressable_shards}
    assert {shard.ctypes.data for shard in shards} <= pointers
    cpersist.dump(arrays, path, compress=3)
    # A background dump (which copies each shard at the call) writes the same file.
    cpersist.dump(arrays, path + ".bg", compress=3, background=True).result()
    with open(path, "rb") as plain, open(path + ".bg", "rb") as background:
        assert plain.read() == background.read()
    loaded = cpersist.load(path, trusted=False)
    for name, array in arrays.items():
        got = loaded[name]
        assert got.sharding == array.sharding, (name, got.sharding)
        assert got.dtype == array.dtype and got.shape == array.shape
        assert np.asarray(got).tobytes() == np.asarray(array).tobytes()
    # A spec that does not fit the shape (a dimension of 5 over 2 devices)
    # loads on the default device.
    from cpersist.pickler import rebuild_jax as rebuild
    odd = {"shape": (5,), "index": (((0, 5),),), "mesh": (2, 2), "axes": ("a", "b"),
           "axis_types": (), "spec": ("a",)}
    got = rebuild((np.arange(5.0),), odd)
    assert got.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])
    assert np.asarray(got).tolist() == [0, 1, 2, 3, 4]
    numpy = cpersist.load(path, jax_as_numpy=True)
    assert all(type(v) is np.ndarray and v.tobytes() == np.asarray(arrays[k]).tobytes()
               for k, v in numpy.items())
    print("OK")
""")

_ONE_DEVICE = textwrap.dedent("""
    import numpy as np, jax, cpersist, sys
    loaded = cpersist.load(sys.argv[1])
    assert jax.device_count() == 1
    for name, got in loaded.items():
        assert got.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0]), name
    assert np.asarray(loaded["rows"]).tobytes() == np.arange(64 * 48, dtype=np.float32).tobytes()
    print("OK")
""")


def test_sharded_arrays_keep_their_sharding_where_the_devices_exist(tmp_path):
    path = str(tmp_path / "sharded.cp")
    four = fresh_env(XLA_FLAGS="--xla_force_host_platform_device_count=4")
    out = run_code(_SHARDED, path, env=four, check=True)
    assert out.stdout.split()[-1] == "OK"
    # With fewer devices than the mesh needs: on the default device.
    out = run_code(_ONE_DEVICE, path, env=fresh_env(XLA_FLAGS=None), check=True)
    assert out.stdout.split()[-1] == "OK"


_PEAK = textwrap.dedent("""
    import sys, jax, jax.numpy as jnp, cpersist
    def peak_mb():
        with open("/proc/self/status") as status:
            return next(int(l.split()[1]) for l in status if l.startswith("VmHWM")) / 1024
    path, compress = sys.argv[1], int(sys.argv[2])
    x = jax.random.normal(jax.random.key(0), (16 << 20,), jnp.float32)  # 64 MiB
    cpersist.dump({"x": x}, path, compress=compress)
    cpersist.load(path)  # warm up
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak starts again from here
    before = peak_mb()
    loaded = cpersist.load(path)["x"]
    print(peak_mb() - before)
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="Linux only")
def test_a_load_reads_jax_arrays_into_memory_jax_uses_in_place(tmp_path):
    # Decoded into 64-byte aligned memory, which jax.device_put takes as is:
    # the load's peak is the array's size, not twice it.
    out = run_code(_PEAK, tmp_path / "x.cp", "3", check=True)
    assert float(out.stdout.split()[-1]) < 64 * 1.3


# -- files written before --------------------------------------------------------------------

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "jax-2.2")


def fixture_arrays():
    """The numpy data of the JAX arrays in the files under ``fixtures/jax-2.2``
    (written by format 2.2, the first to store JAX arrays, with
    :func:`write_fixtures`): sections, an inline array, and ``"sharded"``,
    dumped sharded over a 2 x 2 mesh of CPU devices as ``P("a", None)``."""
    ramp = np.linspace(-2.0, 2.0, 64 * 32)
    return {"w": ramp.astype(ml_dtypes.bfloat16).reshape(64, 32),
            "i": (np.arange(16 * 64) % 256 - 128).astype(np.int8).reshape(16, 64),
            "b": np.linspace(0.0, 1.0, 7).astype(np.float32),
            "sharded": ramp.astype(np.float32).reshape(64, 32)}


def write_fixtures(directory=FIXTURES):
    """Run with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``."""
    from jax.sharding import NamedSharding, PartitionSpec

    arrays = {name: jnp.asarray(data) for name, data in fixture_arrays().items()}
    mesh = jax.make_mesh((2, 2), ("a", "b"))
    arrays["sharded"] = jax.device_put(arrays["sharded"],
                                       NamedSharding(mesh, PartitionSpec("a", None)))
    obj = {"arrays": arrays, "step": 7}
    os.makedirs(directory, exist_ok=True)
    cpersist.dump(obj, os.path.join(directory, "raw.cp"))
    cpersist.dump(obj, os.path.join(directory, "zstd3.cp"), compress=("zstd", 3),
                  chunk_size=512)


@pytest.mark.parametrize("name", ["raw.cp", "zstd3.cp"])
def test_files_written_by_format_2_2_load(name):
    path = os.path.join(FIXTURES, name)
    assert cpersist.inspect(path)["format"] == "2.2"
    expected = fixture_arrays()
    modes = [{}, {"trusted": False}] + ([{"mmap_mode": "r"}] if name == "raw.cp" else [])
    for kwargs in modes:
        loaded = cpersist.load(path, **kwargs)
        assert loaded["step"] == 7
        for key, want in expected.items():
            got = loaded["arrays"][key]
            assert isinstance(got, jax.Array) and got.dtype == want.dtype
            assert got.shape == want.shape and np.asarray(got).tobytes() == want.tobytes()
    as_numpy = cpersist.load(path, jax_as_numpy=True)["arrays"]
    for key, want in expected.items():
        assert type(as_numpy[key]) is np.ndarray and as_numpy[key].dtype == want.dtype
        assert as_numpy[key].tobytes() == want.tobytes()
