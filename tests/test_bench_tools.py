"""Tests of the tools in the top-level benchmarks/ folder (not installed).

They publish results (``publish.py``), compute the performance targets
(``targets.py``), judge the suites' ratios against their bounds
(``bounds.py``), measure thread speed-ups beside controls
(``threads.py``) and the cost of recorded array paths
(``recorded_paths.py``); those reading the quick benchmark run are in
test_bench_quick_run.py. CI runs them from the repository root, which is where
``benchmarks`` is importable from.
"""

import csv
import gc
import os
import pickle
import sys
import threading

import numpy as np
import pytest

from ._fresh import ROOT

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import (bf16_ml_dtypes, bounds, codec_limit, jax_checkpoints, publish,  # noqa: E402
                        recorded_paths, targets, threads, training_loop)


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------------
# publish.py
# ---------------------------------------------------------------------------


def test_repository_readme_has_the_generated_block():
    with open(os.path.join(ROOT, "README.rst"), encoding="utf-8") as f:
        text = f.read()
    start, end = text.index(publish.README_START), text.index(publish.README_END)
    assert start < end and "docs/benchmark_results.rst" in text[start:end]


def test_publish_marks_the_cold_reads_of_the_limits_table():
    row = {"status": "ok", "dataset": "atlas_c", "method": "cpersist", "level": "3",
           "size_bytes": "100000000", "limit_write_s": "0.5", "limit_read_s": "0.1",
           "write_of_limit": "0.9", "read_of_limit": "0.8"}
    lines = publish.limits_table([dict(row, cache="cold"), dict(row, cache="warm"),
                                  dict(row, cache="warm (eviction had no effect)")])
    cells = [line for line in lines if "0.80" in line]
    assert len(cells) == 3 and ["(cold)" in line for line in cells] == [True, False, False]


# ---------------------------------------------------------------------------
# codec_limit.py
# ---------------------------------------------------------------------------


def test_codec_limit_rounds_cold_beside_the_disk_alone(tmp_path):
    obj = {"a": np.arange(400_000, dtype="<i8")}
    out = codec_limit.times(obj, 3, 2, str(tmp_path / "x.cp"), 2, cold=True)
    assert set(out) == {"dump", "encode", "load", "decode", "disk"}
    assert all(len(v) == 2 and all(t[0] > 0 for t in v) for v in out.values())
    figures = {name: (values, best) for name, values, best in codec_limit.rows(out)}
    # The codec alone reads nothing: a cold load against it says so.
    assert "load wall of limit (cold: the limit reads nothing)" in figures
    values, best = figures["load wall of disk or limit"]
    slower = [max(d[0], k[0]) for d, k in zip(out["decode"], out["disk"])]
    assert values == [s / t[0] for s, t in zip(slower, out["load"])]
    assert best == min(slower) / min(t[0] for t in out["load"])
    warm = dict(out)
    del warm["disk"]
    assert "load wall of limit" in {name for name, _, _ in codec_limit.rows(warm)}


# ---------------------------------------------------------------------------
# targets.py
# ---------------------------------------------------------------------------


def _write_csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
        w.writeheader()
        w.writerows(rows)


def test_targets_script_computes_ratios_within_each_run(tmp_path):
    """benchmarks/targets.py: each target from rows of one run, worst dataset."""

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

def test_publish_targets_table_from_rounds(tmp_path):
    """--targets: benchmarks/targets.py's table of the rounds, for the page."""
    with pytest.raises(FileNotFoundError, match="no complete round"):
        publish.targets_table(str(tmp_path / "none"))
    test_targets_script_computes_ratios_within_each_run(tmp_path)  # writes round0
    t_csv = tmp_path / "round0" / "T" / "threads.csv"
    rows = _read(t_csv)
    for r in rows:
        r["times"] = "1.0;1.0" if r["threads"] == "1" else "0.5;0.5"
    _write_csv(t_csv, rows)
    lines = publish.targets_table(str(tmp_path))
    assert lines[0] == ".. list-table:: Targets over 1 rounds (worst case over datasets)"
    text = "\n".join(lines)
    assert "   * - 7 load: 2 threads / 1, pooled (T)" in text
    assert "   * - 2 write vs joblib 3" in text


# ---------------------------------------------------------------------------
# threads.py
# ---------------------------------------------------------------------------


