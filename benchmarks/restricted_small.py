#!/usr/bin/env python3
"""What ``cpersist.loads(data, trusted=False)`` of a small object costs beside
``pickle.loads`` of the same object (the target: at most 3x), and whether the
restricted load's quick path (``cpersist.pickling.quick``) took its stream.

Run from the repository root::

    python benchmarks/restricted_small.py [--repeat 7] [--number 2000]

Each object's three loads are timed in turn within every round, in the
thread's CPU time (a shared machine's other processes then add little), and
the quickest of the rounds kept.

``--steps`` times instead, for the smallest object, each step a restricted
``loads`` of it takes, alone, beside ``pickle.loads``: what the 3x target
leaves room for.
"""

import argparse
import os
import pickle
import random
import sys
import time
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cpersist  # noqa: E402
from cpersist.format.limits import DEFAULT  # noqa: E402
from cpersist.container.compact import small_bytes_stream  # noqa: E402
from cpersist.container.compact import END_MAGIC, stream_checksum  # noqa: E402
from cpersist.pickling.quick import (BYTE_CLASSES, NOT_QUICK, _exact_scan,  # noqa: E402
                                     compact_quick_load, framed_checks, quick_load)
from xxhash import xxh3_64_intdigest  # noqa: E402


def objects():
    rng = random.Random(0)
    return {
        "3-key dict": {"a": 1, "b": 2.0, "c": "x"},
        "seed record": dict((str(n), n) for n in range(100)),
        "1000 ints + str": {"k": list(range(1000)), "s": "x" * 100},
        "200 floats": [rng.random() for _ in range(200)],
        # English keys: an "r" byte, LONG_BINPUT's, in the data
        "training config": {
            "learning_rate": 3e-4, "weight_decay": 0.01, "warmup_steps": 500,
            "max_grad_norm": 1.0, "per_device_train_batch_size": 32,
            "gradient_accumulation_steps": 4, "lr_scheduler_type": "cosine",
            "optimizer": "adamw_torch", "num_train_epochs": 3, "seed": 42,
            "output_dir": "runs/exp1", "report_to": ["tensorboard"], "bf16": True,
            "dropout": 0.1, "label_smoothing_factor": 0.0, "save_strategy": "steps",
        },
        "nested config": {
            "model": {"layers": [64, 128, 256], "dropout": 0.1, "act": "gelu"},
            "optim": {"name": "adam", "lr": 0.0003, "betas": (0.9, 0.999), "eps": 1e-8},
            "data": {"batch": 32, "shuffle": True, "path": "data/train", "splits": [0.8, 0.2]},
            "seed": 0, "tags": ["baseline", "v2"], "notes": None,
        },
    }


def measure(obj, number, repeat):
    stream = pickle.dumps(obj, 5)
    data = cpersist.dumps(obj)
    assert cpersist.loads(data, trusted=False) == obj
    calls = {"pickle": lambda: pickle.loads(stream),
             "trusted": lambda: cpersist.loads(data),
             "restricted": lambda: cpersist.loads(data, trusted=False)}
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeat):
        for name, call in calls.items():
            seconds = timeit.timeit(call, number=number, timer=time.thread_time)
            best[name] = min(best[name], seconds / number)
    quick = quick_load(data[72:-40], DEFAULT) is not NOT_QUICK
    return len(stream), quick, best


def steps(obj, number, repeat):
    """The CPU time of each step of a restricted ``loads`` of ``obj``, each
    alone in a loop (so a step costs less here than within the load)."""
    stream = pickle.dumps(obj, 5)
    data = cpersist.dumps(obj)
    scan = _exact_scan(now=True)
    compact_quick_load(data)  # keeps the checks of its size
    head, after, split, before_checksum = framed_checks[len(data)]
    parts = split(data)

    def signature_only(data, _keywords_only=None, trusted=True, verify=True, n_threads=None,
                       copy=False, limits=None, jax_as_numpy=False):
        return data
    calls = {
        "pickle.loads(stream)": lambda: pickle.loads(stream),
        "cpersist.loads(data)": lambda: cpersist.loads(data),
        "cpersist.loads(data, trusted=False)": lambda: cpersist.loads(data, trusted=False),
        "  compact_quick_load(data) (pickle.loads included)": lambda: compact_quick_load(data),
        "    its head (header, DATA, PROTO 5, FRAME)": lambda: head <= data < after,
        "    its split (stream, bytes after it)": lambda: split(data),
        "    their compares, with XXH3-64 of the stream": lambda: (
            parts[1] == before_checksum and parts[3] == END_MAGIC
            and parts[2] == stream_checksum(parts[0])),
        "      of which XXH3-64 of the stream": lambda: xxh3_64_intdigest(stream),
        "    its byte classes (a translate, isascii)":
            lambda: stream.translate(BYTE_CLASSES).isascii(),
        "  (small_bytes_stream(data), the trusted one's)": lambda: small_bytes_stream(data),
        "  (quick_load(stream), limits given; 2 translates)": lambda: quick_load(stream, DEFAULT),
        "  (exact scan, for a stream with an 'r' byte)": lambda: scan(stream),
        "an empty call": lambda: None,
        "cpersist.loads, the attribute alone": lambda: cpersist.loads,
        "a call of loads' signature (one keyword), empty": lambda: signature_only(
            data, trusted=False),
    }
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeat):
        for name, call in calls.items():
            seconds = timeit.timeit(call, number=number, timer=time.thread_time)
            best[name] = min(best[name], seconds / number)
    base = best["pickle.loads(stream)"]
    print(f"{len(stream)}-byte stream: each step alone, ns (x pickle.loads)")
    for name, seconds in best.items():
        print(f"{name:48} {seconds * 1e9:7.0f} {seconds / base:6.2f}x")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--steps", action="store_true",
                        help="time each step of the smallest object's restricted load")
    args = parser.parse_args(argv)
    if args.steps:
        steps(objects()["3-key dict"], args.number * 10, args.repeat)
        return
    print(f"{'object':18} {'stream':>7} {'path':>8} {'pickle us':>10} {'trusted':>8} "
          f"{'restricted':>10} {'ratio':>6}")
    for name, obj in objects().items():
        size, quick, best = measure(obj, args.number, args.repeat)
        us = {k: v * 1e6 for k, v in best.items()}
        print(f"{name:18} {size:7d} {'quick' if quick else 'machine':>8} {us['pickle']:10.2f} "
              f"{us['trusted'] / us['pickle']:7.2f}x {us['restricted']:9.2f}us "
              f"{us['restricted'] / us['pickle']:5.1f}x")


if __name__ == "__main__":
    main()
