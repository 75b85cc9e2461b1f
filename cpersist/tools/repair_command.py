"""``cpersist repair``: cut off the torn tail of record logs (what an append
killed midway left), holding the writers' lock, or of files of dumps; and
``cpersist compact``: rewrite growing files without their superseded data."""

from ..exceptions import CpersistError
from .report import error_line

#: The command line's exit codes (see :mod:`cpersist.cli`).
_OK, _FAILED = 0, 1


def add_repair(verbs):
    """Add the ``repair`` verb to the command line's subparsers."""
    repair = verbs.add_parser(
        "repair", help="cut off the torn tail of record logs, growing files, or files of dumps",
        description="Cut off what follows the last complete record of each record log "
                    "(an append killed midway leaves a torn tail, which readers ignore and "
                    "the next append cuts off), or after a growing file's last commit, holding "
                    "the lock that keeps writers apart; "
                    "or the dump cut short at the end of a file of several dumps (run it "
                    "while no dump is written to the file). "
                    "Prints one line per file, 'FILE: OK (N records, M bytes cut off)'.",
    )
    repair.add_argument("files", nargs="+", metavar="FILE",
                        help="record logs, growing files or files of dumps (local paths)")
    repair.set_defaults(run=_cmd_repair)


def _cmd_repair(args):
    from ..recordlog.writer import repair

    def done(result):
        what = ("growing file" if result["records"] is None
                else f"{result['records']} records")
        return f"{what}, {result['cut_bytes']:,} bytes cut off"

    return _each_file(args.files, repair, done)


def _each_file(paths, change, done):
    """Run ``change(path)`` on each path, printing ``PATH: OK (done(result))``
    or ``PATH: FAILED: why``; the command's exit status."""
    status = _OK
    for path in paths:
        try:
            result = change(path)
        except (OSError, CpersistError) as exc:
            message = error_line(exc, path)
            if message.startswith(f"{path}: "):
                message = message[len(path) + 2:]
            print(f"{path}: FAILED: {message}")
            status = _FAILED
            continue
        print(f"{path}: OK ({done(result)})")
    return status


def add_compact(verbs):
    """Add the ``compact`` verb to the command line's subparsers."""
    compact = verbs.add_parser(
        "compact", help="rewrite growing files without the data their changes superseded",
        description="Rewrite each growing file (cpersist.dump(..., growing=True)) with only "
                    "what its last commit uses: replaced arrays and earlier commits go, "
                    "grown raw arrays become one run again (memory-mappable). Streaming, "
                    "every chunk checked; written to a temporary file renamed onto FILE "
                    "under the writers' lock, so that FILE is whole at every moment. "
                    "Prints 'FILE: OK (N bytes reclaimed, M bytes now)'. `cpersist info` "
                    "shows how many bytes it would reclaim.",
    )
    compact.add_argument("files", nargs="+", metavar="FILE", help="growing files (local paths)")
    compact.add_argument("--fsync", action="store_true",
                         help="flush the new file to disk before renaming it onto FILE")
    compact.set_defaults(run=_cmd_compact)


def _cmd_compact(args):
    from ..growfile.compact import compact

    return _each_file(args.files, lambda path: compact(path, fsync=args.fsync),
                      lambda result: f"{result['reclaimed_bytes']:,} bytes reclaimed, "
                                     f"{result['bytes_after']:,} bytes now")
