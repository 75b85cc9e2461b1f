"""Command line of the bundled benchmark: ``python -m cpersist.benchmarks``."""

import argparse
import datetime as _dt
import os
import shlex
import sys
import time

from . import datacache, userfiles
from . import datasets as ds
from . import methods as mt

__all__ = ["build_parser", "main"]

QUICK_SIZE = "tiny"
QUICK_LEVELS = (0, 3)
QUICK_MAX_ENTRIES = 16000
#: The default run: minutes on two cores, every method family on every
#: built-in dataset, levels 0, 3 and 6, one repeat.
DEFAULT_SIZE = "1MB"
#: The default run measures each of cpersist's codecs at this level only
#: (cpersist's default codec and the peers at every level of the grid).
DEFAULT_CODEC_LEVELS = (3,)
#: Users' own files can be large: the default grid on them leaves out the
#: slowest levels (some peers take minutes per file at level 9).
FILE_LEVELS = (0, 3)
#: ``--full``: every dataset at 100 MB, every level, three repeats.
FULL_SIZE = "medium"
FULL_REPEATS = 3
#: The suites ``--suite`` chooses from (``all`` runs each).
SUITES = ("storage", "serializers", "memory", "lazy", "remote", "checkpoints", "coldstart")
#: ``--quick``: the lazy and remote suites' sizes are multiplied by this.
QUICK_SCALE = 0.01
#: Exit code after Ctrl-C (128 + SIGINT, what shells report).
EXIT_INTERRUPTED = 130


def _csv_list(text):
    return [t.strip() for t in text.split(",") if t.strip()]


def _levels(text):
    try:
        levels = sorted({int(t) for t in _csv_list(text)})
    except ValueError:
        raise argparse.ArgumentTypeError(f"levels must be integers 0-9, got {text!r}")
    if not levels or any(not 0 <= lv <= 9 for lv in levels):
        raise argparse.ArgumentTypeError(f"levels must be integers 0-9, got {text!r}")
    return levels


