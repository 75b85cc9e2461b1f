"""Cold start and small objects: what a one-shot script, a first call and a
small object cost, each as a ratio (rows of ``coldstart.csv``, in the
columns of :data:`cpersist.benchmarks.turns.RATIO_COLUMNS`), keyed for
:mod:`benchmarks.bounds`; with the start-up times of
:mod:`benchmarks.importtime` (``import_time.csv``).

Run from the repository root (it is not installed with cpersist)::

    python -m benchmarks.coldstart RUN_DIR [--runs 21]

- **One-shot script**: ``import`` + ``dump`` + ``load`` of ``{'w':
  np.arange(100_000.0), 'meta': {...}}`` in a fresh interpreter (numpy
  imported before the clock starts), cpersist's time over joblib's, at
  ``compress=0`` and ``3``; interpreters of the two alternate.
- **First call**: in one fresh process, the first ``compress=3`` dump of a
  48 MB array over the second (to another file), and the same for loads.
- **Command line**: ``cpersist info`` on a compressed file, wall time of the
  whole process over ``python -c "import numpy"``'s.
- **In memory**: ``cpersist.dumps``/``loads`` of the seed posts' small
  objects over ``pickle.dumps``/``loads`` (protocol 5), timed as
  :mod:`timeit` times them (many calls per clock read, best of
  :data:`SIDE_BY_SIDE_REPEAT` reads of the same length, the statements
  taking turns), and the bytes beyond pickle's.
- **To a file**: ``cpersist.dump``/``load`` of the small object to a path
  over ``joblib.dump``/``load``'s, and the file's bytes beyond pickle's.

Process-level figures are medians over ``runs`` fresh interpreters.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from cpersist.benchmarks.turns import RATIO_COLUMNS, failed_row, format_ratios, ratio_row

from .importtime import _cli_command

__all__ = ["run_cold_start", "SMALL_OBJECT"]

#: The seed posts' small object.
SMALL_OBJECT = {"people": [{"name": "Alice"}]}
#: The bytes a dump adds to pickle's are compared with this many.
BYTES_OVER_PICKLE = 128

_ONE_SHOT = """
import time, numpy as np
obj = {{'w': np.arange(100_000.0), 'meta': {{'name': 'run', 'n': 3, 'tags': ['a', 'b']}}}}
t0 = time.perf_counter()
import {lib}
{lib}.dump(obj, {path!r}, compress={compress})
back = {lib}.load({path!r})
t1 = time.perf_counter()
assert np.array_equal(back['w'], obj['w'])
print(t1 - t0)
"""

_FIRST_CALLS = """
import time, numpy as np, cpersist
arr = np.cumsum(np.random.default_rng(0).standard_normal(6_000_000))  # 48 MB
times = []
for path in ({a!r}, {b!r}):
    t0 = time.perf_counter(); cpersist.dump(arr, path, compress=3)
    times.append(time.perf_counter() - t0)
for path in ({a!r}, {b!r}):
    t0 = time.perf_counter(); back = cpersist.load(path)
    times.append(time.perf_counter() - t0)
    assert np.array_equal(back, arr)
