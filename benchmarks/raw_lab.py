"""Raw files against np.save and np.load, paired in one process: what the
storage suite's ``raw`` table gives, with the CPU time beside the wall time
and what the load's threads wait for.

    python benchmarks/raw_lab.py [--sizes 1e4,1e6,1e7,1e8] [--rounds 15]
                                 [--parts 256,4096] [--ops dump,load] [--dir DIR]
                                 [--own-faults] [--old-file kept|clean|none]
                                 [--old-cache-kept] [--settle SECONDS] [--one-thread]
                                 [--old REV] [--probe-create]
                                 [--shipped]

For each size (bytes of a float64 array), the contenders run in turn round
after round (the order reversed every other round), each call's result
freed and the memory given back to the kernel (``malloc_trim``) before the
next, as the suite does. Printed per contender: wall and process CPU time
(all threads) per call, min and median, their ratio to numpy's medians,
the median count of voluntary context switches per call: each is a
thread going to sleep, mostly waiting for the GIL or for another thread
(numpy's calls make none), and the median count of minor page faults per
call (new memory backed by the kernel: the same for both sides when each
fills one new array; time that varies while it stays the same is spent
elsewhere, such as in a virtual machine's host backing memory its guest
gave back). ``--parts`` times the load once per size of the
part a raw chunk is read and checksummed in
(:data:`cpersist.container.sections.READ_PART`, in KiB; the default is the
library's own). ``--own-faults`` times the load also with each of its two
threads faulting in the new array's pages it reads into, rather than the
calling thread faulting in its worker's (:func:`cpersist._runtime.pages.fault_in`).
``--old-file`` says what each dump replaces: ``kept`` (the default) the
file the previous round wrote, its pages still dirty in the page cache
unless the kernel wrote them meanwhile; ``clean`` that file written to disk
first (untimed), as a file written a minute before is; ``none`` no file
(removed first, untimed): both sides then write a new file, as np.save
does to a new path. Each is done once per timed batch, before its first
call (for sizes of 4 MB and more, before every call). Memory freed a
moment before is cheap to take again where a virtual machine gives freed
memory back to its host; ``--settle`` waits that many seconds after it
(untimed), so that a removed file's pages are given back first, as they
are when a file is written to a new path in a while.
``--one-thread`` times the load also on the calling thread alone
(``n_threads=1``): what the second thread gives, and costs, beside it.
``--old-cache-kept`` times the dump also with the replaced file's page
cache left as it is (:data:`cpersist._runtime.pagecache.DROP_MIN` out of
reach), to see what freeing it first gives.
``--old REV`` times also the dump and the load of cpersist at git
revision ``REV`` (exported beside this one as :mod:`format_ab` does, its
dump written to a file of its own), paired in the same rounds: before
and after a change, each against numpy in one run.
``--shipped`` times the loads also as the shipped benchmark
(:mod:`cpersist.benchmarks.raw`) does, a copy of the array into new
memory among the contenders as there: each call's result dropped before
the next, so that only the first call of a timing allocates memory the
process gave back; printed is the wall time per call, min / median, and
the ratio of medians to np.load's.
``--probe-create`` prints, before and after each size's dumps, the median
time to create a file in the scratch directory (``O_CREAT | O_EXCL``,
removed after): what a dump's temporary file costs the kernel, which np.save
(truncating its file in place) never pays. On ext4 without a journal, it
grows with the files deleted in that directory's inode group a short while
before (each creation looks past every inode freed recently, until their
inode table is written back, seconds later): from about 9 microseconds to
about 350 after a few thousand dumps of 10 KB, back to about 10 once they
are written.
The load average is printed at the end: on a busy machine the wall times
mean little, the CPU times and the switches more.
"""

import argparse
import ctypes
import gc
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import cpersist  # noqa: E402
from benchmarks.timing import remove_scratch  # noqa: E402
from cpersist.container import sections  # noqa: E402
from cpersist._runtime import pagecache  # noqa: E402


def _trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return lambda pad: None


def timed(contenders, rounds, calls, prepare=None):
    """``{name: [(wall, cpu, voluntary switches, minor faults) per call, one
    per round]}``;
    ``prepare(name)`` is called before each contender's calls, untimed."""
    trim = _trim()
    out = {name: [] for name, _ in contenders}
    gc.freeze()
    try:
        for number in range(rounds + 1):  # the first round untimed
            order = contenders if number % 2 else contenders[::-1]
            for name, run in order:
                if prepare is not None:
                    prepare(name)
                before = resource.getrusage(resource.RUSAGE_SELF)
                c0, t0 = time.process_time(), time.perf_counter()
                for _ in range(calls):
                    result = run()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                after = resource.getrusage(resource.RUSAGE_SELF)
                switches = after.ru_nvcsw - before.ru_nvcsw
                faults = after.ru_minflt - before.ru_minflt
                del result
                gc.collect()
                trim(0)
                if number:
                    out[name].append((wall / calls, cpu / calls, switches / calls,
                                      faults / calls))
    finally:
        gc.unfreeze()
    return out


