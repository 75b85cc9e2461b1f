"""Tests reading one quick run of the bundled benchmark.

The run (``python -m cpersist.benchmarks --quick --suite all``: every method
and suite on tiny data, in real subprocesses, against real PyTables,
nibabel, joblib, zarr ...) takes minutes, so it is made once, here, with the
lab's suites (``python -m benchmarks.serializers``, ``memory_store``,
``remote``, ``lazy_costs``, ``lazy_dask``) and start-up and cold-start measurements (``python -m
benchmarks.coldstart``) in the same folder, and every test of its output is in this module: ``pytest
-n`` (pytest-xdist, ``--dist loadfile``) runs a module on one worker, so the
run is not made once per worker. The benchmark's other tests are in
test_benchmark.py, the lab's (publishing, bounds) in test_bench_tools.py.
"""

import csv
import importlib.util
import json
import os
import re
import sys

import numpy as np
import pytest

from cpersist.benchmarks import datasets as ds
from cpersist.benchmarks import methods as mt
from cpersist.benchmarks.report import PICK_HEADER

from ._fresh import ROOT

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import (bounds, coldstart, lazy_costs, lazy_dask, memory_store,  # noqa: E402
                        publish, remote, serializers)
from benchmarks.ratios import ratio_files  # noqa: E402

pytestmark = pytest.mark.slow

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """``(exit code, output folder)`` of the quick run of every suite,
    without figures: drawing one per dataset and kind would take a third of
    the run; ``drawn_run`` draws the published ones, and
    test_benchmark.py's interrupted run draws its own. The lab's suites and
    cold-start measurements are added to the folder (their exit codes must
    be 0 too)."""
    from cpersist.benchmarks import main

    out = tmp_path_factory.mktemp("bench_quick")
    rc = main(["--quick", "--suite", "all", "--out", str(out), "--no-progress", "--no-plots"])
    return (rc or serializers.main([str(out), "--quick", "--no-plots"])
            or memory_store.main([str(out), "--quick"])
            or remote.main([str(out), "--mb", "2.1", "--runs", "1"])
            or lazy_costs.main([str(out), "--scale", "0.01", "--repeat", "1"])
            or lazy_dask.main([str(out), "--scale", "0.01", "--repeat", "1"])
            or coldstart.main([str(out), "--runs", "2", "--number", "200"])), out


@pytest.fixture(scope="module")
def run_dir(quick_run):
    """The quick run's output folder, the run having succeeded."""
    rc, out = quick_run
    assert rc == 0
    return out


# ---------------------------------------------------------------------------
# What the run measured and wrote
# ---------------------------------------------------------------------------


def test_quick_run_succeeds(quick_run):
    rc, out = quick_run
    rows = _read(out / "results.csv")
    failed = [(r["dataset"], r["method"], r["level"], r["reason"]) for r in rows if r["status"] == "failed"]
    assert failed == []
    assert rc == 0


def test_every_method_has_correct_timed_row_or_reason(quick_run):
    _, out = quick_run
    rows = _read(out / "results.csv")
    methods = mt.all_methods()
    dsets = [d.name for d in ds.all_datasets() if d.name in ds.QUICK_DATASETS]
    assert len(dsets) == len(ds.QUICK_DATASETS)  # sklearn and nibabel data all found
    seen = {(r["dataset"], r["method"]) for r in rows}
    # Every dataset x method pair is accounted for.
    for d in dsets:
        for m in methods:
            assert (d, m.name) in seen, (d, m.name)
    for r in rows:
        assert r["status"] in ("ok", "n/a"), r
        if r["status"] == "n/a":
            assert r["reason"].strip(), r
            assert r["write_s"] == "" and r["read_s"] == ""
            continue
        assert float(r["write_s"]) > 0 and float(r["read_s"]) > 0, r
        assert int(r["disk_bytes"]) > 0 and int(r["size_bytes"]) > 0
        assert float(r["ratio"]) == pytest.approx(int(r["size_bytes"]) / int(r["disk_bytes"]), rel=1e-3)
        assert float(r["write_MBps"]) > 0 and float(r["read_MBps"]) > 0
        assert float(r["write_peak_MB"]) >= 0 and float(r["read_peak_MB"]) >= 0
        assert r["cache"] == "cold"
        assert r["resident_frac"] == "" or float(r["resident_frac"]) < 0.5  # eviction worked
        assert r["repeats"] == "1"
    for m in methods:
        mrows = [r for r in rows if r["method"] == m.name]
        if m.available() is None:
            assert any(r["status"] == "ok" for r in mrows), f"{m.name} never ran"
        else:
            assert all(r["status"] == "n/a" and r["reason"] == m.available() for r in mrows)