def build_parser(prog="python -m cpersist.benchmarks"):
    """The argument parser (reusable by a ``cpersist bench`` CLI verb)."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Benchmark cpersist against np.save, np.savez_compressed, pickle, joblib, "
                    "PyTables (tables), NIfTI (nibabel), blosc2, zarr, h5py and safetensors "
                    "(--list names every method): disk size, write/read time and peak memory "
                    "per dataset, method and compression level. Given your own files, it ends "
                    "with which setting to use for each. Also the picklebench serializer "
                    "comparison (--suite serializers).",
        epilog="Each write and each read runs in a fresh process; reads are cold-cache "
               "(fsync + POSIX_FADV_DONTNEED) unless --warm-cache. See the CSV 'cache' and "
               "'notes' columns and machine.json for what every number means.",
    )
    p.add_argument("files", nargs="*", metavar="PATH",
                   help="your own files to benchmark (.npy .npz .nii .nii.gz .h5 .hdf5 .cp, "
                        "and pickle/joblib with --trust-pickles; .pt .pth .safetensors run the "
                        "checkpoints suite); when given, only these run unless --datasets is "
                        "also given")
    p.add_argument("--suite", choices=SUITES + ("all",), default="storage",
                   help="storage (default): datasets x methods x levels; serializers: picklebench; "
                        "memory: joblib.Memory's default store vs backend='cpersist'; lazy: "
                        "slices of cpersist.open arrays and dask beside zarr and blosc2; remote: "
                        "a full load from a loopback S3 server beside zarr and a download; "
                        "checkpoints: torch checkpoints (generated, or your .pt/.safetensors "
                        "files) beside torch.save, safetensors and joblib; coldstart: only the "
                        "start-up times and the cold-start and small-object targets, which "
                        "every other suite runs too (see --import-runs); all: every suite")
    p.add_argument("--full", action="store_true",
                   help="the complete grid: every dataset at 100 MB, levels 0,1,3,6,9, three "
                        "repeats (hours); default: built-in data at 1 MB, levels 0,3,6 (0,3 on "
                        "your files; each cpersist:<codec> at 3), one repeat (minutes)")
    p.add_argument("--resume", action="store_true",
                   help="keep the rows already in OUT/results.csv (e.g. of an interrupted run) "
                        "and measure only the missing ones")
    p.add_argument("--datasets", type=_csv_list, default=None, metavar="NAMES",
                   help="comma-separated dataset names or patterns (e.g. 'atlas_*,nifti_*', "
                        "'builtin', 'package'); default all")
    p.add_argument("--methods", type=_csv_list, default=None, metavar="NAMES",
                   help="comma-separated method names, patterns or families (e.g. 'cpersist*,np.save,tables')")
    p.add_argument("--levels", type=_levels, default=None, metavar="L,L,...",
                   help="generic compression level grid (default 0,3,6, on your files 0,3; "
                        "--full: 0,1,3,6,9; --quick: 0,3)")
    p.add_argument("--size", default=None,
                   help="size of each generated dataset: tiny, small, medium, large, or e.g. "
                        "250MB / 1GB (default 1MB; --full: medium, 100 MB; --quick: tiny)")
    p.add_argument("--repeat", type=int, default=None, metavar="N",
                   help="timed repeats per operation, median reported (default 1; --full: 3)")
    p.add_argument("--warm-cache", action="store_true",
                   help="read with the file in the page cache (default: evicted, cold)")
    p.add_argument("--threads", type=_thread_counts, default=None, metavar="N[,N...]",
                   help="n_threads passed to cpersist.dump and cpersist.load (default: all "
                        "CPUs); several counts (e.g. 1,2) measure every cpersist method at "
                        "each, named like cpersist@1t, side by side in one run")
    p.add_argument("--out", default="cpersist-bench", metavar="DIR",
                   help="output directory (CSV, JSON, PNG); default ./cpersist-bench")
    p.add_argument("--quick", action="store_true",
                   help="all methods on tiny data (built-in datasets plus one of each kind of "
                        "real data), levels 0 and 3, one repeat: a smoke run")
    p.add_argument("--trust-pickles", action="store_true",
                   help="allow loading pickle/joblib user files (loading a pickle runs code)")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                   help="seconds before one write/read is killed and reported failed")
    p.add_argument("--keep-files", action="store_true", help="keep written files and the dataset cache")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--max-entries", type=int, default=None,
                   help="picklebench: largest dict (default 4,096,000; --quick: 16,000)")
    p.add_argument("--mem-budget", type=float, default=4096.0, metavar="MB",
                   help="picklebench: stop growing before this peak RSS (default 4096 MB)")
    p.add_argument("--import-runs", type=int, default=None, metavar="N",
                   help="fresh interpreters timing 'import cpersist', 'import joblib', each "
                        "with a first load of a small model, and 'cpersist --help'; and the "
                        "cold-start and small-object targets, coldstart.csv (median "
                        "reported; default 5, --full: 21, a run of your files only: 0; 0 skips)")
    p.add_argument("--scale", type=float, default=None, metavar="X",
                   help="lazy and remote suites: multiply their array sizes (default 1, the "
                        "sizes their targets name: 200 MB slices, 1 GB for dask, 210 MB from "
                        "S3; --quick: 0.01)")
    p.add_argument("--list", action="store_true", help="list datasets and methods, then exit")
    return p


def _thread_counts(text):
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected positive ints separated by commas, got {text!r}")
    return counts[0] if len(counts) == 1 else counts


def _list(threads):
    print("datasets:")
    for d in ds.all_datasets():
        print(f"  {d.name:<22} {d.source:<8} {d.description}")
    print("methods:")
    for m in mt.all_methods(threads):
        why = m.available()
        lv = "fixed " + str(m.fixed_level) if m.fixed_level is not None else f"levels {list(m.supported)}"
        print(f"  {m.name:<22} {m.codec:<14} {lv:<26} {'' if not why else '(unavailable: ' + why + ')'}")


def main(argv=None, prog=None):
    """Run the benchmark from command-line arguments.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default ``sys.argv[1:]``).
    prog : str, optional
        Program name shown in ``--help`` and errors (e.g. ``"cpersist bench"``).

    Returns
    -------
    int
        0 when every measured row is correct, 1 when some method failed
        (wrong data, error, timeout), 2 on bad arguments or unsupported
        files, 130 when interrupted (Ctrl-C; the rows measured are kept).
    """
    parser = build_parser(prog) if prog else build_parser()
    args = parser.parse_args(argv)
    if args.list:
        _list(args.threads)
        return 0
    if args.quick and args.full:
        parser.error("--quick and --full are opposites: choose one")
    from .checkpoints import is_checkpoint_file

    if args.files and args.suite == "storage" and all(map(is_checkpoint_file, args.files)):
        args.suite = "checkpoints"  # torch and safetensors files: the checkpoints suite
    for f in args.files:
        if not os.path.exists(f):
            parser.error(f"no such file: {f}")
        if args.suite == "checkpoints" and is_checkpoint_file(f):
            continue
        why = userfiles.unsupported_file(f) or (
            None if args.trust_pickles else userfiles.untrusted_pickle(f))
        if why:
            parser.error(why)
    try:
        return _run(parser, args, argv)
    except KeyboardInterrupt:
        # Between measurements (plots, tables): nothing is lost, the CSV is complete.
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _grid(args):
    """Size, level grid and repeats of this run, from the mode and the options."""
    if args.quick:
        size, levels, repeats = QUICK_SIZE, QUICK_LEVELS, 1
    elif args.full:
        size, levels, repeats = FULL_SIZE, mt.FULL_LEVELS, FULL_REPEATS
    else:
        only_files = args.files and not args.datasets
        size, levels, repeats = DEFAULT_SIZE, FILE_LEVELS if only_files else mt.DEFAULT_LEVELS, 1
    return (ds.parse_size(args.size or size), list(args.levels or levels),
            args.repeat if args.repeat is not None else repeats)


#: Methods a run of the user's own files leaves out unless asked for by
#: --methods (or --full): the "max" preset tries several codecs and filters
#: per chunk, minutes per 100 MB with a peak of several times the data.
USER_FILE_SKIPPED = ("cpersist max",)
USER_FILE_SKIP_NOTE = ("note: cpersist max (compress=\"max\") is not measured on your files by "
                       "default: it tries several codecs per chunk (minutes per 100 MB, peak "
                       "memory several times the data); add --methods 'cpersist*' or --full to "
                       "measure it")


def _run(parser, args, argv):
    from .report import (format_max_vs_peers, format_table, load_average, max_vs_peers, plot_serializers,
                         plot_storage, write_csv, write_machine_json)

    try:
        size, levels, repeats = _grid(args)
    except ValueError as e:
        parser.error(str(e))
    if repeats < 1:
        parser.error("--repeat must be >= 1")
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    refused_files = False
    t_start = time.perf_counter()
    written = []
    given = list(sys.argv[1:] if argv is None else argv)
    extra = {"argv": given, "command": " ".join([parser.prog, shlex.join(given)]).strip(),
             "suite": args.suite, "mode": "quick" if args.quick else "full" if args.full else "default",
             "started_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
             "load_average_start": load_average()}

    if args.suite in ("storage", "all"):
        from .runner import COLUMN_DOCS, Interrupted, StorageConfig, run_storage

        csv_path = os.path.join(args.out, "results.csv")
        cfg = StorageConfig(
            out=args.out, datasets=args.datasets, methods=args.methods, levels=levels,
            size_bytes=size, repeats=repeats, warm_cache=args.warm_cache, files=list(args.files),
            trust_pickles=args.trust_pickles, quick=args.quick, threads=args.threads,
            timeout=args.timeout, keep_files=args.keep_files, progress=not args.no_progress,
            csv_path=csv_path, resume=args.resume,
            default_datasets=None if args.full else ds.DEFAULT_DATASETS,
            codec_levels=None if (args.full or args.quick or args.levels) else DEFAULT_CODEC_LEVELS,
        )
        if _only_files(args) and not args.full and not args.methods:
            cfg.exclude_methods = list(USER_FILE_SKIPPED)
            print(USER_FILE_SKIP_NOTE, file=sys.stderr)
        try:
            rows = run_storage(cfg)
        except ValueError as e:  # unknown dataset/method name, or a CSV --resume cannot extend
            parser.error(str(e))
        except Interrupted as e:
            _say_interrupted(e, csv_path, given)
            return EXIT_INTERRUPTED
        written.append(csv_path)
        extra["storage"] = {
            "levels": levels, "size_bytes": size, "repeats": repeats,
            "cache": "warm" if args.warm_cache else "cold (fsync + POSIX_FADV_DONTNEED before each read)",
            "threads": args.threads, "quick": args.quick,
            "units": "MB = 1e6 bytes; times in seconds (median of repeats); peaks = RSS above the "
                     "level before the call, first repeat, fresh process",
            "ratio": "size_bytes / disk_bytes (higher is smaller on disk)",
            "process_model": "one fresh forkserver process per (dataset, method, level, write|read); "
                             "all repeats of that operation run in it",
            "columns": COLUMN_DOCS,
        }
        if not args.no_plots and _can_plot():
            written += plot_storage(rows, args.out)
        print(format_table(rows))
        if args.files:
            from .report import format_recommendations

            advice = format_recommendations(rows, source="file")
            if advice:
                print("\n" + advice)
                written.append(_write_text(os.path.join(args.out, "recommendations.txt"), advice))
        refused = [r for r in rows if r.get("source") == "file" and r.get("status") == "n/a"
                   and str(r.get("reason", "")).startswith("dataset not loaded: PermissionError")]
        if refused:
            for name in dict.fromkeys(r["dataset"] for r in refused):
                why = next(r["reason"] for r in refused if r["dataset"] == name)
                print(f"error: {name} was not measured: {why.split(': ', 2)[-1]}", file=sys.stderr)
            refused_files = True
        extra["max_vs_peers"] = max_vs_peers(rows)
        if extra["max_vs_peers"]:
            print("\n" + format_max_vs_peers(extra["max_vs_peers"]))
        failed += sum(r["status"] == "failed" for r in rows)

    if args.suite in ("serializers", "all"):
        from .serializers import SER_COLUMNS, SMALL_COLUMNS, run_serializers, run_small_objects

        max_entries = args.max_entries or (QUICK_MAX_ENTRIES if args.quick else 4_096_000)
        srows = run_serializers(args.out, max_entries=max_entries, mem_budget_mb=args.mem_budget,
                                timeout=args.timeout, progress=not args.no_progress)
        small = run_small_objects(200 if args.quick else 5000)
        written.append(write_csv(os.path.join(args.out, "serializers.csv"), srows, SER_COLUMNS))
        written.append(write_csv(os.path.join(args.out, "small_objects.csv"), small, SMALL_COLUMNS))
        if not args.no_plots and _can_plot():
            written.append(plot_serializers(srows, os.path.join(args.out, "serializers.png")))
        extra["serializers"] = {"max_entries": max_entries, "mem_budget_MB": args.mem_budget}
        _print_serializers(srows, small)
        failed += sum(r["status"] == "failed" for r in srows + small)
        try:
            import shutil

            shutil.rmtree(os.path.join(args.out, "_work"), ignore_errors=True)
        except OSError:
            pass

    if args.suite in ("memory", "all"):
        from .memory import MEMORY_COLUMNS, format_memory, run_memory

        data = _memory_data(args.out, size, args.quick)
        mrows = run_memory(args.out, data, repeats=max(repeats, 1 if args.quick else 3),
                           timeout=args.timeout, progress=not args.no_progress)
        written.append(write_csv(os.path.join(args.out, "memory.csv"), mrows, MEMORY_COLUMNS))
        extra["memory"] = {"objects": list(data), "units": "seconds, median of the repeats; file_bytes "
                           "= the cached output file", "repeats": max(repeats, 1 if args.quick else 3)}
        print("\njoblib.Memory: cache write and hit\n" + format_memory(mrows))
        failed += sum(r["status"] == "failed" for r in mrows)
        if not args.keep_files:
            import shutil

            shutil.rmtree(os.path.join(args.out, "_work"), ignore_errors=True)

    scale = args.scale if args.scale is not None else QUICK_SCALE if args.quick else 1.0
    if args.suite in ("lazy", "all"):
        written += _lazy_suite(args, scale, extra)
        failed += extra["lazy"]["failed"]
    if args.suite in ("remote", "all"):
        written += _remote_suite(args, scale, extra)
        failed += extra["remote"]["failed"]

    if args.suite in ("checkpoints", "all"):
        written += _checkpoints_suite(args, extra)
        failed += extra["checkpoints"]["failed"]

    # Start-up times say nothing about the user's files: not timed on a run of them.
    import_runs = args.import_runs if args.import_runs is not None else (
        0 if _only_files(args) else 21 if args.full else 5)
    if import_runs > 0:
        from .importtime import IMPORT_COLUMNS, format_import_times, run_import_times

        irows = run_import_times(import_runs)
        written.append(write_csv(os.path.join(args.out, "import_time.csv"), irows, IMPORT_COLUMNS))
        extra["import_time"] = {"runs": import_runs,
                                "units": "milliseconds; imports timed inside a fresh interpreter "
                                         "after 'import numpy', commands as wall time"}
        print("\n" + format_import_times(irows))
        from .bounds import TARGET_COLUMNS, format_targets
        from .coldstart import run_cold_start

        crows = run_cold_start(min(import_runs, 2) if args.quick else import_runs,
                               200 if args.quick else 2000)
        written.append(write_csv(os.path.join(args.out, "coldstart.csv"), crows, TARGET_COLUMNS))
        print("\nCold start and small objects: each ratio beside its bound\n"
              + format_targets(crows))
        failed += sum(r["status"] == "failed" for r in crows)

    extra["elapsed_s"] = round(time.perf_counter() - t_start, 2)
    written.append(write_machine_json(os.path.join(args.out, "machine.json"), extra))
    print(f"\n{len(written)} files written to {os.path.abspath(args.out)} in {extra['elapsed_s']} s")
    if failed:
        print(f"{failed} measurement(s) FAILED; see the 'reason' column", file=sys.stderr)
    if refused_files:
        return 2
    return 1 if failed else 0


def _only_files(args):
    """Whether this run measures the user's files alone (no built-in data)."""
    return bool(args.files) and not args.datasets


