"""Running what the benchmark's command line chose: each suite in turn, its
table printed and its files written to the output folder."""

import datetime as _dt
import os
import shlex
import sys
import time

from . import datasets as ds

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


class _Run:
    """What a run has made so far: the files written, the tables printed
    (for summary.md), the count of failed measurements, the rows of
    cpersist's settings (from which each dataset's pick comes) and the
    ``extra`` of machine.json."""

    def __init__(self, args, extra):
        self.args, self.extra = args, extra
        self.written, self.shown, self.settings = [], [], []
        self.failed, self.refused_files = 0, False

    def path(self, name):
        return os.path.join(self.args.out, name)

    def show(self, title, table):
        print(f"\n{title}\n{table}")
        self.shown.append((title, table))

    def write_text(self, name, text, beside=None):
        """Write ``name``, then list the file ``beside`` it where a suite wrote one."""
        with open(self.path(name), "w", encoding="utf-8") as file:
            file.write(text.rstrip() + "\n")
        self.written += [self.path(n) for n in (name, beside) if n and os.path.exists(self.path(n))]

    def suite_done(self, suite, about, failed):
        """``about`` (and the count of failed rows) goes to machine.json."""
        self.extra[suite] = dict(about, failed=failed)
        self.failed += failed

    def ratio_suite(self, suite, target, title, measure, about, gap="\n"):
        """Run ``measure`` (its ratio rows, and its text or None) and write
        ``<name>.csv`` and, with a text, ``<name>.txt`` (and ``<name>.json``
        where the suite wrote one). A suite that raises is one failed row, and
        the other suites go on."""
        from .output import write_csv
        from .turns import RATIO_COLUMNS, failed_row, format_ratios

        name = {"append": "appends"}.get(suite, suite)
        try:
            rows, text = measure()
        except Exception as exc:  # reported as a failed row; the other suites go on
            rows, text = [failed_row(suite, target, f"{type(exc).__name__}: {exc}"[:300])], ""
        table = format_ratios(rows)
        self.show(title, table if text is None else table + gap + text)
        self.written.append(write_csv(self.path(f"{name}.csv"), rows, RATIO_COLUMNS))
        if text is not None:
            self.write_text(f"{name}.txt", f"{title}\n{table}\n\n{text}", f"{name}.json")
        self.suite_done(suite, about, sum(r["status"] == "failed" for r in rows))


