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


def test_quick_import_times(quick_run):
    """The start-up rows: cpersist's import and command line beside joblib's."""
    _, out = quick_run
    rows = {r["what"]: r for r in _read(out / "import_time.csv")}
    assert set(rows) == {"import cpersist", "import joblib", "cpersist --help", "python -c pass"}
    for r in rows.values():
        assert r["status"] == "ok" and r["runs"] == "5"
        assert 0 < float(r["min_ms"]) <= float(r["median_ms"]) <= float(r["max_ms"])
    assert "import numpy; import cpersist" in rows["import cpersist"]["command"]
    assert rows["cpersist --help"]["command"].endswith("--help")
    machine = json.loads((out / "machine.json").read_text())
    assert machine["import_time"]["runs"] == 5


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
        (s, o) for s in SERIALIZERS + ["cpersist dumps/loads"] for o in ("people", "dict100")}
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