def patched(module, name, value, func):
    """``func`` run with ``module.name`` set to ``value`` meanwhile."""
    def run():
        default = getattr(module, name)
        setattr(module, name, value)
        try:
            return func()
        finally:
            setattr(module, name, default)
    return run


def with_part(part, load):
    return patched(sections, "READ_PART", part, load)


def own_faults(load):
    return patched(sections, "can_fault_in", lambda: False, load)


def old_cache_kept(dump):
    return patched(pagecache, "DROP_MIN", float("inf"), dump)


def old_file(path, state, settle):
    """Leave ``path``'s file as ``state`` says (``kept``, ``clean``, ``none``),
    then wait ``settle`` seconds."""
    if state == "none":
        if os.path.exists(path):
            os.unlink(path)
    elif state == "clean" and os.path.exists(path):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
    if settle:
        time.sleep(settle)


class Revisions:
    """The working tree's cpersist and, with ``rev``, that revision's,
    exported into ``directory`` (:func:`format_ab.export`); :meth:`prepare`
    points the module a pickle stream names (``cpersist.pickler``) at the
    one a contender uses, before its calls (untimed)."""

    def __init__(self, rev, directory):
        import cpersist.pickler

        self.old = None
        self.ours = self.theirs = cpersist.pickler
        if rev:
            from benchmarks.format_ab import export

            sys.path.insert(0, directory)
            self.old = export(rev, "cpersist_old", directory)
            self.theirs = sys.modules["cpersist_old.pickler"]

    def prepare(self, name):
        sys.modules["cpersist.pickler"] = self.theirs if name.endswith(" old") else self.ours


def create_cost(directory, samples=50):
    """Median seconds to create (and, untimed, remove) a file in ``directory``."""
    path = os.path.join(directory, ".probe")
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        times.append(time.perf_counter() - t0)
        os.close(fd)
        os.unlink(path)
    return statistics.median(times)


def report(size, op, times, peer):
    med = statistics.median
    peer_wall = med(t[0] for t in times[peer])
    peer_cpu = med(t[1] for t in times[peer])
    for name, rows in times.items():
        wall, cpu, switches, faults = zip(*rows)
        print(f"{size:>12.0f} {op:4} {name:24} wall {min(wall) * 1e3:8.3f} / {med(wall) * 1e3:8.3f} ms"
              f" ({med(wall) / peer_wall:5.2f})  cpu {min(cpu) * 1e3:8.3f} / {med(cpu) * 1e3:8.3f} ms"
              f" ({med(cpu) / peer_cpu:5.2f})  switches {med(switches):5.1f}"
              f"  faults {med(faults):7.0f}", flush=True)


