"""The benchmark on a user's own files: refusals, peers on 0-d arrays, which
setting to use, codecs that kept chunks raw, readable figures."""

import csv
import os
import pickle

import numpy as np
import pytest

from cpersist.benchmarks import cli
from cpersist.benchmarks import datasets as ds
from cpersist.benchmarks.cli import main
from cpersist.benchmarks.figures import bar_figure, plot_storage
from cpersist.benchmarks.report import (KEPT_RAW_NOTE, PICK_HEADER, format_recommendations,
                                        format_table)

from ._fresh import ROOT


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_pickle_without_trust_is_refused_loudly(tmp_path, capsys):
    p = tmp_path / "model.joblib"
    with open(p, "wb") as f:
        pickle.dump([1, 2], f)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["--out", str(out), "--no-progress", str(p)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{p}: a pickle/joblib file" in err and "--trust-pickles" in err
    assert not (out / "results.csv").exists()


def test_cp_file_needing_trust_stops_the_run(tmp_path, capsys):
    from sklearn.linear_model import LinearRegression

    import cpersist

    p = tmp_path / "obj.cp"
    cpersist.dump({"w": np.arange(10.0), "model": LinearRegression()}, p)
    rc = main(["--out", str(tmp_path / "out"), "--no-progress", "--no-plots",
               "--methods", "pickle5", str(p)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "obj.cp was not measured" in err and "--trust-pickles" in err


def test_npz_with_a_0d_array_works_with_every_peer(tmp_path, capsys):
    p = tmp_path / "checkpoint.npz"
    np.savez(p, w=np.arange(2000, dtype=np.float32).reshape(40, 50), step=np.array(1200),
             lr=np.array(0.5, dtype=np.float32))
    out = tmp_path / "out"
    methods = "cpersist,cpersist:zstd,zarr:zstd,zarr:blosc,h5py:zstd,h5py:blosc2,safetensors,np.save"
    rc = main(["--out", str(out), "--no-progress", "--no-plots", "--levels", "3", "--repeat", "1",
               "--methods", methods, str(p)])
    printed = capsys.readouterr().out
    rows = _read(out / "results.csv")
    assert rc == 0, [r["reason"] for r in rows if r["status"] == "failed"]
    by_method = {r["method"]: r for r in rows}
    for name in ("zarr:zstd", "zarr:blosc", "h5py:zstd", "h5py:blosc2", "safetensors", "cpersist"):
        assert by_method[name]["status"] == "ok", by_method[name]
    assert by_method["np.save"]["status"] == "n/a"
    # The end of the run answers what to pass, and summary.md opens with it.
    block = printed.split(PICK_HEADER, 1)[1]
    for goal in ("pick", "fastest write", "fastest read", "smallest file"):
        assert f"  {goal} " in block
    assert "  pick          compress=" in block
    summary = (out / "summary.md").read_text()
    assert summary.index("## What to pick") < summary.index("## Storage")
    assert block.strip().split("\n\n")[0] in summary
    # The dataset name is printed whole, and "(0 ... not applicable)" never.
    assert "file_checkpoint.npz " in printed
    assert "(0 dataset/method" not in printed


def test_explicit_codec_that_kept_chunks_raw_says_so(tmp_path, capsys):
    p = tmp_path / "noise.npy"
    np.save(p, np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8))
    out = tmp_path / "out"
    rc = main(["--out", str(out), "--no-progress", "--no-plots", "--levels", "3",
               "--methods", "cpersist:lz4,cpersist-mmap", str(p)])
    assert rc == 0
    rows = {r["method"]: r for r in _read(out / "results.csv")}
    assert float(rows["cpersist:lz4"]["kept_raw"]) == 1.0
    assert rows["cpersist-mmap"]["kept_raw"] == ""
    printed = capsys.readouterr().out
    line = next(ln for ln in printed.splitlines() if "cpersist:lz4" in ln and "ok" in ln)
    assert "1.00 raw" in line
    assert KEPT_RAW_NOTE in printed


def test_max_is_left_out_of_user_file_runs_unless_asked(tmp_path, monkeypatch, capsys):
    p = tmp_path / "v.npy"
    np.save(p, np.zeros(10))
    seen = []
    monkeypatch.setattr("cpersist.benchmarks.runner.run_storage",
                        lambda cfg: seen.append(cfg) or [])
    for extra, excluded in (([], ["cpersist max"]), (["--methods", "cpersist*"], []),
                            (["--full"], []), (["--datasets", "noise"], [])):
        main(["--out", str(tmp_path / "out"), "--no-progress", "--no-plots",
              str(p)] + extra)
        assert seen[-1].exclude_methods == excluded, extra
    assert "cpersist max (compress=\"max\") is not measured on your files" in capsys.readouterr().err


def test_recommendations_name_only_what_dump_and_load_take():
    def row(method, level, ratio, write, read, family="cpersist", mmap=False, kept_raw=""):
        # MB/s of a 100 MB dataset, the median of the repeats' times.
        return {"dataset": "file_a.npy", "description": "float32 (5000, 5000) C",
                "method": method, "family": family, "level": level, "ratio": ratio,
                "write_MBps": write, "read_MBps": read, "mmap": mmap, "kept_raw": kept_raw,
                "status": "ok", "write_times": ";".join(str(100 / write * k) for k in (0.99, 1, 1.01)),
                "read_times": ";".join(str(100 / read * k) for k in (0.99, 1, 1.01))}

    rows = [row("np.save", 0, 1.0, 3000, 3000, family="numpy"),
            row("cpersist", 0, 1.0, 900, 700), row("cpersist", 3, 3.0, 600, 800),
            row("cpersist:lz4", 1, 2.0, 880, 650), row("cpersist:zstd", 9, 4.0, 20, 400),
            row("cpersist-mmap", 0, 1.0, 910, 1000, mmap=True),
            row("cpersist:zlib", 3, 1.0, 2000, 2000, kept_raw=1.0)]
    lines = format_recommendations(rows).splitlines()
    assert lines[0] == PICK_HEADER.splitlines()[0]
    i = lines.index("file_a.npy: float32 (5000, 5000) C")
    goals = {ln[2:16].strip(): ln[16:] for ln in lines[i + 1:i + 5]}
    assert list(goals) == ["pick", "fastest write", "fastest read", "smallest file"]
    # Never a peer, nor a codec that kept its chunks raw (it wrote what compress=0 writes).
    assert "np.save" not in "\n".join(lines) and "zlib" not in "\n".join(lines)
    # 910 and 880 MB/s differ by under 5%: either; the memmapped read's row wrote compress=0.
    assert goals["fastest write"].startswith('either compress=0 or compress="lz4:1" ')
    assert goals["fastest read"].startswith('compress=0 + mmap_mode="r" ')
    assert goals["smallest file"].startswith('compress="zstd:9" ')
    assert goals["pick"].startswith("compress=3 ")  # 3/4 * 600/910 * 800/1000, the highest
    # Noisy repeats make settings alike that a quiet run tells apart.
    noisy = [dict(r, read_times="0.1;0.125;0.2") for r in rows if r["method"] == "cpersist"]
    read = format_recommendations(noisy).splitlines()[-2]
    assert read.startswith("  fastest read  either compress=3 or compress=0 ")


def test_figures_order_levels_and_mark_failed_methods(tmp_path):
    from cpersist.benchmarks.figures import _plt

    def row(method, level, status="ok", value=1.0):
        return {"dataset": "file_a_long_dataset_name.npy", "method": method, "family": "x",
                "level": level, "status": status, "write_s": value, "size_bytes": 1e6,
                "disk_bytes": 5e5, "read_s": value, "ratio": 2.0, "write_MBps": 10.0,
                "read_MBps": 20.0, "cache": "cold"}

    rows = [row("a", 9), row("a", 0), row("b", 5), row("b", 3), row("c", 6),
            row("broken", 3, "failed", ""), row("d", 3)]
    plt = _plt()
    fig = bar_figure(plt, rows, "write_s", "s", "title", log=True)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "level 0", "level 3", "level 5", "level 6", "level 9", "failed"]
    labels = ax.get_yticklabels()
    broken = next(t for t in labels if t.get_text() == "broken")
    assert broken.get_color() == "tab:red"
    assert any("failed" in t.get_text() for t in ax.texts)
    colors = {p.get_facecolor() for p in ax.get_legend().get_patches()}
    assert len(colors) == 6  # one distinct colour per level
    plt.close(fig)
    paths = plot_storage(rows, str(tmp_path))
    assert sorted(os.path.basename(p) for p in paths) == sorted(
        f"file_a_long_dataset_name.npy_{k}.png" for k in ("disk", "write", "read", "pareto"))


def test_table_prints_whole_names_and_no_empty_na_line():
    rows = [{"dataset": "file_embeddings.npy", "method": "blosc2:zstd+bitshuffle", "level": 3,
             "status": "ok", "ratio": 2.0}]
    text = format_table(rows)
    assert "file_embeddings.npy blosc2:zstd+bitshuffle" in text
    assert "not applicable" not in text
    assert "(1 dataset/method pairs not applicable" in format_table(
        rows + [dict(rows[0], status="n/a", method="np.save")])


def test_bench_help_names_every_peer_family():
    from cpersist.benchmarks.methods import all_methods

    text = cli.build_parser().format_help().replace("\n", " ")
    names = {"numpy": "np.save", "pickle": "pickle", "joblib": "joblib", "tables": "PyTables",
             "nibabel": "nibabel", "blosc2": "blosc2", "zarr": "zarr", "h5py": "h5py",
             "safetensors": "safetensors"}
    families = {m.family for m in all_methods()} - {"cpersist"}
    assert families <= set(names)
    for family in families:
        assert names[family] in text, family
    assert "default 1MB" in text
    with open(os.path.join(ROOT, "docs", "benchmarks.rst")) as f:
        docs = f.read()
    assert "default\n``1MB``" in docs and "medium`` (the\ndefault" not in docs
    assert ds.parse_size("1MB") == cli.ds.parse_size(cli.DEFAULT_SIZE)


def _mixed_folder(folder):
    """A small file of every kind ``cpersist bench --help`` names but HDF5
    and .cp: arrays, a NIfTI image, a torch checkpoint, safetensors and a
    joblib pickle."""
    import joblib
    import nibabel as nib
    import torch
    from safetensors.torch import save_file

    x = np.cumsum(np.random.default_rng(0).normal(size=(200, 100)), axis=0).astype(np.float32)
    np.save(folder / "walk.npy", x)
    np.savez(folder / "pair.npz", w=x, step=np.arange(100))
    nib.save(nib.Nifti1Image(x.reshape(20, 10, 100), np.eye(4)), folder / "brain.nii.gz")
    weights = {"w": torch.from_numpy(x), "b": torch.zeros(10)}
    torch.save({"model": weights, "step": 3}, folder / "model.pt")
    save_file(weights, folder / "weights.safetensors")
    joblib.dump({"x": x, "names": ["a", "b"]}, folder / "fitted.joblib")
    return sorted(str(p) for p in folder.iterdir())


def test_a_folder_of_every_kind_gives_one_pick_per_file(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    (tmp_path / "in").mkdir()
    files = _mixed_folder(tmp_path / "in")
    out = tmp_path / "out"
    rc = main(["--quick", "--methods", "cpersist:lz4,cpersist-mmap", "--trust-pickles",
               "--no-progress", "--no-plots", "--out", str(out)] + files)
    printed = capsys.readouterr().out
    assert rc == 0
    # summary.md opens with what the end of the run printed: a pick per file.
    advice = (out / "summary.md").read_text().split("## What to pick", 1)[1].split("\n## ")[0]
    advice = advice.split(PICK_HEADER, 1)[1].split("```")[0]
    assert advice.strip() in printed
    names = [line.split(": ", 1)[0] for line in advice.splitlines()
             if line and not line.startswith(" ")]
    assert names == ["file_brain.nii.gz", "file_fitted.joblib", "file_pair.npz",
                     "file_walk.npy", "model.pt", "weights.safetensors"]
    assert advice.count("\n  pick ") == len(files)
    assert "cpersist-mmap" not in advice and 'mmap_mode="r"' in advice
    # Each checkpoint's ratios all read one way, as the table's title says.
    assert "each ratio is cpersist's time or file size over the other's" in printed
    targets = [r["target"] for r in _read(out / "checkpoints.csv")]
    assert len(targets) == 2 * 9 and all("speed" not in t for t in targets)


def test_a_checkpoint_without_torch_is_refused_with_the_reason(tmp_path, monkeypatch, capsys):
    import sys

    path = tmp_path / "model.pt"
    path.write_bytes(b"PK\x03\x04 not read")
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    with pytest.raises(SystemExit) as e:
        main(["--out", str(tmp_path / "out"), str(path)])
    assert e.value.code == 2
    assert "model.pt: a checkpoint file is measured with torch" in capsys.readouterr().err
