"""dump(..., background=True): the file holds the object as it was at the
call, written on a thread, atomically; errors come out of the future; one
dump pending at a time; pending dumps finish at interpreter exit."""

import io
import os
import sys
import threading

import numpy as np
import pytest

import cpersist
from cpersist._runtime.temporaries import TMP_SUFFIX

from ._fresh import run_code
from .conftest import assert_same

#: Events gating the background part of a dump (see Gate), by name.
_GATES = {}


def _gate(name):
    return Gate(name)


class Gate:
    """Pickles at once on the main thread (the snapshot), and waits for its
    event when pickled on another (the background dump, its file open)."""

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        if threading.current_thread() is not threading.main_thread():
            assert _GATES[self.name].wait(60), "the test did not open the gate"
        return _gate, (self.name,)


@pytest.fixture
def gate():
    name = f"gate{len(_GATES)}"
    _GATES[name] = threading.Event()
    yield name
    _GATES[name].set()  # a failing test leaves no dump waiting


def _numpy_object():
    rng = np.random.default_rng(0)
    c = rng.standard_normal((300, 200)).astype(np.float32)
    return {
        "c": c,
        "f": np.asfortranarray(rng.integers(0, 1000, (64, 50)).astype(np.int16)),
        "strided": rng.standard_normal((100, 80))[::3, ::2],
        "record": np.zeros(1000, dtype=[("x", "<f8"), ("n", "<i4")]),
        "big": rng.standard_normal(1 << 17),
        "small": np.arange(5),
        "objects": np.array([{"k": 1}, "s"], dtype=object),
        "list": [1, "two", {"three": 3.0}],
    }


def _mutate_numpy(obj):
    for key in ("c", "f", "strided", "big", "small"):
        obj[key][...] = 7
    obj["record"]["x"] = -1.0
    obj["objects"][0]["k"] = 2
    obj["list"].append("four")
    obj["list"][2]["three"] = 0.0


@pytest.mark.parametrize("compress", [0, 3])
def test_numpy_arrays_changed_after_the_call_are_written_as_they_were(tmp_path, compress,
                                                                        gate):
    obj = _numpy_object()
    expected = cpersist.loads(cpersist.dumps(obj))  # an exact deep copy
    path = tmp_path / "bg.cp"
    future = cpersist.dump({"gate": Gate(gate), "obj": obj}, path, compress=compress,
                           background=True)
    _mutate_numpy(obj)
    _GATES[gate].set()  # the dump writes only now
    assert future.result() == [str(path)]
    assert_same(expected, cpersist.load(path)["obj"])


def test_a_memmap_is_snapshotted_as_a_plain_array(tmp_path, gate):
    source = np.lib.format.open_memmap(tmp_path / "m.npy", "w+", np.float64, (1000,))
    source[:] = np.arange(1000)
    future = cpersist.dump({"gate": Gate(gate), "m": source}, tmp_path / "bg.cp",
                           background=True)
    source[:] = -1
    _GATES[gate].set()
    future.result()
    loaded = cpersist.load(tmp_path / "bg.cp")["m"]
    assert type(loaded) is np.ndarray and loaded.tobytes() == np.arange(1000.0).tobytes()


def test_torch_tensors_changed_after_the_call_are_written_as_they_were(tmp_path, gate):
    torch = pytest.importorskip("torch")
    weight = torch.randn(512, 512)  # 1 MiB: copied while the dump runs
    obj = {"w": weight, "w_t": weight.t(), "row": weight[3],
           "p": torch.nn.Parameter(torch.randn(16, dtype=torch.bfloat16)),
           "steps": torch.arange(10, dtype=torch.int64)}
    expected = {key: value.detach().clone() for key, value in obj.items()}
    path = tmp_path / "bg.cp"
    future = cpersist.dump({"gate": Gate(gate), **obj}, path, compress=3, background=True)
    with torch.no_grad():
        weight.fill_(0)
        obj["p"].fill_(1)
        obj["steps"].add_(100)
    _GATES[gate].set()
    future.result()
    loaded = cpersist.load(path)
    for key, value in expected.items():
        assert type(loaded[key]) is type(obj[key]), key
        assert loaded[key].dtype == value.dtype and loaded[key].shape == value.shape, key
        assert loaded[key].stride() == obj[key].stride(), key
        assert torch.equal(loaded[key].detach(), value), key
    assert loaded["p"].requires_grad
    # Views of one storage still share it.
    assert loaded["w_t"].untyped_storage().data_ptr() == loaded["w"].untyped_storage().data_ptr()
    assert loaded["row"].storage_offset() == 3 * 512