def _rounded_from(cell, ratio):
    """Whether a speed-up cell of threads.csv is ``ratio`` rounded to 4
    decimals, ``ratio`` being recomputed from the times the file gives to 6
    significant digits (each off by up to 5e-6 of itself). A tolerance
    relative to the ratio would not do: under load, a ratio can be small
    enough that 4 decimals are a few percent of it."""
    return abs(float(cell) - ratio) <= 0.5e-4 + 2e-5 * ratio


def test_threads_suite_alternates_counts_in_one_process(tmp_path, capsys):
    """benchmarks/threads.py: each count timed once per round, speed-ups per round."""
    _order = threads._order

    assert [_order([1, 2], r) for r in range(3)] == [[1, 2], [2, 1], [1, 2]]
    out = tmp_path / "run"
    rc = threads.main(["--datasets", "timeseries,atlas_f", "--size", "tiny",
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
        assert _rounded_from(two["speedup"], per_round[1])
        assert _rounded_from(two["speedup_min"], per_round[0])
        for kind in ("compute", "fresh", "codec"):  # the controls, same rounds
            assert float(one[f"{kind}_speedup"]) == 1.0
            control = sorted(float(a) / float(b) for a, b in zip(
                one[f"{kind}_times"].split(";"), two[f"{kind}_times"].split(";")))
            assert len(control) == 3 and all(c > 0 for c in control)
            assert _rounded_from(two[f"{kind}_speedup"], control[1])
    # A raw file has no encoded chunk: its codec control is empty.
    assert {(r["codec_speedup"], r["codec_times"]) for r in rows if r["level"] == "0"} == {("", "")}
    assert "speedup" in capsys.readouterr().out
    assert not (out / "_work").exists()
    with pytest.raises(SystemExit):
        threads.main(["--datasets", "nope", "--out", str(out)])
    assert "no dataset matches 'nope'" in capsys.readouterr().err


def test_machine_controls_time_their_work_without_cpersist(monkeypatch):
    """The threads suite's controls: all the work shared out among the
    threads, one Zstandard context each, and a short decode is an error."""
    import zstandard

    MachineControls = threads.MachineControls

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
    CodecControl = threads.CodecControl

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
    _threads_task = threads._threads_task

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


def test_recorded_paths_compares_a_dump_with_paths_and_without(capsys):
    """The script checks that one file records the paths and the other does
    not; the recorded paths make the file larger by at most what they spell
    (the index compresses them)."""
    result = recorded_paths.main(["--arrays", "100", "--repeat", "1"])
    sizes = result["sizes"]
    # Each path is "obj['layerN']['w']", 16-18 characters, plus its key in the meta.
    assert 0 < sizes["recorded"] - sizes["walked"] < 100 * 60
    assert set(result["times"]) == {"recorded", "walked"}
    assert all(t > 0 for way in result["times"].values() for t in way.values())
    assert "recording: dump x" in capsys.readouterr().out


def test_bounds_apply_at_the_sizes_they_are_made_for(tmp_path):
    """A full-size peak, listing and forest get a bound; a key without a
    bound is an error, not a silent pass; a folder without ratio files is
    refused."""
    from benchmarks.ratios import lazy_ratios, ratio_files

    full = {"peak": {"array_mb": 400, "peak_mb": 80.0, "exact": True},
            "listing": {"arrays": 10000, "listing_s": 0.01}}
    small = {"peak": {"array_mb": 4, "peak_mb": 1.0, "exact": True},
             "listing": {"arrays": 100, "listing_s": 0.0001}}
    got = bounds.judge(lazy_ratios(full))
    assert [(r["key"], r["bound"], r["met"]) for r in got] == [
        ("lazy.slice_peak", "<= 1", "no"), ("lazy.listing", "<= 1", "yes")]
    assert [(r["bound"], r["met"]) for r in bounds.judge(lazy_ratios(small))] == [("", "")] * 2
    # The forest of a run that is not quick is held to pickle 5's times.
    forest = tmp_path / "forest"
    forest.mkdir()
    (forest / "machine.json").write_text('{"mode": "default"}')
    (forest / "forest.csv").write_text(
        "suite,target,key,ratio,measured,status,reason\n"
        "forest,raw dump / pickle 5 dump,,0.9,,ok,\nforest,raw load / pickle 5 load,,1.1,,ok,\n")
    assert [(r["key"], r["bound"], r["met"]) for r in
            bounds.judge(ratio_files(str(forest))["forest.csv"])] == [
        ("forest.dump_vs_pickle", "<= 1", "yes"), ("forest.load_vs_pickle", "<= 1", "no")]
    with pytest.raises(KeyError):
        bounds.judge([{"key": "lazy.no_such_target", "status": "ok", "ratio": "1"}])
    with pytest.raises(SystemExit):
        bounds.main([str(tmp_path)])


def test_training_loop_compares_checkpointing_with_none(capsys):
    """Each way of saving runs in turn with a loop that does not save; the
    background dump's call and end are timed beside a copy and a plain dump."""
    training_loop.main(["loop", "--framework", "numpy", "--mb", "1", "--side", "128",
                        "--batch", "4", "--steps", "4", "--every", "2", "--rounds", "1",
                        "--savers", "none,background,copy-first,cached,dump"])
    out = capsys.readouterr().out
    rates = {line[2:22].strip(): float(line.split("steps/s")[0].split()[-1])
             for line in out.splitlines() if "steps/s" in line}
    assert set(rates) == {"none", "cpersist background", "bg copy first", "bg page cache",
                          "cpersist dump"}
    assert all(rate > 0 for rate in rates.values())
    with pytest.raises(SystemExit):  # torch.save saves a torch loop only
        training_loop.main(["loop", "--framework", "numpy", "--savers", "none,torch"])
    training_loop.main(["calls", "--mb", "2", "--rounds", "1", "--cached"])
    out = capsys.readouterr().out
    assert "background call / memcpy: median" in out and "background dump / plain dump" in out
    assert "bg page cache / plain dump" in out
    training_loop.main(["cpu", "--framework", "numpy", "--mb", "1", "--side", "128",
                        "--batch", "4", "--every", "1", "--rounds", "1"])
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]]
    assert rows == ["cpersist", "bg", "cpersist"]  # background, page cache, plain dump
    assert "cpu per round median" in out