def _lazy_suite(args, scale, extra):
    """``--suite lazy``: writes lazy.json, lazy.csv (the targets) and lazy.txt."""
    from . import lazy
    from .bounds import lazy_targets

    repeats = args.repeat if args.repeat is not None else 1 if args.quick else 5

    def run():
        results = lazy.run(args.out, scale=scale, repeats=repeats)
        return lazy_targets(results), lazy.format_results(results)

    return _targets_suite(args, "lazy", "Lazy access", "lazy access", run, extra, {
        "scale": scale, "repeats": repeats,
        "units": "ratios of medians over the repeats, warm page cache; MB = 2**20 bytes in "
                 "lazy.json"})


def _checkpoints_suite(args, extra):
    """``--suite checkpoints``: writes checkpoints.json, .csv (the targets) and .txt."""
    from . import checkpoints

    rounds = args.repeat if args.repeat is not None else 1 if args.quick else 5
    files = [f for f in args.files if checkpoints.is_checkpoint_file(f)]

    def run():
        results = checkpoints.run(args.out, quick=args.quick, rounds=rounds, files=files)
        return checkpoints.targets(results), checkpoints.format_results(results)

    return _targets_suite(args, "checkpoints", "Model checkpoints", "checkpoints", run, extra, {
        "rounds": rounds, "files": files,
        "units": "ratios of medians over the rounds (every contender once per round, in this "
                 "process), warm page cache"}, show_text=True)