print(*times)
"""


def _python(code):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else
                           f"exit code {done.returncode}")
    return [float(x) for x in done.stdout.split()]


def _wall(command):
    import time

    t0 = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=120)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode(errors="replace").strip()
                           or f"exit code {done.returncode}")
    return elapsed


def _failed(target, exc):
    return failed_row("coldstart", target, f"{type(exc).__name__}: {exc}"[:200])


def _has_joblib():
    try:
        import joblib  # noqa: F401
    except ImportError:
        return False
    return True


def _one_shot(directory, runs):
    rows = []
    for compress in (0, 3):
        target = f"one-shot script (import, dump, load), compress={compress}: time / joblib's"
        if not _has_joblib():
            rows.append(ratio_row("coldstart", target, missing="joblib"))
            continue
        try:
            times = {"cpersist": [], "joblib": []}
            for _ in range(runs):
                for lib in times:
                    path = os.path.join(directory, f"one-shot-{lib}-{compress}")
                    times[lib] += _python(_ONE_SHOT.format(lib=lib, path=path,
                                                           compress=compress))
            ours, theirs = (statistics.median(times[lib]) for lib in ("cpersist", "joblib"))
            rows.append(ratio_row("coldstart", target, ours / theirs, key="coldstart.one_shot",
                                  measured=f"{ours * 1e3:.1f} ms / {theirs * 1e3:.1f} ms "
                             f"(ranges {min(times['cpersist']) * 1e3:.0f}-"
                             f"{max(times['cpersist']) * 1e3:.0f} / "
                             f"{min(times['joblib']) * 1e3:.0f}-"
                             f"{max(times['joblib']) * 1e3:.0f} ms)"))
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            rows.append(_failed(target, exc))
    return rows


def _first_calls(directory, runs):
    names = ("dump", "load")
    targets = [f"first compress=3 {what} of a 48 MB array in a process: time / the second's"
               for what in names]
    try:
        ratios = {"dump": [], "load": []}
        firsts = {"dump": [], "load": []}
        for _ in range(runs):
            d1, d2, l1, l2 = _python(_FIRST_CALLS.format(a=os.path.join(directory, "first.cp"),
                                                         b=os.path.join(directory, "second.cp")))
            ratios["dump"].append(d1 / d2)
            ratios["load"].append(l1 / l2)
            firsts["dump"].append((d1, d2))
            firsts["load"].append((l1, l2))
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return [_failed(target, exc) for target in targets]
    rows = []
    for what, target in zip(names, targets):
        ratio = statistics.median(ratios[what])
        first = statistics.median(t for t, _ in firsts[what])
        second = statistics.median(t for _, t in firsts[what])
        rows.append(ratio_row("coldstart", target, ratio, key="coldstart.first_call",
                              measured=f"{first * 1e3:.1f} ms / {second * 1e3:.1f} ms (ratios "
                         f"{min(ratios[what]):.2f}-{max(ratios[what]):.2f})"))
    return rows


def _info_command(directory, runs):
    target = "cpersist info on a compressed file, whole command: time / python -c 'import numpy'"
    try:
        import numpy as np

        import cpersist

        path = os.path.join(directory, "info.cp")
        cpersist.dump({"w": np.cumsum(np.ones((500, 1000)), axis=1), "n": 3}, path, compress=3)
        info, numpy = [], []
        for _ in range(runs):
            info.append(_wall(_cli_command() + ["info", path]))
            numpy.append(_wall([sys.executable, "-c", "import numpy"]))
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return [_failed(target, exc)]
    ours, theirs = statistics.median(info), statistics.median(numpy)
    return [ratio_row("coldstart", target, ours / theirs, key="coldstart.info_command",
                      measured=f"{ours * 1e3:.1f} ms / {theirs * 1e3:.1f} ms")]


#: Clock reads per statement of the side-by-side timings: on a shared
#: machine a statement needs several before one runs undisturbed.
SIDE_BY_SIDE_REPEAT = 25
#: Seconds each clock read of a side-by-side timing lasts, about: the same
#: for every statement, since a longer read is likelier to be interrupted
#: by another process (and its best to be slower) on a busy machine.
SIDE_BY_SIDE_READ = 0.002


def best_times(statements, namespace, number, repeat=SIDE_BY_SIDE_REPEAT):
    """``{statement: seconds per call}``, each the best of ``repeat`` clock
    reads of up to ``number`` calls lasting about :data:`SIDE_BY_SIDE_READ`
    each, as ``serializers.best_time`` (many calls per clock read); the statements
    take turns, one clock read each, so that a change in the machine's
    speed while they are timed reaches every one of them alike."""
    import timeit

    timers, calls = {}, {}
    for stmt in statements:
        timer = timers[stmt] = timeit.Timer(stmt, globals=namespace)
        once = min(timer.repeat(repeat=3, number=1))
        calls[stmt] = max(1, min(number, int(SIDE_BY_SIDE_READ / max(once, 1e-9))))
    best = dict.fromkeys(statements, float("inf"))
    for _ in range(repeat):
        for stmt, timer in timers.items():
            best[stmt] = min(best[stmt], timer.timeit(calls[stmt]) / calls[stmt])
    return best


def _in_memory(number):
    import pickle

    import cpersist

    rows = []
    from .serializers import SMALL_OBJECTS

    for name, make in SMALL_OBJECTS.items():
        obj = make()
        ours, theirs = cpersist.dumps(obj), pickle.dumps(obj, protocol=5)
        assert cpersist.loads(ours) == obj
        space = {"obj": obj, "cpersist": cpersist, "pickle": pickle, "ours": ours,
                 "theirs": theirs}
        times = best_times(["cpersist.dumps(obj)", "pickle.dumps(obj, protocol=5)",
                            "cpersist.loads(ours)", "pickle.loads(theirs)"], space, number)
        for what in ("dumps", "loads"):
            arg = "obj" if what == "dumps" else "ours"
            mine = times[f"cpersist.{what}({arg})"]
            peer = times["pickle.dumps(obj, protocol=5)" if what == "dumps" else
                         "pickle.loads(theirs)"]
            rows.append(ratio_row("coldstart", f"{what} of {name!r}: time / pickle.{what} "
                                  f"(protocol 5)", mine / peer, key=f"coldstart.{what}_vs_pickle",
                                  measured=f"{mine * 1e6:.2f} us / {peer * 1e6:.2f} us"))
        rows.append(ratio_row("coldstart", f"dumps of {name!r}: bytes beyond pickle's / "
                              f"{BYTES_OVER_PICKLE}", (len(ours) - len(theirs)) / BYTES_OVER_PICKLE,
                              key="coldstart.dumps_bytes", measured=f"{len(ours)} B / {len(theirs)} B"))
    return rows


def _to_a_file(directory, number):
    import pickle

    import cpersist

    targets = [f"{what} of {SMALL_OBJECT!r} to a file: time / joblib.{what}"
               for what in ("dump", "load")]
    if not _has_joblib():
        return [ratio_row("coldstart", target, missing="joblib") for target in targets]
    import joblib

    ours, theirs = os.path.join(directory, "small.cp"), os.path.join(directory, "small.joblib")
    space = {"cpersist": cpersist, "joblib": joblib, "obj": SMALL_OBJECT, "ours": ours,
             "theirs": theirs}
    cpersist.dump(SMALL_OBJECT, ours)
    joblib.dump(SMALL_OBJECT, theirs)
    assert cpersist.load(ours) == SMALL_OBJECT == joblib.load(theirs)
    rows = []
    for what, target in zip(("dump", "load"), targets):
        args = "obj, {}" if what == "dump" else "{}"
        mine, peer = best_times([f"cpersist.{what}({args.format('ours')})",
                                 f"joblib.{what}({args.format('theirs')})"], space,
                                number).values()
        rows.append(ratio_row("coldstart", target, mine / peer, key=f"coldstart.file_{what}",
                              measured=f"{mine * 1e6:.1f} us / {peer * 1e6:.1f} us"))
    size, pickled = os.path.getsize(ours), len(pickle.dumps(SMALL_OBJECT, protocol=5))
    rows.append(ratio_row("coldstart", f"dump of {SMALL_OBJECT!r} to a file: bytes beyond "
                          f"pickle's / {BYTES_OVER_PICKLE}", (size - pickled) / BYTES_OVER_PICKLE,
                          key="coldstart.file_bytes", measured=f"{size} B (joblib {os.path.getsize(theirs)} B, "
                     f"pickle {pickled} B)"))
    return rows


def run_cold_start(runs=5, number=2000):
    """Measure the cold-start and small-object targets.

    Parameters
    ----------
    runs : int
        Fresh interpreters per process-level figure (the median is kept).
    number : int
        Calls per clock read of the in-memory figures (a tenth of them for
        the figures to a file).

    Returns
    -------
    list of dict
        Target rows (:data:`.turns.RATIO_COLUMNS`), suite ``coldstart``.
    """
    with tempfile.TemporaryDirectory(prefix="cpersist-coldstart-") as directory:
        return (_one_shot(directory, runs) + _first_calls(directory, runs)
                + _info_command(directory, runs) + _in_memory(number)
                + _to_a_file(directory, max(10, number // 10)))


def main(argv=None):
    """Measure the start-up times and the cold-start comparisons; write
    ``import_time.csv`` and ``coldstart.csv`` to the run's folder."""
    from cpersist.benchmarks.output import write_csv

    from .importtime import IMPORT_COLUMNS, format_import_times, run_import_times

    parser = argparse.ArgumentParser(prog="python -m benchmarks.coldstart",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", metavar="RUN_DIR", help="folder of a benchmark run (made if new)")
    parser.add_argument("--runs", type=int, default=5,
                        help="fresh interpreters per start-up figure (median kept; default 5)")
    parser.add_argument("--number", type=int, default=2000,
                        help="calls per clock read of the in-memory figures (default 2000)")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    imports = run_import_times(args.runs)
    write_csv(os.path.join(args.out, "import_time.csv"), imports, IMPORT_COLUMNS)
    print(f"Start-up\n{format_import_times(imports)}")
    if sys.flags.dont_write_bytecode:
        print("PYTHONDONTWRITEBYTECODE is set: every module without a bytecode cache is "
              "compiled at each import, and the start-up figures include it")
    rows = run_cold_start(args.runs, args.number)
    write_csv(os.path.join(args.out, "coldstart.csv"), rows, RATIO_COLUMNS)
    print(f"\nCold start and small objects: each comparison as a ratio\n{format_ratios(rows)}")
    failed = sum(r["status"] == "failed" for r in rows + imports)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
