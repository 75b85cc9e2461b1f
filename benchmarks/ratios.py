"""The lazy and remote suites' results as ratio rows keyed for the bounds of
:mod:`benchmarks.bounds`, and every ratio file of a run.

The installed suites write what they measured (``lazy.json``, ``remote.csv``)
and print it; the comparisons the maintainers hold to bounds are made here,
from those files: ``lazy.csv`` and ``remote_targets.csv`` in the columns of
:data:`cpersist.benchmarks.ratios.RATIO_COLUMNS` (the checkpoint suite
writes its own ``checkpoints.csv``; ``coldstart.csv`` comes from
:mod:`benchmarks.coldstart`).
"""

import csv
import json
import os

from cpersist.benchmarks.ratios import failed_row, ratio_row

__all__ = ["lazy_ratios", "remote_ratios", "ratio_files"]

#: ``open().arrays`` of 10,000 arrays is compared with this many seconds.
LISTING_S_PER_10000 = 0.050
#: Slicing 0.1% of a 400 MB array: the RSS growth is compared with this many MB.
PEAK_ABOVE_RSS_MB = 64
#: A 1% row slice from S3: its requests (the object's lookup and every GET)
#: are compared with this many.
SLICE_REQUESTS = 4


def lazy_ratios(results):
    """Ratio rows of :func:`cpersist.benchmarks.lazy.run`'s results."""
    rows = []
    for r in results.get("slice", []):
        kind = r["kind"]
        size = f"{r['array_mb']:.0f} MB {kind}"
        rows.append(ratio_row("lazy", f"1% row slice of {size}: bytes read / (rows' share + 2 "
                              f"chunks + index)", r["read_over_bound"],
                              f"{r['bytes_read'] / 2**20:.2f} of {r['bound_bytes'] / 2**20:.2f} MiB",
                              key="lazy.slice_bytes"))
        for peer, label in (("blosc2", "blosc2.open()[slice]"), ("zarr", "zarr v3")):
            t_peer = r.get(f"{peer}_s")
            rows.append(ratio_row("lazy", f"1% row slice of {size}: time / {label}",
                                  r.get(f"slice_over_{peer}"),
                                  f"{r['slice_s'] * 1e3:.1f} ms / {(t_peer or 0) * 1e3:.1f} ms",
                                  key=f"lazy.slice_vs_{peer}",
                                  missing=peer if t_peer is None else None))
        rows.append(ratio_row("lazy", f"1% row slice of {size}: time / full load",
                              r["slice_over_load"],
                              f"{r['slice_s'] * 1e3:.1f} ms / {r['full_load_s'] * 1e3:.1f} ms",
                              key="lazy.slice_vs_load"))
    if "peak" in results:
        p = results["peak"]
        # The comparison is made for a 400 MB array; a scaled-down run is
        # shown without a key.
        rows.append(ratio_row("lazy", f"0.1% slice of {p['array_mb']:.0f} MB: peak memory above "
                              f"the RSS before / {PEAK_ABOVE_RSS_MB} MB",
                              p["peak_mb"] / PEAK_ABOVE_RSS_MB,
                              f"{p['peak_mb']:.1f} MB above the RSS before",
                              key="lazy.slice_peak" if p["array_mb"] >= 400 else ""))
    if "listing" in results:
        p = results["listing"]
        # Made for 10,000 arrays; fewer (a scaled-down run) are compared at
        # the same time per array, without a key (fixed costs dominate small
        # counts).
        limit = LISTING_S_PER_10000 * p["arrays"] / 10000
        rows.append(ratio_row("lazy", f"open().arrays of {p['arrays']} arrays: time / "
                              f"{limit * 1e3:g} ms", p["listing_s"] / limit,
                              f"{p['listing_s'] * 1e3:.1f} ms",
                              key="lazy.listing" if p["arrays"] >= 10000 else ""))
    if "dask" in results:
        p = results["dask"]
        size = "" if p is None else f" over {p['array_mb']:.0f} MB"
        what = f"dask sum{size} on 2 worker processes"
        if p is None:
            rows.append(ratio_row("lazy", f"{what}: time / zarr v3", key="lazy.dask_vs_zarr",
                                  missing="distributed"))
            rows.append(ratio_row("lazy", f"{what}: speed-up over 1 thread",
                                  key="lazy.dask_speedup", missing="distributed"))
        else:
            rows.append(ratio_row("lazy", f"{what}: time / zarr v3", p["over_zarr"],
                                  f"{p['cpersist_2proc_s']:.2f} s / {(p['zarr_2proc_s'] or 0):.2f} s",
                                  key="lazy.dask_vs_zarr",
                                  missing="zarr" if p["zarr_2proc_s"] is None else None))
            rows.append(ratio_row("lazy", f"{what}: speed-up over 1 thread",
                                  p["speedup_over_1thread"],
                                  f"{p['cpersist_1thread_s']:.2f} s / {p['cpersist_2proc_s']:.2f} s",
                                  key="lazy.dask_speedup"))
    return rows


def remote_ratios(rows):
    """Ratio rows of :func:`cpersist.benchmarks.remote.run`'s rows: a full
    load's speed over each peer's (the peer's time over cpersist's)."""
    by = {r["method"]: r for r in rows}
    base = by.get("cpersist.load", {})
    out = []
    for method, label, key in (("zarr FsspecStore", "zarr v3 (FsspecStore)", "remote.load_vs_zarr"),
                               ("s3fs cat_file", "an s3fs download of the same bytes",
                                "remote.load_vs_download")):
        target = f"full load from S3: cpersist.load speed / {label}"
        peer = by.get(method, {})
        if base.get("status") == "not installed":
            out.append(dict(failed_row("remote", target, base["reason"], key=key),
                            status="not installed"))
            continue
        if base.get("status") != "ok" or peer.get("status") != "ok":
            failed = peer if base.get("status") == "ok" else base
            reason = failed.get("reason", "not measured")
            if "No module named" in reason:
                out.append(ratio_row("remote", target, key=key,
                                     missing=reason.split("'")[1].split(".")[0]))
            else:
                out.append(failed_row("remote", target, reason, key=key))
            continue
        out.append(ratio_row("remote", target, peer["median_s"] / base["median_s"],
                             f"{base['median_s']:.2f} s / {peer['median_s']:.2f} s", key=key))
    part = by.get("cpersist.open slice", {})
    if part.get("status") == "ok":
        out.append(ratio_row("remote", f"1% row slice from S3 after a fresh open: requests / "
                             f"{SLICE_REQUESTS}", part["requests"] / SLICE_REQUESTS,
                             f"{part['requests']} requests, {part['served_mb']} MB served",
                             key="remote.slice_requests"))
    return out


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def ratio_files(run):
    """``{file name: ratio rows}`` of a run's folder: ``lazy.csv`` and
    ``remote_targets.csv`` made from the suites' results, ``checkpoints.csv``
    and ``coldstart.csv`` as written; a file whose suite did not run is
    left out."""
    found = {}
    path = os.path.join(run, "lazy.json")
    if os.path.exists(path):
        with open(path) as f:
            found["lazy.csv"] = lazy_ratios(json.load(f))
    path = os.path.join(run, "remote.csv")
    if os.path.exists(path):
        found["remote_targets.csv"] = remote_ratios(
            [{k: _number(v) for k, v in r.items()} for r in _read(path)])
    for name in ("checkpoints.csv", "coldstart.csv"):
        if os.path.exists(os.path.join(run, name)):
            found[name] = _read(os.path.join(run, name))
    return found


def _number(text):
    """A CSV cell as the number it holds, else as it is."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text
