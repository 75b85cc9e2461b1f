"""The suites' comparisons as ratio rows keyed for the bounds of
:mod:`benchmarks.bounds`, and every ratio file of a run.

The lazy suite (installed), :mod:`benchmarks.lazy_costs`,
:mod:`benchmarks.lazy_dask` and :mod:`benchmarks.remote` write what they
measured (``lazy.json``, ``lazy_costs.json``, ``dask.json``, ``remote.csv``)
and print it; the comparisons the maintainers hold to bounds are made here,
from those files: ``lazy.csv`` and ``remote_targets.csv`` in the columns of
:data:`cpersist.benchmarks.turns.RATIO_COLUMNS`. The checkpoint suite
writes its own ratios (``checkpoints.csv``, unkeyed), to which
:func:`checkpoint_keys` gives the keys, as :func:`raw_keys` does to the raw
files' and the random forest's (``raw.csv``, ``forest.csv``);
``coldstart.csv`` comes from :mod:`benchmarks.coldstart`.
"""

import csv
import json
import os

from cpersist.benchmarks.turns import failed_row, ratio_row

__all__ = ["lazy_ratios", "remote_ratios", "checkpoint_keys", "raw_keys", "ratio_files"]

#: ``open().arrays`` of 10,000 arrays is compared with this many seconds.
LISTING_S_PER_10000 = 0.050
#: Slicing 0.1% of a 400 MB array: the RSS growth is compared with this many MB.
PEAK_ABOVE_RSS_MB = 64
#: A 1% row slice from S3: its requests (the object's lookup and every GET)
#: are compared with this many.
SLICE_REQUESTS = 4
#: The checkpoint suite's comparisons held to a bound: what follows the
#: checkpoint's name in the target -> (key, the generated checkpoints it is
#: held on). A user's own checkpoint gets no key.
CHECKPOINT_KEYS = {
    "dump time / torch.save's": ("dump_vs_torch", ("float32",)),
    "load time / torch.load(weights_only)'s": ("load_vs_torch", ("float32",)),
    "file size / torch.save's": ("size_vs_torch", ("float32", "bfloat16")),
    "mmap_mode='r' load time / torch.load(mmap)'s": ("mmap_vs_torch", ("float32",)),
    "mmap_mode='r' load time / safetensors load_file's": ("mmap_vs_safetensors", ("float32",)),
    "trusted=False load time / trusted's": ("untrusted_vs_trusted", ("float32",)),
    "compress=3 file size / torch.save's": ("compress3_size_vs_torch", ("bfloat16",)),
    "compress=3 dump time / raw dump's": ("compress3_dump_vs_raw", ("bfloat16",)),
    "compress=3 load time / torch.load(weights_only)'s": ("compress3_load_vs_torch", ("bfloat16",)),
}
#: The raw files' and the random forest's comparisons held to a bound: what
#: ends the target -> key. A raw array is compared at every size the suite
#: measures; the forest at its full size only (a quick run's is smaller).
RAW_KEYS = {
    "dump time / np.save's": "raw.dump_vs_numpy",
    "load time / np.load's": "raw.load_vs_numpy",
}
FOREST_KEYS = {
    "raw dump / pickle 5 dump": "forest.dump_vs_pickle",
    "raw load / pickle 5 load": "forest.load_vs_pickle",
}
#: The JAX states' comparisons held to a bound, at full size only.
JAX_KEYS = {
    "compress=3 dump time / orbax StandardCheckpointer save's": "jax_dump_vs_orbax",
    "compress=3 load time / orbax restore's": "jax_load_vs_orbax",
    "mmap_mode='r' load time / orbax restore's": "jax_mmap_vs_orbax",
    "compress=3 file size / orbax's": "jax_size_vs_orbax",
}


