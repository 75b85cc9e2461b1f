"""dump(..., background=True): the file holds the object as it was at the
call, written on a thread, atomically; errors come out of the future; one
dump pending at a time; pending dumps finish at interpreter exit."""

import ctypes
import errno
import io
import mmap
import os
import sys
import threading

import numpy as np
import pytest

import cpersist
from cpersist._runtime.temporaries import TMP_SUFFIX
from cpersist.container import direct_io
from cpersist.pickling import background, copy_pace
from cpersist.pickling.snapshot import IncompleteSnapshot, chunks_to_write, take
from cpersist.pickling.snapshot_pickler import DEFER_FROM, kept_in

from ._fresh import run_code
from .conftest import assert_same

#: Events gating the background part of a dump (see Gate), by name, and
#: those a Gate sets when the dump reaches it.
_GATES = {}
_ARRIVED = {}


def _gate(name):
    return Gate(name)


class Gate:
    """Pickles at once on the main thread (the snapshot), and waits for its
    event when pickled on another (the background dump, its file open)."""

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        if threading.current_thread() is not threading.main_thread():
            _ARRIVED[self.name].set()
            assert _GATES[self.name].wait(60), "the test did not open the gate"
        return _gate, (self.name,)


@pytest.fixture
def gate():
    name = f"gate{len(_GATES)}"
    _GATES[name] = threading.Event()
    _ARRIVED[name] = threading.Event()
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


@pytest.mark.parametrize("direct", [False, True], ids=["page cache", "direct"])
@pytest.mark.parametrize("compress", [0, 3])
def test_the_file_is_byte_for_byte_a_plain_dumps(tmp_path, compress, direct, monkeypatch):
    # Large arrays too: their chunks come from the originals or the copies.
    obj = {**_numpy_object(), "large": np.random.default_rng(4).standard_normal(3 << 20)}
    # A read-only array is pickled as bytes, a writable one as a bytearray.
    obj["read-only"], obj["large read-only"] = np.arange(9.0), np.ones(DEFER_FROM)
    obj["read-only"].flags.writeable = obj["large read-only"].flags.writeable = False
    # Written around the page cache from DIRECT_FROM bytes of arrays on.
    monkeypatch.setattr(background, "DIRECT_FROM", 0 if direct else 1 << 62)
    cpersist.dump(obj, tmp_path / "plain.cp", compress=compress)
    cpersist.dump(obj, tmp_path / "bg.cp", compress=compress, background=True).result()
    if direct and _direct_writes_allowed(tmp_path):
        # Of the file's pages, only its last, shorter than a block, is cached.
        assert _cached_pages(tmp_path / "bg.cp") <= 1
    assert (tmp_path / "bg.cp").read_bytes() == (tmp_path / "plain.cp").read_bytes()


@pytest.mark.skipif(not direct_io.direct_writes_possible(), reason="no O_DIRECT on this platform")
def test_a_direct_file_holds_what_it_is_given_across_its_buffers(tmp_path, monkeypatch):
    import fcntl

    monkeypatch.setattr(direct_io, "BUFFER_SIZE", 3 * direct_io.BLOCK)
    rng = np.random.default_rng(5)
    sizes = [0, 1, direct_io.BLOCK - 1, 3 * direct_io.BLOCK, 7 * direct_io.BLOCK + 5, 2, 100_000, 3]
    pieces = [rng.integers(0, 256, n, np.uint8).tobytes() for n in sizes]
    path = tmp_path / "direct.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        file = direct_io.DirectFile(fd)
        for number, piece in enumerate(pieces):
            # Any buffer: memoryviews of other formats too, as the writer hands them.
            given = memoryview(np.frombuffer(piece, np.uint8)) if number % 2 else piece
            assert file.write(given) == len(piece)
        assert file.tell() == sum(sizes)
        file.close()
        file.close()  # a second close does nothing (nor writes twice)
        assert os.fstat(fd).st_size == sum(sizes)
        assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT  # its owner's again
    finally:
        os.close(fd)
    if _direct_writes_allowed(tmp_path):
        assert _cached_pages(path) <= 1
    assert path.read_bytes() == b"".join(pieces)
    with pytest.raises(ValueError, match="closed"):
        file.write(b"x")


