"""bfloat16 weights as numpy arrays of ml_dtypes' ``bfloat16`` against the
same bits as torch tensors: compression ratio, dump time and load time of
each, timed in turn round after round in one process, with their ratios
(ml_dtypes' over torch's: 1 when both take the same path).

The weights are ``--mb`` MB of random normal values times 0.02 (as a
checkpoint's are) in tensors of 2048 x 2048, rounded to bfloat16 by torch;
the numpy arrays view the same memory.

    python benchmarks/bf16_ml_dtypes.py --mb 256 --levels 0,1,3 --rounds 7
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cpersist  # noqa: E402


def load_average():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.split("average:")[-1].strip()


def weights(mb):
    """``(tensors, arrays)``: dicts of the same bfloat16 values, torch and ml_dtypes."""
    import ml_dtypes
    import torch

    g = torch.Generator().manual_seed(0)
    n = max(1, mb // 8)  # 2048 x 2048 bfloat16: 8 MB
    tensors = {f"w{i}": (torch.randn(2048, 2048, generator=g) * 0.02).to(torch.bfloat16)
               for i in range(n)}
    arrays = {k: t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) for k, t in tensors.items()}
    return tensors, arrays


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--levels", default="0,1,3")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    tensors, arrays = weights(args.mb)
    objects = {"torch": tensors, "ml_dtypes": arrays}
    directory = tempfile.mkdtemp(prefix="cpersist-bf16-")
    try:
        for level in (int(x) for x in args.levels.split(",")):
            paths = {k: os.path.join(directory, f"{k}.cp") for k in objects}
            times = {(op, k): [] for op in ("dump", "load") for k in objects}
            before = load_average()
            for number in range(args.rounds + 1):  # the first round untimed
                order = list(objects)[::1 if number % 2 else -1]
                for op in ("dump", "load"):
                    for k in order:
                        t0 = time.perf_counter()
                        if op == "dump":
                            cpersist.dump(objects[k], paths[k], compress=level)
                        else:
                            cpersist.load(paths[k])
                        if number:
                            times[op, k].append(time.perf_counter() - t0)
            loaded = cpersist.load(paths["ml_dtypes"])
            assert all(loaded[k].dtype == arrays[k].dtype
                       and loaded[k].tobytes() == arrays[k].tobytes() for k in arrays)
            sizes = {k: os.path.getsize(p) for k, p in paths.items()}
            raw = sum(a.nbytes for a in arrays.values())
            print(f"compress={level}: {raw / 2**20:.0f} MB in {len(arrays)} arrays, "
                  f"{args.rounds} rounds; load average {before} -> {load_average()}")
            for k in objects:
                print(f"  {k:9s} ratio {raw / sizes[k]:.4f}  dump "
                      f"{statistics.median(times['dump', k]) * 1e3:7.1f} ms  load "
                      f"{statistics.median(times['load', k]) * 1e3:7.1f} ms")
            print(f"  ml_dtypes / torch: ratio {sizes['torch'] / sizes['ml_dtypes']:.4f}, dump "
                  f"time {statistics.median(times['dump', 'ml_dtypes']) / statistics.median(times['dump', 'torch']):.3f}"
                  f" (min {min(times['dump', 'ml_dtypes']) / min(times['dump', 'torch']):.3f}), load time "
                  f"{statistics.median(times['load', 'ml_dtypes']) / statistics.median(times['load', 'torch']):.3f}"
                  f" (min {min(times['load', 'ml_dtypes']) / min(times['load', 'torch']):.3f})")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
