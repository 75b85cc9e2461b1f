"""Memory-mapped loads while other processes replace the file: every load is
whole, its pickled fields and its array bytes from one and the same file."""

import multiprocessing
import time

import numpy as np

import cpersist

SECONDS = 3


def _writer(path, first_tag, ready, stop):
    tag = first_tag
    # Sizes differ between dumps, so a mapping made from a newer file would
    # also run past or short of the index read from the older one.
    while not stop.is_set():
        n = 1000 + 37 * (tag % 50)
        cpersist.dump({"tag": tag, "a": np.full(n, tag, dtype=np.int64)}, path)
        ready.set()
        tag += 2


def test_mmap_loads_during_concurrent_dumps_are_whole(tmp_path):
    path = str(tmp_path / "shared.cp")
    cpersist.dump({"tag": 0, "a": np.zeros(1000, dtype=np.int64)}, path)
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
            if not (obj["a"] == obj["tag"]).all() or len(obj["a"]) != 1000 + 37 * (
                    obj["tag"] % 50):
                failures.append(f"tag {obj['tag']} with array values "
                                f"{np.unique(np.asarray(obj['a']))[:5]} len {len(obj['a'])}")
    finally:
        stop.set()
        for writer in writers:
            writer.join(30)
    assert failures == []
    assert loads > 100 and len(tags) > 10  # the file really changed under the loads