def test_quick_levels_and_specific_rows(quick_run):
    _, out = quick_run
    rows = {(r["dataset"], r["method"], r["level"]): r for r in _read(out / "results.csv")}
    # Level mapping: cpersist runs the grid (0, 3); np.save raw only;
    # savez_compressed at its one level, reported as 6.
    assert rows[("atlas_c", "cpersist", "0")]["status"] == "ok"
    assert rows[("atlas_c", "cpersist", "3")]["status"] == "ok"
    assert rows[("atlas_c", "np.save", "0")]["status"] == "ok"
    assert rows[("atlas_c", "np.savez_compressed", "6")]["status"] == "ok"
    assert ("atlas_c", "np.save", "3") not in rows
    # Applicability.
    assert "3 to 7" in rows[("noise", "nibabel.nii", "0")]["reason"]
    assert rows[("text", "np.save", "0")]["status"] == "n/a"
    assert rows[("random_forest", "pickle5", "0")]["status"] == "ok"
    assert rows[("random_forest", "cpersist", "3")]["status"] == "ok"
    forest_tables = [r for k, r in rows.items() if k[0] == "random_forest" and k[1] == "tables"]
    assert forest_tables and forest_tables[0]["status"] == "n/a"
    assert rows[("digits_dict", "np.savez_compressed", "6")]["status"] == "ok"
    # Compression is real: smooth atlas shrinks, noise does not.
    assert float(rows[("atlas_c", "cpersist", "3")]["ratio"]) > 1.5
    assert float(rows[("noise", "cpersist:zstd", "3")]["ratio"]) < 1.2
    assert float(rows[("atlas_c", "cpersist", "0")]["ratio"]) == pytest.approx(1.0, abs=0.05)
    # Memmapped reads are flagged and timed including the touch.
    assert rows[("atlas_c", "np.save-mmap", "0")]["mmap"] == "True"
    assert rows[("atlas_c", "cpersist-mmap", "0")]["status"] == "ok"
    # cpersist's rows say how close each setting came to its codec alone
    # (raw: to a copy); other methods and compress="max" have no limit.
    for key in [("atlas_c", "cpersist", "0"), ("atlas_c", "cpersist", "3"),
                ("timeseries", "cpersist:zstd", "3")]:
        row = rows[key]
        assert float(row["limit_write_s"]) > 0 and float(row["limit_read_s"]) > 0, key
        # One repeat: the median of the repeats' own fractions is its one,
        # rounded to 3 decimals, the times given to 6 significant digits:
        # an absolute tolerance, as a relative one fails on a small quotient
        # (an operation slowed by load).
        for op in ("write", "read"):
            quotient = float(row[f"limit_{op}_s"]) / float(row[f"{op}_s"])
            assert abs(float(row[f"{op}_of_limit"]) - quotient) <= 0.5e-3 + 1e-5 * quotient, key
    assert rows[("atlas_c", "np.save", "0")]["write_of_limit"] == ""
    assert rows[("atlas_c", "cpersist max", "9")]["limit_write_s"] == ""
    # The forest against pickle 5, as ratios of one run.
    forest = {r["target"]: r for r in _read(out / "forest.csv")}
    assert set(forest) == {"raw dump / pickle 5 dump", "raw load / pickle 5 load",
                           "restricted load (trusted=['sklearn']) / pickle 5 load"}
    assert all(r["status"] == "ok" and float(r["ratio"]) > 0 for r in forest.values())
    # The big variant is bigger.
    assert int(rows[("big", "np.save", "0")]["size_bytes"]) >= 3 * int(rows[("atlas_c", "np.save", "0")]["size_bytes"])


