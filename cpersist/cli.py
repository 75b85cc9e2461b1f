"""The ``cpersist`` command line and its verbs: info, verify, convert, repair, compact, bench.

Run as ``cpersist VERB ...`` (the console script) or ``python -m cpersist
VERB ...``. No verb executes the pickle stream of a cpersist file: ``info``
and ``verify`` read the index and walk the opcodes, ``convert`` copies the
stream as it is (only ``convert --trust-pickles`` of a joblib file or a pickle
loads it, to dump its object again). Exit codes: 0 success, 1 a file is missing, damaged or fails
verification, 2 bad command-line usage.
"""

import argparse
import json
import os
import sys

from . import __version__
from .container.files import display_name
from ._runtime.temporaries import TMP_SUFFIX
from .storage.fsspec.urls import is_url
from .exceptions import CpersistError
from .tools.repair_command import add_compact, add_repair
from .tools.report import (MAX_ROWS, human_size, json_default, error_line, format_info,
                           format_verified)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PROG = "cpersist"


class _UsageError(Exception):
    """A bad option value found after argparse accepted it."""


def parse_compress_spec(spec):
    """Turn a ``--compress`` value into :func:`cpersist.dump`'s ``compress``.

    The spellings are those :func:`cpersist.dump` accepts (one parser,
    :func:`cpersist.codecs.parse_compress`): ``raw`` or ``0``; a level
    ``1``–``9`` for the default codec; ``NAME`` (level 3); ``NAME:LEVEL``
    (``zstd:9``, ``blosc:lz4:5``).

    Raises
    ------
    ValueError
        If ``spec`` is none of these; the message lists the codecs, or the
        allowed range of levels.
    """
    from .codecs import parse_compress
    from .codecs.registry import parse_text

    parse_compress(spec)  # raises ValueError naming the accepted values
    return parse_text(spec)


#: The FILE argument that names standard input.
STDIN = "-"


def _check_file(path):
    """Raise a one-line error for a path that cannot be a readable file."""
    if path == STDIN or is_url(path):  # a URL is checked when it is opened
        return
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory, not a cpersist file")


def _source(path):
    """What a FILE argument reads: standard input for ``-``, else the path
    (a FIFO or other non-seekable file is copied to a temporary file)."""
    return sys.stdin.buffer if path == STDIN else path


# -- info -------------------------------------------------------------------

def file_info(path, storage_options=None):
    """Everything ``cpersist info`` shows about a file, without unpickling it.

    Parameters
    ----------
    path : str
        A cpersist file or URL; ``-`` reads standard input.
    storage_options : dict, optional
        For a URL: passed to fsspec.

    Returns
    -------
    dict
        :func:`cpersist.inspect`'s report (arrays with their ``"path"``,
        ``"inline_arrays"``...), plus ``"file"``, and for each array
        ``"ratio"`` (uncompressed / stored size).
    """
    from .tools.inspection import inspect

    _check_file(path)
    report = inspect(_source(path), storage_options=_options_for(path, storage_options))
    for entry in report["arrays"]:
        stored, raw = entry["stored_bytes"], entry["raw_bytes"]
        entry["ratio"] = round(raw / stored, 3) if stored and raw is not None else None
    return {"file": path, **report}