def _targets_suite(args, suite, title, what, run, extra, info, show_text=False):
    """Run a suite whose results are target rows: ``run()`` gives ``(rows,
    text)``. Writes SUITE.csv and SUITE.txt (and lists SUITE.json where the
    suite wrote one); a suite that raises is one failed row, and the other
    suites go on."""
    from .bounds import TARGET_COLUMNS, format_targets
    from .report import write_csv

    try:
        rows, text = run()
    except Exception as exc:  # reported as a failed row; the other suites go on
        rows = [{"suite": suite, "target": what, "status": "failed",
                 "reason": f"{type(exc).__name__}: {exc}"[:300]}]
        text = ""
    table = f"{title}: targets as ratios beside their bounds\n" + format_targets(rows)
    print("\n" + table + ("\n" + text if show_text else ""))
    paths = [write_csv(os.path.join(args.out, f"{suite}.csv"), rows, TARGET_COLUMNS),
             _write_text(os.path.join(args.out, f"{suite}.txt"), table + "\n\n" + text)]
    if os.path.exists(os.path.join(args.out, f"{suite}.json")):
        paths.append(os.path.join(args.out, f"{suite}.json"))
    extra[suite] = {**info, "failed": sum(r["status"] == "failed" for r in rows)}
    return paths


def _remote_suite(args, scale, extra):
    """``--suite remote``: writes remote.csv, remote_targets.csv and remote.txt."""
    from . import remote
    from .lazy import optional
    from .bounds import TARGET_COLUMNS, format_targets, remote_targets
    from .report import write_csv

    runs = args.repeat if args.repeat is not None else 1 if args.quick else 3
    mb = max(1.0, 210 * scale)
    missing = [name for name in ("s3fs", "moto") if optional(name) is None]
    if missing:
        rows = [{"method": "cpersist.load", "status": "not installed",
                 "reason": f"needs {' and '.join(missing)} (pip install "
                           f"'cpersist[remote]' 'moto[server]')"}]
    else:
        try:
            rows = remote.run(mb=mb, runs=runs, progress=lambda text: None)
        except Exception as exc:  # reported as a failed row; the other suites go on
            rows = [{"method": "cpersist.load", "status": "failed",
                     "reason": f"{type(exc).__name__}: {exc}"[:300]}]
    targets = remote_targets(rows)
    if missing:
        for row in targets:
            row.update(status="not installed", reason=rows[0]["reason"])
    table = ("Reading from S3 (moto on 127.0.0.1)\n" + remote.format_results(rows)
             + "\n\nTargets as ratios beside their bounds\n" + format_targets(targets))
    print("\n" + table)
    extra["remote"] = {"mb": mb, "runs": runs,
                       "failed": sum(r.get("status") == "failed" for r in rows + targets),
                       "units": "seconds, median of the runs; MB = 1e6 bytes"}
    return [write_csv(os.path.join(args.out, "remote.csv"), rows, remote.REMOTE_COLUMNS),
            write_csv(os.path.join(args.out, "remote_targets.csv"), targets, TARGET_COLUMNS),
            _write_text(os.path.join(args.out, "remote.txt"), table)]


