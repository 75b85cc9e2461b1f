"""Raw files: cpersist's raw ``dump`` and ``load`` of one float64 array
against ``np.save`` and ``np.load``, and against a plain copy of its bytes
into new memory, at each of :data:`SIZES`; and of a model of many small
arrays (the storage suite's random forest), loaded trusted and restricted,
against pickle 5 (:func:`forest_ratios`).

Medians of rounds in which every contender runs once in turn, in this
process, warm page cache; a small size makes several calls per timing.
Each dump replaces the previous file, as a program saving its state does.
"""

import os
import pickle

import numpy as np

import cpersist

from ..tools.table import format_table
from .measure import remove_output
from .output import measure_into
from .turns import medians, ratio_row, timed_in_turn

#: Sizes of the array, in bytes (MB = 1e6 bytes).
SIZES = (10_000, 1_000_000, 10_000_000, 100_000_000)
#: ``--full`` adds this one.
FULL_SIZES = SIZES + (1_000_000_000,)
#: Timed rounds by default, and with ``--quick``.
ROUNDS = 9
QUICK_ROUNDS = 5
#: A contender makes calls worth about this many bytes per timing (at
#: least one, at most :data:`MAX_CALLS`), and without ``--quick`` rounds
#: worth this many (at most :data:`MAX_ROUNDS`; see :func:`rounds_at`).
BYTES_PER_TIMING, MAX_CALLS = 4 << 20, 100
BYTES_PER_SIZE, MAX_ROUNDS = 4 * 10 ** 9, 100
#: Heads the table.
TITLE = ("Raw files: cpersist.dump/load (compress=0) of one float64 array against "
         "np.save/np.load, and against a copy of its bytes into new memory (page cache warm)")


