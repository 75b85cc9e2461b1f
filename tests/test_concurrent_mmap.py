"""Memory-mapped loads while other processes replace the file: every load is
whole, its pickled fields and its array bytes from one and the same file.
Loads that mark a file as edited (``r+``) while others load it: none fails."""

import multiprocessing
import time

import numpy as np

import cpersist

SECONDS = 3


def _writer(path, first_tag, ready, stop):
    tag = first_tag
    # Sizes differ between dumps, so a mapping made from a newer file would
    # also run past or short of the index read from the older one; each is
    # a section (at least RAW_INLINE_BELOW bytes), mapped.
    while not stop.is_set():
        n = 8192 + 37 * (tag % 50)
        cpersist.dump({"tag": tag, "a": np.full(n, tag, dtype=np.int64)}, path)
        ready.set()
        tag += 2


def test_mmap_loads_during_concurrent_dumps_are_whole(tmp_path):
    path = str(tmp_path / "shared.cp")
    cpersist.dump({"tag": 0, "a": np.zeros(8192, dtype=np.int64)}, path)
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    ready = [ctx.Event(), ctx.Event()]  # set once a writer has dumped
    writers = [ctx.Process(target=_writer, args=(path, first, event, stop))
               for first, event in zip((1, 2), ready)]
    for writer in writers:
        writer.start()
    loads, tags, failures = 0, set(), []
    try:
        # Both writers running (their start-up is slow on a loaded machine).
        assert all(event.wait(120) for event in ready)
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            try:
                obj = cpersist.load(path, mmap_mode="r")
            except Exception as exc:  # noqa: BLE001 - every failure is recorded
                failures.append(repr(exc))
                continue
            loads += 1
            tags.add(obj["tag"])
            assert isinstance(obj["a"], np.memmap)
            if not (obj["a"] == obj["tag"]).all() or len(obj["a"]) != 8192 + 37 * (
                    obj["tag"] % 50):
                failures.append(f"tag {obj['tag']} with array values "
                                f"{np.unique(np.asarray(obj['a']))[:5]} len {len(obj['a'])}")
    finally:
        stop.set()
        for writer in writers:
            writer.join(30)
    assert failures == []
    assert loads > 100 and len(tags) > 10  # the file really changed under the loads


#: An object whose load unpickles for a while before it maps its array: an
#: ``r+`` load reads the index, then marks the file as edited only once the
#: stream asks for the array, so other loads of the same file read its
#: index in between.
_HEAD = list(range(200_000))
_EDITED_ARRAY = np.arange(8192.0)  # a section, which r+ maps


def _loader(path, mode, barrier, stop, results):
    failures, loads = [], 0
    while True:
        barrier.wait(120)  # the file is fresh
        if stop.is_set():
            break
        try:
            obj = cpersist.load(path, mmap_mode=mode)
            if obj["head"] != _HEAD or not np.array_equal(obj["a"], _EDITED_ARRAY):
                failures.append(f"{mode} load: wrong values")
        except Exception as exc:  # noqa: BLE001 - every failure is recorded
            failures.append(f"{mode} load: {exc!r}")
        loads += 1
        barrier.wait(120)  # every load of this file done
    results.put((loads, failures))


def test_r_plus_and_plain_loads_of_one_file_at_once_raise_nothing(tmp_path):
    # Each trial dumps a fresh (unedited) file, then three r+ loads and
    # three plain ones start on it at once: the r+ loads mark it as edited
    # while the others read its index.
    path = str(tmp_path / "shared.cp")
    obj = {"head": _HEAD, "a": _EDITED_ARRAY}
    cpersist.dump(obj, path)
    ctx = multiprocessing.get_context("spawn")
    barrier, stop, results = ctx.Barrier(7), ctx.Event(), ctx.Queue()
    loaders = [ctx.Process(target=_loader, args=(path, mode, barrier, stop, results))
               for mode in ["r+"] * 3 + [None] * 3]
    for loader in loaders:
        loader.start()
    trials = 0
    try:
        barrier.wait(120)  # every loader started: the first trial
        deadline = time.monotonic() + SECONDS
        while True:
            trials += 1
            barrier.wait(120)
            if time.monotonic() > deadline:
                stop.set()
            else:
                cpersist.dump(obj, path)
            barrier.wait(120)
            if stop.is_set():
                break
        outcomes = [results.get(timeout=120) for _ in loaders]
    finally:
        stop.set()
        barrier.abort()
        for loader in loaders:
            loader.join(30)
    failures = [failure for _, failures in outcomes for failure in failures]
    print(f"{trials} trials, {sum(n for n, _ in outcomes)} loads, {len(failures)} failed")
    assert failures == []
    assert trials >= 3 and all(n == trials for n, _ in outcomes)
    # The last trial's file, marked by three r+ loads at once: the same
    # bytes as a file marked by one.
    alone = tmp_path / "alone.cp"
    cpersist.dump(obj, alone)
    cpersist.load(alone, mmap_mode="r+")
    with open(path, "rb") as file:
        assert file.read() == alone.read_bytes()