def test_quick_outputs_written(quick_run):
    _, out = quick_run
    rows = _read(out / "results.csv")
    ok_datasets = {r["dataset"] for r in rows if r["status"] == "ok"}
    # Every dataset has rows, even those few methods can store (text).
    assert "text" in ok_datasets
    assert not list(out.glob("*.png"))  # --no-plots
    info = json.loads((out / "machine.json").read_text())
    assert info["versions"]["numpy"] == np.__version__
    assert info["cpu_count"] >= 1
    assert "cold" in info["storage"]["cache"]
    assert not (out / "_work").exists()  # scratch files cleaned up


def test_summary_opens_with_a_pick_per_dataset_then_every_table(quick_run):
    _, out = quick_run
    summary = (out / "summary.md").read_text()
    sections = [part.split("\n", 1)[0] for part in summary.split("\n## ")[1:]]
    assert sections[:2] == ["What to pick", "Storage: every dataset, method and level (ratio: "
                            "in-memory size / file size, MB/s of in-memory data, peaks in MB)"]
    for title in ("Raw files", "Lazy access", "Model checkpoints"):
        assert any(s.startswith(title) for s in sections), title
    for lab in ("Serializers", "joblib.Memory", "Reading from S3"):  # the lab's suites
        assert not any(s.startswith(lab) for s in sections), lab
    picks = summary.split("\n## ")[1].split(PICK_HEADER, 1)[1].split("```")[0]
    stored = {r["dataset"] for r in _read(out / "results.csv")
              if r["family"] == "cpersist" and r["status"] == "ok"}
    checkpoints = out / "checkpoints.json"  # absent where torch is not installed
    generated = {c["name"] for c in json.loads(checkpoints.read_text())["checkpoints"]
                 } if checkpoints.exists() else set()
    named = [line.split(": ", 1)[0] for line in picks.splitlines()
             if line and not line.startswith(" ")]
    assert sorted(named) == sorted(stored | generated)
    assert picks.count("\n  pick          compress=") == len(named)


def test_raw_files_against_numpy_and_a_copy(quick_run):
    """Raw dump and load of a float64 array at each size up to 100 MB (1 GB
    only in a full run) over numpy's, and as a fraction of a copy's speed."""
    _, out = quick_run
    rows = _read(out / "raw.csv")
    assert all(r["status"] == "ok" and float(r["ratio"]) > 0 for r in rows)
    sizes = ("10 KB", "1 MB", "10 MB", "100 MB")
    assert [r["target"] for r in rows] == [
        f"raw float64 array, {size}: {what}" for size in sizes for what in (
            "dump time / np.save's", "load time / np.load's", "dump throughput / a copy's",
            "load throughput / a copy's")]
    results = json.loads((out / "raw.json").read_text())
    assert [r["size"] for r in results] == [10_000, 1_000_000, 10_000_000, 100_000_000]
    for r in results:
        for op, peer in (("dump", "np.save"), ("load", "np.load")):
            assert set(r["median_s"][op]) == {f"cpersist.{op}", peer, "copy"}
            assert all(len(runs) == 5 for runs in r["rounds_s"][op].values())


def test_lab_start_up_times(quick_run):
    """The lab's start-up rows: cpersist's import, first load and command
    line beside joblib's; the installed benchmark measures none."""
    _, out = quick_run
    assert "Start-up" not in (out / "summary.md").read_text()
    rows = {r["what"]: r for r in _read(out / "import_time.csv")}
    assert set(rows) == {"import cpersist", "import joblib", "cpersist.load", "joblib.load",
                         "cpersist --help", "python -c pass"}
    for r in rows.values():
        assert r["status"] == "ok" and r["runs"] == "2"
        assert 0 < float(r["min_ms"]) <= float(r["median_ms"]) <= float(r["max_ms"])
    assert "import numpy; import cpersist" in rows["import cpersist"]["command"]
    assert 'cpersist.load("model.cp")' in rows["cpersist.load"]["command"]
    assert 'joblib.load("model.joblib")' in rows["joblib.load"]["command"]
    # A load imports what the import left for first use: it cannot take less.
    assert float(rows["cpersist.load"]["min_ms"]) > float(rows["import cpersist"]["min_ms"])
    assert rows["cpersist --help"]["command"].endswith("--help")


