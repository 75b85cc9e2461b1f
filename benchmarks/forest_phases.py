"""Where the time of a raw load of the shipped benchmark's random forest goes,
phase by phase, beside ``pickle.load``'s of the same forest (protocol 5), in
paired rounds, by the CPU time of the thread loading (all of a raw load's
work runs on it), optionally with an older revision of cpersist side by side.

    python benchmarks/forest_phases.py [--old REV] [--rounds 100] [--trees 100] [--fresh]

The phases of ``cpersist.load`` are the inclusive times of functions of its
reading side, each wrapped for the measurement (a microsecond or so each):

- open: the path opened and told to be no compact dump (``open_local``,
  ``compact_file_stream``, ``open_source``);
- index: the header, records and index read (``ContainerReader``);
- stream: the pickle stream read into its buffer and its checksums
  verified (``open_section``);
- unpickle: ``ArrayUnpickler.load``, its small arrays copied out of the
  stream and every object built;
- rest: what the load's total leaves (arguments, closing, freeing the
  unpickler's memo, the frames' own work, and the wrappers' own clock
  reads, about 10 microseconds).

``pickle.load``'s: open (``open()``), load (reading the file included),
close. The object each step returns is freed outside its timing, and
measured apart (free). Memory is kept as ``forest_pickle.py
--steady-malloc`` keeps it, so that no step faults pages in that the step
before gave back. Printed: the median and the minimum of each phase, in
microseconds, and the total's ratio to ``pickle.load``'s.

``--fresh`` measures in the shipped benchmark's conditions instead
(:func:`cpersist.benchmarks.turns.timed_in_turn`): what lives before the
rounds frozen (``gc.freeze``), and after each step the garbage collected
and the memory given back to the kernel (``malloc_trim``), so that each
load faults its memory in as a new process would; each phase's minor page
faults (the loading thread's) are printed beside its time.
"""

import argparse
import ctypes
import gc
import resource
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from format_ab import export, use  # noqa: E402
from forest_pickle import forest, steady_malloc  # noqa: E402

PHASES = ("open", "index", "stream", "unpickle")


def faults():
    """Minor page faults of this thread so far."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def timed(times, phase, func):
    """``func``, adding its inclusive CPU time to ``times[phase]`` and its
    minor page faults to ``times[phase + " faults"]``."""
    clock = time.thread_time_ns

    def wrapper(*args, **kwargs):
        start, faulted = clock(), faults()
        try:
            return func(*args, **kwargs)
        finally:
            times[phase] = times.get(phase, 0) + clock() - start
            key = phase + " faults"
            times[key] = times.get(key, 0) + faults() - faulted

    return wrapper


def instrument(lib, times):
    """Wrap the functions of ``lib``'s reading side that mark the phases
    (those a revision has: an older one may lack some)."""
    def wrap(module, name, phase):
        owner = sys.modules.get(f"{lib.__name__}.{module}")
        holder, _, attr = name.rpartition(".")
        if owner is not None and holder:
            owner = getattr(owner, holder, None)
        if owner is None or not hasattr(owner, attr):
            print(f"{lib.__name__}: no {module}.{name}: left out of {phase}")
            return
        setattr(owner, attr, timed(times, phase, getattr(owner, attr)))

    __import__(lib.__name__ + ".pickling.read")
    __import__(lib.__name__ + ".storage.open")
    wrap("api", "open_local", "open")
    wrap("api", "compact_file_stream", "open")
    wrap("storage.open", "open_source", "open")
    sys.modules[lib.__name__ + ".api"]._READING_SIDE = None  # imported again, wrapped
    wrap("pickling.read", "ContainerReader", "index")
    wrap("container.sections", "SectionReads.open_section", "stream")
    wrap("pickling.unpickler", "ArrayUnpickler.load", "unpickle")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="a revision to measure beside the working tree")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--fresh", action="store_true",
                        help="the shipped benchmark's conditions: memory given back after each step")
    args = parser.parse_args(argv)
    if not args.fresh:
        steady_malloc()
    packages = tempfile.mkdtemp(prefix="forest-phases-")
    directory = tempfile.mkdtemp(prefix="forest-phases-files-")
    try:
        measure(args, packages, directory)
    finally:
        shutil.rmtree(packages, ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)


def measure(args, packages, directory):
    """Print the phases of ``args.rounds`` paired rounds, the revisions'
    packages exported into ``packages``, the files written in ``directory``."""
    sys.path.insert(0, packages)
    libs = {"new": export(None, "cp_new", packages)}
    if args.old:
        libs["old"] = export(args.old, "cp_old", packages)
    model = forest(args.trees)
    pickled = os.path.join(directory, "forest.pkl")
    with open(pickled, "wb") as file:
        pickle.dump(model, file, protocol=5)
    clock = time.thread_time_ns
    phases = {}

    def pickle_load():
        times = phases["pickle"]
        start, faulted = clock(), faults()
        file = open(pickled, "rb")
        opened = clock()
        obj = pickle.load(file)
        loaded = clock()
        file.close()
        times.update(open=opened - start, load=loaded - opened, close=clock() - loaded)
        times["load faults"] = faults() - faulted
        return obj

    steps = {"pickle": (None, pickle_load)}
    for label, lib in libs.items():
        path = os.path.join(directory, f"{label}.cp")
        use(lib)
        lib.dump(model, path, compress=0)
        times = phases[label] = {}
        instrument(lib, times)
        steps[label] = (lib, lambda lib=lib, path=path: lib.load(path))
    del model
    phases["pickle"] = {}
    rows = {name: {} for name in steps}
    for lib, step in steps.values():  # the code paths warm
        if lib is not None:
            use(lib)
        step()
    trim = ctypes.CDLL(None).malloc_trim if args.fresh else None
    if args.fresh:
        gc.collect()
        gc.freeze()
    for _ in range(args.rounds):
        for name, (lib, step) in steps.items():
            if lib is not None:
                use(lib)
            gc.collect()
            if trim is not None:
                trim(0)
            phases[name].clear()
            start, faulted = clock(), faults()
            obj = step()
            total, total_faults = clock() - start, faults() - faulted
            del obj
            freed = clock() - start - total
            measured = dict(phases[name])
            if lib is not None:
                measured["rest"] = total - sum(measured.get(p, 0) for p in PHASES)
            measured.update({"total": total, "free": freed, "total faults": total_faults})
            for phase, value in measured.items():
                rows[name].setdefault(phase, []).append(value)
    if args.fresh:
        gc.unfreeze()
    print(f"{args.trees} trees, {args.rounds} rounds, CPU time of the loading thread, "
          f"microseconds (median / min), {'fresh' if args.fresh else 'kept'} memory; "
          f"load average {os.getloadavg()[0]:.1f}")
    base = statistics.median(rows["pickle"]["total"])
    for name, row in rows.items():
        print(f"{name}: total / pickle.load's: median "
              f"{statistics.median(row['total']) / base:.3f}")
        for phase, values in row.items():
            if phase.endswith(" faults"):
                print(f"  {phase:15s} {statistics.median(values):8.0f} pages")
            else:
                print(f"  {phase:15s} {statistics.median(values) / 1e3:8.1f} / "
                      f"{min(values) / 1e3:8.1f}")


if __name__ == "__main__":
    main()