def _write_text(path, text):
    with open(path, "w", encoding="utf-8") as file:
        file.write(text.rstrip() + "\n")
    return path


def _say_interrupted(exc, csv_path, given):
    import shlex

    again = [a for a in given if a != "--resume"] + ["--resume"]
    print(f"\ninterrupted: {len(exc.rows)} row(s) kept in {csv_path} ({exc.measured} measured "
          f"in this run).\nTo measure the rest: python -m cpersist.benchmarks {shlex.join(again)}\n"
          f"To start again from nothing: the same command without --resume.", file=sys.stderr)


def _memory_data(out, size, quick):
    """The joblib.Memory suite's objects, materialised once (as for the storage suite)."""
    from .memory import MEMORY_OBJECTS

    cache_dir = os.path.join(out, "_work", "memory_data")
    os.makedirs(cache_dir, exist_ok=True)
    data = {}
    for d in ds.select_datasets(list(MEMORY_OBJECTS), ds.all_datasets()):
        data[d.name] = datacache.save_cached(d, d.make(size, quick), os.path.join(cache_dir, d.name + ".pkl"))
    return data


def _can_plot():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed: no figures (pip install 'cpersist[bench]')", file=sys.stderr)
        return False
    return True


def _print_serializers(srows, small):
    print(f"\n{'serializer':<14} {'entries':>9} {'store_s':>9} {'load_s':>9} {'file_MB':>9} "
          f"{'st MB/s':>8} {'ld MB/s':>8} {'rssLoad':>8} {'rss/MB':>7}")
    for r in srows:
        if r["status"] != "ok":
            print(f"{r['serializer']:<14} {r['entries']:>9} {r['status']}: {r['reason']}")
            continue
        print(f"{r['serializer']:<14} {r['entries']:>9} {r['store_s']:>9.4f} {r['load_s']:>9.4f} "
              f"{r['file_MB']:>9.3f} {r['store_MBps']:>8} {r['load_MBps']:>8} {r['rss_load_MB']:>8.1f} "
              f"{r['rss_per_file_MB']:>7}")
    print(f"\n{'serializer':<14} {'object':<8} {'dumps_us':>9} {'loads_us':>9} {'bytes':>7}")
    for r in small:
        if r["status"] != "ok":
            print(f"{r['serializer']:<14} {r['object']:<8} {r['status']}: {r['reason']}")
            continue
        print(f"{r['serializer']:<14} {r['object']:<8} {r['dumps_us']:>9} {r['loads_us']:>9} {r['bytes']:>7}")
