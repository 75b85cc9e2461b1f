"""Tests of the bundled benchmark (cpersist.benchmarks).

The expensive part is one real ``--quick --suite all`` run (every method,
tiny data, real subprocesses, real PyTables/nibabel/joblib/numpy), shared by
the tests through a module-scoped fixture; the rest are small and direct.
"""

import csv
import gc
import json
import os
import pickle
import threading

import numpy as np
import pytest

from cpersist.benchmarks import main
from cpersist.benchmarks import datasets as ds
from cpersist.benchmarks import methods as mt
from cpersist.benchmarks.compare import first_difference, touch
from cpersist.benchmarks.runner import StorageConfig, measure_cell

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_quick")
    rc = main(["--quick", "--suite", "all", "--out", str(out), "--no-progress"])
    return rc, out


# ---------------------------------------------------------------------------
# The quick run
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
    # The big variant is bigger.
    assert int(rows[("big", "np.save", "0")]["size_bytes"]) >= 3 * int(rows[("atlas_c", "np.save", "0")]["size_bytes"])


def test_quick_outputs_written(quick_run):
    _, out = quick_run
    rows = _read(out / "results.csv")
    ok_datasets = {r["dataset"] for r in rows if r["status"] == "ok"}
    pngs = [out / "pareto.png", out / "serializers.png"]
    for d in ok_datasets:
        pngs += [out / f"{d}_{kind}.png" for kind in ("disk", "write", "read")]
    for p in pngs:
        assert p.exists(), p
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 2000, p
    info = json.loads((out / "machine.json").read_text())
    assert info["versions"]["numpy"] == np.__version__
    assert info["cpu_count"] >= 1
    assert "cold" in info["storage"]["cache"]
    assert not (out / "_work").exists()  # scratch files cleaned up


def test_quick_serializers(quick_run):
    _, out = quick_run
    rows = _read(out / "serializers.csv")
    from cpersist.benchmarks.serializers import SERIALIZERS

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
        (s, o) for s in SERIALIZERS for o in ("people", "dict100")}
    assert all(r["status"] == "ok" and float(r["dumps_us"]) > 0 for r in small)


# ---------------------------------------------------------------------------
# User files
# ---------------------------------------------------------------------------


def _make_user_files(d):
    import joblib
    import nibabel as nib
    import tables

    import cpersist

    rng = np.random.default_rng(0)
    vol = rng.random((6, 7, 8, 2)).astype(np.float32)
    paths = {}
    paths["npy"] = d / "a.npy"
    np.save(paths["npy"], vol)
    paths["npz"] = d / "b.npz"
    np.savez(paths["npz"], x=vol, y=np.arange(10))
    paths["nii"] = d / "c.nii"
    nib.save(nib.Nifti1Image(vol, np.eye(4)), str(paths["nii"]))
    paths["nii.gz"] = d / "d.nii.gz"
    nib.save(nib.Nifti1Image(vol, np.eye(4)), str(paths["nii.gz"]))
    paths["h5"] = d / "e.h5"
    with tables.open_file(str(paths["h5"]), "w") as f:
        f.create_array("/", "vol", vol)
        f.create_array("/grp", "t", np.arange(5), createparents=True)
    paths["cp"] = d / "f.cp"
    cpersist.dump({"vol": vol, "meta": [1, "two"]}, str(paths["cp"]), compress=3)
    paths["pkl"] = d / "g.pkl"
    with open(paths["pkl"], "wb") as f:
        pickle.dump({"vol": vol, "n": 3}, f)
    paths["joblib"] = d / "h.joblib"
    joblib.dump([vol, "x"], str(paths["joblib"]), compress=3)
    return paths, vol