def test_bf16_script_compares_ml_dtypes_arrays_with_torch_tensors(capsys):
    pytest.importorskip("torch")
    pytest.importorskip("ml_dtypes")
    bf16_ml_dtypes.main(["--mb", "8", "--levels", "3", "--rounds", "1"])
    out = capsys.readouterr().out
    # The same bits take the same path: the files are as large.
    assert "ml_dtypes / torch: ratio 1.0000, dump time" in out


def test_jax_checkpoints_script_prints_the_ratios_against_orbax(capsys):
    for module in ("jax", "flax", "optax", "orbax.checkpoint"):
        pytest.importorskip(module)
    jax_checkpoints.main(["--quick", "--rounds", "1"])
    out = capsys.readouterr().out
    for state in ("float32", "bfloat16"):
        assert f"JAX {state} state" in out
        row = [line for line in out.splitlines() if line.startswith(f"JAX {state}")
               and "compress=3 load time / orbax restore's" in line]
        assert len(row) == 1 and float(row[0].split()[-5]) > 0  # ratio, then "a ms / b ms"


def test_jax_checkpoint_ratios_are_keyed_at_full_size():
    from cpersist.benchmarks import jax_checkpoints

    from benchmarks.ratios import checkpoint_keys

    times = {name: 1.0 for name in ("cpersist raw", "cpersist compress=3", "orbax save",
                                    "orbax async save", "flax msgpack",
                                    "cpersist background=True", "cpersist.load",
                                    "cpersist.load compress=3", "cpersist.load mmap_mode='r'",
                                    "orbax restore")}
    state = {"name": "float32", "array_mb": 288.0, "arrays": 38, "dump_s": times,
             "load_s": times, "call_s": times, "file_bytes": {"cp3": 2, "orbax": 4}}
    full = checkpoint_keys(jax_checkpoints.ratios({"states": [state]}), {"jax": {"quick": False}})
    keys = [r["key"] for r in full if r["key"]]
    assert keys == ["checkpoints.jax_dump_vs_orbax", "checkpoints.jax_load_vs_orbax",
                    "checkpoints.jax_mmap_vs_orbax", "checkpoints.jax_size_vs_orbax"]
    assert {r["met"] for r in bounds.judge(full) if r["key"]} == {"no", "yes"}  # 1 > 0.67; sizes 0.5
    quick = checkpoint_keys(jax_checkpoints.ratios({"states": [state]}), {"jax": {"quick": True}})
    assert all(r["key"] == "" for r in quick)
