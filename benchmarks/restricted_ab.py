"""The restricted load and the stream walker at two git revisions, side by side in one process.

    python benchmarks/restricted_ab.py OLD_REV [NEW_REV] [--rounds 30] [--dir DIR]

Each round times, with both revisions (the order alternating, the garbage
collector run before each): ``loads(data, trusted=False)`` of a dict of 100
short strings to ints and of ``{"k": list(range(1000))}``, ``inspect`` of a
file whose stream has about 100,000 opcodes, and the walk of that stream and
of the stream of a float32 transformer checkpoint (340 MB, as the shipped
benchmark makes it). Printed: the minimum and the median of each, and their
ratios new/old. Then, for the new revision alone, a restricted load of the
checkpoint against a trusted one (the minimum of 7 each, alternating).
``NEW_REV`` defaults to the working tree (see :mod:`format_ab`).
"""

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from importlib import import_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from format_ab import export, use  # noqa: E402


def timed(func, number):
    t0 = time.perf_counter()
    for _ in range(number):
        func()
    return (time.perf_counter() - t0) / number


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new", nargs="?")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--dir", help="where the test files are kept (default: a temporary one)")
    args = parser.parse_args(argv)
    packages = tempfile.mkdtemp(prefix="restricted-ab-")
    sys.path.insert(0, packages)
    libs = {"cp_old": export(args.old, "cp_old", packages),
            "cp_new": export(args.new, "cp_new", packages)}
    walks = {name: import_module(f"{name}.stream.opcodes").walk for name in libs}
    new = libs["cp_new"]
    use(new)  # the checkpoint's stream names cpersist.pickler
    directory = args.dir or tempfile.mkdtemp(prefix="restricted-ab-files-")
    os.makedirs(directory, exist_ok=True)
    many, checkpoint = (os.path.join(directory, n) for n in ("opcodes.cp", "checkpoint.cp"))
    if not os.path.exists(many):
        import numpy as np

        new.dump({"meta": {str(n): n for n in range(20000)},
                  "rows": [(i, f"s{i}") for i in range(8000)],
                  "w": {f"p{i}": np.arange(300.0) + i for i in range(300)}}, many)
    if not os.path.exists(checkpoint):
        maker = import_module("cp_new.benchmarks.checkpoints").transformer_checkpoint
        new.dump(maker("float32", 12, 768), checkpoint)

    def stream(path):
        reader = import_module("cp_new.container").ContainerReader(open(path, "rb").read())
        return bytes(reader.read_bytes(reader.sections[reader.root]))

    seed = new.dumps(dict((str(n), n) for n in range(100)))
    ints = new.dumps({"k": list(range(1000))})
    many_stream, checkpoint_stream = stream(many), stream(checkpoint)
    cases = {
        "loads(trusted=False), dict of 100": (lambda lib: lib.loads(seed, trusted=False), 50),
        "loads(trusted=False), list of 1000": (lambda lib: lib.loads(ints, trusted=False), 20),
        "inspect, 100k opcodes": (lambda lib: lib.inspect(many), 1),
        "walk, 100k opcodes": (lambda lib: walks[lib.__name__](many_stream), 1),
        "walk, checkpoint's stream": (lambda lib: walks[lib.__name__](checkpoint_stream), 10),
    }
    times = {}
    for round_ in range(args.rounds):
        for case, (run, number) in cases.items():
            for name in ("cp_old", "cp_new") if round_ % 2 else ("cp_new", "cp_old"):
                gc.collect()
                times.setdefault((case, name), []).append(
                    timed(lambda: run(libs[name]), number))  # noqa: B023
    for case in cases:
        old, new_ = times[(case, "cp_old")], times[(case, "cp_new")]
        print(f"{case}: old min {min(old) * 1e3:.3f} ms, median "
              f"{statistics.median(old) * 1e3:.3f} ms; new min {min(new_) * 1e3:.3f} ms, median "
              f"{statistics.median(new_) * 1e3:.3f} ms; new/old {min(new_) / min(old):.3f} "
              f"(minimums), {statistics.median(new_) / statistics.median(old):.3f} (medians)")
    loads = {True: [], False: []}
    for _ in range(7):
        for trusted in (True, False):
            loads[trusted].append(timed(lambda: new.load(checkpoint, trusted=trusted), 1))  # noqa: B023
    print(f"checkpoint (new): trusted {min(loads[True]) * 1e3:.0f} ms, trusted=False "
          f"{min(loads[False]) * 1e3:.0f} ms, ratio {min(loads[False]) / min(loads[True]):.3f}")


if __name__ == "__main__":
    main()
