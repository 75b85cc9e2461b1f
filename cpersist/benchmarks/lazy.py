"""The lazy suite: what :func:`cpersist.open` reads and costs for part of a
compressed array, beside a full load, zarr v3 and blosc2. Bytes read are
the change of ``rchar`` in ``/proc/self/io``, over the least a reader needs."""

import os

import numpy as np

import cpersist

from .output import measure_into
from .turns import medians, timed_in_turn

MB = 1 << 20


def rchar():
    """Bytes this process has read through system calls so far."""
    with open("/proc/self/io", "rb") as file:
        for line in file:
            if line.startswith(b"rchar:"):
                return int(line.split()[1])
    raise OSError("no rchar in /proc/self/io")


def make_array(kind, nbytes, seed=0):
    """A 2-D array of about ``nbytes``, rows of 2000 bytes.

    ``"compressible"``: int32 random walks along each row (smooth, like a
    signal); ``"incompressible"``: uniformly random bytes.
    """
    rng, rows = np.random.default_rng(seed), max(1, nbytes // 2000)
    if kind == "compressible":
        steps = rng.integers(-2, 3, size=(rows, 500), dtype=np.int8)
        return np.cumsum(steps, axis=1, dtype=np.int32)
    return rng.integers(0, 256, size=(rows, 2000), dtype=np.uint8)


def optional(name):
    """The module ``name``, or None if it is not installed."""
    import importlib
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _lazy_slice(path, index):
    with cpersist.open(path) as f:
        return next(iter(f.arrays.values()))[index]


def measure_slice(kind, nbytes, directory, repeats):
    """Bytes read and time for 1% of the rows, cpersist against its peers
    (a peer not installed has its time None and its name in ``missing``)."""
    zarr, blosc2 = optional("zarr"), optional("blosc2")
    arr = make_array(kind, nbytes)
    count = max(1, int(len(arr) * 0.01))  # 1% of the rows, in the middle
    index = slice((len(arr) - count) // 2, (len(arr) - count) // 2 + count)
    path = os.path.join(directory, f"{kind}.cp")
    cpersist.dump({"a": arr}, path, compress=True)
    file_bytes = os.path.getsize(path)
    with cpersist.open(path) as f:
        largest = max(c.length for c in f.arrays["obj['a']"]._bind().section.chunks)
    row_share = file_bytes * (index.stop - index.start) / len(arr)
    before = rchar()
    got = _lazy_slice(path, index)
    read = rchar() - before
    assert np.array_equal(got, arr[index])
    bound = row_share + 2 * largest + 16 * 1024  # the index is read in one 16 KiB tail read
    peers = {}
    if zarr is not None:
        zpath = os.path.join(directory, f"{kind}.zarr")
        zarr.create_array(store=zpath, data=arr, overwrite=True)
        assert np.array_equal(zarr.open_array(zpath, mode="r")[index], arr[index])
        peers["zarr"] = lambda: zarr.open_array(zpath, mode="r")[index]
    if blosc2 is not None:
        bpath = os.path.join(directory, f"{kind}.b2nd")
        blosc2.asarray(arr, urlpath=bpath, mode="w")
        assert np.array_equal(blosc2.open(bpath)[index], arr[index])
        peers["blosc2"] = lambda: blosc2.open(bpath, mode="r")[index]
    del arr
    # The full load is timed in the same rounds: the slice, the load and the
    # peers each run after another's, on the same caches.
    times = medians(timed_in_turn({"cpersist": lambda: _lazy_slice(path, index),
                                   "load": lambda: cpersist.load(path), **peers},
                                  max(9, 3 * repeats)))
    t_lazy, t_load = times["cpersist"], times["load"]
    result = {
        "kind": kind, "array_mb": nbytes / MB, "file_mb": file_bytes / MB,
        "slice_rows": index.stop - index.start, "bytes_read": read, "bound_bytes": int(bound),
        "read_over_bound": read / bound, "largest_chunk": largest,
        "slice_s": t_lazy, "full_load_s": t_load, "slice_over_load": t_lazy / t_load,
        "missing": sorted({"zarr", "blosc2"} - set(peers)),
    }
    for name in ("zarr", "blosc2"):
        t_peer = times.get(name)
        result[f"{name}_s"] = t_peer
        result[f"slice_over_{name}"] = None if t_peer is None else t_lazy / t_peer
    return result


def run(out_dir, scale=1.0, repeats=5):
    """Run the lazy-access measurements and write ``out_dir/lazy.json``;
    ``scale`` multiplies the arrays' 200 MB."""
    return measure_into(out_dir, "lazy.json", "cpersist-lazy-", lambda directory: {
        "scale": scale, "cpus": os.cpu_count(),
        "slice": [measure_slice(kind, int(200 * MB * scale), directory, repeats)
                  for kind in ("compressible", "incompressible")]})


def format_results(results):
    """The results as lines of text, each target with its ratio."""
    lines = []
    for row in results.get("slice", []):
        peers = "".join(
            f", {row[f'slice_over_{name}']:.2f}x {name} ({row[f'{name}_s'] * 1e3:.1f} ms)"
            if row[f"{name}_s"] is not None else f", {name} not installed"
            for name in ("zarr", "blosc2"))
        lines.append(
            f"1% row slice of {row['array_mb']:.0f} MB {row['kind']} (file {row['file_mb']:.1f} "
            f"MB): read {row['bytes_read'] / MB:.2f} MB = {row['read_over_bound']:.2f}x the bound; "
            f"{row['slice_s'] * 1e3:.1f} ms = {row['slice_over_load']:.3f}x full load "
            f"({row['full_load_s'] * 1e3:.0f} ms){peers}")
    return "\n".join(lines)