def lazy_ratios(results):
    """Ratio rows of :func:`cpersist.benchmarks.lazy.run`'s results, with
    :mod:`benchmarks.lazy_costs`' ``peak`` and ``listing`` and
    :func:`benchmarks.lazy_dask.measure_dask`'s as ``results["dask"]``."""
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
    """Ratio rows of :func:`benchmarks.remote.run`'s rows: a full
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


def checkpoint_keys(rows, results):
    """The checkpoint suite's ratio rows with the keys of the comparisons
    held to a bound, given the suite's results (``checkpoints.json``): those
    of the generated checkpoints, of the full-size JAX states and of
    ``compress='max'`` on a float32 weight."""
    generated = {c["name"] for c in results.get("checkpoints", []) if c.get("generated")}
    jax_keyed = not results.get("jax", {}).get("quick", True)
    out = []
    for r in rows:
        name, _, what = r["target"].partition(": ")
        key = ""
        if name.split(" ")[0] in generated and what in CHECKPOINT_KEYS:
            key, dtypes = CHECKPOINT_KEYS[what]
            key = key if name.split(" ")[0] in dtypes else ""
        elif name.startswith("JAX ") and jax_keyed:
            key = JAX_KEYS.get(what, "")
        elif r["target"].startswith("compress='max' file size / the bytes of one float32 "):
            key = "max_size"
        out.append(dict(r, key=f"checkpoints.{key}" if key else ""))
    return out


def raw_keys(rows, keys):
    """Ratio rows (``raw.csv``, ``forest.csv``) with the key that ``keys``
    (:data:`RAW_KEYS`, :data:`FOREST_KEYS`) gives what ends each target,
    after its last ``": "``; none for a target it does not hold."""
    return [dict(r, key=keys.get(r["target"].rpartition(": ")[2], "")) for r in rows]


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def ratio_files(run):
    """``{file name: ratio rows}`` of a run's folder: ``lazy.csv`` and
    ``remote_targets.csv`` made from the suites' results (``lazy.json``,
    ``lazy_costs.json`` and ``dask.json``, ``remote.csv``), ``checkpoints.csv``
    keyed from ``checkpoints.json``, ``coldstart.csv`` as written, and
    ``raw.csv`` and ``forest.csv`` keyed (the forest unless the run was
    quick, as ``machine.json`` says); a file whose suite did not run is
    left out."""
    found = {}
    lazy = None
    # The suite's, benchmarks.lazy_costs' and benchmarks.lazy_dask's.
    for name in ("lazy.json", "lazy_costs.json", "dask.json"):
        path = os.path.join(run, name)
        if os.path.exists(path):
            with open(path) as f:
                part = json.load(f)
            lazy = dict(lazy or {}, **(part if name != "dask.json" else {"dask": part}))
    if lazy is not None:
        found["lazy.csv"] = lazy_ratios(lazy)
    path = os.path.join(run, "remote.csv")
    if os.path.exists(path):
        found["remote_targets.csv"] = remote_ratios(
            [{k: _number(v) for k, v in r.items()} for r in _read(path)])
    if os.path.exists(os.path.join(run, "checkpoints.csv")):
        path = os.path.join(run, "checkpoints.json")
        results = {}
        if os.path.exists(path):
            with open(path) as f:
                results = json.load(f)
        found["checkpoints.csv"] = checkpoint_keys(
            _read(os.path.join(run, "checkpoints.csv")), results)
    if os.path.exists(os.path.join(run, "coldstart.csv")):
        found["coldstart.csv"] = _read(os.path.join(run, "coldstart.csv"))
    # A quick run's forest is smaller than the one its bounds are made for.
    forest_keys = {} if _mode(run) == "quick" else FOREST_KEYS
    for name, keys in (("raw.csv", RAW_KEYS), ("forest.csv", forest_keys)):
        path = os.path.join(run, name)
        if os.path.exists(path):
            found[name] = raw_keys(_read(path), keys)
    return found


def _mode(run):
    """The run's mode as the bundled benchmark records it (``quick``,
    ``default``, ``full``), or None."""
    path = os.path.join(run, "machine.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f).get("mode")


def _number(text):
    """A CSV cell as the number it holds, else as it is."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text