def test_jax_arrays_are_written_without_a_copy(tmp_path, gate):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    from cpersist.pickling.snapshot import take

    params = {"w": jnp.arange(12, dtype=jnp.bfloat16).reshape(3, 4), "b": jnp.ones(4)}
    snapshot = take(params)
    assert snapshot.restore()["w"] is params["w"]  # immutable: kept as it is
    del snapshot
    step = jax.jit(lambda w: w + 1, donate_argnums=0)
    future = cpersist.dump({"gate": Gate(gate), **params}, tmp_path / "bg.cp",
                           background=True)
    # A training step that donates the array: jax must not delete it under the dump.
    params["w"] = step(params["w"])
    _GATES[gate].set()
    future.result()
    loaded = cpersist.load(tmp_path / "bg.cp")
    assert type(loaded["w"]) is type(params["b"])
    assert loaded["w"].dtype == jnp.bfloat16 and loaded["w"].shape == (3, 4)
    assert np.asarray(loaded["w"]).tobytes() == np.asarray(
        jnp.arange(12, dtype=jnp.bfloat16).reshape(3, 4)).tobytes()


def test_the_dump_of_a_snapshot_waits_for_each_large_array_to_be_copied(tmp_path):
    from cpersist.pickling.snapshot import DEFER_FROM, take
    from cpersist.pickling.write import INLINE_BELOW

    # Arrays a dump keeps in its pickle stream are read without waiting:
    # they are copied with the snapshot.
    assert DEFER_FROM >= INLINE_BELOW
    n = DEFER_FROM // 8
    obj = {"small": np.arange(10.0), "a": np.arange(n, dtype=np.float64),
           "b": np.asfortranarray(np.arange(2 * n, dtype=np.int64).reshape(2, n) % 999)}
    snapshot = take(obj, deferred=True)
    restored = snapshot.restore()
    assert restored["small"].tobytes() == obj["small"].tobytes()
    written = threading.Event()

    def write():
        with snapshot.waited_for_by_this_thread():
            cpersist.dump(restored, tmp_path / "s.cp")
        written.set()

    thread = threading.Thread(target=write)
    thread.start()
    assert not written.wait(0.5)  # waiting for the copy of "a"
    assert not (tmp_path / "s.cp").exists()
    snapshot.copy()
    thread.join(60)
    assert written.is_set()
    assert_same(obj, cpersist.load(tmp_path / "s.cp"))


class _CtrlCAfterFirstCopy:
    """Raises KeyboardInterrupt in ``Snapshot.copy`` once it has made its
    first copy, as Ctrl-C would."""

    def __enter__(self):
        from cpersist.pickling.snapshot import Snapshot

        def tracer(frame, event, arg):
            return in_copy if event == "call" and frame.f_code is Snapshot.copy.__code__ else None

        def in_copy(frame, event, arg):
            if event == "line" and frame.f_locals.get("number") == 1:
                raise KeyboardInterrupt
            return in_copy

        sys.settrace(tracer)

    def __exit__(self, *exc):
        sys.settrace(None)


