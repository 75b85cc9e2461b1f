"""File size of ``cpersist.dump(compress="max")`` beside the smallest any peer makes.

Run from the repository root::

    python benchmarks/max_ratio.py                    # every dataset, small size (8 MB)
    python benchmarks/max_ratio.py --size medium -d atlas_c -d sparse_table

For each built-in and package dataset of the benchmark, writes the object
with cpersist's ``max`` codec and with each peer at its strongest setting:
``np.savez_compressed``; ``joblib.dump`` with ``("zlib", 9)``, ``("lzma",
9)`` and ``("bz2", 9)``; PyTables with zlib and each Blosc library at level
9, shuffle on; nibabel ``.nii.gz`` at gzip level 9 (3-D to 7-D arrays);
Blosc2 NDArrays with Zstandard at clevel 9 behind shuffle, bitshuffle and
shuffle + bytedelta; zarr v3 with its default codecs. Peers that cannot
store the object are left out. Prints one row per dataset: the compression
ratio (in-memory bytes / file bytes) of ``max`` and of the best peer, and
``max/best``, the size of the ``max`` file over the best peer's (at most 1
means ``max`` is no larger); ``--csv`` writes every size.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import sys
import tempfile
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # this checkout's cpersist

import cpersist  # noqa: E402
from cpersist.benchmarks import datasets as D  # noqa: E402
from cpersist.benchmarks.measure import disk_size  # noqa: E402
from cpersist.benchmarks.peers_classic import Nibabel, Tables  # noqa: E402


def _arrays(obj):
    """``{name: array}`` if ``obj`` is a plain array or a dict of them, else None."""
    plain = lambda a: isinstance(a, np.ndarray) and not a.dtype.hasobject  # noqa: E731
    if plain(obj):
        return {"data": obj}
    if isinstance(obj, dict) and obj and all(isinstance(k, str) and plain(v) for k, v in obj.items()):
        return obj
    return None


def _joblib(level_name):
    def write(obj, path):
        import joblib

        joblib.dump(obj, path, compress=(level_name, 9))
    return write


def _savez(obj, path):
    arrays = _arrays(obj)
    if arrays is None:
        return False
    np.savez_compressed(path, **arrays)
    return True


def _method(method):
    def write(obj, path):
        if method.available() or method.why_not(obj):
            return False
        method.write(obj, path, 9)
        return True
    return write


def _blosc2(filters):
    def write(obj, path):
        import blosc2

        arrays = _arrays(obj)
        if arrays is None:
            return False
        os.mkdir(path)
        for i, arr in enumerate(arrays.values()):
            if arr.ndim == 0 or arr.size == 0:
                np.save(os.path.join(path, f"{i}.npy"), arr)
                continue
            cparams = blosc2.CParams(codec=blosc2.Codec.ZSTD, clevel=9, filters=filters,
                                     typesize=arr.dtype.itemsize, nthreads=1)
            blosc2.asarray(np.ascontiguousarray(arr), urlpath=os.path.join(path, f"{i}.b2nd"),
                           mode="w", cparams=cparams)
        return True
    return write


def _zarr(obj, path):
    import zarr

    arrays = _arrays(obj)
    if arrays is None:
        return False
    group = zarr.open_group(path, mode="w", zarr_format=3)
    for name, arr in arrays.items():
        group.create_array(name, data=arr)
    return True


def _cpersist_max(obj, path):
    cpersist.dump(obj, path, compress="max")
    return True


def peers():
    """(name, writer) of every peer; a writer returns False when it cannot
    store the object."""
    import blosc2

    out = [("np.savez_compressed", _savez)]
    out += [(f"joblib:{c}9", _joblib(c)) for c in ("zlib", "lzma", "bz2")]
    out += [(f"tables:{c}9", _method(Tables(c))) for c in ("zlib", "blosc:lz4", "blosc:zstd", "blosc2")]
    out += [("nibabel.nii.gz9", _method(Nibabel(True)))]
    F = blosc2.Filter
    out += [(f"blosc2:zstd9+{n}", _blosc2(f)) for n, f in (
        ("shuffle", [F.SHUFFLE]), ("bitshuffle", [F.BITSHUFFLE]),
        ("bytedelta", [F.SHUFFLE, F.BYTEDELTA]))]
    out += [("zarr3-default", _zarr)]
    return out


def measure(obj, workdir):
    """{name: file size or None} for cpersist max and every peer."""
    sizes = {}
    for name, write in [("cpersist:max", _cpersist_max)] + peers():
        suffix = ".nii.gz" if name.startswith("nibabel") else ".h5" if name.startswith("tables") else ""
        path = os.path.join(workdir, name.replace(":", "_") + suffix)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                ok = write(obj, path)
            except Exception as exc:  # a peer that cannot store this object
                print(f"    {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
                ok = False
        if ok is None:  # writers that always succeed return True
            ok = True
        candidates = [p for p in (path, path + ".npz") if os.path.exists(p)]
        sizes[name] = disk_size(candidates[0]) if ok and candidates else None
        for p in candidates:
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    return sizes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="small", help="built-in dataset size (default small, 8 MB)")
    parser.add_argument("-d", "--dataset", action="append", help="dataset name or pattern (repeatable)")
    parser.add_argument("--csv", help="write every size to this CSV file")
    args = parser.parse_args(argv)
    size = D.parse_size(args.size)
    chosen = D.select(args.dataset, D.all_datasets())
    rows = []
    print(f"{'dataset':18} {'MB':>7} {'max':>7} {'best peer':>7}  {'max/best':>8}  best peer")
    for ds in chosen:
        obj = ds.make(size, False)
        nbytes = D.deep_nbytes(obj)
        with tempfile.TemporaryDirectory(prefix="max_ratio_") as work:
            sizes = measure(obj, work)
        mine = sizes.pop("cpersist:max")
        best = min((s, n) for n, s in sizes.items() if s is not None)
        rows.append({"dataset": ds.name, "bytes": nbytes, "cpersist:max": mine, **sizes})
        print(f"{ds.name:18} {nbytes / 1e6:7.2f} {nbytes / mine:7.2f} {nbytes / best[0]:7.2f}  "
              f"{mine / best[0]:8.4f}  {best[1]}", flush=True)
    if args.csv:
        names = ["dataset", "bytes", "cpersist:max"] + [n for n, _ in peers()]
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, names)
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