def test_lab_serializers(quick_run):
    _, out = quick_run
    rows = _read(out / "serializers.csv")
    SERIALIZERS = serializers.SERIALIZERS

    by = {(r["serializer"], int(r["entries"])): r for r in rows}
    for s in SERIALIZERS:
        for n in (1000, 4000, 16000):
            r = by[(s, n)]
            assert r["status"] == "ok", r
            assert float(r["store_s"]) > 0 and float(r["load_s"]) > 0 and float(r["file_MB"]) > 0
            assert float(r["rss_per_file_MB"]) >= 0
    # Text protocol 0 is larger than binary protocol 5.
    assert float(by[("pickle0", 16000)]["file_MB"]) > float(by[("pickle5", 16000)]["file_MB"])
    small = _read(out / "small_objects.csv")
    assert {(r["serializer"], r["object"]) for r in small} == {
        (s, o) for s in SERIALIZERS + ["cpersist dumps/loads"] for o in ("people", "dict100")}
    assert all(r["status"] == "ok" and float(r["dumps_us"]) > 0 for r in small)


def test_quick_run_new_methods_and_datasets(quick_run):
    _, out = quick_run
    rows = {(r["dataset"], r["method"], r["level"]): r for r in _read(out / "results.csv")}
    for method in ("blosc2", "zarr:zstd", "zarr:blosc", "h5py:blosc2", "h5py:zstd", "safetensors",
                   "blosc2:zstd+bitshuffle"):
        assert any(k[1] == method and r["status"] == "ok" for k, r in rows.items()), method
    assert rows[("atlas_c", "blosc2", "5")]["status"] == "ok"
    for name in ("dataframe", "sparse_matrix"):
        assert rows[(name, "cpersist", "3")]["status"] == "ok"
        assert rows[(name, "pickle5", "0")]["status"] == "ok"
        assert rows[(name, "np.save", "0")]["status"] == "n/a"
        assert rows[(name, "safetensors", "0")]["status"] == "n/a"
        assert "not DataFrame" in rows[("dataframe", "tables", "0")]["reason"]


def test_lab_memory_store(quick_run):
    """joblib.Memory's store against cpersist's on the forest and the atlas."""
    _, out = quick_run
    MEMORY_OBJECTS, STORES = memory_store.MEMORY_OBJECTS, memory_store.STORES

    rows = _read(out / "memory.csv")
    assert {(r["dataset"], r["store"]) for r in rows} == {
        (d, label) for d in MEMORY_OBJECTS for label, _ in STORES}
    for r in rows:
        assert r["status"] == "ok", r
        assert float(r["write_s"]) > 0 and float(r["hit_s"]) > 0 and int(r["file_bytes"]) > 0
        assert (r["hit_mmap_s"] != "") == (r["compress"] == "0")
    by = {(r["dataset"], r["store"]): r for r in rows}
    # Compression is real in both stores.
    for store in ("joblib", "cpersist"):
        assert (int(by[("atlas_c", f"{store} compress=3")]["file_bytes"])
                < int(by[("atlas_c", f"{store} raw")]["file_bytes"]) / 1.5)
    assert not (out / "_work").exists()  # scratch files cleaned up