def shipped(size, loads, rounds, calls, prepare):
    """Time ``loads`` as the shipped benchmark does
    (:func:`cpersist.benchmarks.turns.timed_in_turn`: after each timing its
    result freed, the collector run and memory given back; each call's
    result dropped before the next, as :func:`cpersist.benchmarks.raw.measure`
    calls), with the CPU time beside the wall time; print each one's
    min / median per call and the ratio of medians to np.load's."""
    from cpersist.benchmarks.raw import _repeated
    from cpersist.benchmarks.turns import timed_in_turn

    cpu_times = {name: [] for name, _ in loads}

    def with_cpu_time(name, run):
        def call():
            c0 = time.process_time()
            result = run()
            cpu_times[name].append(time.process_time() - c0)
            return result
        return call

    walls = timed_in_turn({name: with_cpu_time(name, _repeated(run, calls)) for name, run in loads},
                          rounds, before={name: partial(prepare, name) for name, _ in loads})
    # timed_in_turn's first round is untimed: its CPU times are dropped too.
    times = {name: [(wall / calls, cpu / calls) for wall, cpu in zip(walls[name], cpu[1:])]
             for name, cpu in cpu_times.items()}
    med = statistics.median
    peer_wall, peer_cpu = (med(t[k] for t in times["np.load"]) for k in (0, 1))
    for name, rows in times.items():
        wall, cpu = zip(*rows)
        print(f"{size:>12.0f} load {name:24} shipped: wall {min(wall) * 1e3:7.3f} / "
              f"{med(wall) * 1e3:7.3f} ms ({med(wall) / peer_wall:5.3f})  cpu "
              f"{min(cpu) * 1e3:7.3f} / {med(cpu) * 1e3:7.3f} ms ({med(cpu) / peer_cpu:5.3f})",
              flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1e4,1e6,1e7,1e8")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--parts", default="", help="KiB per read and checksum call, e.g. 256,4096")
    parser.add_argument("--ops", default="dump,load")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--old-file", choices=("kept", "clean", "none"), default="kept",
                        help="what each dump replaces (see above)")
    parser.add_argument("--settle", type=float, default=0,
                        help="seconds to wait after --old-file's step, untimed")
    parser.add_argument("--old-cache-kept", action="store_true",
                        help="also time the dump keeping the replaced file's page cache")
    parser.add_argument("--one-thread", action="store_true",
                        help="also time the load with n_threads=1")
    parser.add_argument("--own-faults", action="store_true",
                        help="also time the load with each thread faulting in its own pages")
    parser.add_argument("--probe-create", action="store_true",
                        help="print what creating a file in the scratch directory costs")
    parser.add_argument("--shipped", action="store_true",
                        help="also time the loads as the shipped benchmark does")
    parser.add_argument("--old", default=None, metavar="REV",
                        help="also time cpersist at git revision REV, paired")
    args = parser.parse_args(argv)
    directory = tempfile.mkdtemp(prefix="cpersist-raw-lab-", dir=args.dir)
    exported = tempfile.mkdtemp(prefix="cpersist-raw-lab-old-") if args.old else None
    print("columns: min / median per call (ratio of medians to numpy's)")
    try:
        revisions = Revisions(args.old, exported)
        old = revisions.old
        for size in (int(float(s)) for s in args.sizes.split(",")):
            arr = np.random.default_rng(0).random(size // 8)
            npy, cp = os.path.join(directory, "a.npy"), os.path.join(directory, "a.cp")
            old_cp = os.path.join(directory, "old.cp")
            np.save(npy, arr)
            revisions.prepare("cpersist.dump")
            cpersist.dump(arr, cp)
            if old is not None:
                revisions.prepare("cpersist.dump old")
                old.dump(arr, old_cp)
                revisions.prepare("cpersist.dump")
            if "load" in args.ops and args.old_file == "none":
                parser.error("--old-file none removes the files the loads read")
            if not np.array_equal(cpersist.load(cp), arr):
                raise AssertionError("the array did not load back as it was dumped")
            calls = max(1, min(100, (4 << 20) // size))
            if "dump" in args.ops:
                dumps = [("np.save", lambda: np.save(npy, arr)),
                         ("cpersist.dump", lambda: cpersist.dump(arr, cp))]
                targets = {"np.save": npy, "cpersist.dump": cp}
                if args.old_cache_kept:
                    kept = os.path.join(directory, "kept.cp")
                    cpersist.dump(arr, kept)
                    dumps.append(("cpersist.dump old cache kept",
                                  old_cache_kept(lambda: cpersist.dump(arr, kept))))
                    targets["cpersist.dump old cache kept"] = kept
                if old is not None:
                    dumps.append(("cpersist.dump old", lambda: old.dump(arr, old_cp)))
                    targets["cpersist.dump old"] = old_cp

                def prepare_dump(name):
                    revisions.prepare(name)
                    old_file(targets[name], args.old_file, args.settle)

                if args.probe_create:
                    before = create_cost(directory)
                report(size, "dump", timed(dumps, args.rounds, calls, prepare_dump), "np.save")
                if args.probe_create:
                    print(f"{size:>12.0f} creating a file in the scratch directory: "
                          f"{before * 1e6:.1f} us before these dumps, "
                          f"{create_cost(directory) * 1e6:.1f} us after", flush=True)
            if "load" in args.ops:
                loads = [("np.load", lambda: np.load(npy)),
                         ("cpersist.load", lambda: cpersist.load(cp))]
                loads += [(f"cpersist.load part {p} KiB", with_part(int(p) << 10,
                                                                  lambda: cpersist.load(cp)))
                          for p in args.parts.split(",") if p]
                if args.one_thread:
                    loads.append(("cpersist.load one thread", lambda: cpersist.load(cp, n_threads=1)))
                if args.own_faults:
                    loads.append(("cpersist.load own faults", own_faults(lambda: cpersist.load(cp))))
                if old is not None:
                    loads.append(("cpersist.load old", lambda: old.load(old_cp)))
                report(size, "load", timed(loads, args.rounds, calls, revisions.prepare),
                       "np.load")
                if args.shipped:
                    shipped(size, loads + [("copy", arr.copy)], args.rounds, calls,
                            revisions.prepare)
    finally:
        remove_scratch(directory)
        if exported is not None:
            shutil.rmtree(exported, ignore_errors=True)


if __name__ == "__main__":
    main()
