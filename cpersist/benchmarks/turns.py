"""Contenders timed in turn, round after round, in this process: each call
charged for its own work alone, and each allocating its memory as a new
process would, so that the comparisons of one run are side by side."""

import ctypes
import gc
import math
import statistics
import time


def timed_in_turn(contenders, rounds, before=None):
    """The time of each contender in every round (a list of ``rounds``
    seconds), timed in turn; ``before[name]()`` runs untimed before each run.

    A call's result is freed after its clock stops and the memory given back
    to the kernel (``malloc_trim``), so that each allocates as in a new
    process, whatever ran before it. Each round takes the contenders with
    another stride, so that each follows a different one."""
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
                gc.collect()
                if trim is not None:
                    trim(0)
                if number:
                    times[name].append(elapsed)
    finally:
        gc.unfreeze()
    return times


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
