"""Targets as ratios beside their bounds: the rows of the lazy and remote
suites' ``lazy.csv`` and ``remote_targets.csv``, and their text.

A target is a ratio measured within one run (cpersist's time over a peer's,
bytes read over the least a reader needs) and a bound it must stay under or
above. A ratio whose measurement needs a library that is not installed is a
row with status ``not installed``; a ratio measured without a bound (given
for comparison) has an empty ``bound``.
"""

from ..tools.table import format_table

__all__ = ["TARGET_COLUMNS", "lazy_targets", "remote_targets", "format_targets"]

#: Columns of a target row.
TARGET_COLUMNS = ["suite", "target", "ratio", "bound", "met", "measured", "status", "reason"]

#: ``open().arrays`` lists 10,000 arrays in at most this many seconds.
LISTING_S_PER_10000 = 0.050
#: A 1% row slice takes at most this share of a full load's time.
SLICE_OVER_LOAD = 0.05
#: Slicing 0.1% of a 400 MB array raises the RSS by at most this many MB.
PEAK_ABOVE_RSS_MB = 64
#: Requests (the object's lookup and every GET) for a 1% row slice from S3.
SLICE_REQUESTS = 4


def _row(suite, target, ratio=None, bound=None, measured="", missing=None):
    """One target row; ``bound`` is ``("<=", x)`` or ``(">=", x)`` or None."""
    row = {"suite": suite, "target": target, "ratio": "", "bound": "", "met": "",
           "measured": measured, "status": "ok", "reason": ""}
    if missing:
        row.update(status="not installed", reason=f"needs {missing} (pip install {missing})",
                   measured="")
        return row
    row["ratio"] = round(ratio, 3)
    if bound is not None:
        op, limit = bound
        row["bound"] = f"{op} {limit:g}"
        row["met"] = "yes" if (ratio <= limit if op == "<=" else ratio >= limit) else "no"
    return row


def lazy_targets(results):
    """Target rows of :func:`cpersist.benchmarks.lazy.run`'s results."""
    rows = []
    for r in results.get("slice", []):
        kind = r["kind"]
        size = f"{r['array_mb']:.0f} MB {kind}"
        rows.append(_row("lazy", f"1% row slice of {size}: bytes read / (rows' share + 2 "
                         f"chunks + index)", r["read_over_bound"], ("<=", 1),
                         f"{r['bytes_read'] / 2**20:.2f} of {r['bound_bytes'] / 2**20:.2f} MiB"))
        for peer, label in (("blosc2", "blosc2.open()[slice]"), ("zarr", "zarr v3")):
            t_peer = r.get(f"{peer}_s")
            rows.append(_row("lazy", f"1% row slice of {size}: time / {label}",
                             r.get(f"slice_over_{peer}"), ("<=", 1),
                             f"{r['slice_s'] * 1e3:.1f} ms / "
                             f"{(t_peer or 0) * 1e3:.1f} ms",
                             missing=peer if t_peer is None else None))
        rows.append(_row("lazy", f"1% row slice of {size}: time / full load",
                         r["slice_over_load"], ("<=", SLICE_OVER_LOAD),
                         f"{r['slice_s'] * 1e3:.1f} ms / {r['full_load_s'] * 1e3:.1f} ms"))
    if "peak" in results:
        p = results["peak"]
        # The bound is for a 400 MB array; a scaled-down run is shown
        # without a verdict.
        rows.append(_row("lazy", f"0.1% slice of {p['array_mb']:.0f} MB: peak memory above "
                         f"the RSS before / {PEAK_ABOVE_RSS_MB} MB",
                         p["peak_mb"] / PEAK_ABOVE_RSS_MB,
                         ("<=", 1) if p["array_mb"] >= 400 else None,
                         f"{p['peak_mb']:.1f} MB above the RSS before"))
    if "listing" in results:
        p = results["listing"]
        # The bound is for 10,000 arrays; fewer (a scaled-down run) are
        # compared at the same time per array, without a verdict (fixed costs
        # dominate small counts).
        limit = LISTING_S_PER_10000 * p["arrays"] / 10000
        rows.append(_row("lazy", f"open().arrays of {p['arrays']} arrays: time / "
                         f"{limit * 1e3:g} ms", p["listing_s"] / limit,
                         ("<=", 1) if p["arrays"] >= 10000 else None,
                         f"{p['listing_s'] * 1e3:.1f} ms"))
    if "dask" in results:
        p = results["dask"]
        size = "" if p is None else f" over {p['array_mb']:.0f} MB"
        what = f"dask sum{size} on 2 worker processes"
        if p is None:
            rows.append(_row("lazy", f"{what}: time / zarr v3", missing="distributed"))
            rows.append(_row("lazy", f"{what}: speed-up over 1 thread", missing="distributed"))
        else:
            rows.append(_row("lazy", f"{what}: time / zarr v3", p["over_zarr"], ("<=", 1.25),
                             f"{p['cpersist_2proc_s']:.2f} s / {(p['zarr_2proc_s'] or 0):.2f} s",
                             missing="zarr" if p["zarr_2proc_s"] is None else None))
            rows.append(_row("lazy", f"{what}: speed-up over 1 thread",
                             p["speedup_over_1thread"], (">=", 1.5),
                             f"{p['cpersist_1thread_s']:.2f} s / {p['cpersist_2proc_s']:.2f} s"))
    return rows


def remote_targets(rows):
    """Target rows of :func:`cpersist.benchmarks.remote.run`'s rows: a full
    load's speed over each peer's (the peer's time over cpersist's)."""
    by = {r["method"]: r for r in rows}
    base = by.get("cpersist.load", {})
    out = []
    for method, label in (("zarr FsspecStore", "zarr v3 (FsspecStore)"),
                          ("s3fs cat_file", "an s3fs download of the same bytes")):
        target = f"full load from S3: cpersist.load speed / {label}"
        peer = by.get(method, {})
        if base.get("status") != "ok" or peer.get("status") != "ok":
            failed = peer if base.get("status") == "ok" else base
            reason = failed.get("reason", "not measured")
            if "No module named" in reason:
                out.append(_row("remote", target, missing=reason.split("'")[1].split(".")[0]))
            else:
                out.append(dict(_row("remote", target, 0), ratio="", status="failed",
                                reason=reason))
            continue
        out.append(_row("remote", target, peer["median_s"] / base["median_s"], (">=", 0.8),
                        f"{base['median_s']:.2f} s / {peer['median_s']:.2f} s"))
    part = by.get("cpersist.open slice", {})
    if part.get("status") == "ok":
        out.append(_row("remote", f"1% row slice from S3 after a fresh open: requests / "
                        f"{SLICE_REQUESTS}", part["requests"] / SLICE_REQUESTS, ("<=", 1),
                        f"{part['requests']} requests, {part['served_mb']} MB served"))
    return out


def format_targets(rows):
    """The target rows as a text table."""
    return format_table(["target", "ratio", "bound", "met", "measured"], [
        [r["target"], f"{r['ratio']:.3f}", r["bound"] or "-", r["met"] or "-", r["measured"]]
        if r["status"] == "ok" else [r["target"], f"{r['status']}: {r['reason']}"]
        for r in rows], right=(1, 2, 3))
