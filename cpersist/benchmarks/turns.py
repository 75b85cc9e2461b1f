"""Contenders timed in turn, round after round, in this process: each call charged for its own
work alone, and each allocating its memory as a new process would, so that the comparisons of
one run are side by side; and those comparisons as ratio rows (cpersist's time over a peer's,
one size over another): the rows of ``checkpoints.csv``, ``appends.csv``, ``raw.csv`` and
``forest.csv``. ``key``, empty here, is where the maintainers' lab names a comparison it holds
to a bound."""

import ctypes
import gc
import math
import os
import statistics
import time
from functools import partial

from .._runtime.threads import wait_for_later
from ..tools.table import format_table
from .measure import disk_size, remove_output


#: Columns of a ratio row.
RATIO_COLUMNS = ["suite", "target", "key", "ratio", "measured", "status", "reason"]


def ratio_row(suite, target, ratio=None, measured="", key="", missing=None):
    """One ratio row; ``missing`` names a library that is not installed."""
    if missing:
        return {"suite": suite, "target": target, "key": key, "ratio": "", "measured": "",
                "status": "not installed", "reason": f"needs {missing} (pip install {missing})"}
    return {"suite": suite, "target": target, "key": key, "ratio": round(ratio, 3),
            "measured": measured, "status": "ok", "reason": ""}


def failed_row(suite, target, reason, key=""):
    """A comparison that could not be measured."""
    return dict(ratio_row(suite, target, 0, key=key), ratio="", status="failed", reason=reason)


def format_ratios(rows):
    """The ratio rows as a text table."""
    return format_table(["comparison", "ratio", "measured"], [
        [r["target"], f"{float(r['ratio']):.3f}", r["measured"]]
        if r["status"] == "ok" else [r["target"], f"{r['status']}: {r['reason']}"]
        for r in rows], right=(1,))


def timed_in_turn(contenders, rounds, before=None):
    """The time of each contender in every round (a list of ``rounds``
    seconds), timed in turn; ``before[name]()`` runs untimed before each run.

    After a call's clock stops, the work it left to cpersist's thread is
    done, its result freed and the memory given back to the kernel
    (``malloc_trim``): each allocates as in a new process, whatever ran
    before it. Each round takes the contenders with another stride."""
    names = list(contenders)
    times = {name: [] for name in names}
    n = len(names)
    strides = [s for s in range(1, n) if math.gcd(s, n) == 1] or [1]
    trim = _malloc_trim()
    # What lives already is no contender's garbage: frozen, the collector
    # after each call walks only what the calls made (a process that has
    # imported torch and the rest takes a third of a second otherwise).
    gc.freeze()
    try:
        for number in range(rounds + 1):  # the first round (imports, pools) untimed
            stride = strides[number % len(strides)]
            for name in (names[(number + i * stride) % n] for i in range(n)):
                if before and name in before:
                    before[name]()
                t0 = time.perf_counter()
                result = contenders[name]()
                elapsed = time.perf_counter() - t0
                del result
                wait_for_later()  # a dump's deletion of the file it replaced
                gc.collect()
                if trim is not None:
                    trim(0)
                if number:
                    times[name].append(elapsed)
    finally:
        gc.unfreeze()
    return times


def dumps_then_loads(dumps, loads, paths, rounds, check):
    """Every dump of ``dumps`` (name -> (call, key in ``paths`` of the file
    it writes)) timed in turn, ``check()``, then every load of ``loads``
    timed in turn; the files are removed afterwards.

    Returns the medians (``dump_s``, ``load_s``), every round's times (``dump_rounds_s``,
    ``load_rounds_s``: their spread) and the bytes of each file, by key (``file_bytes``)."""
    # Each dump writes a new file: the time the file system takes to free
    # the previous one (a rename onto it, or a truncation) is not timed.
    before = {name: partial(remove_output, paths[key]) for name, (_, key) in dumps.items()}
    try:
        dump_rounds = timed_in_turn({name: call for name, (call, _) in dumps.items()}, rounds,
                                    before)
        check()  # every file holds what was dumped before its loads are timed
        load_rounds = timed_in_turn(loads, rounds)
        sizes = {key: disk_size(path) for key, path in paths.items() if os.path.exists(path)}
    finally:
        for path in paths.values():
            remove_output(path)
    return {"dump_s": medians(dump_rounds), "load_s": medians(load_rounds),
            "dump_rounds_s": dump_rounds, "load_rounds_s": load_rounds, "file_bytes": sizes}


def range_ms(seconds):
    """``12-15``: the fastest and slowest of ``seconds``, in whole milliseconds."""
    return f"{min(seconds) * 1e3:.0f}-{max(seconds) * 1e3:.0f}"


def ratio_rows(suite, what, comparisons, result, ranges=True):
    """The ratio rows on ``what`` of a :func:`dumps_then_loads` ``result``,
    one per comparison of ``comparisons`` ((target, figure, cpersist's
    contender, the peer's)) whose peer was measured. The figure is
    ``"dump"``, ``"load"`` or ``"call"``: median times (with ``ranges``,
    the range of each one's rounds too); or a format of the two files'
    sizes: ``{a}`` and ``{b}`` in bytes, ``{a_mb}`` and ``{b_mb}`` in MB,
    ``{d}`` their difference in bytes."""
    rows = []
    for target, figure, mine, peer in comparisons:
        if figure in ("dump", "load", "call"):
            t = result[f"{figure}_s"]
            if peer not in t:
                continue
            ratio, measured = t[mine] / t[peer], f"{t[mine] * 1e3:.0f} ms / {t[peer] * 1e3:.0f} ms"
            if ranges:
                spread = result[f"{figure}_rounds_s"]
                measured += f" (ranges {range_ms(spread[mine])} / {range_ms(spread[peer])} ms)"
        else:
            a, b = result["file_bytes"][mine], result["file_bytes"][peer]
            ratio = a / b
            measured = figure.format(a=a, b=b, d=a - b, a_mb=a / (1 << 20), b_mb=b / (1 << 20))
        rows.append(ratio_row(suite, f"{what}: {target}", ratio, measured))
    return rows


def contest_table(result, ops=("dump", "load")):
    """Every contender's median time and range over the rounds, fastest
    first, for each of ``ops``, then the size of each file of a
    :func:`dumps_then_loads` result."""
    cells = []
    for op in ops:
        rounds = result[f"{op}_rounds_s"]
        cells += [[op, name, f"{t * 1e3:.1f} ms", f"{range_ms(rounds[name])} ms"]
                  for name, t in sorted(result[f"{op}_s"].items(), key=lambda kv: kv[1])]
    cells += [["size", key, f"{n / (1 << 20):.1f} MB", ""]
              for key, n in sorted(result["file_bytes"].items())]
    return format_table(["op", "contender", "time or size", "range"], cells, right=(2, 3),
                        indent="  ")


def not_installed(needs):
    """The pip name of the first of ``needs`` (``(module, pip name)`` pairs)
    that does not import, or None."""
    import importlib.util
    for module, package in needs:
        try:
            if importlib.util.find_spec(module) is None:
                return package
        except ModuleNotFoundError:  # the parent package of a dotted name
            return package
    return None


def medians(times):
    return {name: statistics.median(runs) for name, runs in times.items()}


def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
