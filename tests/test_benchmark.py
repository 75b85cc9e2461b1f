"""Tests of the bundled benchmark (cpersist.benchmarks).

The tests of one real ``--quick --suite all`` run are in
test_bench_quick_run.py; these are small, direct runs and the parts alone.
"""

import csv
import os
import pickle
import subprocess
import types

import numpy as np
import pytest

from cpersist.benchmarks import main
from cpersist.benchmarks import generated, peers_classic
from cpersist.benchmarks import datasets as ds
from cpersist.benchmarks import methods as mt
from cpersist.benchmarks.compare import first_difference, touch
from cpersist.benchmarks.runner import StorageConfig, measure_cell

from ._fresh import run_code, start_python

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------------
# The quick run
# ---------------------------------------------------------------------------


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


@pytest.mark.slow
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


class CorruptingNpSave(peers_classic.NpSave):
    """A real np.save round trip that flips one value on read."""

    name = "np.save-corrupt"

    def read(self, path):
        a = np.load(path).copy()
        a.flat[0] += 1
        return a


class RaisingMethod(peers_classic.NpSave):
    name = "raising"

    def write(self, obj, path, level):
        raise OSError("disk on fire")


def _cell(tmp_path, method, warm=False):
    arr = generated.make_noise(4096)
    data_path = str(tmp_path / "noise.pkl")
    with open(data_path, "wb") as f:
        pickle.dump(arr, f, protocol=5)
    info = {"source": "builtin", "description": "noise", "size_bytes": arr.nbytes, "path": data_path}
    cfg = StorageConfig(out=str(tmp_path), repeats=2, progress=False, warm_cache=warm)
    return measure_cell("noise", info, method, 0, cfg, str(tmp_path))


def test_measurement_processes_start_with_every_library_imported():
    """The forkserver imports what the timed calls use, so that no write or
    read is charged its library's import (zarr's takes longer than a small
    dataset's write). Each name it lists exists: a moved module would be
    skipped silently."""
    import ast
    import importlib.util

    from cpersist.benchmarks import measure

    assert measure.preload_modules == ["cpersist.benchmarks._preload"]
    # Read, not imported: importing it freezes this process's collector.
    spec = importlib.util.find_spec(measure.preload_modules[0])
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    listed = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and node.targets[0].id == "_NAMES")
    assert {"zarr", "h5py", "hdf5plugin", "safetensors.numpy", "tables",
            "cpersist.tools.inspection"} <= set(listed)
    for name in listed:
        assert importlib.util.find_spec(name) is not None, name


def test_wrong_data_is_failed_and_not_timed(tmp_path):
    row = _cell(tmp_path, CorruptingNpSave())
    assert row["status"] == "failed"
    assert "values differ" in row["reason"]
    assert row["read_s"] == "" and row["write_s"] == ""
    good = _cell(tmp_path, peers_classic.NpSave())
    assert good["status"] == "ok" and float(good["read_s"]) > 0
    assert len(good["read_times"].split(";")) == 2
    assert good["cache"] == "cold" and good["peak_via"] in ("VmHWM", "sampler")
    warm = _cell(tmp_path, peers_classic.NpSaveMmap(), warm=True)
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
    a, b = generated.make_atlas(size, "C"), generated.make_atlas(size, "C")
    assert a.tobytes() == b.tobytes() and a.dtype == np.float32 and a.ndim == 4
    f = generated.make_atlas(size, "F")
    assert f.flags.f_contiguous and not f.flags.c_contiguous and np.array_equal(a, f)
    assert 0.5 * size < a.nbytes < 2 * size
    t = generated.make_text(size)
    assert isinstance(t, list) and all(isinstance(s, str) for s in t[:10]) and t == generated.make_text(size)
    sp = generated.make_sparse_table(size)
    assert 0.7 < np.isnan(sp).mean() < 0.99
    assert generated.make_timeseries(size).dtype == np.int64
    assert ds.parse_size("tiny") == ds.SIZE_PRESETS["tiny"]
    assert ds.parse_size("100MB") == 100 * 1024**2 and ds.parse_size("2") == 2 * 1024**2
    assert ds.parse_size("1.5GB") == int(1.5 * 1024**3)
    with pytest.raises(ValueError):
        ds.parse_size("lots")


