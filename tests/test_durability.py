"""Durability: atomic dumps (SIGKILL, exceptions, concurrent writers), no
leaked file handles, memmaps that outlive ``load``."""

import gc
import glob
import mmap
import os
import pathlib
import signal
import subprocess
import textwrap
import threading
import time

import numpy as np
import pytest

import cpersist
from cpersist.container import atomic

from ._fresh import run_code, start_python
from .conftest import assert_same

KILLS = 30
#: Items of the float64 array each killed dump writes (25 MB): enough for
#: the kills to land at 15 points spread over the write.
ITEMS = 3_125_000

_CHILD = textwrap.dedent("""
    import sys, numpy as np, cpersist
    path, compress, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
    big = {"v": "new", "a": np.arange(N, dtype=np.float64)}
    print("dumping", flush=True)
    cpersist.dump(big, path, compress=0 if compress == "0" else compress, n_threads=1)
    print("done", flush=True)
""")


def _tmp_files(directory, name):
    return sorted(glob.glob(os.path.join(directory, f".{name}.*.cpersist-tmp")))


@pytest.mark.slow
def test_sigkill_during_dump_keeps_old_file(tmp_path):
    target = tmp_path / "model.cp"
    old = {"v": "old", "a": np.arange(1000)}
    cpersist.dump(old, target)
    modes = ["0", "zlib"]
    size = {}
    for mode in modes:  # the size of a complete file, to aim the kills
        run_code(_CHILD, tmp_path / "cal.cp", mode, ITEMS, check=True, timeout=60)
        size[mode] = os.path.getsize(tmp_path / "cal.cp")
        os.unlink(tmp_path / "cal.cp")
    mid_write = 0
    for i in range(KILLS):
        compress = modes[i % 2]
        # Spread the kills over the dump: from the temporary file's creation
        # to just before its last bytes are written.
        aim = (i // 2) / (KILLS // 2) * 0.97 * size[compress]
        child = start_python("-c", _CHILD, target, compress, ITEMS, stdout=subprocess.PIPE)
        with child:
            assert child.stdout.readline() == b"dumping\n"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and child.poll() is None:
                tmp_before = _tmp_files(tmp_path, "model.cp")
                try:
                    if tmp_before and os.path.getsize(tmp_before[0]) >= aim:
                        break
                except OSError:  # renamed meanwhile
                    pass
                time.sleep(0.0005)
            child.send_signal(signal.SIGKILL)
            child.wait()
        leftovers = _tmp_files(tmp_path, "model.cp")
        out = cpersist.load(target)
        if out["v"] == "old":
            assert np.array_equal(out["a"], old["a"])
            # At most the killed process's own temporary file is left.
            assert len(leftovers) <= 1, leftovers
            if leftovers:
                mid_write += 1
                os.unlink(leftovers[0])
        else:
            # The kill came after the rename: the new object, complete (its
            # checksums were verified by the load). Whether the child had
            # printed "done" by then is not asserted: a kill aimed late can
            # land between the rename and that print.
            assert out["v"] == "new" and out["a"].shape == (ITEMS,)
            assert np.array_equal(out["a"], np.arange(ITEMS, dtype=np.float64))
            assert not leftovers
            cpersist.dump(old, target)
    print(f"SIGKILL: {KILLS} kills, {mid_write} during the write")
    assert mid_write >= 20, f"only {mid_write} of {KILLS} kills hit a dump in progress"
    assert os.listdir(tmp_path) == ["model.cp"]


#: A dump that writes its array to its temporary file, then waits, mid-dump,
#: for a line on its standard input before it finishes.
_BLOCKED = textwrap.dedent("""
    import sys, numpy as np, cpersist
    class Waits:
        def __reduce__(self):
            print("blocked", flush=True)
            sys.stdin.readline()
            return (str, ("done",))
    cpersist.dump({"a": np.arange(1_000_000), "w": Waits()}, sys.argv[1], n_threads=1)
""")


def _blocked_writer(target):
    """A process in the middle of a dump to ``target``, and its temporary file."""
    child = start_python("-c", _BLOCKED, target, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout.readline() == b"blocked\n"
    (tmp,) = _tmp_files(os.path.dirname(target), os.path.basename(target))
    assert os.path.getsize(tmp) >= 8_000_000  # the array is written
    return child, tmp


def test_the_next_dump_removes_the_temporary_files_of_dead_writers_only(tmp_path):
    fcntl = pytest.importorskip("fcntl")
    target = tmp_path / "model.cp"
    cpersist.dump({"v": 0}, target)
    # A writer killed mid-dump leaves its temporary file behind.
    killed, dead_tmp = _blocked_writer(target)
    with killed:
        killed.kill()
        killed.wait()
    # The next dump to that path removes it, unless it is locked: the lock
    # of its writer, released when it died, is what tells it dead.
    with open(dead_tmp, "rb") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        cpersist.dump({"v": 1}, target)
        assert _tmp_files(tmp_path, "model.cp") == [dead_tmp]
    cpersist.dump({"v": 2}, target)
    assert _tmp_files(tmp_path, "model.cp") == []
    # A live writer's is left alone, and its dump completes.
    live, live_tmp = _blocked_writer(target)
    with live:
        cpersist.dump({"v": 3}, target)
        assert _tmp_files(tmp_path, "model.cp") == [live_tmp]
        assert cpersist.load(target) == {"v": 3}
        live.communicate(b"go\n", timeout=60)
        assert live.returncode == 0
    out = cpersist.load(target)
    assert out["w"] == "done" and np.array_equal(out["a"], np.arange(1_000_000))
    assert sorted(os.listdir(tmp_path)) == ["model.cp"]


class _Unpicklable:
    def __reduce__(self):
        raise RuntimeError("boom")


@pytest.mark.parametrize("exc_obj", [_Unpicklable(), lambda: 0])
def test_exception_leaves_target_untouched(tmp_path, exc_obj):
    target = tmp_path / "t.cp"
    cpersist.dump({"v": 1}, target)
    before = target.read_bytes()
    # Arrays are written before the failing object is reached.
    with pytest.raises(Exception):
        cpersist.dump([np.arange(1_000_000), exc_obj], target)
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == ["t.cp"]


def test_keyboard_interrupt_removes_temp(tmp_path, monkeypatch):
    target = tmp_path / "t.cp"
    cpersist.dump({"v": 1}, target)

    class Interrupt:
        def __reduce__(self):
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        cpersist.dump([np.ones(1000), Interrupt()], target)
    assert os.listdir(tmp_path) == ["t.cp"]
    assert cpersist.load(target) == {"v": 1}


def test_a_new_file_gets_the_umask_and_a_replaced_one_keeps_its_mode(tmp_path):
    old = os.umask(0o027)
    try:
        cpersist.dump({"a": np.arange(3)}, tmp_path / "new.cp")
        assert os.stat(tmp_path / "new.cp").st_mode & 0o777 == 0o640
        os.chmod(tmp_path / "new.cp", 0o604)
        cpersist.dump({"a": np.arange(4)}, tmp_path / "new.cp")
        assert os.stat(tmp_path / "new.cp").st_mode & 0o777 == 0o604
    finally:
        os.umask(old)
    assert cpersist.load(tmp_path / "new.cp")["a"].tolist() == [0, 1, 2, 3]


def test_fsync_parameter(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    cpersist.dump({"a": np.arange(10)}, tmp_path / "a.cp")
    assert calls == []  # default: no fsync
    cpersist.dump({"a": np.arange(10)}, tmp_path / "b.cp", fsync=True)
    assert len(calls) == 2  # the file's data, then the directory entry
    assert np.array_equal(cpersist.load(tmp_path / "b.cp")["a"], np.arange(10))


_WRITER = textwrap.dedent("""
    import sys, numpy as np, cpersist
    path, k, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    obj = {"writer": k, "a": np.full(200_000 + k * 1000, k, dtype=np.int64)}
    for i in range(n):
        cpersist.dump(obj, path, compress=0 if k % 2 else "zstd", n_threads=1)
""")

_READER = textwrap.dedent("""
    import sys, time, numpy as np, cpersist
    path, seconds = sys.argv[1], float(sys.argv[2])
    end = time.monotonic() + seconds
    seen = set()
    while time.monotonic() < end:
        obj = cpersist.load(path)
        k = obj["writer"]
        a = obj["a"]
        assert a.shape == (200_000 + k * 1000,) and (a == k).all(), k
        seen.add(k)
    print(sorted(seen))
""")


def test_concurrent_writers_and_readers(tmp_path):
    target = tmp_path / "shared.cp"
    cpersist.dump({"writer": 0, "a": np.full(200_000, 0, dtype=np.int64)}, target)
    writers = [start_python("-c", _WRITER, target, k, 40) for k in (1, 2, 3)]
    readers = [start_python("-c", _READER, target, 4, stdout=subprocess.PIPE) for _ in range(2)]
    for proc in writers + readers:
        with proc:
            proc.wait(timeout=120)
            if proc.stdout:
                assert proc.stdout.read().startswith(b"[")
            assert proc.returncode == 0
    final = cpersist.load(target)
    k = final["writer"]
    assert k in (1, 2, 3) and (final["a"] == k).all()
    assert os.listdir(tmp_path) == ["shared.cp"]


# -- the edited mark ----------------------------------------------------------

#: An r+ load killed before its write number ``allowed`` (its pwrite calls,
#: counted from 0), or exiting normally with the number of writes it made.
_MARKER = textwrap.dedent("""
    import os, signal, sys, cpersist
    path, allowed = sys.argv[1], int(sys.argv[2])
    write, writes = os.pwrite, [0]
    def killed_at_the_limit(fd, data, offset):
        if writes[0] == allowed:
            os.kill(os.getpid(), signal.SIGKILL)
        writes[0] += 1
        return write(fd, data, offset)
    os.pwrite = killed_at_the_limit
    cpersist.load(path, mmap_mode="r+")
    print(writes[0])
""")


@pytest.mark.usefixtures("sections")
def test_sigkill_between_the_writes_of_the_edited_mark_leaves_a_whole_file(tmp_path):
    obj = {"a": np.arange(1000.0), "names": ["x", "y"]}
    alone = tmp_path / "alone.cp"
    cpersist.dump(obj, alone)
    cpersist.load(alone, mmap_mode="r+")
    marked = alone.read_bytes()
    target = tmp_path / "t.cp"
    for allowed in range(10):
        cpersist.dump(obj, target)
        done = run_code(_MARKER, target, allowed)
        if done.returncode == 0:
            break
        assert done.returncode == -signal.SIGKILL, done.stderr
        # Killed after `allowed` writes: the file loads whole, plainly and
        # mapped, and verifies.
        out = cpersist.load(target)
        assert np.array_equal(out["a"], obj["a"]) and out["names"] == obj["names"]
        assert np.array_equal(cpersist.load(target, mmap_mode="r")["a"], obj["a"])
        assert cpersist.verify(target)["unchecked"] == []
        # The next r+ load finishes the mark: the bytes of a file marked in one go.
        cpersist.load(target, mmap_mode="r+")
        assert target.read_bytes() == marked
    # The mark, its checksum in the trailer, the header's flag.
    assert int(done.stdout) == allowed == 3
    assert target.read_bytes() == marked


def _index_start(path):
    with open(path, "rb") as file:
        file.seek(-32, os.SEEK_END)
        return int.from_bytes(file.read(8), "little")


@pytest.mark.usefixtures("sections")
def test_a_reader_that_finds_an_index_half_changed_waits_for_the_lock_of_its_writer(
        tmp_path, monkeypatch):
    fcntl = pytest.importorskip("fcntl")
    target = tmp_path / "t.cp"
    obj = {"a": np.arange(1000.0)}
    cpersist.dump(obj, target)
    at = _index_start(target)
    loaded = []
    with open(target, "r+b") as writer:
        # A writer in the middle of a change in place holds the file's lock
        # (here: bytes of its index that no state of it has).
        fcntl.flock(writer, fcntl.LOCK_EX)
        os.pwrite(writer.fileno(), b'{"edited":trse ,', at)
        reader = threading.Thread(target=lambda: loaded.append(cpersist.load(target)))
        reader.start()
        reader.join(0.5)
        assert reader.is_alive() and not loaded  # waiting for the writer
        os.pwrite(writer.fileno(), b'{"edited":false,', at)
        fcntl.flock(writer, fcntl.LOCK_UN)
        reader.join(30)
    assert np.array_equal(loaded[0]["a"], obj["a"])
    # A lock that is not released (its holder is no writer of cpersist's):
    # the damage is reported once the wait is over.
    monkeypatch.setattr("cpersist.container.reader.LOCK_WAIT", 0.2)
    with open(target, "r+b") as writer:
        fcntl.flock(writer, fcntl.LOCK_EX)
        os.pwrite(writer.fileno(), b'{"edited":trse ,', at)
        with pytest.raises(cpersist.CorruptFileError, match="index checksum mismatch"):
            cpersist.load(target)


# -- file handles and memory maps ---------------------------------------------

def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_no_leaked_file_handles(tmp_path):
    good = tmp_path / "good.cp"
    cpersist.dump({"a": np.arange(1000.0)}, good)
    raw = good.read_bytes()
    bad = tmp_path / "bad.cp"
    bad.write_bytes(raw[:-5])
    gc.collect()
    before = _open_fds()
    for _ in range(50):
        cpersist.load(good)
        m = cpersist.load(good, mmap_mode="r")
        del m
        cpersist.inspect(good)
        cpersist.verify(good)
        for func in (cpersist.load, cpersist.inspect, cpersist.verify):
            with pytest.raises(cpersist.CorruptFileError):
                func(bad)
        with pytest.raises(Exception):
            cpersist.dump([np.ones(10), lambda: 0], tmp_path / "x.cp")
    gc.collect()
    assert _open_fds() == before


@pytest.mark.skipif(not hasattr(os, "O_PATH"), reason="path descriptors are Linux's")
def test_a_replaced_file_is_deleted_off_the_dumping_thread(tmp_path, monkeypatch):
    """The file a dump replaces is held across the rename and deleted when
    another thread closes it: the dump does not wait for its pages and
    blocks to be freed. Nothing behind the path is opened (a FIFO), and no
    descriptor is left open."""
    from cpersist.container import atomic

    path = tmp_path / "a.cp"
    cpersist.dump(np.arange(10), path)
    old = path.stat()
    later = []
    monkeypatch.setattr(atomic, "run_later", lambda func, *args: later.append((func, args)))
    cpersist.dump(np.arange(20), path)
    [(func, (fd,))] = later
    held = os.fstat(fd)
    assert os.path.samestat(held, old) and held.st_nlink == 0  # replaced, not yet deleted
    func(fd)
    assert np.array_equal(cpersist.load(path), np.arange(20))
    monkeypatch.undo()
    fifo = tmp_path / "fifo.cp"
    os.mkfifo(fifo)
    gc.collect()
    before = _open_fds()
    for target in (fifo, path, path):
        cpersist.dump(np.arange(5), target)
        assert np.array_equal(cpersist.load(target), np.arange(5))
    deadline = time.monotonic() + 20
    while _open_fds() != before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _open_fds() == before


def _cache_state(path):
    from cpersist._runtime.pagecache import cache_state

    fd = os.open(path, os.O_RDONLY)
    try:
        return cache_state(fd)
    finally:
        os.close(fd)


def test_a_dump_frees_the_replaced_files_page_cache_first_only_when_all_is_on_disk(
        tmp_path, monkeypatch):
    """A dump replacing a file whose cached pages are all on disk frees them
    before writing (the new file's pages are then cheap to get): the old
    file stays whole, the new one has the bytes of a dump to a new path. A
    file with pages not yet written keeps them, and so does a file behind a
    symbolic link or a FIFO (nothing opened blocks)."""
    from cpersist._runtime import pagecache

    old_bytes = np.arange(1 << 19, dtype=np.float64)  # 4 MiB
    new = {"v": "new", "a": np.arange(1 << 19, dtype=np.float64)[::-1].copy()}
    path, fresh = tmp_path / "a.cp", tmp_path / "fresh.cp"
    cpersist.dump(old_bytes, path)
    if _cache_state(path) is None:
        pytest.skip("the kernel does not say what is cached (cachestat, Linux 6.5)")
    monkeypatch.setattr(pagecache, "DROP_MIN", 1 << 20)
    cpersist.dump(new, fresh)
    expected_new = fresh.read_bytes()

    # Dirty: written a moment ago and not yet on disk, so kept.
    expected_old = path.read_bytes()
    cached, dirty, _ = _cache_state(path)
    if dirty:
        assert not pagecache.drop_clean_cache(path, path.stat().st_size)
        assert _cache_state(path)[0] == cached
    # Clean: freed by the dump that replaces it, before the rename, the old
    # file whole on disk; not while this process has it open or mapped.
    with open(path, "rb") as file:
        os.fdatasync(file.fileno())
        assert file.read() == expected_old  # all cached
        assert pagecache.cache_state(file.fileno())[:2] == (
            -(-len(expected_old) // mmap.PAGESIZE), 0)
        assert not pagecache.drop_clean_cache(path, len(expected_old))
    mapped = np.memmap(path, mode="r")
    assert not pagecache.drop_clean_cache(path, len(expected_old))
    del mapped
    seen = []
    drop = pagecache.drop_clean_cache

    def drop_and_look(name, size):
        seen.append((drop(name, size), _cache_state(name)[0], pathlib.Path(name).read_bytes()))

    monkeypatch.setattr(atomic, "drop_clean_cache", drop_and_look)
    cpersist.dump(new, path)
    assert seen == [(True, 0, expected_old)]
    assert path.read_bytes() == expected_new

    # Neither a link's target nor a FIFO is opened or freed.
    link, fifo = tmp_path / "link.cp", tmp_path / "fifo.cp"
    os.symlink(fresh, link)
    os.mkfifo(fifo)
    fresh.read_bytes()
    before = _cache_state(fresh)[0]
    assert not pagecache.drop_clean_cache(link, fresh.stat().st_size)
    assert not pagecache.drop_clean_cache(fifo, 1 << 30)
    assert _cache_state(fresh)[0] == before > 0


def test_a_dump_onto_a_file_starts_no_write_of_it_to_disk(tmp_path):
    """Renamed onto a file, a new file some of whose blocks the file system
    has not yet placed is written back in full within the rename on ext4
    (its ``auto_da_alloc``), which takes as long as the dump. Without
    ``fsync`` a dump places every block first: no page of the replacing
    file is being written when the dump returns. (The kernel may start
    writing any file back when the machine holds many unwritten pages: each
    case has three tries, of which the rename's write-back fails all.)"""
    arr = np.arange(1 << 19, dtype=np.float64)  # 4 MiB
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path)
    state = _cache_state(path)
    if state is None:
        pytest.skip("the kernel does not say what is cached (cachestat, Linux 6.5)")
    if not state[1]:
        pytest.skip("this file system writes nothing back (tmpfs)")
    for value in (arr[::-1].copy(), {"a": arr, "tail": "x" * 5000}):
        seen = []
        for _ in range(3):
            cpersist.dump(value, path)
            cached, dirty, writing = _cache_state(path)
            seen.append((cached, dirty, writing))
            if (dirty, writing) == (cached, 0):
                break
        assert (dirty, writing) == (cached, 0), seen
        assert_same(value, cpersist.load(path))


def test_memmap_outlives_load_and_replacement(tmp_path):
    target = tmp_path / "m.cp"
    arr = np.arange(100_000, dtype=np.float32)
    cpersist.dump({"a": arr}, target)
    out = cpersist.load(target, mmap_mode="r")["a"]
    gc.collect()
    assert isinstance(out, np.memmap) and np.array_equal(out, arr)
    cpersist.dump({"a": arr * 2}, target)  # replaced: the map keeps the old inode
    assert np.array_equal(out, arr)
    assert np.array_equal(cpersist.load(target)["a"], arr * 2)


@pytest.mark.usefixtures("sections")
def test_memmap_write_modes(tmp_path):
    target = tmp_path / "m.cp"
    arr = np.arange(1000, dtype=np.int64)
    cpersist.dump({"a": arr}, target)
    c = cpersist.load(target, mmap_mode="c")["a"]
    c[:10] = -1
    del c
    gc.collect()
    assert np.array_equal(cpersist.load(target)["a"], arr)  # 'c' writes stay private
    with pytest.raises(ValueError):
        cpersist.load(target, mmap_mode="r")["a"][0] = 5
    w = cpersist.load(target, mmap_mode="r+")["a"]
    w[:10] = -1
    w.flush()
    del w
    gc.collect()
    expected = arr.copy()
    expected[:10] = -1
    # 'r+' writes reach the file; its checksums now describe the old
    # bytes, and the file says its raw arrays were edited.
    assert np.array_equal(cpersist.load(target, mmap_mode="r")["a"], expected)
    assert np.array_equal(cpersist.load(target, verify=False)["a"], expected)
    assert np.array_equal(cpersist.load(target)["a"], expected)
    assert cpersist.verify(target)["unchecked"] == [0]