def test_user_files_each_type(tmp_path):
    paths, vol = _make_user_files(tmp_path)
    out = tmp_path / "out"
    rc = main(["--quick", "--out", str(out), "--no-progress", "--no-plots", "--trust-pickles",
               "--methods", "np.save,pickle5,cpersist,np.savez_compressed,tables"]
              + [str(p) for p in paths.values()])
    rows = _read(out / "results.csv")
    assert rc == 0
    for kind, p in paths.items():
        name = ds.file_dataset(str(p)).name
        drows = [r for r in rows if r["dataset"] == name]
        assert drows, kind
        ok = [r for r in drows if r["status"] == "ok"]
        assert {r["method"] for r in ok} >= {"pickle5", "cpersist"}, (kind, drows)
        assert all(r["status"] in ("ok", "n/a") for r in drows)
    # Single-array files are arrays (array-only methods apply); containers are dicts.
    npy = ds.file_dataset(str(paths["npy"])).name
    assert any(r["dataset"] == npy and r["method"] == "np.save" and r["status"] == "ok" for r in rows)
    h5 = ds.file_dataset(str(paths["h5"])).name
    assert any(r["dataset"] == h5 and r["method"] == "tables" and r["status"] == "ok" for r in rows)
    assert int(next(r for r in rows if r["dataset"] == npy)["size_bytes"]) == vol.nbytes


def test_user_pickle_refused_without_trust(tmp_path):
    p = tmp_path / "g.pkl"
    with open(p, "wb") as f:
        pickle.dump([1, 2], f)
    out = tmp_path / "out"
    rc = main(["--quick", "--out", str(out), "--no-progress", "--no-plots", "--methods", "pickle5", str(p)])
    rows = _read(out / "results.csv")
    assert rc == 0
    assert len(rows) == 1 and rows[0]["status"] == "n/a"
    assert "--trust-pickles" in rows[0]["reason"]


def test_load_user_file_loaders(tmp_path):
    paths, vol = _make_user_files(tmp_path)
    assert first_difference(vol, ds.load_user_file(str(paths["npy"]))) is None
    z = ds.load_user_file(str(paths["npz"]))
    assert set(z) == {"x", "y"} and first_difference(vol, z["x"]) is None
    assert first_difference(vol, ds.load_user_file(str(paths["nii.gz"]))) is None
    h = ds.load_user_file(str(paths["h5"]))
    assert set(h) == {"vol", "grp/t"}
    with pytest.raises(PermissionError):
        ds.load_user_file(str(paths["joblib"]))
    # A .cp of plain data loads without trust; one holding a class instance does not.
    import cpersist
    from sklearn.linear_model import LinearRegression

    assert set(ds.load_user_file(str(paths["cp"]))) == {"vol", "meta"}
    model = tmp_path / "model.cp"
    cpersist.dump(LinearRegression(), str(model))
    with pytest.raises(PermissionError, match="--trust-pickles"):
        ds.load_user_file(str(model))
    assert isinstance(ds.load_user_file(str(model), trust_pickles=True), LinearRegression)
    with pytest.raises(ValueError):
        ds.load_user_file(str(tmp_path / "x.txt"))


# ---------------------------------------------------------------------------
# Correctness checking really fails wrong methods
# ---------------------------------------------------------------------------


class CorruptingNpSave(mt.NpSave):
    """A real np.save round trip that flips one value on read."""

    name = "np.save-corrupt"

    def read(self, path):
        a = np.load(path).copy()
        a.flat[0] += 1
        return a


class RaisingMethod(mt.NpSave):
    name = "raising"

    def write(self, obj, path, level):
        raise OSError("disk on fire")


def _cell(tmp_path, method, warm=False):
    arr = ds.make_noise(4096)
    data_path = str(tmp_path / "noise.pkl")
    with open(data_path, "wb") as f:
        pickle.dump(arr, f, protocol=5)
    info = {"source": "builtin", "description": "noise", "size_bytes": arr.nbytes, "path": data_path}
    cfg = StorageConfig(out=str(tmp_path), repeats=2, progress=False, warm_cache=warm)
    return measure_cell("noise", info, method, 0, cfg, str(tmp_path))


