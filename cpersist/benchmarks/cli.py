"""Command line of the bundled benchmark: ``python -m cpersist.benchmarks``."""

import argparse
import os
import sys

from . import datasets as ds
from . import methods as mt
from ..tools.table import format_table
from .suites import EXIT_INTERRUPTED, SUITES, run

#: The default run: minutes on two cores, every method family on every
#: built-in dataset, levels 0, 3 and 6, up to five repeats (the run's repeat
#: budget stops slow operations sooner).
DEFAULT_SIZE = "1MB"
#: (size, levels, repeats) of each mode: the default, ``--quick`` (a smoke
#: run) and ``--full`` (every dataset at 100 MB, every level, three repeats).
GRIDS = {"default": (DEFAULT_SIZE, mt.DEFAULT_LEVELS, 5), "quick": ("tiny", (0, 3), 1),
         "full": ("medium", mt.FULL_LEVELS, 3)}
#: Users' own files can be large: the default grid on them leaves out the
#: slowest levels (some peers take minutes per file at level 9).
FILE_LEVELS = (0, 3)


def csv_list(text):
    """``"a, b,"`` -> ``["a", "b"]`` (an argparse type)."""
    return [t.strip() for t in text.split(",") if t.strip()]


def level_list(text):
    try:
        levels = sorted({int(t) for t in csv_list(text)})
    except ValueError:
        levels = []
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
                    "per dataset, method and compression level; model checkpoints beside "
                    "torch.save, safetensors and orbax; slices of lazily opened arrays beside "
                    "zarr and blosc2. It ends with what to pass to cpersist.dump for each "
                    "dataset or file, and saves every table in OUT/summary.md.",
        epilog="Each write and each read runs in a fresh process; reads are cold-cache "
               "(fsync + POSIX_FADV_DONTNEED) unless --warm-cache. See the CSV 'cache' and "
               "'notes' columns and machine.json for what every number means.")
    p.add_argument("files", nargs="*", metavar="PATH",
                   help="your own files to benchmark, of any of these kinds together: .npy .npz "
                        ".nii .nii.gz .h5 .hdf5 .cp, pickle/joblib with --trust-pickles, and "
                        ".pt .pth .safetensors (in the checkpoints suite, with torch); when "
                        "given, only these run unless --datasets is also given; the run ends "
                        "with what to pass to cpersist.dump and load for each")
    p.add_argument("--suite", choices=SUITES + ("all",), default="storage",
                   help="storage (default): datasets x methods x levels; lazy: slices of "
                        "cpersist.open arrays beside zarr and blosc2; checkpoints: "
                        "torch and JAX checkpoints (generated, or your .pt/.safetensors files) "
                        "beside torch.save, safetensors, joblib and orbax; append: 200 "
                        "appends of 10,000 x 128 float32 rows (--quick: 20 of 1,000) "
                        "beside h5py, zarr, PyTables and a pickle log; all: every suite")
    p.add_argument("--full", action="store_true",
                   help="the complete grid: every dataset at 100 MB, levels 0,1,3,6,9, three "
                        "repeats (hours); default: built-in data at 1 MB, levels 0,3,6 (0,3 on "
                        "your files; each cpersist:<codec> at 3), up to 5 repeats, fewer where "
                        "they would take over 2 s (minutes)")
    p.add_argument("--resume", action="store_true",
                   help="keep the rows already in OUT/results.csv (e.g. of an interrupted run) "
                        "and measure only the missing ones")
    p.add_argument("--datasets", type=csv_list, default=None, metavar="NAMES",
                   help="comma-separated dataset names or patterns (e.g. 'atlas_*,nifti_*', "
                        "'builtin', 'package'); default all")
    p.add_argument("--methods", type=csv_list, default=None, metavar="NAMES",
                   help="comma-separated method names, patterns or families (e.g. 'cpersist*,np.save,tables')")
    p.add_argument("--levels", type=level_list, default=None, metavar="L,L,...",
                   help="generic compression level grid (default 0,3,6, on your files 0,3; "
                        "--full: 0,1,3,6,9; --quick: 0,3)")
    p.add_argument("--size", default=None,
                   help="size of each generated dataset: tiny, small, medium, large, or e.g. "
                        "250MB / 1GB (default 1MB; --full: medium, 100 MB; --quick: tiny)")
    p.add_argument("--repeat", type=int, default=None, metavar="N",
                   help="timed repeats per operation, median reported (default: up to 5, fewer "
                        "where they would take over 2 s; --full: 3; --quick: 1)")
    p.add_argument("--warm-cache", action="store_true",
                   help="read with the file in the page cache (default: evicted, cold)")
    p.add_argument("--threads", type=thread_counts, default=None, metavar="N[,N...]",
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
    p.add_argument("--scale", type=float, default=None, metavar="X",
                   help="lazy suite: multiply its array sizes (default 1, the sizes its "
                        "comparisons are made for: 200 MB slices; --quick: 0.01)")
    p.add_argument("--list", action="store_true", help="list datasets and methods, then exit")
    return p


def thread_counts(text):
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected positive ints separated by commas, got {text!r}")
    return counts[0] if len(counts) == 1 else counts


def _list(threads):
    print("datasets:")
    print(format_table(["name", "source", "description"],
                       [[d.name, d.source, d.description] for d in ds.all_datasets()], indent="  "))
    print("methods:")
    rows = []
    for m in mt.all_methods(threads):
        why = m.available()
        lv = "fixed " + str(m.fixed_level) if m.fixed_level is not None else f"levels {list(m.supported)}"
        rows.append([m.name, m.codec, lv, "unavailable: " + why if why else "available"])
    print(format_table(["name", "codec", "levels", "here"], rows, indent="  "))


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
    from .checkpoints import is_checkpoint_file, missing
    for f in args.files:
        if not os.path.exists(f):
            parser.error(f"no such file: {f}")
        if is_checkpoint_file(f):
            if missing():
                parser.error(f"{f}: a checkpoint file is measured with torch, safetensors and "
                             f"joblib, and {missing()} is not installed (pip install {missing()})")
            continue
        why = ds.unsupported_file(f) or (None if args.trust_pickles else ds.untrusted_pickle(f))
        if why:
            parser.error(why)
    try:
        size, levels, repeats = _grid(args)
    except ValueError as e:
        parser.error(str(e))
    if repeats < 1:
        parser.error("--repeat must be >= 1")
    try:
        return run(parser, args, argv, size, levels, repeats)
    except KeyboardInterrupt:
        # Between measurements (plots, tables): nothing is lost, the CSV is complete.
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _grid(args):
    """Size, level grid and repeats of this run, from the mode and the options."""
    size, levels, repeats = GRIDS["quick" if args.quick else "full" if args.full else "default"]
    if not (args.quick or args.full) and args.files and not args.datasets:
        levels = FILE_LEVELS
    return (ds.parse_size(args.size or size), list(args.levels or levels),
            args.repeat if args.repeat is not None else repeats)