def test_quick_lazy_suite(quick_run):
    """--suite all runs the lazy suite; the lab adds its dask sum and makes
    every comparison a ratio, keyed for its bound."""
    _, out = quick_run
    assert not (out / "lazy.csv").exists()  # keyed rows are the lab's
    rows = ratio_files(out)["lazy.csv"]
    targets = [r["target"] for r in rows]
    for kind in ("compressible", "incompressible"):
        for what in ("bytes read", "time / blosc2.open()[slice]", "time / zarr v3",
                     "time / full load"):
            assert sum(f"MB {kind}:" in t and what in t for t in targets) == 1, (kind, what)
    assert any(t.startswith("0.1% slice") for t in targets)
    assert any(t.startswith("open().arrays of") for t in targets)
    assert sum(t.startswith("dask sum") for t in targets) == 2
    for r in rows:
        assert r["suite"] == "lazy" and r["status"] == "ok", r
        assert float(r["ratio"]) > 0
    dask = {r["target"].split(": ", 1)[1]: r["key"] for r in rows if r["target"].startswith("dask")}
    assert dask == {"time / zarr v3": "lazy.dask_vs_zarr", "speed-up over 1 thread": "lazy.dask_speedup"}
    slices = {r["target"].split(": ", 1)[1]: r["key"] for r in rows if r["target"].startswith("1%")}
    assert slices["time / blosc2.open()[slice]"] == "lazy.slice_vs_blosc2"
    assert slices["time / full load"] == "lazy.slice_vs_load"
    peak = [r for r in rows if r["target"].startswith("0.1% slice")]
    assert len(peak) == 1 and peak[0]["target"].endswith("/ 64 MB")
    assert peak[0]["key"] == ""  # a scaled-down array: no bound applies
    text = (out / "lazy.txt").read_text()
    assert text.startswith("Lazy access") and "dask" not in text
    assert "zarr" in text and "blosc2" in text
    raw = json.loads((out / "lazy.json").read_text())
    assert raw["scale"] == 0.01 and len(raw["slice"]) == 2 and "dask" not in raw
    dask = json.loads((out / "dask.json").read_text())
    assert dask["blocks"] >= 1 and dask["array_mb"] == pytest.approx(10.24)
    assert "faster than 1 thread" in lazy_dask.format_dask(dask)
    info = json.loads((out / "machine.json").read_text())
    assert info["lazy"]["scale"] == 0.01 and info["lazy"]["failed"] == 0


def test_lab_remote(quick_run):
    """The lab's S3 comparison against a loopback moto server."""
    _, out = quick_run
    rows = _read(out / "remote.csv")
    assert [r["method"] for r in rows] == ["cpersist.load", "zarr FsspecStore", "s3fs cat_file",
                                           "cpersist.open slice"]
    for r in rows:
        assert r["status"] == "ok", r
        assert float(r["median_s"]) > 0 and float(r["mb_per_s"]) > 0 and r["runs"] == "1"
    assert not (out / "remote_targets.csv").exists()  # keyed rows are the lab's
    targets = ratio_files(out)["remote_targets.csv"]
    assert len(targets) == 3
    by = {r["method"]: float(r["median_s"]) for r in rows}
    for t, peer in zip(targets, ("zarr FsspecStore", "s3fs cat_file")):
        assert t["status"] == "ok" and t["key"].startswith("remote.load_vs_"), t
        assert float(t["ratio"]) == pytest.approx(by[peer] / by["cpersist.load"], rel=0.05)
    # The server counted the slice's requests: the lookup and a GET at least.
    requests = int(rows[-1]["requests"])
    assert requests >= 2 and float(rows[-1]["served_mb"]) > 0
    assert targets[2]["target"].startswith("1% row slice from S3")
    assert targets[2]["key"] == "remote.slice_requests" and float(targets[2]["ratio"]) == requests / 4
    text = (out / "remote.txt").read_text()
    assert "zarr FsspecStore" in text and f"{requests} requests" in text


def test_quick_checkpoints_suite(quick_run):
    """--suite all runs the checkpoints suite: every comparison a ratio; the
    lab keys those a bound applies to."""
    pytest.importorskip("torch")
    _, out = quick_run
    assert all(r["key"] == "" for r in _read(out / "checkpoints.csv"))  # keys are the lab's
    rows = ratio_files(out)["checkpoints.csv"]
    assert all(r["suite"] == "checkpoints" and r["status"] == "ok" for r in rows), rows
    float32 = {r["target"].split(": ", 1)[1]: r for r in rows if r["target"].startswith("float32")}
    assert float32["dump time / torch.save's"]["key"] == "checkpoints.dump_vs_torch"
    assert float32["trusted=False load time / trusted's"]["key"] == "checkpoints.untrusted_vs_trusted"
    assert float32["compress=3 file size / torch.save's"]["key"] == ""  # held on bfloat16 only
    bf16 = {r["target"].split(": ", 1)[1]: r for r in rows if r["target"].startswith("bfloat16")}
    small = bf16["compress=3 file size / torch.save's"]
    assert small["key"] == "checkpoints.compress3_size_vs_torch" and float(small["ratio"]) <= 0.77
    # Every ratio reads one way: cpersist's time or size over the other's.
    assert all(" / " in r["target"] and "speed" not in r["target"] for r in rows)
    assert any(r["target"].startswith("compress='max'") for r in rows)
    assert "torch.load weights_only" in (out / "checkpoints.txt").read_text()
    if importlib.util.find_spec("orbax") is not None:
        # A quick run's JAX states are too small for the bounds: no key.
        jax_rows = [r for r in rows if r["target"].startswith("JAX ")]
        assert {r["target"].split(" ", 2)[1] for r in jax_rows} == {"float32", "bfloat16"}
        assert len(jax_rows) == 20 and all(r["key"] == "" for r in jax_rows)
        assert "orbax restore" in (out / "checkpoints.txt").read_text()
    # Every round's time is kept, and a time's spread is shown beside its median.
    results = json.loads((out / "checkpoints.json").read_text())
    loads = results["checkpoints"][0]["load_rounds_s"]["cpersist.load"]
    assert len(loads) == results["rounds"] and all(t > 0 for t in loads)
    low, high = (f"{f(loads) * 1e3:.0f}" for f in (min, max))
    assert f"(ranges {low}-{high} / " in float32["load time / torch.load(weights_only)'s"]["measured"]


