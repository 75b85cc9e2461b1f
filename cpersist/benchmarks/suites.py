"""Running what the benchmark's command line chose: each suite in turn, its
table printed and its files written to the output folder."""

import datetime as _dt
import os
import shlex
import sys
import time

from . import datasets as ds

__all__ = ["SUITES", "EXIT_INTERRUPTED", "run"]

#: The default run measures each of cpersist's codecs at this level only
#: (cpersist's default codec and the peers at every level of the grid).
DEFAULT_CODEC_LEVELS = (3,)
#: Without ``--repeat``, ``--full`` or ``--quick``, an operation is repeated
#: until its repeats have taken this many seconds: a fast one gets every
#: repeat, whose spread says which settings differ by more than noise, a
#: slow one (whose share of noise is smaller) fewer.
REPEAT_BUDGET_S = 2.0
#: The suites ``--suite`` chooses from (``all`` runs each).
SUITES = ("storage", "lazy", "checkpoints", "append")
#: ``--quick``: the lazy suite's sizes are multiplied by this.
QUICK_SCALE = 0.01
#: Exit code after Ctrl-C (128 + SIGINT, what shells report).
EXIT_INTERRUPTED = 130


#: Methods a run of the user's own files leaves out unless asked for by
#: --methods (or --full): the "max" preset tries several codecs and filters
#: per chunk, minutes per 100 MB with a peak of several times the data.
USER_FILE_SKIPPED = ("cpersist max",)
USER_FILE_SKIP_NOTE = ("note: cpersist max (compress=\"max\") is not measured on your files by "
                       "default: it tries several codecs per chunk (minutes per 100 MB, peak "
                       "memory several times the data); add --methods 'cpersist*' or --full to "
                       "measure it")