def run(parser, args, argv, size, levels, repeats):
    """Run the suites ``args`` choose at this grid, print their tables and
    write their files to ``args.out``; the exit code of :func:`.cli.main`."""
    from .checkpoints import is_checkpoint_file
    from .output import load_average, write_machine_json
    from .report import format_recommendations
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()
    given = list(sys.argv[1:] if argv is None else argv)
    run = _Run(args, {
        "argv": given, "command": " ".join([parser.prog, shlex.join(given)]).strip(),
        "suite": args.suite, "mode": "quick" if args.quick else "full" if args.full else "default",
        "started_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "load_average_start": load_average()})
    # Each file runs in the suite of its kind: checkpoints or the storage suite.
    data_files = [f for f in args.files if not is_checkpoint_file(f)]
    model_files = [f for f in args.files if is_checkpoint_file(f)]
    if data_files or (args.suite in ("storage", "all") and (args.datasets or not args.files)):
        if _storage_suite(run, parser, given, data_files, size, levels, repeats):
            return EXIT_INTERRUPTED
    if args.suite in ("storage", "all") and not (args.files or args.datasets or args.methods):
        _raw_suite(run)
    if args.suite in ("lazy", "all"):
        _lazy_suite(run)
    if model_files or args.suite in ("checkpoints", "all"):
        _checkpoints_suite(run, model_files)
    if args.suite in ("append", "all"):
        _append_suite(run)

    advice = format_recommendations(run.settings)
    if advice:
        print("\n" + advice)
    _write_summary(run, advice)
    run.extra["elapsed_s"] = round(time.perf_counter() - t_start, 2)
    run.written.append(write_machine_json(run.path("machine.json"), run.extra))
    print(f"\n{len(run.written)} files written to {os.path.abspath(args.out)} in "
          f"{run.extra['elapsed_s']} s")
    if run.failed:
        print(f"{run.failed} measurement(s) FAILED; see the 'reason' column", file=sys.stderr)
    return 2 if run.refused_files else 1 if run.failed else 0


def _storage_suite(run, parser, given, files, size, levels, repeats):
    """The storage suite on the built-in datasets and the user's data
    ``files``: results.csv, the figures and the table, then the forest's
    ratios; True when it was interrupted."""
    from .runner import COLUMN_DOCS, Interrupted, StorageConfig, run_storage
    from .report import format_table
    args = run.args
    budget = None if args.full or args.quick or args.repeat is not None else REPEAT_BUDGET_S
    csv_path = run.path("results.csv")
    cfg = StorageConfig(
        out=args.out, datasets=args.datasets, methods=args.methods, levels=levels,
        size_bytes=size, repeats=repeats, warm_cache=args.warm_cache, files=files,
        trust_pickles=args.trust_pickles, quick=args.quick, threads=args.threads,
        timeout=args.timeout, keep_files=args.keep_files, progress=not args.no_progress,
        csv_path=csv_path, resume=args.resume, repeat_budget=budget,
        default_datasets=None if args.full else ds.DEFAULT_DATASETS,
        codec_levels=None if (args.full or args.quick or args.levels) else DEFAULT_CODEC_LEVELS)
    if args.files and not args.datasets and not args.full and not args.methods:
        cfg.exclude_methods = list(USER_FILE_SKIPPED)
        print(USER_FILE_SKIP_NOTE, file=sys.stderr)
    try:
        rows = run_storage(cfg)
    except ValueError as e:  # unknown dataset/method name, or a CSV --resume cannot extend
        parser.error(str(e))
    except Interrupted as e:
        again = [a for a in given if a != "--resume"] + ["--resume"]
        print(f"\ninterrupted: {len(e.rows)} row(s) kept in {csv_path} ({e.measured} measured "
              f"in this run).\nTo measure the rest: python -m cpersist.benchmarks "
              f"{shlex.join(again)}\nTo start again from nothing: the same command without "
              f"--resume.", file=sys.stderr)
        return True
    run.written.append(csv_path)
    run.extra["storage"] = {
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
        from .figures import plot_storage
        run.written += plot_storage(rows, args.out)
    run.settings += rows
    run.show("Storage: every dataset, method and level (ratio: in-memory size / file size, "
             "MB/s of in-memory data, peaks in MB)", format_table(rows))
    refused = {}  # the user's files refused as untrusted pickles -> why
    for r in rows:
        if r.get("source") == "file" and r.get("status") == "n/a" and str(
                r.get("reason", "")).startswith("dataset not loaded: PermissionError"):
            refused.setdefault(r["dataset"], r["reason"])
    for name, why in refused.items():
        print(f"error: {name} was not measured: {why.split(': ', 2)[-1]}", file=sys.stderr)
    run.refused_files = bool(refused)
    run.failed += sum(r["status"] == "failed" for r in rows)
    if any(r["dataset"] == FOREST and r["status"] == "ok" for r in rows):
        _forest_ratios(run, size, repeats)
    return False


#: The storage suite's dataset of many small arrays, also compared with
#: pickle as ratios measured in one process (:func:`.raw.forest_ratios`).
FOREST = "random_forest"


def _forest_ratios(run, size, repeats):
    """The forest's raw dump and loads against pickle 5's: forest.csv."""
    import tempfile

    from . import raw

    quick = run.args.quick
    n = max(repeats or 0, 3 if quick else 15)

    def measure():
        model = next(d for d in ds.package_datasets() if d.name == FOREST).make(size, quick)
        with tempfile.TemporaryDirectory(dir=run.args.out) as work:
            return raw.forest_ratios(model, work, repeats=n), None

    run.ratio_suite("forest", FOREST, raw.FOREST_TITLE, measure, {"repeats": n})


def _lazy_suite(run):
    """``--suite lazy``: lazy.json and lazy.txt."""
    from . import lazy
    args = run.args
    scale = args.scale if args.scale is not None else QUICK_SCALE if args.quick else 1.0
    repeats = args.repeat if args.repeat is not None else 1 if args.quick else 5
    title = "Lazy access: slices of cpersist.open arrays beside a full load, zarr and blosc2"
    failed = 0
    try:
        text = lazy.format_results(lazy.run(args.out, scale=scale, repeats=repeats))
    except Exception as exc:  # reported; the other suites go on
        text, failed = f"failed: {type(exc).__name__}: {exc}"[:300], 1
    run.show(title, text)
    run.suite_done("lazy", {"scale": scale, "repeats": repeats,
                            "units": "medians over the repeats, warm page cache; MB = 2**20 bytes"},
                   failed)
    run.write_text("lazy.txt", f"{title}\n{text}", "lazy.json")


def _raw_suite(run):
    """The raw-file comparisons of the storage suite (built-in data only):
    raw.csv (the ratios), raw.json and raw.txt."""
    from . import raw
    args = run.args
    rounds = args.repeat if args.repeat is not None and args.repeat > 1 else None

    def measure():
        results = raw.run(args.out, quick=args.quick, full=args.full, rounds=rounds)
        return raw.ratios(results), raw.format_results(results)

    run.ratio_suite("raw", "raw files", raw.TITLE, measure, {
        "rounds": rounds or (raw.QUICK_ROUNDS if args.quick else raw.ROUNDS),
        "sizes": list(raw.FULL_SIZES if args.full else raw.SIZES),
        "units": "per-call medians over the rounds (every contender once per round, in this "
                 "process; more where timings are short: cpersist.benchmarks.raw.rounds_at), "
                 "warm page cache; MB = 1e6 bytes"}, gap="\n\n")


def _checkpoints_suite(run, files):
    """``--suite checkpoints``, or the user's checkpoint files: checkpoints.json,
    .csv (the ratios) and .txt; adds the rows of cpersist's settings on each
    checkpoint to the run's."""
    from . import checkpoints
    args = run.args
    rounds = args.repeat if args.repeat is not None else 1 if args.quick else checkpoints.ROUNDS

    def measure():
        results = checkpoints.run(args.out, quick=args.quick, rounds=rounds, files=files)
        run.settings.extend(checkpoints.setting_rows(results))
        return checkpoints.ratios(results), checkpoints.format_results(results)

    run.ratio_suite("checkpoints", "checkpoints", checkpoints.TITLE, measure, {
        "rounds": rounds, "files": files,
        "units": "ratios of medians over the rounds (every contender once per round, in this "
                 "process), warm page cache"})


def _append_suite(run):
    """``--suite append``: appends.json, .csv (the ratios) and .txt."""
    from . import appends

    def measure():
        results = appends.run(run.args.out, quick=run.args.quick)
        return appends.ratios(results), appends.format_results(results)

    run.ratio_suite("append", "append", appends.TITLE, measure, {
        "quick": run.args.quick,
        "units": "one run of the appends, each timed; reads: medians of "
                 f"{appends.READ_REPEATS}, warm page cache, in this process; MB = 1e6 bytes"})


def _write_summary(run, advice):
    """summary.md: what to pick for each dataset, then every table printed."""
    parts = [f"# cpersist benchmark\n\n`{run.extra['command']}`, started "
             f"{run.extra['started_utc']} on {os.cpu_count()} logical CPUs. The CSV files beside "
             f"this one hold every figure; machine.json says what each column means."]
    parts += [f"## {title}\n\n```text\n{table}\n```"
              for title, table in ([("What to pick", advice)] if advice else []) + run.shown]
    run.write_text("summary.md", "\n\n".join(parts))


def _can_plot():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed: no figures (pip install matplotlib)", file=sys.stderr)
        return False
    return True
