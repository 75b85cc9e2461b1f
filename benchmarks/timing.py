"""Timing calls in the lab's scripts."""

import os
import time


def time_runs(func, runs):
    """Wall times in seconds of ``runs`` calls of ``func()``, in order."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        func()
        times.append(time.perf_counter() - t0)
    return times


def remove_scratch(directory):
    """Remove a script's scratch ``directory`` (files only) and print the
    load average, which says how busy the machine was meanwhile."""
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    os.rmdir(directory)
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))