def test_a_dump_waits_for_the_copy_holding_each_array():
    from cpersist.pickling.snapshot import DEFER_FROM, IncompleteSnapshot, take

    n = DEFER_FROM // 8
    obj = {key: np.full(n * (i + 1), i, np.float64) for i, key in enumerate("abcd")}
    snapshot = take(obj, deferred=True)
    restored = snapshot.restore()
    with _CtrlCAfterFirstCopy(), pytest.raises(KeyboardInterrupt):
        snapshot.copy()
    snapshot.wait_copied(restored["a"][n // 2:])  # copied first: no wait
    assert restored["a"].tobytes() == obj["a"].tobytes()
    for key in "bcd":  # never copied
        with pytest.raises(IncompleteSnapshot):
            snapshot.wait_copied(restored[key][1:])
    snapshot.wait_copied(np.ones(n))  # not of the snapshot


def test_a_call_interrupted_while_copying_writes_no_file(tmp_path):
    from cpersist.pickling import background
    from cpersist.pickling.snapshot import DEFER_FROM, IncompleteSnapshot

    obj = {key: np.full(DEFER_FROM // 8, i, np.float64) for i, key in enumerate("abc")}
    with _CtrlCAfterFirstCopy(), pytest.raises(KeyboardInterrupt):
        cpersist.dump(obj, tmp_path / "x.cp", background=True)
    [future] = [f for f in list(background._futures) if f.target == str(tmp_path / "x.cp")]
    assert isinstance(future.exception(60), IncompleteSnapshot)
    # Nothing written, nothing left behind, and the next dump goes ahead.
    assert cpersist.dump(obj, tmp_path / "y.cp", background=True).result(60)
    assert sorted(os.listdir(tmp_path)) == ["y.cp"]
    assert_same(obj, cpersist.load(tmp_path / "y.cp"))


def test_the_file_appears_only_once_complete(tmp_path, gate):
    path = tmp_path / "bg.cp"
    # The gate after an array: the dump has written a section when it waits.
    obj = {"a": np.arange(100000.0), "gate": Gate(gate), "b": np.ones(50000)}
    future = cpersist.dump(obj, path, background=True)
    # The dump now waits inside its pickling, its temporary file open.
    temporaries = []
    while not temporaries:
        temporaries = [p for p in os.listdir(tmp_path) if p.endswith(TMP_SUFFIX)]
        assert not future.done(), future.exception()
    assert not path.exists() and not future.done()
    _GATES[gate].set()
    future.result()
    assert sorted(os.listdir(tmp_path)) == ["bg.cp"]
    loaded = cpersist.load(path)
    assert loaded["a"].tobytes() == obj["a"].tobytes() and loaded["gate"].name == gate


def test_a_second_background_dump_waits_for_the_first(tmp_path, gate):
    first, second = tmp_path / "first.cp", tmp_path / "second.cp"
    future = cpersist.dump({"gate": Gate(gate), "a": np.zeros(10)}, first, background=True)
    seen = {}

    def dump_second():
        seen["future"] = cpersist.dump({"a": np.ones(10)}, second, background=True)
        seen["first written"] = first.exists()

    thread = threading.Thread(target=dump_second)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive() and not first.exists()  # blocked while the first is pending
    _GATES[gate].set()
    thread.join(60)
    assert seen["first written"]  # the call returned only once the first was done
    future.result()
    seen["future"].result()
    assert cpersist.load(second)["a"].tobytes() == np.ones(10).tobytes()


def test_two_background_dumps_to_one_path_leave_the_later_one(tmp_path):
    path = tmp_path / "bg.cp"
    first = cpersist.dump({"v": np.full(300000, 1.0)}, path, compress=3, background=True)
    second = cpersist.dump({"v": np.full(300000, 2.0)}, path, compress=3, background=True)
    first.result()
    second.result()
    assert cpersist.load(path)["v"].tobytes() == np.full(300000, 2.0).tobytes()
    assert os.listdir(tmp_path) == ["bg.cp"]


def test_result_raises_the_dumps_error(tmp_path):
    future = cpersist.dump({"ok": np.ones(3), "callbacks": [lambda: 0]}, tmp_path / "u.cp",
                           background=True)
    with pytest.raises(cpersist.UnpicklableError, match=r"obj\['callbacks'\]\[0\]"):
        future.result()
    future = cpersist.dump({"a": np.ones(3)}, tmp_path / "missing" / "a.cp", background=True)
    with pytest.raises(FileNotFoundError, match="create it first"):
        future.result()
    assert os.listdir(tmp_path) == []


def test_only_paths_and_bad_arguments_raise_at_the_call(tmp_path):
    with pytest.raises(ValueError, match="path only"):
        cpersist.dump({}, io.BytesIO(), background=True)
    with pytest.raises(ValueError, match="path only"):
        cpersist.dump({}, "memory://bg.cp", background=True)
    with pytest.raises(ValueError, match="compress"):
        cpersist.dump({}, tmp_path / "a.cp", compress="nope", background=True)


_AT_EXIT = """
import sys, time, threading
import numpy as np, cpersist

class Slow:
    def __reduce__(self):
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.5)  # the background dump still pending at exit
            return dict, ()  # loads in the test, where this class is not
        return Slow, ()

retrieved = cpersist.dump({}, sys.argv[1] + "/missing/a.cp", background=True)
assert isinstance(retrieved.exception(), FileNotFoundError)
cpersist.dump({}, sys.argv[1] + "/missing/b.cp", background=True)
pending = cpersist.dump({"a": np.arange(1e6), "slow": Slow()}, sys.argv[1] + "/c.cp",
                        compress=3, background=True)
print("done before exit:", pending.done())
"""


def test_pending_dumps_finish_and_failures_are_reported_at_exit(tmp_path):
    out = run_code(_AT_EXIT, str(tmp_path), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "done before exit: False" in out.stdout
    assert cpersist.load(tmp_path / "c.cp")["a"].tobytes() == np.arange(1e6).tobytes()
    reports = [line for line in out.stderr.splitlines() if line.startswith("cpersist:")]
    assert len(reports) == 1, out.stderr
    assert "b.cp" in reports[0] and "FileNotFoundError" in reports[0]


def test_a_snapshot_reuses_the_memory_of_the_last_one_nothing_references():
    from cpersist.pickling.snapshot import Buffers, take

    buffers = Buffers()
    arrays = {"kept": np.arange(1000.0), "dropped": np.arange(2000.0)}  # buffers by size
    first = take(arrays, buffers)
    restored = first.restore()
    held = restored["kept"]  # outlives its dump
    addresses = {key: value.ctypes.data for key, value in restored.items()}
    del restored
    buffers.give_back(first.buffers())
    again = take({"kept": np.zeros(1000), "dropped": np.full(2000, 5.0)}, buffers).restore()
    assert again["dropped"].ctypes.data == addresses["dropped"]  # reused
    assert again["kept"].ctypes.data != addresses["kept"]  # still held: not reused
    assert held.tobytes() == np.arange(1000.0).tobytes()
    assert again["kept"].tobytes() == np.zeros(1000).tobytes()
    assert again["dropped"].tobytes() == np.full(2000, 5.0).tobytes()


def test_a_background_dump_leaves_its_snapshot_memory_to_the_next(tmp_path):
    from cpersist.pickling import background

    obj = {"a": np.ones(1 << 20), "b": np.zeros(1 << 19)}
    cpersist.dump(obj, tmp_path / "bg.cp", background=True).result()
    # Nothing of the dump references its copies once it is done (no cycle
    # waiting for the collector): they serve the next snapshot.
    assert sorted(background._buffers._spare) == [4 << 20, 8 << 20]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_dumps_in_the_background_while_its_parent_has_one_pending(tmp_path,
                                                                                  gate):
    pending = cpersist.dump({"gate": Gate(gate)}, tmp_path / "parent.cp", background=True)
    pid = os.fork()
    if pid == 0:  # the child: the parent's pending dump holds no slot here
        code = 1
        try:
            child = cpersist.dump({"a": np.arange(10)}, tmp_path / "child.cp", background=True)
            code = 0 if child.result(timeout=60) == [str(tmp_path / "child.cp")] else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    _GATES[gate].set()
    pending.result()
    assert os.waitstatus_to_exitcode(status) == 0
    assert cpersist.load(tmp_path / "child.cp")["a"].tobytes() == np.arange(10).tobytes()