def test_quick_append_suite(quick_run):
    """--suite all runs the append suite: the record log against every peer,
    each as ratios; the growing array too; every contender's last appends
    against its first."""
    from cpersist.benchmarks import appends

    _, out = quick_run
    rows = _read(out / "appends.csv")
    results = json.loads((out / "appends.json").read_text())
    assert (results["appends"], results["rows"]) == appends.SIZES["quick"]
    peers = [p.name for p in appends.PEERS]
    log = {r["target"] for r in rows if r["target"].startswith("cpersist record log / ")}
    assert log == {f"cpersist record log / {peer}: {what}" for peer in peers
                   for _, what, _ in appends.RATIOS}
    for r in rows:
        if r["status"] == "ok":
            assert float(r["ratio"]) > 0 and " / " in r["measured"], r
    growing = [r for r in rows if r["target"].startswith("cpersist growing array")]
    assert len(growing) == 4 * len(peers) + 1
    assert all(r["status"] == "ok" for r in growing), growing
    ends = [r["target"].split(":")[0] for r in rows if "last appends" in r["target"]]
    assert set(peers + ["cpersist record log", "cpersist growing array"]) <= set(ends)
    failed = [r for r in rows if r["status"] == "failed"]
    assert not failed, failed
    assert "pickle.dump to an open file" in (out / "appends.txt").read_text()
    summary = (out / "summary.md").read_text()
    assert "\n## " + appends.TITLE in summary


