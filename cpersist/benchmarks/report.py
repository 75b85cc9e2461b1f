"""The run's text: the results table and what to pass to cpersist per dataset."""

import math
import statistics

from ..tools.table import format_table as _table
from .output import as_float as _f


def _fmt(v, spec):
    x = _f(v)
    return "-" if x is None else format(x, spec)


def format_table(rows, max_reason=60):
    """The end-of-run results table (measured and failed rows; n/a counted).

    Dataset and method names are printed whole. A ratio marked ``raw`` is a
    cpersist row whose codec kept at least half of the array bytes
    uncompressed (the ``kept_raw`` column); a note under the table says why.
    """
    shown = [r for r in rows if r.get("status") != "n/a"]
    table, kept_any = [], False
    for r in shown:
        ratio = _fmt(r.get("ratio"), ".2f")
        kept = _f(r.get("kept_raw"))
        if kept is not None and kept >= 0.5:
            ratio, kept_any = f"{ratio} raw", True
        status = str(r.get("status", ""))
        if status != "ok":
            status += " " + str(r.get("reason", ""))[:max_reason]
        table.append([r["dataset"], r["method"], r["level"], ratio, _fmt(r.get("write_MBps"), ".1f"),
                      _fmt(r.get("read_MBps"), ".1f"), _fmt(r.get("write_peak_MB"), ".1f"),
                      _fmt(r.get("read_peak_MB"), ".1f"), status])
    lines = [_table(["dataset", "method", "lvl", "ratio", "wMB/s", "rMB/s", "wPeakMB", "rPeakMB",
                     "status"], table, right=range(2, 8))]
    if kept_any:
        lines.append(KEPT_RAW_NOTE)
    na = len(rows) - len(shown)
    if na:
        lines.append(f"({na} dataset/method pairs not applicable; see the CSV 'reason' column)")
    return "\n".join(lines)


#: Printed under a table where some ratio is marked ``raw``.
KEPT_RAW_NOTE = (
    "raw: cpersist kept most chunks uncompressed with this codec: a probe of each chunk showed "
    "it saving too little for what decoding it costs (15% at levels 1-5, 5% at 6-9, less for "
    "forms that decode faster); "
    "a stronger codec or level compresses them (see the CSV 'kept_raw' column)")


#: Two settings' times are alike when their medians differ by less than
#: this fraction, or when the middle halves of their repeats overlap (the
#: noise of the machine, seen in the repeats).
NOISE_FLOOR = 0.05
#: Files whose sizes differ by less than this fraction are alike.
SIZE_ALIKE = 0.01
_SPEEDS = ("ratio", "write_MBps", "read_MBps")


def setting(row, load=True):
    """What to pass to :func:`cpersist.dump` (and, with ``load``, to
    :func:`cpersist.load`) to get a cpersist row's file (and read):
    ``compress=3``, ``compress="lz4:1"``, ``compress=0 + mmap_mode="r"``."""
    name, _, threads = str(row["method"]).partition("@")
    codec = name.partition(":")[2]
    compress = ('"max"' if name == "cpersist max" else f'"{codec}:{row["level"]}"' if codec
                else row["level"])
    text = f"compress={compress}" + (f", n_threads={threads[:-1]}" if threads else "")
    return text + (' + mmap_mode="r"' if load and str(row.get("mmap")) == "True" else "")


def _times(row, op):
    return [float(t) for t in str(row.get(f"{op}_times") or "").split(";") if t]


def alike(a, b, op):
    """Whether rows ``a`` and ``b`` took the same time to ``op`` (``"write"``
    or ``"read"``) within the noise of their repeats (:data:`NOISE_FLOOR`)."""
    (ta, tb) = (sorted(_times(r, op)) for r in (a, b))
    (qa, qb) = (statistics.quantiles(t, n=4, method="inclusive")[::2] if t[1:] else t * 2
                for t in (ta, tb))
    ma, mb = statistics.median(ta), statistics.median(tb)
    return abs(ma - mb) <= NOISE_FLOOR * min(ma, mb) or (qa[0] <= qb[1] and qb[0] <= qa[1])


def recommendations(rows):
    """Per dataset, cpersist's settings that give the fastest write, the
    fastest read, the smallest file, and the one to pick: the highest
    geometric mean of ratio, write and read speed, each over the best on
    that dataset. Each goal lists its best setting, then those :func:`alike`
    it. A codec that kept most chunks raw is left out of the speed goals.
    Of ``rows`` (the storage suite's, and the checkpoints suite's
    :func:`.checkpoints.setting_rows`) cpersist's ``ok`` ones are used.
    Returns a dict per dataset: ``dataset``, ``description`` and ``goals``
    (goal name -> rows)."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("family") == "cpersist"
          and all(_f(r.get(k)) for k in _SPEEDS) and _times(r, "write") and _times(r, "read")]
    out = []
    for name in dict.fromkeys(r["dataset"] for r in ok):
        rs = [r for r in ok if r["dataset"] == name]
        fast = [r for r in rs if (_f(r.get("kept_raw")) or 0) < 0.5] or rs
        top = {k: max(_f(r[k]) for r in fast) for k in _SPEEDS}

        def ties(pool, op):
            pool = sorted(pool, key=lambda r: -_f(r[f"{op}_MBps"]))
            found = [pool[0]] + [r for r in pool[1:] if alike(pool[0], r, op)]
            # Alike writes: a row read as it is written first (its figures are shown).
            return sorted(found, key=lambda r: op == "write" and str(r.get("mmap")) == "True")

        by_size = sorted(rs, key=lambda r: (-_f(r["ratio"]), -_f(r["write_MBps"])))
        goals = {"pick": [max(fast, key=lambda r: math.prod(_f(r[k]) / top[k] for k in top))],
                 "fastest write": ties(fast, "write"), "fastest read": ties(fast, "read"),
                 "smallest file": [r for r in by_size if _f(r["ratio"]) >= (1 - SIZE_ALIKE)
                                   * _f(by_size[0]["ratio"])]}
        out.append({"dataset": name, "description": rs[0].get("description", ""), "goals": goals})
    return out


def _figures(row):
    w, r = (_fmt(row[k], ".0f" if _f(row[k]) >= 10 else ".2g") for k in _SPEEDS[1:])
    return f"ratio {_fmt(row['ratio'], '.2f')}, write {w} MB/s, read {r} MB/s"


#: Opens the printed recommendations.
PICK_HEADER = """\
What to pass to cpersist.dump (and mmap_mode= to cpersist.load), per dataset, measured on
this machine (medians of the repeats). pick: the best balance of file size, write and read
speed. "either" joins settings whose times differ by less than the noise of their repeats
(or sizes by under 1%); the figures are the first one's."""


def _either(settings):
    return settings[0] if len(settings) == 1 else (
        f"either {', '.join(settings[:-1])} or {settings[-1]}")


def format_recommendations(rows):
    """The printed text of :func:`recommendations` (empty when there is none)."""
    recs = recommendations(rows)
    if not recs:
        return ""
    lines = [PICK_HEADER]
    for rec in recs:
        # A write is what goes to dump: a memmapped read's row wrote compress=0.
        cells = [[goal, _either(list(dict.fromkeys(setting(r, goal != "fastest write")
                                                   for r in found))[:3]), _figures(found[0])]
                 for goal, found in rec["goals"].items()]
        lines += ["", f"{rec['dataset']}: {rec['description']}", _table(None, cells, indent="  ")]
    return "\n".join(lines)