@pytest.mark.skipif(not direct_io.direct_writes_possible(), reason="no O_DIRECT on this platform")
def test_a_direct_file_writes_kept_memory_straight_from_it(tmp_path, monkeypatch):
    """Runs of kept memory whose address matches the file position modulo a
    block are written from where they are, their part blocks and all else
    copied; the bytes are those given either way."""
    block = direct_io.BLOCK
    monkeypatch.setattr(direct_io, "BUFFER_SIZE", 4 * block)
    monkeypatch.setattr(direct_io, "KEPT_FROM", 2 * block)
    lent = []
    write_lent = direct_io._write_lent
    monkeypatch.setattr(direct_io, "_write_lent", lambda file, number, offset: (
        lent.append((offset, file._lent[number].nbytes)), write_lent(file, number, offset)))
    kept = np.frombuffer(mmap.mmap(-1, 40 * block), np.uint8)  # page-aligned
    kept[:] = np.random.default_rng(6).integers(0, 256, kept.size, np.uint8)
    other = bytes(range(256)) * 100
    # Bytes of another object, or slices of the kept memory, in order:
    pieces = [other[:5], kept[5:5 + 9 * block + 7],  # a run: address 5, file offset 5
              kept[5 + 9 * block + 7:30 * block + 1],  # the run goes on in memory
              other[:3],  # ends it
              kept[30 * block + 9:38 * block],  # at file offset 30 * block + 4: copied
              kept[:100]]  # short: copied
    path = tmp_path / "direct.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        file = direct_io.DirectFile(fd, kept_in([kept]))
        for piece in pieces:
            assert file.write(piece) == len(piece)
        file.close()
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(bytes(piece) for piece in pieces)
    # The run from kept[block] (file offset block) to kept[30 * block], in
    # writes of at most BUFFER_SIZE, each a multiple of a block.
    assert sum(n for _, n in lent) == 29 * block
    assert lent[0][0] == block and all(offset % block == 0 for offset, _ in lent)
    assert max(n for _, n in lent) == 4 * block


@pytest.mark.skipif(not direct_io.direct_writes_possible(), reason="no O_DIRECT on this platform")
def test_a_direct_background_dump_writes_large_arrays_from_its_snapshot(tmp_path, monkeypatch):
    """What the dump takes of the originals goes into the snapshot's copies,
    and all of each large array is written from them (but its part blocks),
    once the snapshot's memory is that of the one before (new memory's page
    faults would hold the call up): the file is the plain dump's."""
    lent = []
    write_lent = direct_io._write_lent
    monkeypatch.setattr(direct_io, "_write_lent", lambda file, number, offset: (
        lent.append(file._lent[number].nbytes), write_lent(file, number, offset)))
    monkeypatch.setattr(background, "DIRECT_FROM", 0)
    rng = np.random.default_rng(7)
    obj = {"a": rng.standard_normal((1001, 1003)), "b": rng.standard_normal(3 << 20),
           "small": np.arange(7.0)}
    cpersist.dump(obj, tmp_path / "plain.cp")
    large = obj["a"].nbytes + obj["b"].nbytes
    for reused in (False, True):  # the second in memory of the first snapshot
        lent.clear()
        cpersist.dump(obj, tmp_path / "bg.cp", background=True).result()
        assert (tmp_path / "bg.cp").read_bytes() == (tmp_path / "plain.cp").read_bytes()
        if reused:
            assert large - 2 * direct_io.BLOCK <= sum(lent) <= large
        else:
            assert not lent