def test_wrong_data_is_failed_and_not_timed(tmp_path):
    row = _cell(tmp_path, CorruptingNpSave())
    assert row["status"] == "failed"
    assert "values differ" in row["reason"]
    assert row["read_s"] == "" and row["write_s"] == ""
    good = _cell(tmp_path, mt.NpSave())
    assert good["status"] == "ok" and float(good["read_s"]) > 0
    assert len(good["read_times"].split(";")) == 2
    assert good["cache"] == "cold" and good["peak_via"] in ("VmHWM", "sampler")
    warm = _cell(tmp_path, mt.NpSaveMmap(), warm=True)
    assert warm["status"] == "ok" and warm["cache"] == "warm" and warm["resident_frac"] == ""
    assert float(warm["read_peak_MB"]) > 0  # touching the mapping brings pages into RSS


def test_exception_is_failed_with_reason(tmp_path):
    row = _cell(tmp_path, RaisingMethod())
    assert row["status"] == "failed" and "disk on fire" in row["reason"]


def test_first_difference():
    a = np.array([1.0, np.nan, 3.0])
    assert first_difference(a, a.copy()) is None
    assert "NaN positions" in first_difference(a, np.array([1.0, 2.0, 3.0]))
    assert "dtype" in first_difference(a, a.astype(np.float32))
    assert "shape" in first_difference(a, a[:2])
    assert first_difference(np.asfortranarray(np.ones((3, 4))), np.ones((3, 4))) is None
    assert first_difference(np.arange(3, dtype=">i4"), np.arange(3, dtype="<i4")) is None
    assert first_difference({"k": [1, "x", a]}, {"k": [1, "x", a.copy()]}) is None
    assert "values differ" in first_difference({"k": [1, "x"]}, {"k": [1, "y"]})
    assert "keys" in first_difference({"a": 1}, {"b": 1})
    rec = np.zeros(3, dtype=[("a", "u1"), ("b", "f8")])
    rec2 = rec.copy()
    rec2["b"][1] = 2
    assert first_difference(rec, rec.copy()) is None
    assert first_difference(rec, rec2) is not None


def test_touch_reads_memmaps(tmp_path):
    p = tmp_path / "m.npy"
    np.save(p, np.arange(1000.0).reshape(10, 100).T)  # F-ordered on disk
    m = np.load(p, mmap_mode="r")
    assert touch({"x": [m]}) == m.nbytes
    assert touch(np.arange(3)) == 0


def test_datasets_deterministic_and_sized():
    size = 64 * 1024
    a, b = ds.make_atlas(size, "C"), ds.make_atlas(size, "C")
    assert a.tobytes() == b.tobytes() and a.dtype == np.float32 and a.ndim == 4
    f = ds.make_atlas(size, "F")
    assert f.flags.f_contiguous and not f.flags.c_contiguous and np.array_equal(a, f)
    assert 0.5 * size < a.nbytes < 2 * size
    t = ds.make_text(size)
    assert isinstance(t, list) and all(isinstance(s, str) for s in t[:10]) and t == ds.make_text(size)
    sp = ds.make_sparse_table(size)
    assert 0.7 < np.isnan(sp).mean() < 0.99
    assert ds.make_timeseries(size).dtype == np.int64
    assert ds.parse_size("tiny") == ds.SIZE_PRESETS["tiny"]
    assert ds.parse_size("100MB") == 100 * 1024**2 and ds.parse_size("2") == 2 * 1024**2
    assert ds.parse_size("1.5GB") == int(1.5 * 1024**3)
    with pytest.raises(ValueError):
        ds.parse_size("lots")


def test_cli_errors_and_list(tmp_path, capsys):
    assert main(["--list"]) == 0
    assert "cpersist-mmap" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--quick", "--out", str(tmp_path), "--datasets", "no_such_dataset"])
    with pytest.raises(SystemExit):
        main(["--levels", "12"])
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), str(tmp_path / "missing.npy")])