# ---------------------------------------------------------------------------
# The lab's tools on the run: publishing (benchmarks/publish.py), bounds
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def drawn_run(run_dir, tmp_path_factory):
    """A copy of the quick run holding the published datasets' rows, with
    figures and summary drawn by ``publish.py --no-publish``."""
    import shutil

    run = tmp_path_factory.mktemp("drawn_run")
    for src in run_dir.iterdir():
        if src.is_file():
            shutil.copy(src, run / src.name)
    rows = [r for r in _read(run_dir / "results.csv") if r["dataset"] in publish.DEFAULT_FIGURES]
    with open(run / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert not list(run.glob("*.png"))  # the quick run draws none
    assert publish.main([str(run), "--no-publish"]) == 0
    return run


def test_publish_redraws_figures_and_summary(drawn_run):
    """benchmarks/publish.py redraws figures and the summary from a run's CSVs."""
    for d in publish.DEFAULT_FIGURES:
        for kind in ("disk", "write", "read", "pareto"):
            assert (drawn_run / f"{d}_{kind}.png").read_bytes()[:8] == PNG_MAGIC, (d, kind)
    assert (drawn_run / "serializers.png").read_bytes()[:8] == PNG_MAGIC
    summary = (drawn_run / "summary.rst").read_text()
    assert "atlas_c" in summary and "np.save" in summary and "cpersist" in summary


def test_publish_writes_page_figures_and_readme_table(drawn_run, tmp_path):
    """One page with the machine, command and date in its header, the
    figures it shows, and README's table between its delimiters only."""
    machine = json.loads((drawn_run / "machine.json").read_text())
    readme = tmp_path / "README.rst"
    readme.write_text("Title\n=====\n\nprose before\n\n.. results table start\n\nold table\n\n"
                      ".. results table end\n\nprose after\n")
    static = tmp_path / "static"
    static.mkdir()
    (static / "stale.png").write_bytes(PNG_MAGIC)
    page = tmp_path / "benchmark_results.rst"
    figures = publish.publish(str(drawn_run), page=str(page), static=str(static),
                              readme=str(readme))
    text = page.read_text()
    assert text.startswith(publish.GENERATED)
    # The command as a user would type it: no output folder, no terminal options.
    command = publish._command(machine)
    assert command == "python -m cpersist.benchmarks --quick --suite all"
    assert f":Command: ``{command}``" in text and "--out" in machine["command"]
    assert machine["cpu"] in text and f"{machine['cpu_count']} logical cores" in text
    assert machine["date_utc"] in text and machine["started_utc"] in text
    assert f"numpy {machine['versions']['numpy']}" in text and ":RAM:" in text and ":OS:" in text
    assert ":Load average:" in text and len(machine["load_average_start"]) == 3
    for section in ("Start-up", "Codecs", "Methods compared", "Raw files", "Many small arrays",
                    "Serializers", "Lazy access", "Object storage"):
        assert f"\n{section}\n" in text
    # Every ratio of the raw suite and the forest's, as the run measured it.
    for r in _read(drawn_run / "raw.csv") + _read(drawn_run / "forest.csv"):
        assert re.search(rf"{re.escape(r['target'])} +{float(r['ratio']):.3g} ", text), r
    # The lazy and remote suites' comparisons as ratios, without the maintainers' bounds.
    assert "speed-up over 1 thread" in text and "cpersist.load speed / zarr v3 (FsspecStore)" in text
    assert ">= 1.5" not in text and ">= 0.8" not in text and "Bound" not in text
    assert "  Met  " not in text
    import docutils.core
    import docutils.utils

    # Those sections are valid RST (the rest uses Sphinx's roles, unknown to docutils).
    docutils.core.publish_doctree(text[text.index("Lazy access\n"):], settings_overrides={
        "report_level": docutils.utils.Reporter.ERROR_LEVEL, "halt_level":
        docutils.utils.Reporter.ERROR_LEVEL})
    assert "``python -c 'import numpy; import cpersist'``" in text
    assert "**atlas_c**" in text and "**random_forest**" in text
    # Figures: the page's, and nothing left from an earlier run.
    assert not (static / "stale.png").exists()
    assert "atlas_c_write.png" in figures and "serializers.png" in figures
    assert sorted(p.name for p in static.iterdir()) == sorted(figures)
    for name in figures:
        assert f"/_static/bench/{name}" in text
        assert (static / name).read_bytes()[:8] == PNG_MAGIC
    # README: prose kept, the old table replaced by the run's atlas_c rows.
    new = readme.read_text()
    assert new.startswith("Title\n=====\n\nprose before\n\n.. results table start\n")
    assert new.endswith(".. results table end\n\nprose after\n") and "old table" not in new
    assert "``np.save``" in new and "``cpersist``" in new and "``joblib``" in new
    assert command in new and "docs/benchmark_results.rst" in new
    assert "--out" not in new and machine["date_utc"][:10] not in new
    # Publishing again changes nothing (the delimiters survive).
    publish.publish(str(drawn_run), page=str(page), static=str(static), readme=str(readme))
    assert readme.read_text() == new


def test_publish_refuses_readme_without_delimiters_and_unknown_datasets(run_dir, tmp_path):
    readme = tmp_path / "README.rst"
    readme.write_text("no delimiters here\n")
    with pytest.raises(ValueError, match="results table start"):
        publish.publish(str(run_dir), page=str(tmp_path / "p.rst"), static=str(tmp_path / "s"),
                        readme=str(readme))
    assert readme.read_text() == "no delimiters here\n"
    with pytest.raises(ValueError, match="datasets not in this run: nope"):
        publish.publish(str(run_dir), datasets=["nope"], page=str(tmp_path / "p.rst"),
                        static=str(tmp_path / "s"), readme=None)


def test_bounds_judge_every_keyed_ratio_of_a_run(run_dir, capsys):
    """The lab makes the suites' comparisons ratios with keys; its bounds give
    each keyed ratio its bound and verdict, and print met or missed for each."""
    judged = {name: {r["target"]: r for r in bounds.judge(rows)}
              for name, rows in ratio_files(str(run_dir)).items()}
    assert set(judged) == {"lazy.csv", "remote_targets.csv", "checkpoints.csv", "coldstart.csv",
                           "raw.csv", "forest.csv"}
    for rows in judged.values():
        for r in rows.values():
            assert (r["bound"] != "") == (r["key"] != ""), r
            if r["bound"] and r["status"] == "ok":
                op, limit = r["bound"].split()
                ratio = float(r["ratio"])
                assert r["met"] == ("yes" if (ratio <= float(limit) if op == "<=" else
                                              ratio >= float(limit)) else "no"), r
    dask = {t.split(": ", 1)[1]: r["bound"] for t, r in judged["lazy.csv"].items()
            if t.startswith("dask")}
    assert dask == {"time / zarr v3": "<= 1.25", "speed-up over 1 thread": ">= 1.5"}
    slices = {t.split(": ", 1)[1]: r["bound"] for t, r in judged["lazy.csv"].items()
              if t.startswith("1%")}
    assert slices["time / full load"] == "<= 0.05" and slices["time / blosc2.open()[slice]"] == "<= 1"
    remote_rows = list(judged["remote_targets.csv"].values())
    assert [r["bound"] for r in remote_rows] == [">= 0.8", ">= 0.8", "<= 1"]
    coldstart = {t: r["bound"] for t, r in judged["coldstart.csv"].items()}
    assert coldstart["one-shot script (import, dump, load), compress=3: time / joblib's"] == "<= 0.5"
    assert coldstart["first compress=3 load of a 48 MB array in a process: time / the second's"] == "<= 1.3"
    assert coldstart["dumps of 'people': time / pickle.dumps (protocol 5)"] == "<= 3"
    assert coldstart["loads of 'people': time / pickle.loads (protocol 5)"] == "<= 2"
    assert judged["coldstart.csv"]["dumps of 'people': bytes beyond pickle's / 128"]["met"] == "yes"
    raw = {t.split(": ", 1)[1]: r["bound"] for t, r in judged["raw.csv"].items()
           if t.startswith("raw float64 array, 1 MB")}
    assert raw == {"dump time / np.save's": "<= 1", "load time / np.load's": "<= 1",
                   "dump throughput / a copy's": "", "load throughput / a copy's": ""}
    # A quick run's forest is smaller than the one the bounds are made for.
    assert [r["bound"] for r in judged["forest.csv"].values()] == ["", "", ""]
    ckpt = judged["checkpoints.csv"]
    # Without torch the suite writes one row saying so (where CI=true torch
    # is installed, and its ratios must be there).
    if os.environ.get("CI") == "true" or importlib.util.find_spec("torch") is not None:
        f32 = {t.split(": ", 1)[1]: r["bound"] for t, r in ckpt.items() if t.startswith("float32")}
        assert f32["dump time / torch.save's"] == "<= 0.83"
        assert f32["compress=3 file size / torch.save's"] == ""
        assert f32["trusted=False load time / trusted's"] == "<= 1.1"
        bf16 = {t.split(": ", 1)[1]: r for t, r in ckpt.items() if t.startswith("bfloat16")}
        small = bf16["compress=3 file size / torch.save's"]
        assert small["bound"] == "<= 0.77" and small["met"] == "yes"
    else:
        [row] = ckpt.values()
        assert row["status"] == "not installed" and "torch" in row["reason"], row
        assert row["key"] == row["bound"] == "", row
    rc = bounds.main([str(run_dir)])
    printed = capsys.readouterr().out
    missed = sum(r["met"] == "no" for rows in judged.values() for r in rows.values())
    assert rc == (1 if missed else 0)
    assert printed.count("lazy.csv") == 1 and "coldstart.csv" in printed
    assert printed.rstrip().endswith(f"{missed} target(s) missed" if missed else
                                     "every target with a bound met")
