"""The threads suite: how much cpersist's thread pool speeds up dump and load.

For every dataset and compression level, one fresh process writes the data
at each thread count in turn, round after round, and another loads the file
the same way (warm page cache). The counts alternate within one process,
in the order 1, 2, 2, 1, 1, 2, ... (for counts 1,2), because on a shared
virtual machine the speed of the whole machine drifts within seconds: two
2-thread loads a second apart in one process took 25 and 39 ms, and a count
measured in its own process a few seconds after the other would carry that
drift into the ratio. Each round gives a speed-up (time at the first count
over time at the other); the suite reports the median over rounds.
"""

from __future__ import annotations

import gc
import os
import shutil
import time
from typing import Any, Dict, List, Sequence

from . import datasets as ds
from .measure import median, run_in_subprocess, warm_cache

__all__ = ["THREADS_COLUMNS", "THREADS_DATASETS", "run_threads"]

MB = 1e6
#: Default datasets: the compressible built-in arrays (thread counts matter
#: little where chunks are stored raw).
THREADS_DATASETS = ["atlas_c", "atlas_f", "sparse_table", "timeseries"]

THREADS_COLUMNS = [
    "dataset", "description", "level", "op", "threads", "time_s", "MBps", "speedup",
    "speedup_min", "speedup_max", "repeats", "status", "reason", "times",
]


def _order(counts: Sequence[int], r: int) -> List[int]:
    # Reversed every other round: what runs first in a round (just after a
    # free of the previous result, say) is not always the same count.
    return list(counts) if r % 2 == 0 else list(reversed(counts))


def _threads_task(task: Dict[str, Any]) -> Dict[str, Any]:
    """In a fresh process: dump or load at each count, alternating."""
    import cpersist

    from .compare import first_difference

    path, counts, level = task["file_path"], task["counts"], task["level"]
    obj = ds.load_cached(task["data_path"])
    times = {n: [] for n in counts}
    checked = set()
    for r in range(task["repeats"]):
        for n in _order(counts, r):
            if task["op"] == "write":
                if os.path.exists(path):
                    os.unlink(path)  # every dump creates the file, as a user would
                gc.collect()
                t0 = time.perf_counter()
                cpersist.dump(obj, path, compress=level, n_threads=n)
                times[n].append(time.perf_counter() - t0)
                continue
            warm_cache(path)
            gc.collect()
            t0 = time.perf_counter()
            result = cpersist.load(path, n_threads=n)
            times[n].append(time.perf_counter() - t0)
            if n not in checked:
                diff = first_difference(obj, result)
                if diff:
                    return {"status": "failed",
                            "reason": f"wrong data read back at {n} threads: {diff}"}
                checked.add(n)
            del result
    return {"status": "ok", "times": times}


def run_threads(out_dir: str, dataset_list: Sequence[ds.Dataset], size_bytes: int,
                levels: Sequence[int], counts: Sequence[int], repeats: int,
                timeout: float = 1800.0) -> List[Dict[str, Any]]:
    """Measure dump and load of each dataset at each thread count.

    Parameters
    ----------
    out_dir : str
        Scratch files go to ``out_dir/_work`` (removed afterwards).
    dataset_list : sequence of Dataset
    size_bytes : int
        Size of the generated datasets.
    levels : sequence of int
        cpersist ``compress`` levels (0 = raw).
    counts : sequence of int
        Thread counts; speed-ups are relative to the first.
    repeats : int
        Rounds: each count is timed once per round.
    timeout : float
        Seconds before one process is killed and its rows reported failed.

    Returns
    -------
    list of dict
        One row per (dataset, level, op, count) with the
        :data:`THREADS_COLUMNS` keys.
    """
    work = os.path.join(out_dir, "_work")
    os.makedirs(work, exist_ok=True)
    rows = []
    try:
        for d in dataset_list:
            try:
                obj = d.make(size_bytes, False)
            except Exception as e:  # e.g. an untrusted pickle: reported, not fatal
                rows += [dict(dataset=d.name, description=d.description, level=level, op=op,
                              threads=n, repeats=repeats, status="failed",
                              reason=f"dataset not loaded: {type(e).__name__}: {e}")
                         for level in levels for op in ("write", "read") for n in counts]
                continue
            info = ds.save_cached(d, obj, os.path.join(work, "dataset.pkl"))
            del obj
            for level in levels:
                task = dict(call=_threads_task, file_path=os.path.join(work, "data.cp"),
                            data_path=info["path"], counts=list(counts), level=level,
                            repeats=repeats)
                for op in ("write", "read"):
                    res = run_in_subprocess(dict(task, op=op), timeout)
                    base = dict(dataset=d.name, description=info["description"], level=level,
                                op=op, repeats=repeats)
                    if res["status"] != "ok":
                        rows += [dict(base, threads=n, status="failed",
                                      reason=res.get("reason", "?")) for n in counts]
                        if op == "write":
                            break  # nothing to read
                        continue
                    rows += _rows(base, info["size_bytes"], res["times"], counts)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _rows(base, size, times, counts):
    first = times[counts[0]]
    rows = []
    for n in counts:
        per_round = [a / b for a, b in zip(first, times[n])]
        t = median(times[n])
        rows.append(dict(
            base, threads=n, time_s=t, MBps=round(size / MB / t, 2),
            speedup=round(median(per_round), 4), speedup_min=round(min(per_round), 4),
            speedup_max=round(max(per_round), 4), status="ok", reason="",
            times=";".join(f"{x:.6g}" for x in times[n]),
        ))
    return rows