def parse_storage_option(text):
    """``KEY=VALUE`` as a pair; VALUE is read as JSON when it parses
    (``true``, ``3``, ``{"region_name": "eu-west-1"}``), else kept a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        value = json.loads(value)
    except ValueError:
        pass
    return key, value


def _options_for(path, options):
    """The storage options for ``path``: None unless it is a URL."""
    return dict(options) if options and is_url(path) else None


def _cmd_info(args):
    status = EXIT_OK
    reports = []
    for path in args.files:
        try:
            reports.append(file_info(path, args.storage_option))
        except (OSError, CpersistError, ImportError) as exc:
            _error(exc, path)
            status = EXIT_FAILED
    if args.json:
        payload = reports[0] if len(args.files) == 1 and reports else reports
        if reports or len(args.files) != 1:
            print(json.dumps(payload, indent=2, default=json_default))
    elif reports:
        print("\n\n".join(format_info(r, every=args.all, details=args.details)
                            for r in reports))
    return status


# -- verify -----------------------------------------------------------------

def _cmd_verify(args):
    from .tools.inspection import reseal, verify

    status = EXIT_OK
    for path in args.files:
        source = path
        try:
            _check_file(path)
            if args.reseal and path == STDIN:
                raise _UsageError("--reseal rewrites files: it cannot read standard input")
            if args.reseal and is_url(path):
                raise _UsageError(f"{path}: --reseal rewrites local files in place, "
                                  f"not objects in remote storage")
            source = _source(path)
            if args.reseal:
                result = reseal(source)
            else:
                result = verify(source, storage_options=_options_for(path, args.storage_option))
        except (OSError, CpersistError, ImportError) as exc:
            message = error_line(exc, path)
            for named in (path, display_name(source)):
                if message.startswith(f"{named}: "):
                    message = message[len(named) + 2:]
                    break
            print(f"{path}: FAILED: {message}")
            status = EXIT_FAILED
            continue
        print(format_verified(path, result, args.reseal))
    return status


# -- convert ----------------------------------------------------------------

def _cmd_convert(args):
    from .tools.convert import convert

    try:
        compress = None if args.compress is None else parse_compress_spec(args.compress)
    except ValueError as exc:
        raise _UsageError(f"--compress: {exc}") from None
    _check_file(args.src)
    dst_dir = os.path.dirname(os.path.abspath(args.dst))
    if not is_url(args.dst) and not os.path.isdir(dst_dir):
        raise FileNotFoundError(f"{args.dst}: cannot write, no directory {dst_dir}")
    options = args.storage_option if is_url(args.src) or is_url(args.dst) else None
    try:
        stats = convert(_source(args.src), args.dst, compress, chunk_size=args.chunk_size,
                        n_threads=args.threads, trust_pickles=args.trust_pickles,
                        storage_options=dict(options or {}) or None)
    except OSError as exc:
        if str(exc.filename or "").endswith(TMP_SUFFIX):  # the temporary file next to DST
            raise OSError(f"{args.dst}: cannot write ({exc.strerror})") from None
        raise
    before, after = stats["stored_bytes_before"], stats["stored_bytes_after"]
    ratio = f"{stats['raw_bytes'] / after:.2f}" if after else "-"
    print(f"{args.src} ({stats['source_kind']}) -> {args.dst}: {stats['sections']} sections, "
          f"{human_size(stats['raw_bytes'])} of data stored in {human_size(before)} -> "
          f"{human_size(after)} (ratio {ratio}, compress={args.compress or 'raw'})")
    return EXIT_OK


# -- bench ------------------------------------------------------------------

def _cmd_bench(argv):
    try:
        from .benchmarks import main as bench_main
    except ImportError as exc:
        print(f"{PROG} bench: error: the benchmark needs its extra dependencies "
              f"(in a checkout: pip install '.[bench]'): {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        return bench_main(list(argv), prog=f"{PROG} bench")
    except SystemExit as exc:  # argparse inside the benchmark: --help, bad options
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


# -- parser and main --------------------------------------------------------

def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _add_storage_option(parser):
    parser.add_argument(
        "--storage-option", action="append", type=parse_storage_option, default=[],
        metavar="KEY=VALUE",
        help="an fsspec storage option for URLs (s3://, gs://, https://...), repeatable; "
             "VALUE is read as JSON when it parses. Credentials and AWS_ENDPOINT_URL "
             "also come from the environment")


class _CompressHelp(str):
    """The help of ``convert --compress``, naming every codec only when the
    help is shown: listing installed codecs reads every installed package's
    entry points, which commands other than ``--help`` never need."""

    def __mod__(self, params):
        # The names come from the registry (built-in, registered and
        # installed codecs), which lists them without importing any
        # compression library.
        from .codecs import ALIASES, DEFAULT_CODEC, DEFAULT_LEVEL, available_codecs

        return (f"raw (or 0); a level 1-9 for the default codec ({DEFAULT_CODEC}); a codec "
                f"name ({', '.join(available_codecs() + sorted(ALIASES))}) at level "
                f"{DEFAULT_LEVEL}; or NAME:LEVEL, e.g. zstd:9 or blosc:lz4:5")


def build_parser():
    """The ``cpersist`` argument parser."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect, check, re-encode and benchmark cpersist files. "
                    "No verb executes the pickled object of a cpersist file.",
        epilog="Exit codes: 0 success, 1 a file is missing, damaged or fails "
               "verification, 2 bad usage. 'cpersist VERB --help' describes each verb.",
    )
    parser.add_argument("--version", action="version", version=f"cpersist {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True

    info = verbs.add_parser(
        "info", help="describe a file: format, arrays, pickle stream, globals",
        description="Describe cpersist files without executing their pickle stream: "
                    "format version, the arrays' bytes in memory and in the file, codecs, "
                    "the pickle stream and the globals the file needs to load, then each "
                    "array or torch tensor (its path in the object when it can be found, "
                    "dtype, shape, size, codec). --details adds how each is stored.",
    )
    info.add_argument("files", nargs="+", metavar="FILE",
                      help="cpersist files or URLs; - reads standard input")
    info.add_argument("--all", action="store_true",
                      help=f"list every array (by default a table of more than "
                           f"{MAX_ROWS} gives its first and last rows)")
    info.add_argument("--details", action="store_true",
                      help="list every array and how each is stored: its section (dtype "
                           "as stored, order, codec, level, stored and uncompressed size, "
                           "ratio), the views torch tensors make of their storages")
    info.add_argument("--json", action="store_true",
                      help="print JSON (one object for one file, a list for several), "
                           "with every detail")
    _add_storage_option(info)
    info.set_defaults(run=_cmd_info)

    verify = verbs.add_parser(
        "verify", help="check every checksum and the structure of files",
        description="Check the structure and every chunk's checksum of each file (and "
                    "that compressed chunks decompress), without unpickling. Prints one "
                    "line per file, 'FILE: OK' or 'FILE: FAILED: why'; exits with 1 if any "
                    "file failed.",
    )
    verify.add_argument("files", nargs="+", metavar="FILE",
                        help="cpersist files or URLs; - reads standard input")
    verify.add_argument("--reseal", action="store_true",
                        help="store new checksums for the raw arrays of files changed "
                             "through a writable map (mmap_mode='r+'), after checking "
                             "everything else")
    _add_storage_option(verify)
    verify.set_defaults(run=_cmd_verify)

    convert = verbs.add_parser(
        "convert", help="re-encode a file's sections with another codec or level",
        description="Write a copy of SRC to DST with every section re-encoded, chunk by "
                    "chunk, without unpickling the object (the pickle stream is copied "
                    "as is). Use --compress raw to make the arrays memory-mappable. DST "
                    "is written atomically and may be SRC. With --trust-pickles, SRC may "
                    "also be a joblib file (any compression) or a pickle, which is loaded "
                    "and dumped to DST. The line printed says which kind SRC is.",
    )
    convert.add_argument("src", metavar="SRC", help="a cpersist file or URL (or, with "
                         "--trust-pickles, a joblib file or a pickle); - reads standard input")
    convert.add_argument("dst", metavar="DST")
    convert.add_argument("--compress", "-c", default=None, metavar="SPEC",
                         help=_CompressHelp("raw (or 0), a level 1-9, a codec name or "
                                            "NAME:LEVEL; required for a cpersist SRC, raw "
                                            "by default for a .safetensors or torch.save SRC"))
    convert.add_argument("--chunk-size", type=_positive_int, default=None, metavar="BYTES",
                         help="bytes per chunk in DST (default: keep SRC's chunks)")
    convert.add_argument("--threads", type=_positive_int, default=None, metavar="N",
                         help="compression threads (default: all CPUs)")
    _add_storage_option(convert)
    convert.add_argument(
        "--trust-pickles", action="store_true",
        help="also convert a joblib file or a pickle: this LOADS it, which runs any code "
             "it names, so only for files you trust (a cpersist SRC is never unpickled)")
    convert.set_defaults(run=_cmd_convert)

    add_repair(verbs)
    add_compact(verbs)
    verbs.add_parser(
        "bench", add_help=False, help="run the bundled benchmark (cpersist bench --help)",
        description="Run the bundled benchmark; arguments go to python -m cpersist.benchmarks.",
    )
    return parser


def _error(exc, path=None):
    print(f"{PROG}: error: {error_line(exc, path)}", file=sys.stderr)


def main(argv=None):
    """Run the command line.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name; default ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit code: 0 success, 1 a file is missing, damaged or failed
        verification, 2 bad usage.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _main(argv)
    except BrokenPipeError:  # the reader went away: `cpersist info f.cp | head`
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # no second error at exit
        except (OSError, ValueError):
            pass
        return EXIT_FAILED


def _main(argv):
    if argv and argv[0] == "bench":
        return _cmd_bench(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return args.run(args)
    except _UsageError as exc:
        print(f"{PROG} {args.verb}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        raise
    except (OSError, CpersistError, ImportError) as exc:
        _error(exc)
        return EXIT_FAILED
    except ValueError as exc:  # bad option values cpersist rejects (e.g. --chunk-size)
        print(f"{PROG} {args.verb}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