def label(size):
    """``10 KB``, ``1 MB``, ``1 GB``."""
    for unit, scale in (("GB", 10 ** 9), ("MB", 10 ** 6), ("KB", 10 ** 3)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


def _repeated(func, calls):
    """``func`` called ``calls`` times; what the last call returned."""
    def run():
        for _ in range(calls - 1):
            func()
        return func()
    return run


def calls_at(size):
    return max(1, min(MAX_CALLS, BYTES_PER_TIMING // size))


def rounds_at(size, rounds):
    """``rounds``, or more where timings are short: the median of nine
    timings of a millisecond moves by a tenth from one run to the next, of
    nine of 20 ms (100 MB) by a fifth."""
    return max(rounds, min(MAX_ROUNDS, BYTES_PER_SIZE // (calls_at(size) * size)))


def measure(size, directory, rounds):
    """Per-call medians and rounds (seconds) of every contender at ``size``."""
    arr = np.random.default_rng(0).random(size // 8)
    npy, cp = os.path.join(directory, "a.npy"), os.path.join(directory, "a.cp")
    np.save(npy, arr)
    cpersist.dump(arr, cp)
    for back in (np.load(npy), cpersist.load(cp)):
        if not (back.dtype == arr.dtype and np.array_equal(back, arr)):
            raise AssertionError(f"a {label(size)} array did not load back as it was dumped")
    calls = calls_at(size)
    copy = _repeated(arr.copy, calls)  # into new memory
    dumps = timed_in_turn({"np.save": _repeated(lambda: np.save(npy, arr), calls),
                           "cpersist.dump": _repeated(lambda: cpersist.dump(arr, cp), calls),
                           "copy": copy}, rounds)
    loads = timed_in_turn({"np.load": _repeated(lambda: np.load(npy), calls),
                           "cpersist.load": _repeated(lambda: cpersist.load(cp), calls),
                           "copy": copy}, rounds)
    for path in (npy, cp):
        os.unlink(path)
    per_call = {op: {name: [t / calls for t in runs] for name, runs in timed.items()}
                for op, timed in (("dump", dumps), ("load", loads))}
    return {"size": size, "calls": calls, "rounds": rounds, "rounds_s": per_call,
            "median_s": {op: medians(runs) for op, runs in per_call.items()}}


def run(out_dir, quick=False, full=False, rounds=None):
    """Measure every size (in :func:`rounds_at` rounds unless ``quick``);
    write ``out_dir/raw.json``; return the list of :func:`measure` results."""
    rounds = rounds or (QUICK_ROUNDS if quick else ROUNDS)
    return measure_into(out_dir, "raw.json", "cpersist-raw-", lambda directory: [
        measure(size, directory, rounds if quick else rounds_at(size, rounds))
        for size in (FULL_SIZES if full else SIZES)])


def _ms(seconds):
    return f"{seconds * 1e3:.3g} ms"


def ratios(results):
    """Ratio rows (:data:`.turns.RATIO_COLUMNS`) of :func:`run`'s results."""
    rows = []
    for r in results:
        what = f"raw float64 array, {label(r['size'])}"
        t, spread = r["median_s"], r["rounds_s"]
        for op, peer in (("dump", "np.save"), ("load", "np.load")):
            mine = f"cpersist.{op}"
            rows.append(ratio_row(
                "raw", f"{what}: {op} time / {peer}'s", t[op][mine] / t[op][peer],
                f"{_ms(t[op][mine])} / {_ms(t[op][peer])} (ranges {_range(spread[op][mine])} "
                f"/ {_range(spread[op][peer])})"))
        for op in ("dump", "load"):
            mine = f"cpersist.{op}"
            rows.append(ratio_row(
                "raw", f"{what}: {op} throughput / a copy's", t[op]["copy"] / t[op][mine],
                f"{r['size'] / 1e6 / t[op][mine]:.0f} MB/s / {r['size'] / 1e6 / t[op]['copy']:.0f}"
                f" MB/s"))
    return rows


def _range(seconds):
    return f"{min(seconds) * 1e3:.3g}-{max(seconds) * 1e3:.3g} ms"


def format_results(results):
    """Every contender's per-call median, per size."""
    cells = []
    for r in results:
        for op in ("dump", "load"):
            for name, t in sorted(r["median_s"][op].items(), key=lambda kv: kv[1]):
                cells.append([label(r["size"]), op, name, _ms(t),
                              f"{r['size'] / 1e6 / t:.0f} MB/s", _range(r["rounds_s"][op][name])])
    return format_table(["size", "op", "contender", "median", "throughput", "range"], cells,
                        right=(3, 4, 5))


#: Heads the table of :func:`forest_ratios`.
FOREST_TITLE = ("A random forest (many small arrays) against pickle protocol 5: raw dump and "
                "load, in turns in one process, warm page cache")
#: What a restricted load of the forest trusts beyond the allowlist.
FOREST_TRUSTED = ["sklearn"]


def forest_ratios(model, work_dir, repeats=15):
    """The ratio rows of ``model`` (a fitted scikit-learn estimator) dumped
    and loaded ``repeats`` times by each contender, in turns, in ``work_dir``."""
    cp_path = os.path.join(work_dir, "forest.cp")
    pk_path = os.path.join(work_dir, "forest.pkl")

    def pickle_dump():
        with open(pk_path, "wb") as file:
            pickle.dump(model, file, protocol=5)

    def pickle_load():
        with open(pk_path, "rb") as file:
            return pickle.load(file)

    steps = {
        "pickle dump": pickle_dump,
        "cpersist dump": lambda: cpersist.dump(model, cp_path, compress=0),
        "pickle load": pickle_load,
        "cpersist load": lambda: cpersist.load(cp_path),
        "cpersist restricted load": lambda: cpersist.load(cp_path, trusted=FOREST_TRUSTED),
    }
    try:
        med = medians(timed_in_turn(steps, repeats))
    finally:
        for path in (cp_path, pk_path):
            remove_output(path)

    def row(target, mine, theirs):
        return ratio_row("forest", target, med[mine] / med[theirs],
                         measured=f"{med[mine] * 1e3:.2f} ms / {med[theirs] * 1e3:.2f} ms, "
                                  f"medians of {repeats}")

    return [row("raw dump / pickle 5 dump", "cpersist dump", "pickle dump"),
            row("raw load / pickle 5 load", "cpersist load", "pickle load"),
            row("restricted load (trusted=['sklearn']) / pickle 5 load",
                "cpersist restricted load", "pickle load")]
