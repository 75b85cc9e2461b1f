"""Files of a run: the CSVs and ``machine.json`` (the machine, library
versions and the exact command, so that every number can be read back in
context)."""

import csv
import datetime as _dt
import importlib
import json
import math
import os
import platform
import re
import shutil
import sys
import tempfile

import cpersist

_VERSIONED = ("cpersist", "numpy", "tables", "blosc", "blosc2", "nibabel", "joblib", "lz4",
              "zstandard", "sklearn", "matplotlib", "tqdm")


def write_csv(path, rows, columns):
    """Write ``rows`` (dicts) to ``path`` with the given column order."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def measure_into(out, filename, prefix, measure, scratch_in_out=False):
    """``measure(directory)`` in a new scratch folder (its name starting
    with ``prefix``; inside ``out`` with ``scratch_in_out``, else in the
    system's temporary folder), removed afterwards; its result written to
    ``out/filename`` as JSON (``out`` made if new) and returned."""
    os.makedirs(out, exist_ok=True)
    directory = tempfile.mkdtemp(prefix=prefix, dir=out if scratch_in_out else None)
    try:
        result = measure(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    with open(os.path.join(out, filename), "w") as file:
        json.dump(result, file, indent=1)
    return result


def safe_name(name):
    """``name`` with every run of characters unsafe in a file name as ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def as_float(v):
    """A CSV cell as a finite float, or None (empty, ``n/a``, NaN)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _version(mod):
    try:
        m = importlib.import_module(mod)
    except Exception:
        return None
    return str(getattr(m, "__version__", "?"))


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "?"


def _total_ram():
    try:  # what /proc/meminfo calls MemTotal
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf, or not these names
        return None


def load_average():
    """The 1-, 5- and 15-minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine_info(extra=None):
    """The machine, the library versions and ``extra`` (the command line,
    options, what each column means), for machine.json."""
    info = {"date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "platform": platform.platform(), "python": sys.version.split()[0],
            "implementation": platform.python_implementation(), "cpu": _cpu_model(),
            "cpu_count": os.cpu_count(), "ram_bytes": _total_ram(), "load_average": load_average(),
            "versions": {m: _version(m) for m in _VERSIONED}}
    try:
        import tables
        info["versions"]["hdf5"] = tables.hdf5_version
        info["tables_complibs"] = [c for c in tables.filters.all_complibs if tables.which_lib_version(c)]
    except Exception:
        pass
    info["cpersist_codecs"] = list(cpersist.available_codecs())
    if extra:
        info.update(extra)
    return info


def write_machine_json(path, extra=None):
    """Write :func:`machine_info` as JSON to ``path``."""
    with open(path, "w") as f:
        json.dump(machine_info(extra), f, indent=2, default=str)
    return path