@pytest.mark.skipif(not direct_io.direct_writes_possible(), reason="no O_DIRECT on this platform")
@pytest.mark.parametrize("refused_by", ["write", "fcntl"])
def test_a_file_system_refusing_direct_writes_gets_them_through_the_page_cache(
        tmp_path, monkeypatch, refused_by):
    import fcntl

    # As a file system without direct writes refuses them: EINVAL from a
    # write while the descriptor has O_DIRECT, or from setting the flag.
    refusals = []
    pwrite, set_flags = os.pwrite, fcntl.fcntl

    def refusing_pwrite(fd, data, offset):
        if set_flags(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refusals.append(offset)
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return pwrite(fd, data, offset)

    def refusing_fcntl(fd, command, arg=0):
        if command == fcntl.F_SETFL and arg & os.O_DIRECT:
            refusals.append(fd)
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return set_flags(fd, command, arg)

    # Files of many buffers, several of them written at once.
    monkeypatch.setattr(direct_io, "BUFFER_SIZE", 16 * direct_io.BLOCK)
    monkeypatch.setattr(background, "DIRECT_FROM", 0)
    obj = {**_numpy_object(), "large": np.random.default_rng(6).standard_normal(3 << 17)}
    cpersist.dump(obj, tmp_path / "plain.cp")
    if refused_by == "write":
        monkeypatch.setattr(os, "pwrite", refusing_pwrite)
    else:
        monkeypatch.setattr(fcntl, "fcntl", refusing_fcntl)
    for name in ("bg.cp", "again.cp"):  # the second with the first's buffers
        cpersist.dump(obj, tmp_path / name, background=True).result()
        assert refusals
        refusals.clear()
        assert (tmp_path / name).read_bytes() == (tmp_path / "plain.cp").read_bytes()
    assert_same(obj, cpersist.load(tmp_path / "bg.cp"))
    assert sorted(os.listdir(tmp_path)) == ["again.cp", "bg.cp", "plain.cp"]


@pytest.mark.skipif(not direct_io.direct_writes_possible(), reason="no O_DIRECT on this platform")
def test_the_call_returns_while_the_disk_still_writes(tmp_path, monkeypatch):
    import fcntl

    # The dump lends no original to a direct write waiting for the disk:
    # the call copies the rest and returns while no buffer is written yet.
    disk = threading.Event()
    pwrite = os.pwrite

    def slow_disk(fd, data, offset):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            assert disk.wait(60), "the test did not let the disk write"
        return pwrite(fd, data, offset)

    monkeypatch.setattr(direct_io, "BUFFER_SIZE", 16 * direct_io.BLOCK)
    monkeypatch.setattr(background, "DIRECT_FROM", 0)
    monkeypatch.setattr(os, "pwrite", slow_disk)
    obj = {key: np.random.default_rng(i).standard_normal(DEFER_FROM // 8)
           for i, key in enumerate("abcd")}
    # The call gives the dump about half a second to write from the originals.
    monkeypatch.setattr(copy_pace, "_copy_speed", 2 * 4 * DEFER_FROM)
    monkeypatch.setattr(copy_pace, "_just_measured", True)
    expected = {key: value.copy() for key, value in obj.items()}
    called = []
    call = threading.Thread(target=lambda: called.append(cpersist.dump(
        obj, tmp_path / "bg.cp", chunk_size=8 * direct_io.BLOCK, background=True)))
    call.start()
    call.join(30)
    returned = not call.is_alive()
    disk.set()
    call.join()
    assert returned, "the call waited for the disk"
    for value in obj.values():
        value[...] = -1
    called[0].result()
    assert_same(expected, cpersist.load(tmp_path / "bg.cp"))


def _direct_writes_allowed(folder):
    """Whether files in ``folder`` take writes with ``O_DIRECT`` (tmpfs
    before Linux 6.6 does not)."""
    if not direct_io.direct_writes_possible():
        return False
    path = os.path.join(folder, "direct-probe")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    try:
        os.write(fd, mmap.mmap(-1, direct_io.BLOCK))  # page-aligned memory
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        os.unlink(path)


def _cached_pages(path):
    """How many pages of the file at ``path`` are in the page cache (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    size = os.path.getsize(path)
    pages = -(-size // mmap.PAGESIZE)
    with open(path, "rb") as file:
        # A private mapping, written to by nobody: mincore sees the file's pages.
        mapped = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_COPY)
    start = ctypes.c_char.from_buffer(mapped)
    vector = ctypes.create_string_buffer(pages)
    try:
        if libc.mincore(ctypes.addressof(start), size, vector) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
    finally:
        del start
        mapped.close()
    return sum(byte & 1 for byte in vector.raw)


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


def test_a_step_donating_jax_arrays_after_the_call_reuses_their_memory(tmp_path, gate):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")

    def expected_w():
        return jnp.arange(12, dtype=jnp.bfloat16).reshape(3, 4)

    params = {"w": expected_w(), "b": jnp.ones(4)}
    step = jax.jit(lambda w: w + 1, donate_argnums=0)
    memory = params["w"].unsafe_buffer_pointer()
    future = cpersist.dump({"gate": Gate(gate), **params}, tmp_path / "bg.cp",
                           background=True)
    # While the dump is pending, a training step that donates the array
    # writes its result into the array's own memory (the snapshot holds no
    # view of it, which would send the result to fresh memory), and another
    # array is deleted: neither reaches the file.
    params["w"] = step(params["w"])
    assert params["w"].unsafe_buffer_pointer() == memory
    params["b"].delete()
    refill = [jnp.full(4, -7.0) for _ in range(64)]
    _GATES[gate].set()
    future.result()
    loaded = cpersist.load(tmp_path / "bg.cp")
    assert all(type(loaded[k]) is type(refill[0]) for k in ("w", "b"))
    assert loaded["w"].dtype == jnp.bfloat16 and loaded["w"].shape == (3, 4)
    assert np.asarray(loaded["w"]).tobytes() == np.asarray(expected_w()).tobytes()
    assert np.asarray(loaded["b"]).tobytes() == np.ones(4, np.float32).tobytes()


def _first_and_last(framework):
    """An object of two large arrays (or tensors viewing two storages), the
    first over several chunks, and a function changing them both."""
    n = DEFER_FROM // 8
    if framework == "numpy":
        first = np.arange(6 * n, dtype=np.float64).reshape(6, n)
        last = np.asfortranarray(np.arange(2 * n, dtype=np.int64).reshape(n, 2) % 999)
        obj = {"first": first, "first_t": first.T, "last": last}

        def change():
            first[...] = -1
            last[...] = -2
        return obj, first.nbytes, change
    if framework == "jax":
        jax = pytest.importorskip("jax")
        jnp = jax.numpy
        first = jnp.arange(12 * n, dtype=jnp.float32).reshape(6, 2 * n)
        obj = {"first": first, "first_t": first.T,
               "last": jnp.arange(2 * n, dtype=jnp.int32).reshape(n, 2) % 999}
        fill = jax.jit(lambda a: a * 0 - 1, donate_argnums=0)

        def change():
            # Immutable, but a step donating them writes into their memory.
            for key in ("first", "last"):
                memory = obj[key].unsafe_buffer_pointer()
                obj[key] = fill(obj[key])
                assert obj[key].unsafe_buffer_pointer() == memory
        return obj, first.nbytes, change
    torch = pytest.importorskip("torch")
    first = torch.arange(6 * n, dtype=torch.float64).reshape(6, n)
    last = torch.nn.Parameter(torch.randn(2 * n, dtype=torch.float32))
    obj = {"first": first, "first_t": first.t(), "row": first[2], "last": last}

    def change():
        with torch.no_grad():
            first.fill_(-1)
            last.fill_(-2)
    return obj, first.untyped_storage().nbytes(), change


def _assert_as_before(expected, loaded):
    if isinstance(expected["first"], np.ndarray):
        assert_same(expected, loaded)
        return
    if type(expected["first"]).__module__.startswith("jax"):
        for key, value in expected.items():
            assert type(loaded[key]) is type(value), key
            assert loaded[key].dtype == value.dtype and loaded[key].shape == value.shape, key
            assert np.asarray(loaded[key]).tobytes() == np.asarray(value).tobytes(), key
        return
    torch = sys.modules["torch"]
    for key, value in expected.items():
        assert type(loaded[key]) is type(value), key
        assert loaded[key].dtype == value.dtype and loaded[key].stride() == value.stride(), key
        assert torch.equal(loaded[key].detach(), value.detach()), key
    assert (loaded["first_t"].untyped_storage().data_ptr()
            == loaded["first"].untyped_storage().data_ptr())


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("compress", [0, 3])
@pytest.mark.parametrize("n_threads", [1, 2])  # the writer's ways of writing sections
def test_the_dump_writes_from_the_originals_what_the_call_has_not_copied(tmp_path, gate,
                                                                         framework, compress,
                                                                         n_threads):
    obj, first_bytes, change = _first_and_last(framework)
    # An exact deep copy (views stay views).
    expected = cpersist.loads(cpersist.dumps(obj))
    snapshot = take({"first": obj["first"], "gate": Gate(gate),
                     **{key: value for key, value in obj.items() if key != "first"}},
                    deferred=True)
    restored = snapshot.restore()
    failed = []

    def write():
        try:
            with snapshot.written_by_this_thread():
                cpersist.dump(restored, tmp_path / "s.cp", compress=compress,
                              n_threads=n_threads)
        except BaseException as exc:
            failed.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    # The dump wrote the first array before the call copied anything: from the original.
    assert _ARRIVED[gate].wait(60) and not failed, failed
    assert snapshot.from_originals == first_bytes
    copying = threading.Thread(target=snapshot.copy)  # the call's part
    copying.start()
    copying.join(60)
    # It returned while the dump waits at the gate: the dump let go of the
    # original before reaching it, compressed chunks included.
    assert not copying.is_alive()
    change()  # the caller's next step
    _GATES[gate].set()
    writer.join(60)
    assert not failed, failed
    assert snapshot.from_originals == first_bytes  # the rest from the copies
    loaded = cpersist.load(tmp_path / "s.cp")
    _assert_as_before(expected, {key: loaded[key] for key in expected})


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("compress", [0, 3])
def test_arrays_changed_as_soon_as_the_call_returns_are_written_as_they_were(tmp_path,
                                                                             framework,
                                                                             compress):
    # Nothing holds the dump back: it writes from the originals until it
    # meets the call's copies, and the call returns once it no longer reads them.
    obj, _, change = _first_and_last(framework)
    expected = cpersist.loads(cpersist.dumps(obj))
    future = cpersist.dump(obj, tmp_path / "bg.cp", compress=compress, background=True)
    change()
    future.result()
    _assert_as_before(expected, cpersist.load(tmp_path / "bg.cp"))


def test_the_call_and_the_dump_meet_inside_an_array():
    n = 12 << 20
    original = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
    expected = original.tobytes()
    snapshot = take({"a": original}, deferred=True)
    restored = snapshot.restore()["a"]
    with snapshot.written_by_this_thread():
        chunks, release = chunks_to_write(restored, 1 << 20)
        chunks = iter(chunks)
        first = next(chunks)
        # The first chunk is the original's memory, lent until released.
        assert np.frombuffer(first, np.uint8).ctypes.data == original.ctypes.data
        first = bytes(first)
        returned = threading.Event()
        copying = threading.Thread(target=lambda: (snapshot.copy(), returned.set()))
        copying.start()
        assert not returned.wait(0.5)  # copied the rest, waiting for the chunk lent
        release()
        copying.join(60)
        assert returned.is_set()
        original[...] = 0  # the call has returned
        rest = []
        for chunk in chunks:  # from the copy, made from the end back to the first chunk
            address = np.frombuffer(chunk, np.uint8).ctypes.data
            assert restored.ctypes.data <= address < restored.ctypes.data + n
            rest.append(bytes(chunk))
            release()
    assert first + b"".join(rest) == expected
    assert snapshot.from_originals == 1 << 20


def test_the_call_leaves_to_the_dump_what_it_writes_before_a_copy_would_be_done(
        tmp_path, monkeypatch):
    # A copy would take ages (one byte a second): the call, started before
    # the dump, copies nothing and returns once the dump has read it all.
    monkeypatch.setattr(copy_pace, "_copy_speed", 1.0)
    monkeypatch.setattr(copy_pace, "_just_measured", True)
    original = np.random.default_rng(2).integers(0, 256, 12 << 20, dtype=np.uint8)
    expected = original.copy()
    snapshot = take({"a": original}, deferred=True)
    restored = snapshot.restore()
    copying = threading.Thread(target=snapshot.copy)
    copying.start()
    with snapshot.written_by_this_thread():
        cpersist.dump(restored, tmp_path / "x.cp")
    copying.join(60)
    assert not copying.is_alive()
    assert snapshot.from_originals == original.nbytes
    original[...] = 0
    assert_same({"a": expected}, cpersist.load(tmp_path / "x.cp"))


def test_the_call_copies_at_once_what_the_dump_waits_for(monkeypatch):
    monkeypatch.setattr(copy_pace, "_copy_speed", 1.0)  # the call would rather wait
    monkeypatch.setattr(copy_pace, "_just_measured", True)
    original = np.random.default_rng(3).integers(0, 256, 4 << 20, dtype=np.uint8)
    expected = original.copy()
    snapshot = take({"a": original}, deferred=True)
    restored = snapshot.restore()["a"]
    views = []

    def dump():
        with snapshot.written_by_this_thread():
            chunks, release = chunks_to_write(restored, 1 << 20)
            next(iter(chunks))  # from the original
            release()
            # A view of the array is read from the copy: the dump waits for the call.
            view, _ = chunks_to_write(restored[::3], 1 << 20)
            views.append(b"".join(bytes(chunk) for chunk in view))

    dumping = threading.Thread(target=dump, daemon=True)
    dumping.start()
    snapshot.copy()
    dumping.join(60)
    assert not dumping.is_alive()
    assert snapshot.from_originals == 1 << 20
    original[...] = 0
    assert views == [expected[::3].tobytes()]


def test_a_view_of_an_array_partly_read_from_the_original_is_read_from_the_copy():
    # An object whose pickling stores an array and then a view of it: the
    # part the dump read from the original is put in the copy while the call
    # runs; once it has returned, that part is gone and the dump fails.
    n = 4 << 20
    original = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
    expected = original.copy()
    for call_returned in (False, True):
        original[...] = expected
        snapshot = take({"a": original}, deferred=True)
        restored = snapshot.restore()["a"]
        with snapshot.written_by_this_thread():
            chunks, release = chunks_to_write(restored, 1 << 20)
            next(iter(chunks))  # from the original
            copying = threading.Thread(target=snapshot.copy)
            if call_returned:
                release()
                copying.start()
                copying.join(60)
                with pytest.raises(IncompleteSnapshot, match="twice"):
                    chunks_to_write(restored[::3], 1 << 20)
                continue
            copying.start()  # waits for the chunk lent
            view, _ = chunks_to_write(restored[::3], 1 << 20)
            release()
            copying.join(60)
            original[...] = 0
            assert b"".join(bytes(chunk) for chunk in view) == expected[::3].tobytes()
            assert restored.tobytes() == expected.tobytes()


class _CtrlCAfterFirstCopy:
    """Raises KeyboardInterrupt in ``Snapshot.copy`` once it has copied its
    first array (the object's last), as Ctrl-C would.

    The trace function found on entry (coverage's, a debugger's) is put back
    on exit: leaving none would switch coverage off for every later test in
    this process."""

    def __enter__(self):
        from cpersist.pickling.snapshot import Snapshot

        calls = []

        def tracer(frame, event, arg):
            if event == "call" and frame.f_code is Snapshot._copy_down.__code__:
                calls.append(frame)
                if len(calls) == 2:
                    raise KeyboardInterrupt

        self._found = sys.gettrace()
        sys.settrace(tracer)

    def __exit__(self, *exc):
        sys.settrace(self._found)


def test_the_dump_of_an_interrupted_call_stops_at_its_next_chunk():
    n = DEFER_FROM // 8
    obj = {key: np.full(n * (i + 1), i, np.float64) for i, key in enumerate("abcd")}
    snapshot = take(obj, deferred=True)
    restored = snapshot.restore()
    with snapshot.written_by_this_thread():
        lent, release_lent = chunks_to_write(restored["a"], DEFER_FROM)
        next(iter(lent))  # from the original
        with _CtrlCAfterFirstCopy(), pytest.raises(KeyboardInterrupt):
            snapshot.copy()
        # The caller may have changed "a" before the dump was done with it.
        with pytest.raises(IncompleteSnapshot):
            release_lent()
        # "d" was copied, "b" and "c" never were: none is written.
        for key in "bcd":
            chunks, _ = chunks_to_write(restored[key], DEFER_FROM)
            with pytest.raises(IncompleteSnapshot):
                next(iter(chunks))
        with pytest.raises(IncompleteSnapshot):  # nor any view of them
            chunks_to_write(restored["d"][1:], DEFER_FROM)
    chunks, release = chunks_to_write(np.ones(n), DEFER_FROM)  # not of a snapshot
    assert release is None and len(b"".join(chunks)) == 8 * n


def test_a_call_interrupted_while_copying_writes_no_file(tmp_path, gate, monkeypatch):
    """With the dump started while the call copies (OVERLAP_COPIES)."""
    from cpersist.pickling import background

    monkeypatch.setattr(background, "OVERLAP_COPIES", True)
    obj = {key: np.full(DEFER_FROM // 8, i, np.float64) for i, key in enumerate("abc")}
    # The gate first: the dump takes nothing from the originals before the call is interrupted.
    with _CtrlCAfterFirstCopy(), pytest.raises(KeyboardInterrupt):
        cpersist.dump({"gate": Gate(gate), **obj}, tmp_path / "x.cp", background=True)
    _GATES[gate].set()
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
    # A dump that fails at once: the call copies no more for it, and returns.
    big = {key: np.ones(DEFER_FROM) for key in "abc"}
    future = cpersist.dump(big, tmp_path / "missing" / "a.cp", background=True)
    with pytest.raises(FileNotFoundError, match="create it first"):
        future.result()
    assert os.listdir(tmp_path) == []


_FILE_TOO_LARGE = """
import os, resource, signal, sys
import numpy as np, cpersist
from cpersist.pickling import background

background.DIRECT_FROM = int(sys.argv[3])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (3 << 20, 3 << 20))
# 8 MiB each, of noise: it does not compress under the limit.
obj = {key: np.random.default_rng(i).random(1 << 20) for i, key in enumerate("abcd")}
future = cpersist.dump(obj, os.path.join(sys.argv[1], "big.cp"), compress=int(sys.argv[2]),
                       background=True)
for value in obj.values():
    value[...] = -1
error = future.exception(120)
print(type(error).__name__, getattr(error, "errno", None))
print(sorted(os.listdir(sys.argv[1])))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="no RLIMIT_FSIZE")
@pytest.mark.parametrize("direct_from", [0, 1 << 62], ids=["direct", "page cache"])
@pytest.mark.parametrize("compress", [0, 3])
def test_a_write_failing_midway_reaches_result_and_leaves_nothing(tmp_path, compress,
                                                                  direct_from):
    # The dump fails while it may be reading an original: the call returns all the same.
    out = run_code(_FILE_TOO_LARGE, str(tmp_path), str(compress), str(direct_from),
                   timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"OSError {errno.EFBIG}", "[]"], out.stdout


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
    from cpersist.pickling.snapshot_pickler import Buffers

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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore of anonymous memory")
def test_memory_kept_for_the_next_snapshot_has_its_pages_backed():
    from cpersist._runtime.pages import fault_in
    from cpersist.pickling.snapshot_pickler import Buffers

    if not fault_in(memoryview(bytearray(2 * mmap.PAGESIZE))):
        pytest.skip("this kernel cannot fault pages in ahead (before Linux 5.14)")
    buffers = Buffers()
    # Taken, and given back untouched (as the part of a deferred copy the
    # dump read from the original): none of its pages is backed yet.
    pages = (48 << 20) // mmap.PAGESIZE  # memory of its own (mmap), not the heap's
    memory = buffers.take(pages * mmap.PAGESIZE)
    # The allocator may hand out memory a test before this one touched:
    # its pages are let go of first, so that only the fault-in backs them.
    _drop_pages(memory)
    assert _resident_pages(memory) < pages // 2
    address = memory.ctypes.data
    del memory
    buffers.give_back(buffers.taken())  # nothing else references it
    again = buffers.take(pages * mmap.PAGESIZE)
    assert again.ctypes.data == address
    assert _resident_pages(again) >= pages - 1  # all its whole pages


def _drop_pages(array):
    """Let go of the whole pages of ``array``'s memory (``MADV_DONTNEED``):
    unbacked, they read as zeros until written."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    start = -(-array.ctypes.data // mmap.PAGESIZE) * mmap.PAGESIZE
    end = (array.ctypes.data + array.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    assert libc.madvise(start, end - start, mmap.MADV_DONTNEED) == 0, ctypes.get_errno()


def _resident_pages(array):
    """How many pages holding ``array``'s memory are backed (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    start = array.ctypes.data // mmap.PAGESIZE * mmap.PAGESIZE
    size = array.ctypes.data + array.nbytes - start
    vector = ctypes.create_string_buffer(-(-size // mmap.PAGESIZE))
    if libc.mincore(start, size, vector) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(byte & 1 for byte in vector.raw)


def test_a_background_dump_leaves_its_snapshot_memory_to_the_next(tmp_path):
    from cpersist.pickling import background

    obj = {"a": np.ones(DEFER_FROM), "b": np.zeros(DEFER_FROM // 2)}
    cpersist.dump(obj, tmp_path / "bg.cp", background=True).result()
    # Nothing of the dump references its copies once it is done (no cycle
    # waiting for the collector): they serve the next snapshot.
    assert sorted(background._buffers._spare) == [4 * DEFER_FROM, 8 * DEFER_FROM]
    # So do the copies of JAX arrays (their data, as a numpy array's).
    jnp = pytest.importorskip("jax.numpy")
    obj = {"w": jnp.ones(DEFER_FROM, jnp.float32), "b": jnp.ones(3, jnp.bfloat16)}
    cpersist.dump(obj, tmp_path / "jax.cp", background=True).result()
    assert sorted(background._buffers._spare) == [6, 4 * DEFER_FROM]


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