def test_make_figures_script(quick_run, tmp_path):
    """benchmarks/make_figures.py redraws figures and the summary from a run's CSVs."""
    import importlib.util
    import shutil

    _, out = quick_run
    run = tmp_path / "run"
    run.mkdir()
    # Two datasets are enough to exercise it (drawing all of them is slow).
    rows = [r for r in _read(out / "results.csv") if r["dataset"] in ("atlas_c", "text")]
    with open(run / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    shutil.copy(out / "serializers.csv", run / "serializers.csv")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("make_figures", os.path.join(root, "benchmarks", "make_figures.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([str(run), "--no-publish"]) == 0
    for name in ("atlas_c_disk.png", "text_read.png", "pareto.png", "serializers.png"):
        assert (run / name).read_bytes()[:8] == PNG_MAGIC
    summary = (run / "summary.rst").read_text()
    assert "atlas_c" in summary and "np.save" in summary and "cpersist" in summary


def _load_script(name):
    import importlib.util

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "benchmarks", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write_csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
        w.writeheader()
        w.writerows(rows)


def test_targets_script_computes_ratios_within_each_run(tmp_path):
    """benchmarks/targets.py: each target from rows of one run, worst dataset."""
    targets = _load_script("targets")

    def row(dataset, method, level, write_s, read_s, ratio=1.0, wpeak=1.0, rpeak=101.0,
            family=None, mmap="False", open_s=""):
        return {"dataset": dataset, "method": method, "level": str(level), "status": "ok",
                "write_s": write_s, "read_s": read_s, "ratio": ratio, "write_peak_MB": wpeak,
                "read_peak_MB": rpeak, "size_bytes": 100e6, "mmap": mmap,
                "family": family or method.split(":")[0].split("-")[0], "read_open_s": open_s}

    a = []
    for ds, np_w in (("atlas_f", 0.010), ("timeseries", 0.010), ("noise", 0.010)):
        a += [row(ds, "np.save", 0, np_w, 0.010), row(ds, "cpersist", 0, 0.0125, 0.011),
              row(ds, "cpersist", 3, 0.05, 0.02, ratio=9.0, wpeak=12.0, rpeak=120.0),
              row(ds, "joblib", 3, 0.5, 0.1, ratio=8.0), row(ds, "tables:blosc:lz4", 3, 0.2, 0.05)]
    a[1]["write_s"] = 0.020  # atlas_f raw dump at half np.save's speed: the worst
    a += [row("random_forest", "cpersist", 0, 0.009, 0.01), row("random_forest", "pickle5", 0, 0.004, 0.004),
          row("random_forest", "cpersist", 3, 0.015, 0.01, ratio=7.5),
          row("random_forest", "joblib", 3, 0.05, 0.02, ratio=6.0)]
    round_dir = tmp_path / "round0"
    _write_csv(round_dir / "A" / "results.csv", a)
    _write_csv(round_dir / "B" / "results.csv",
               [row(ds, f"cpersist@{n}t", 3, 0.2 / n, 0.1 / n)
                for ds in targets.COMPRESSIBLE for n in (1, 2)])
    # Controls: 1-thread times 1.0; 2-thread times 0.5 (compute) and 0.8
    # (fresh) in every process, except 0.4 and 1.0 in the dumps of atlas_f.
    control = {(ds, op, 2, "compute"): "0.5;0.5" for ds in targets.COMPRESSIBLE
               for op in ("write", "read")}
    control.update({(ds, op, 2, "fresh"): "0.8;0.8" for ds in targets.COMPRESSIBLE
                    for op in ("write", "read")})
    control[("atlas_f", "write", 2, "compute")] = "0.4;0.4"
    control[("atlas_f", "write", 2, "fresh")] = "1.0;1.0"
    control.update({(ds, "read", 2, "codec"): "0.6;0.6" for ds in targets.COMPRESSIBLE})
    _write_csv(round_dir / "T" / "threads.csv",
               [{"dataset": ds, "level": "3", "op": op, "threads": str(n), "status": "ok",
                 "speedup": 1.0 if n == 1 else {"write": 2.0, "read": 1.7}[op] - 0.1 * i,
                 "compute_speedup": 1.0 if n == 1 else 1.9,
                 "fresh_speedup": 1.0 if n == 1 else 1.5,
                 "codec_speedup": 1.0 if n == 1 else 1.6,
                 "compute_times": control.get((ds, op, n, "compute"), "1.0;1.0"),
                 "fresh_times": control.get((ds, op, n, "fresh"), "1.0;1.0"),
                 "codec_times": control.get((ds, op, n, "codec"), "1.0;1.0")}
                for i, ds in enumerate(targets.COMPRESSIBLE) for op in ("write", "read")
                for n in (1, 2)])
    _write_csv(round_dir / "D" / "results.csv",
               [row(f"file_noise_{size}.npy", "cpersist-mmap", 0, 0.01, 0.01, mmap="True", open_s=t)
                for size, t in (("1MB", 1e-4), ("1GB", 3e-4))])
    _write_csv(round_dir / "E" / "serializers.csv", [
        {"serializer": "cpersist", "entries": "1024000", "store_s": 0.3, "load_s": 0.5, "status": "ok"},
        {"serializer": "pickle5", "entries": "1024000", "store_s": 0.25, "load_s": 0.5, "status": "ok"}])

    got = targets.evaluate(str(round_dir))
    assert got["1 raw dump vs np.save"][0] == pytest.approx(0.5)
    assert got["1 raw load vs np.load"][0] == pytest.approx(10 / 11)
    assert got["1 mmap open 1 GB / 1 MB"][0] == pytest.approx(3.0)
    assert got["2 ratio / joblib 3"][0] == pytest.approx(9 / 8)
    assert got["2 write vs joblib 3"][0] == pytest.approx(10.0)
    assert got["2 write vs PyTables blosc:lz4 3"][0] == pytest.approx(4.0)
    assert got["4 1M dict store / pickle 5"][0] == pytest.approx(1.2)
    assert got["5 forest raw dump / pickle 5"][0] == pytest.approx(2.25)
    assert got["6 dump peak MB (any codec)"][0] == pytest.approx(12.0)
    assert got["6 load peak above size, MB"][0] == pytest.approx(20.0)
    # Target 7 from the paired threads suite (T): its worst dataset ...
    assert got["7 dump: 2 threads / 1"][0] == pytest.approx(1.7)
    assert got["7 load: 2 threads / 1"][0] == pytest.approx(1.4)
    assert "sparse_table 1.40 (1.90/1.50/1.60)" in got["7 load: 2 threads / 1"][1]
    # ... and, for comparison, from the separate processes of run B.
    assert got["7 dump, separate processes (B)"][0] == pytest.approx(2.0)
    # The controls: the median over every process's pairs, this round.
    compute, fresh, codec = (f"7 dump: {label}" for label in targets.CONTROLS.values())
    assert got[compute] == (pytest.approx(2.0), "8 pairs")
    assert got[fresh][0] == pytest.approx(1.25)
    assert got[codec][0] == pytest.approx(1.0)
    assert got[f"7 load: {targets.CONTROLS['compute']}"][0] == pytest.approx(2.0)
    assert got[f"7 load: {targets.CONTROLS['codec']}"][0] == pytest.approx(1 / 0.6)

    rows = {r[0]: r for r in targets.table([got, got])}
    assert rows["1 raw dump vs np.save"][5] == "NOT met"
    assert rows["1 mmap open 1 GB / 1 MB"][5] == "NOT met"
    assert rows["5 forest raw dump / pickle 5"][5] == "NOT met"
    assert rows["2 write vs joblib 3"][5] == "met" and rows["2 write vs joblib 3"][4] == "2/2"
    assert rows["7 dump: 2 threads / 1"][5] == "met" and rows["7 load: 2 threads / 1"][5] == "NOT met"
    assert rows[compute][1:] == ["–", "2.00", "2.00–2.00", "–", "control", "8 pairs"]
    assert "| 7 load: 2 threads / 1 |" in targets.markdown(list(rows.values()))
    assert "list-table" in targets.rst(list(rows.values()), 2)


def test_targets_pooled_thread_speedups(tmp_path):
    """Target 7 pooled: per dataset the median over every paired round of
    every round, then the worst dataset."""
    targets = _load_script("targets")
    dirs = []
    for k, two in enumerate(([0.5, 0.5, 0.9], [0.5, 0.5, 0.5])):  # 1-thread times are 1.0
        rows = []
        for i, ds in enumerate(targets.COMPRESSIBLE):
            for n, times in ((1, [1.0] * 3), (2, [t + 0.01 * i for t in two])):
                # Controls: the compute one scales 2x in every pair, the
                # fresh one 1x but in the last dataset's 2nd round (4x).
                fresh = [0.25] * 3 if n == 2 and k == 1 and i == 3 else [1.0] * 3
                rows += [{"dataset": ds, "level": "3", "op": op, "threads": str(n),
                          "status": "ok", "times": ";".join(map(str, times)),
                          "compute_times": ";".join(["1.0" if n == 1 else "0.5"] * 3),
                          "fresh_times": ";".join(map(str, fresh)),
                          "codec_times": ";".join(["1.0" if n == 1 else "0.8"] * 3)}
                         for op in ("write", "read")]
        _write_csv(tmp_path / f"round{k}" / "T" / "threads.csv", rows)
        dirs.append(str(tmp_path / f"round{k}"))
    (dump, dump_compute, dump_fresh, dump_codec,
     load, load_compute, load_fresh, load_codec) = targets.pooled_threads(dirs)
    worst = targets.COMPRESSIBLE[-1]  # the slowest 2-thread times
    # 6 pairs: five at 1 / (0.5 + 0.03), one at 1 / 0.93: the median is 1 / 0.53.
    assert dump[0].startswith("7 dump") and load[0].startswith("7 load")
    assert float(load[2]) == pytest.approx(1 / 0.53, abs=0.01)
    assert load[4] == "6 pairs" and load[5] == "met" and f"{worst} 1.89" in load[6]
    # Controls over every dataset's pairs: 24 each; 3 of them at 4x.
    assert load_compute[0] == f"7 load: {targets.CONTROLS['compute']}, pooled (T)"
    assert load_compute[2:6] == ["2.00", "–", "24 pairs", "control"]
    assert float(load_fresh[2]) == 1.0 and float(dump_fresh[2]) == 1.0
    # Per dataset: the last one has 3 of its 6 pairs at 4x.
    assert f"{worst} 2.50" in load_fresh[6] and "atlas_f 2.00" in load_compute[6]
    assert load_codec[0] == f"7 load: {targets.CONTROLS['codec']}, pooled (T)"
    assert float(load_codec[2]) == float(dump_codec[2]) == 1.25


def test_several_thread_counts_side_by_side(tmp_path, capsys):
    """--threads 1,2: every cpersist method once per count, in one run."""
    names = [m.name for m in mt.all_methods([1, 2])]
    assert {"cpersist@1t", "cpersist@2t", "cpersist:zstd@1t", "cpersist-mmap@2t"} <= set(names)
    assert "np.save" in names and "cpersist" not in names
    assert {m.threads for m in mt.all_methods([1, 2]) if m.name.startswith("cpersist@")} == {1, 2}
    out = tmp_path / "run"
    rc = main(["--datasets", "timeseries", "--size", "tiny", "--methods", "cpersist@*",
               "--levels", "3", "--repeat", "1", "--threads", "1,2", "--no-plots",
               "--no-progress", "--out", str(out)])
    assert rc == 0
    rows = {r["method"]: r for r in _read(out / "results.csv")}
    assert set(rows) == {"cpersist@1t", "cpersist@2t"}
    assert rows["cpersist@1t"]["threads"] == "1" and rows["cpersist@2t"]["threads"] == "2"
    assert all(r["status"] == "ok" for r in rows.values())
    with pytest.raises(SystemExit):
        main(["--threads", "0,2", "--list"])
    assert "positive ints" in capsys.readouterr().err


def test_threads_suite_alternates_counts_in_one_process(tmp_path, capsys):
    """--suite threads: each count timed once per round, speed-ups per round."""
    from cpersist.benchmarks.threads import _order

    assert [_order([1, 2], r) for r in range(3)] == [[1, 2], [2, 1], [1, 2]]
    out = tmp_path / "run"
    rc = main(["--suite", "threads", "--datasets", "timeseries,atlas_f", "--size", "tiny",
               "--levels", "0,3", "--repeat", "3", "--threads", "1,2", "--no-progress",
               "--out", str(out)])
    assert rc == 0
    rows = _read(out / "threads.csv")
    assert {(r["dataset"], r["level"], r["op"], r["threads"]) for r in rows} == {
        (ds, lv, op, n) for ds in ("timeseries", "atlas_f") for lv in ("0", "3")
        for op in ("write", "read") for n in ("1", "2")}
    for r in rows:
        assert r["status"] == "ok" and r["repeats"] == "3"
        times = [float(t) for t in r["times"].split(";")]
        assert len(times) == 3 and all(t > 0 for t in times)
        assert float(r["time_s"]) == pytest.approx(sorted(times)[1], rel=1e-5)
    by_key = {(r["dataset"], r["level"], r["op"], r["threads"]): r for r in rows}
    for ds in ("timeseries", "atlas_f"):
        one, two = by_key[(ds, "3", "read", "1")], by_key[(ds, "3", "read", "2")]
        assert float(one["speedup"]) == 1.0
        per_round = sorted(float(a) / float(b) for a, b in
                           zip(one["times"].split(";"), two["times"].split(";")))
        assert float(two["speedup"]) == pytest.approx(per_round[1], rel=1e-3)
        assert float(two["speedup_min"]) == pytest.approx(per_round[0], rel=1e-3)
        for kind in ("compute", "fresh", "codec"):  # the controls, same rounds
            assert float(one[f"{kind}_speedup"]) == 1.0
            control = sorted(float(a) / float(b) for a, b in zip(
                one[f"{kind}_times"].split(";"), two[f"{kind}_times"].split(";")))
            assert len(control) == 3 and all(c > 0 for c in control)
            assert float(two[f"{kind}_speedup"]) == pytest.approx(control[1], rel=1e-3)
    # A raw file has no encoded chunk: its codec control is empty.
    assert {(r["codec_speedup"], r["codec_times"]) for r in rows if r["level"] == "0"} == {("", "")}
    assert "speedup" in capsys.readouterr().out
    assert not (out / "_work").exists()
    with pytest.raises(SystemExit):
        main(["--suite", "threads", "--datasets", "nope", "--out", str(out)])
    assert "no dataset matches 'nope'" in capsys.readouterr().err


def test_machine_controls_time_their_work_without_cpersist(monkeypatch):
    """The threads suite's controls: all the work shared out among the
    threads, one Zstandard context each, and a short decode is an error."""
    import zstandard

    from cpersist.benchmarks.threads import MachineControls

    controls = MachineControls(calls=6, frames=3)
    calls = []
    for n in (1, 2):
        assert controls.compute(n) > 0 and controls.fresh(n) > 0
    assert len(controls._compressors) == len(controls._decompressors) == 2
    assert len(set(map(id, controls._compressors))) == 2
    # Every compression is made, once, whatever the thread count.
    monkeypatch.setattr(controls, "_compressors", [
        type("Counting", (), {"compress": lambda self, b, k=k: calls.append(k)})()
        for k in range(2)])
    controls.compute(2)
    assert sorted(calls) == [0, 0, 0, 1, 1, 1]
    # The fresh control writes memory the process has not touched: every
    # call faults its pages in (at least one fault per 2 MiB huge page).
    import resource

    fresh = MachineControls(calls=2)
    fresh.fresh(1)
    for n in (1, 2):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        fresh.fresh(n)
        assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before >= 24
    # A frame that decodes to less than its slice fails the control.
    controls._frame = zstandard.ZstdCompressor().compress(b"x" * 1000)
    with pytest.raises(RuntimeError, match="decoded short"):
        controls.fresh(2)


def test_codec_control_times_the_files_own_chunks(tmp_path, monkeypatch):
    """The codec control decodes a file's chunks into new arrays (the same
    bytes as a load, each chunk once, whatever the thread count) and encodes
    them again; a raw file gives it nothing to time."""
    import cpersist
    from cpersist.benchmarks.threads import CodecControl

    arr = np.concatenate([np.arange(300_000, dtype=np.int64),
                          np.random.default_rng(0).integers(0, 2**62, 100_000)])
    path = tmp_path / "a.cp"
    cpersist.dump({"a": arr, "b": arr[::-1].copy()}, path, compress=3, chunk_size=1 << 16)
    before = set(threading.enumerate())
    control = CodecControl(str(path))
    assert len(control) > 50
    seen = []
    real = np.empty

    def spy(size, dtype):
        out = real(size, dtype)
        seen.append(out)
        return out
    monkeypatch.setattr(np, "empty", spy)
    for n in (1, 3):
        seen.clear()
        assert control.decode(n) > 0
        # The two arrays and the pickle stream, each section byte for byte.
        decoded = sorted((bytes(out) for out in seen), key=len)
        assert arr.tobytes() in decoded and arr[::-1].tobytes() in decoded
    monkeypatch.setattr(np, "empty", real)
    control.encode(2)  # the first call at a count also warms its threads up
    encoded = []
    codecs = {id(c[4]): c[4] for c in control._chunks if c[4] is not None}
    for codec in codecs.values():
        monkeypatch.setattr(codec, "encode", lambda chunk, typesize, c=codec: encoded.append(
            (id(c), bytes(chunk))))
    assert control.encode(2) > 0
    assert sorted(encoded) == sorted((id(c[4]), bytes(raw)) for c, raw in
                                     zip(control._chunks, control._raw) if c[4] is not None)
    assert any(c[4] is None for c in control._chunks)  # the noise, stored as is
    cpersist.dump(arr, tmp_path / "raw.cp", compress=0)
    assert len(CodecControl(str(tmp_path / "raw.cp"))) == 0
    # Its kept threads end with it (an executor's workers exit once it is
    # collected).
    kept = [t for t in set(threading.enumerate()) - before if t.name.startswith("control")]
    assert len(kept) == 3  # 1 for 2 threads, 2 for 3
    del control
    gc.collect()
    for thread in kept:
        thread.join(timeout=10)
        assert not thread.is_alive()


def test_threads_suite_reports_wrong_data(tmp_path, monkeypatch):
    """A load that returns other data fails the task instead of timing it."""
    import cpersist
    from cpersist.benchmarks.threads import _threads_task

    data_path = tmp_path / "data.pkl"
    data_path.write_bytes(pickle.dumps(np.arange(5000.0), protocol=5))
    task = dict(file_path=str(tmp_path / "x.cp"), data_path=str(data_path), counts=[1, 2],
                level=3, repeats=2)
    wrote = _threads_task(dict(task, op="write"))
    assert wrote["status"] == "ok" and [len(v) for v in wrote["times"].values()] == [2, 2]
    assert _threads_task(dict(task, op="read"))["status"] == "ok"
    real_load = cpersist.load
    monkeypatch.setattr(cpersist, "load", lambda *a, **k: real_load(*a, **k) + 1)
    bad = _threads_task(dict(task, op="read"))
    assert bad["status"] == "failed" and "wrong data read back at 1 threads" in bad["reason"]