def test_package_datasets_are_found_where_pytest_is_not_installed():
    """The benchmark installs without pytest (README's first command): the
    data bundled with nibabel is found without nibabel.testing, which
    imports it."""
    pytest.importorskip("nibabel")
    out = run_code(
        "import sys; sys.modules['pytest'] = None\n"  # an import of it fails
        "from cpersist.benchmarks.datasets import package_datasets\n"
        "sets = {d.name: d for d in package_datasets()}\n"
        "arr = sets['nifti_example4d'].make(0, True)\n"
        "print(sorted(n for n in sets if n.startswith('nifti_')), arr.ndim)",
        check=True).stdout
    assert out.split() == ["['nifti_anatomical',", "'nifti_example4d',", "'nifti_example_nifti2',",
                           "'nifti_functional',", "'nifti_standard']", "4"]


def test_cli_errors_and_list(tmp_path, capsys):
    assert main(["--list"]) == 0
    assert "cpersist-mmap" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--quick", "--out", str(tmp_path), "--datasets", "no_such_dataset"])
    with pytest.raises(SystemExit):
        main(["--levels", "12"])
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), str(tmp_path / "missing.npy")])


@pytest.mark.parametrize("args,message", [
    (["--levels", "3,high"], "levels must be integers 0-9, got '3,high'"),
    (["--threads", "two", "--list"], "expected positive ints separated by commas, got 'two'"),
    (["--quick", "--full"], "--quick and --full are opposites: choose one"),
    (["--size", "lots"], "cannot parse size 'lots'; use e.g. 100MB, 1GB, tiny, small"),
    (["--repeat", "0"], "--repeat must be >= 1"),
    (["--size", "tiny", "--datasets", "timeseries", "--methods", "no_such_method"],
     "no method matches 'no_such_method'; known: "),
])
def test_bad_arguments_exit_2_naming_the_problem(args, message, tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        main([*args, "--out", str(out), "--no-progress", "--no-plots"])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
    assert not (out / "results.csv").exists() or len(_read(out / "results.csv")) == 0


@pytest.mark.slow
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


# ---------------------------------------------------------------------------
# The newer formats, pandas and scipy data
# ---------------------------------------------------------------------------


def test_peer_methods_round_trip(tmp_path):
    """Each peer format writes and reads back arrays and dicts exactly, or says why not."""
    from cpersist.benchmarks import peers
    from cpersist.benchmarks.method import missing

    arr = generated.make_atlas(64 * 1024, "F")
    objs = {"array": arr, "dict": {"vol": arr, "grp/ids": np.arange(7, dtype=np.int32)},
            "records": {"r": np.zeros(4, dtype=[("a", "u1"), ("b", "<f8")])}}
    seen = set()
    for m in peers.peer_methods():
        assert m.available() is None, m  # the [bench] extra installs them all
        for kind, obj in objs.items():
            why = m.why_not(obj)
            if why:
                assert why.strip() and (kind != "array" or m.family == "none"), (m, kind, why)
                continue
            level = m.levels([3])[0]
            path = str(tmp_path / f"{m.name.replace(':', '_')}_{kind}{m.suffix}")
            m.write(obj, path, level)
            assert first_difference(obj, m.read(path)) is None, (m, kind)
            seen.add((m.family, kind))
    assert {("blosc2", "array"), ("zarr", "dict"), ("h5py", "records"), ("safetensors", "dict")} <= seen
    # Compression settings are really applied: level 9 with bit shuffle beats raw safetensors.
    assert os.path.getsize(tmp_path / "blosc2_zstd+bitshuffle_array.b2nd") < arr.nbytes / 2
    assert "not installed" in missing("no_such_module_for_the_benchmark")


def test_dataframe_and_sparse_datasets_round_trip_exactly():
    import pandas as pd
    import scipy.sparse as sp

    import cpersist

    df = generated.make_dataframe(64 * 1024)
    assert isinstance(df["city"].dtype, pd.CategoricalDtype) and pd.api.types.is_string_dtype(df["code"])
    assert ds.deep_nbytes(df) == int(df.memory_usage(deep=True).sum())
    m = generated.make_sparse_matrix(64 * 1024)
    assert sp.issparse(m) and m.format == "csr" and 0 < m.nnz < 0.05 * m.shape[0] * m.shape[1]
    for obj in (df, m):
        import io

        buf = io.BytesIO()
        cpersist.dump(obj, buf, compress=3)
        buf.seek(0)
        assert first_difference(obj, cpersist.load(buf)) is None
    changed = df.copy()
    changed.loc[3, "price"] += 1
    assert "price" in first_difference(df, changed)
    recoded = df.copy()
    recoded["city"] = recoded["city"].astype(str)
    assert first_difference(df, recoded) is not None
    m2 = m.copy()
    m2.data[0] += 1
    assert "1 of" in first_difference(m, m2)
    assert "format" in first_difference(m, m.tocsc()) or first_difference(m, m.tocsc())


def test_method_list_follows_available_codecs(monkeypatch):
    """cpersist's codecs (and its "max" preset) come from cpersist.available_codecs()."""
    import cpersist

    monkeypatch.setattr(cpersist, "available_codecs", lambda: ["zstd", "lzma", "max"])
    names = [m.name for m in mt.all_methods()]
    assert "cpersist:lzma" in names and "cpersist max" in names and "cpersist:max" not in names
    assert "cpersist:zlib" not in names
    monkeypatch.setattr(cpersist, "available_codecs", lambda: ["zstd"])
    assert "cpersist max" not in [m.name for m in mt.all_methods()]


# ---------------------------------------------------------------------------
# Real input: HDF5 compound data, str arrays, unsupported files
# ---------------------------------------------------------------------------


def test_hdf5_compound_dataset_is_loaded_and_measured(tmp_path):
    import h5py

    rec = np.zeros(5, dtype=[("id", "<i4"), ("score", "<f8"), ("tag", "S3")])
    rec["id"] = np.arange(5)
    rec["score"] = np.linspace(0, 1, 5)
    rec["tag"] = b"abc"
    path = tmp_path / "mixed.h5"
    with h5py.File(path, "w") as f:
        f["vol"] = np.ones((4, 5, 6), dtype=np.float32)
        f["grp/ids"] = np.arange(9)
        f["table"] = rec
    obj = ds.load_user_file(str(path))
    assert set(obj) == {"vol", "grp/ids", "table"}
    assert first_difference(rec, obj["table"]) is None
    out = tmp_path / "out"
    rc = main(["--out", str(out), "--no-progress", "--no-plots", "--levels", "3",
               "--methods", "cpersist,h5py:zstd,tables,np.savez_compressed", str(path)])
    assert rc == 0
    rows = {r["method"]: r for r in _read(out / "results.csv")}
    assert "dict of 3" in rows["cpersist"]["description"]
    for method in ("cpersist", "h5py:zstd", "np.savez_compressed"):
        assert rows[method]["status"] == "ok", rows[method]
    assert rows["tables"]["status"] == "n/a" and "'table'" in rows["tables"]["reason"]


def test_npz_with_str_array_is_a_dict_of_arrays_for_pytables(tmp_path):
    path = tmp_path / "labels.npz"
    np.savez(path, names=np.array(["alpha", "beta", "gamma"]), x=np.arange(6.0).reshape(2, 3))
    out = tmp_path / "out"
    rc = main(["--out", str(out), "--no-progress", "--no-plots", "--methods", "tables,tables:zlib", str(path)])
    assert rc == 0
    rows = {r["method"]: r for r in _read(out / "results.csv")}
    assert rows["tables"]["status"] == "ok" and rows["tables:zlib"]["status"] == "ok"
    for r in rows.values():  # every PyTables filter built into this PyTables stores it
        assert r["status"] == "ok" or "not built into" in r["reason"], r


def test_unsupported_file_is_refused_up_front(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("not data\n")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["--out", str(out), str(path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "notes.txt: unsupported file type" in err and ".npz" in err
    assert not (out / "results.csv").exists()


def test_default_and_full_grids():
    from cpersist.benchmarks.cli import _grid, build_parser

    parse = build_parser().parse_args
    assert _grid(parse([])) == (ds.parse_size("1MB"), [0, 3, 6], 5)
    assert _grid(parse(["x.npy"])) == (ds.parse_size("1MB"), [0, 3], 5)
    assert _grid(parse(["x.npy", "--datasets", "atlas_c"]))[1] == [0, 3, 6]
    assert _grid(parse(["--full"])) == (ds.SIZE_PRESETS["medium"], [0, 1, 3, 6, 9], 3)
    assert _grid(parse(["--full", "--levels", "9", "--repeat", "2"]))[1:] == ([9], 2)
    with pytest.raises(SystemExit):
        main(["--quick", "--full"])


def test_raw_sizes_get_rounds_worth_the_same_bytes():
    """A size whose timings are short gets more rounds than asked, up to the
    cap; a long one what was asked."""
    from cpersist.benchmarks import raw

    for size in raw.FULL_SIZES:
        for asked in (1, raw.ROUNDS, 150):
            rounds = raw.rounds_at(size, asked)
            timed = rounds * raw.calls_at(size) * size
            assert rounds >= asked
            assert rounds in (asked, raw.MAX_ROUNDS) or (
                raw.BYTES_PER_SIZE - raw.calls_at(size) * size < timed <= raw.BYTES_PER_SIZE)
    assert raw.rounds_at(raw.FULL_SIZES[-1], raw.ROUNDS) == raw.ROUNDS
    assert raw.rounds_at(raw.SIZES[1], raw.ROUNDS) > raw.ROUNDS


def test_progress_bar_shows_cell_and_time_left(capsys):
    from cpersist.benchmarks.runner import progress_bar

    bar = progress_bar(total=10.0, desc="cpersist bench", weighted=True)
    bar.set_postfix_str("atlas_c | cpersist:zstd L9")
    bar.update(4.0)
    bar.close()
    err = capsys.readouterr().err
    assert "atlas_c | cpersist:zstd L9" in err and "left" in err and "40%" in err


def test_bar_legend_does_not_cover_bars():
    from cpersist.benchmarks.figures import _plt, bar_figure

    plt = _plt()
    rows = [{"method": m, "level": lv, "v": 1.0 + lv} for m in ("a", "b") for lv in (0, 3, 9)]
    fig = bar_figure(plt, rows, "v", "value", "title", log=False)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1 - 1  # beside the axes, not on them
    assert legend.x1 <= fig.bbox.x1 + 1  # and inside the figure
    plt.close(fig)


# ---------------------------------------------------------------------------
# Ctrl-C: rows kept, clean exit, --resume
# ---------------------------------------------------------------------------


def test_ctrl_c_during_a_process_start_is_raised_once_it_has_started():
    import signal

    from cpersist.benchmarks.measure import _interrupt_after

    reached = []
    # A pytest-xdist worker ignores Ctrl-C; the benchmark's command does not.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with _interrupt_after():
                os.kill(os.getpid(), signal.SIGINT)
                reached.append("end of block")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    assert reached == ["end of block"]


@pytest.mark.slow
def test_interrupt_keeps_rows_and_resume_completes(tmp_path):
    import signal
    import time

    out = tmp_path / "run"
    csv_path = out / "results.csv"
    methods = ["cpersist:zstd", "cpersist:lz4", "cpersist-mmap", "np.save", "joblib:lz4"]
    args = ["-m", "cpersist.benchmarks", "--out", str(out), "--size", "tiny",
            "--datasets", "atlas_c,timeseries", "--methods", ",".join(methods),
            "--levels", "1,3", "--no-progress"]
    # A test run started in the background by a shell inherits SIGINT
    # ignored, and Python then keeps ignoring it: Ctrl-C is restored here.
    proc = start_python(*args, "--no-plots", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if csv_path.exists() and len(_read(csv_path)) >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr + stdout
    assert "--resume" in stderr
    kept = _read(csv_path)
    assert len(kept) >= 3 and all(r["status"] == "ok" for r in kept)
    assert not (out / "_work").exists()

    # Resumed here, in this process: it completes the run and draws its figures.
    assert main(args[2:] + ["--resume"]) == 0
    rows = _read(csv_path)
    keys = [(r["dataset"], r["method"], r["level"]) for r in rows]
    assert len(keys) == len(set(keys))  # nothing measured twice
    assert rows[:len(kept)] == kept  # the interrupted run's rows are kept as they were
    assert {(d, m) for d, m, _ in keys} == {(d, m) for d in ("atlas_c", "timeseries") for m in methods}
    assert all(r["status"] in ("ok", "n/a") for r in rows)
    # A figure per dataset and kind (disk, times, the Pareto view).
    for d in ("atlas_c", "timeseries"):
        for kind in ("disk", "write", "read", "pareto"):
            data = (out / f"{d}_{kind}.png").read_bytes()
            assert data[:8] == PNG_MAGIC and len(data) > 2000, (d, kind)


def test_lazy_suite_and_lab_remote_without_optional_libraries(tmp_path, monkeypatch, capsys):
    """A peer's library not installed is said so, not a failure."""
    import json
    import sys

    from ._fresh import ROOT

    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from benchmarks import remote

    for name in ("zarr", "s3fs"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    rc = main(["--suite", "lazy", "--scale", "0.003", "--repeat", "1",
               "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    raw = json.loads((tmp_path / "lazy.json").read_text())
    assert [(r["zarr_s"], r["missing"]) for r in raw["slice"]] == [(None, ["zarr"])] * 2
    assert all(r["blosc2_s"] > 0 and r["slice_s"] > 0 for r in raw["slice"])
    text = (tmp_path / "lazy.txt").read_text()
    assert text.count("zarr not installed") == 2
    assert remote.main([str(tmp_path)]) == 0
    assert [r["status"] for r in _read(tmp_path / "remote.csv")] == ["not installed"]
    assert "not installed" in capsys.readouterr().out


def test_benchmark_modules_are_short_and_import_no_cycle():
    """Each module of the installed benchmark has one job: at most 400 lines,
    and no two of them import each other, even through a third."""
    import ast
    import pathlib

    import cpersist.benchmarks

    folder = pathlib.Path(cpersist.benchmarks.__file__).parent
    graph = {}
    for path in folder.glob("*.py"):
        text = path.read_text()
        assert text.count("\n") <= 400, path.name
        deps = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        graph[path.stem] = deps

    def reaches(start, goal, seen):
        return any(dep == goal or (dep in graph and dep not in seen and
                                   reaches(dep, goal, seen | {dep})) for dep in graph[start])

    assert [m for m in graph if reaches(m, m, {m})] == []


def test_checkpoint_contenders_follow_a_different_one_in_each_round(monkeypatch):
    # A load's page faults depend on what the call before it freed: the freed
    # memory goes back to the kernel after every call, and a fixed cycle,
    # however it is started, would always put the same one before it.
    from collections import Counter, defaultdict

    from cpersist.benchmarks import turns

    calls = []
    trimmed_after = []
    collected_after = []
    monkeypatch.setattr(turns, "_malloc_trim",
                        lambda: lambda pad: trimmed_after.append(len(calls)))
    # Recorded, not run: the calls here make no garbage.
    monkeypatch.setattr(turns, "gc", types.SimpleNamespace(
        collect=lambda: collected_after.append(len(calls)), freeze=lambda: None,
        unfreeze=lambda: None))
    names = [f"loader{i}" for i in range(9)]
    times = turns.timed_in_turn({name: (lambda name=name: calls.append(name))
                                 for name in names}, 5)
    assert set(times) == set(names) and Counter(calls) == {name: 6 for name in names}
    assert all(len(runs) == 5 for runs in times.values())  # the first round untimed
    assert trimmed_after == collected_after == list(range(1, len(calls) + 1))
    before = defaultdict(Counter)
    for previous, name in zip(calls[8:], calls[9:]):
        before[name][previous] += 1
    assert all(max(counts.values()) == 1 for counts in before.values())


def test_jax_checkpoints_without_the_jax_extra_are_one_row(tmp_path, monkeypatch):
    import sys

    from cpersist.benchmarks import jax_checkpoints

    expected = jax_checkpoints.missing() or "orbax-checkpoint"  # the first one absent
    monkeypatch.setitem(sys.modules, "orbax", None)  # import raises ImportError
    results = jax_checkpoints.run(str(tmp_path), quick=True, rounds=1)
    assert results == {"missing": expected}
    [row] = jax_checkpoints.ratios(results)
    assert row["status"] == "not installed" and expected in row["reason"]
    assert jax_checkpoints.format_results(results) == "" and os.listdir(tmp_path) == []



def test_codec_limit_times_the_arrays_chunks_alone():
    from cpersist.benchmarks.methods import Limit, arrays_of

    big = np.arange(300_000, dtype="<f8")
    small = np.arange(10, dtype="<i4")
    obj = {"a": big, "b": [small, big], "s": "text", "o": np.array([None])}
    found = arrays_of(obj)
    assert [a.nbytes for a in found] == [big.nbytes, small.nbytes]  # each once, no object array
    for compress in (0, 3, ("lz4", 1)):
        limit = Limit(obj, compress, n_threads=2, chunk_size=1 << 20)
        assert sum(chunk.nbytes for chunk, _ in limit.chunks) == big.nbytes + small.nbytes
        assert limit.encode_s() > 0 and limit.decode_s() > 0
        # Decoded into one new buffer per array, as a load decodes them.
        assert [bytes(a) for a in limit.decoded()] == [big.tobytes(), small.tobytes()]
    with pytest.raises(ValueError, match="max"):
        Limit(obj, "max", n_threads=1)
