"""Timing calls in the lab's scripts."""

import time


def time_runs(func, runs):
    """Wall times in seconds of ``runs`` calls of ``func()``, in order."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        func()
        times.append(time.perf_counter() - t0)
    return times