def run(parser, args, argv, size, levels, repeats):
    """Run the suites ``args`` choose at this grid, print their tables and
    write their files to ``args.out``; the exit code of :func:`.cli.main`."""
    from .checkpoints import is_checkpoint_file
    from .figures import plot_storage
    from .output import load_average, write_machine_json
    from .report import format_recommendations, format_table
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    refused_files = False
    t_start = time.perf_counter()
    written = []
    shown = []  # (title, table) of every table printed, for summary.md
    # Each file runs in the suite of its kind: checkpoints or the storage suite.
    data_files = [f for f in args.files if not is_checkpoint_file(f)]
    model_files = [f for f in args.files if is_checkpoint_file(f)]
    settings = []  # rows of cpersist's settings, from which each dataset's pick comes

    def show(title, table):
        print(f"\n{title}\n{table}")
        shown.append((title, table))

    given = list(sys.argv[1:] if argv is None else argv)
    extra = {"argv": given, "command": " ".join([parser.prog, shlex.join(given)]).strip(),
             "suite": args.suite, "mode": "quick" if args.quick else "full" if args.full else "default",
             "started_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
             "load_average_start": load_average()}

    if data_files or (args.suite in ("storage", "all") and (args.datasets or not args.files)):
        budget = None if args.full or args.quick or args.repeat is not None else REPEAT_BUDGET_S
        from .runner import COLUMN_DOCS, Interrupted, StorageConfig, run_storage
        csv_path = os.path.join(args.out, "results.csv")
        cfg = StorageConfig(
            out=args.out, datasets=args.datasets, methods=args.methods, levels=levels,
            size_bytes=size, repeats=repeats, warm_cache=args.warm_cache, files=data_files,
            trust_pickles=args.trust_pickles, quick=args.quick, threads=args.threads,
            timeout=args.timeout, keep_files=args.keep_files, progress=not args.no_progress,
            csv_path=csv_path, resume=args.resume, repeat_budget=budget,
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
            "levels": levels, "size_bytes": size, "repeats": repeats, "repeat_budget_s": budget,
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
        settings += rows
        show("Storage: every dataset, method and level (ratio: in-memory size / file size, "
             "MB/s of in-memory data, peaks in MB)", format_table(rows))
        refused = [r for r in rows if r.get("source") == "file" and r.get("status") == "n/a"
                   and str(r.get("reason", "")).startswith("dataset not loaded: PermissionError")]
        if refused:
            for name in dict.fromkeys(r["dataset"] for r in refused):
                why = next(r["reason"] for r in refused if r["dataset"] == name)
                print(f"error: {name} was not measured: {why.split(': ', 2)[-1]}", file=sys.stderr)
            refused_files = True
        failed += sum(r["status"] == "failed" for r in rows)
        if any(r["dataset"] == FOREST and r["status"] == "ok" for r in rows):
            written += _forest_ratios(args, size, repeats, extra, show)
            failed += extra["forest"]["failed"]

    if args.suite in ("storage", "all") and not (args.files or args.datasets or args.methods):
        written += _raw_suite(args, extra, show)
        failed += extra["raw"]["failed"]

    scale = args.scale if args.scale is not None else QUICK_SCALE if args.quick else 1.0
    if args.suite in ("lazy", "all"):
        written += _lazy_suite(args, scale, extra, show)
        failed += extra["lazy"]["failed"]

    if model_files or args.suite in ("checkpoints", "all"):
        written += _checkpoints_suite(args, model_files, extra, show, settings)
        failed += extra["checkpoints"]["failed"]

    if args.suite in ("append", "all"):
        written += _append_suite(args, extra, show)
        failed += extra["append"]["failed"]

    advice = format_recommendations(settings)
    if advice:
        print("\n" + advice)
    written.append(_write_summary(os.path.join(args.out, "summary.md"), extra, advice, shown))
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


#: The storage suite's dataset of many small arrays, also compared with
#: pickle as ratios measured in one process (:mod:`.forest`).
FOREST = "random_forest"


def _forest_ratios(args, size, repeats, extra, show):
    """The forest's raw dump and loads against pickle 5's: writes forest.csv."""
    import tempfile

    from . import forest

    n = max(repeats or 0, 3 if args.quick else 15)

    def measure():
        model = next(d for d in ds.package_datasets() if d.name == FOREST).make(size, args.quick)
        with tempfile.TemporaryDirectory(dir=args.out) as work:
            return forest.ratios(model, work, repeats=n), None

    paths, failed = _ratio_suite(args, "forest", FOREST, forest.TITLE, measure, show)
    extra["forest"] = {"repeats": n, "failed": failed}
    return paths


def _lazy_suite(args, scale, extra, show):
    """``--suite lazy``: writes lazy.json and lazy.txt."""
    from . import lazy
    repeats = args.repeat if args.repeat is not None else 1 if args.quick else 5
    title = "Lazy access: slices of cpersist.open arrays beside a full load, zarr and blosc2"
    failed = 0
    try:
        text = lazy.format_results(lazy.run(args.out, scale=scale, repeats=repeats))
    except Exception as exc:  # reported; the other suites go on
        text, failed = f"failed: {type(exc).__name__}: {exc}"[:300], 1
    show(title, text)
    extra["lazy"] = {"scale": scale, "repeats": repeats, "failed": failed,
                     "units": "medians over the repeats, warm page cache; MB = 2**20 bytes"}
    paths = [_write_text(os.path.join(args.out, "lazy.txt"), f"{title}\n{text}")]
    if os.path.exists(os.path.join(args.out, "lazy.json")):
        paths.append(os.path.join(args.out, "lazy.json"))
    return paths


def _ratio_suite(args, suite, target, title, measure, show, gap="\n"):
    """Run ``measure`` (its ratio rows, and its text or None) and write
    ``<name>.csv`` and, with a text, ``<name>.txt`` (listing ``<name>.json``
    where the suite wrote one). A suite that raises is one failed row, and
    the other suites go on. Returns the paths and the count of failed rows."""
    from .output import write_csv
    from .ratios import RATIO_COLUMNS, failed_row, format_ratios

    name = {"append": "appends"}.get(suite, suite)
    try:
        rows, text = measure()
    except Exception as exc:  # reported as a failed row; the other suites go on
        rows, text = [failed_row(suite, target, f"{type(exc).__name__}: {exc}"[:300])], ""
    table = format_ratios(rows)
    show(title, table if text is None else table + gap + text)
    paths = [write_csv(os.path.join(args.out, f"{name}.csv"), rows, RATIO_COLUMNS)]
    if text is not None:
        paths.append(_write_text(os.path.join(args.out, f"{name}.txt"),
                                 f"{title}\n{table}\n\n{text}"))
        if os.path.exists(os.path.join(args.out, f"{name}.json")):
            paths.append(os.path.join(args.out, f"{name}.json"))
    return paths, sum(r["status"] == "failed" for r in rows)


def _raw_suite(args, extra, show):
    """The raw-file comparisons of the storage suite (built-in data only):
    raw.csv (the ratios), raw.json and raw.txt."""
    import json

    from . import raw

    rounds = args.repeat if args.repeat is not None and args.repeat > 1 else None

    def measure():
        results = raw.run(quick=args.quick, full=args.full, rounds=rounds)
        with open(os.path.join(args.out, "raw.json"), "w") as file:
            json.dump(results, file, indent=1)
        return raw.ratios(results), raw.format_results(results)

    paths, failed = _ratio_suite(args, "raw", "raw files", raw.TITLE, measure, show, gap="\n\n")
    extra["raw"] = {"rounds": rounds or (raw.QUICK_ROUNDS if args.quick else raw.ROUNDS),
                    "sizes": list(raw.FULL_SIZES if args.full else raw.SIZES), "failed": failed,
                    "units": "per-call medians over the rounds (every contender once per "
                             "round, in this process), warm page cache; MB = 1e6 bytes"}
    return paths


def _checkpoints_suite(args, files, extra, show, settings):
    """``--suite checkpoints``, or the user's checkpoint files: checkpoints.json,
    .csv (the ratios) and .txt; adds the rows of cpersist's settings on each
    checkpoint to ``settings``."""
    from . import checkpoints

    rounds = (args.repeat if args.repeat is not None
              else 1 if args.quick else checkpoints.ROUNDS)

    def measure():
        results = checkpoints.run(args.out, quick=args.quick, rounds=rounds, files=files)
        settings.extend(checkpoints.setting_rows(results))
        return checkpoints.ratios(results), checkpoints.format_results(results)

    paths, failed = _ratio_suite(args, "checkpoints", "checkpoints", checkpoints.TITLE,
                                 measure, show)
    extra["checkpoints"] = {
        "rounds": rounds, "files": files, "failed": failed,
        "units": "ratios of medians over the rounds (every contender once per round, in this "
                 "process), warm page cache"}
    return paths


def _append_suite(args, extra, show):
    """``--suite append``: appends.json, .csv (the ratios) and .txt."""
    from . import appends

    def measure():
        results = appends.run(args.out, quick=args.quick)
        return appends.ratios(results), appends.format_results(results)

    paths, failed = _ratio_suite(args, "append", "append", appends.TITLE, measure, show)
    extra["append"] = {
        "quick": args.quick, "failed": failed,
        "units": "one run of the appends, each timed; reads: medians of "
                 f"{appends.READ_REPEATS}, warm page cache, in this process; MB = 1e6 bytes"}
    return paths


def _write_text(path, text):
    with open(path, "w", encoding="utf-8") as file:
        file.write(text.rstrip() + "\n")
    return path


def _write_summary(path, extra, advice, shown):
    """summary.md: what to pick for each dataset, then every table printed."""
    parts = [f"# cpersist benchmark\n\n`{extra['command']}`, started {extra['started_utc']} on "
             f"{os.cpu_count()} logical CPUs. The CSV files beside this one hold every "
             f"figure; machine.json says what each column means."]
    for title, table in ([("What to pick", advice)] if advice else []) + shown:
        parts.append(f"## {title}\n\n```text\n{table}\n```")
    return _write_text(path, "\n\n".join(parts))


def _say_interrupted(exc, csv_path, given):
    again = [a for a in given if a != "--resume"] + ["--resume"]
    print(f"\ninterrupted: {len(exc.rows)} row(s) kept in {csv_path} ({exc.measured} measured "
          f"in this run).\nTo measure the rest: python -m cpersist.benchmarks {shlex.join(again)}\n"
          f"To start again from nothing: the same command without --resume.", file=sys.stderr)


def _can_plot():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed: no figures (pip install matplotlib)", file=sys.stderr)
        return False
    return True
