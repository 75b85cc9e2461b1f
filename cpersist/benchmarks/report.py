"""The run's text: the results table, which setting to use per file, and
``compress="max"`` against the smallest peer file."""

import math

from ..tools.table import format_table as _table
from .output import as_float as _f

__all__ = ["format_table", "recommendations", "format_recommendations", "max_vs_peers",
           "format_max_vs_peers", "KEPT_RAW_NOTE"]


# ---------------------------------------------------------------------------
# Text table
# ---------------------------------------------------------------------------


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
    "it saving under 15% (levels 1-5; 5% at 6-9), which costs more time than it saves space; "
    "a stronger codec or level compresses them (see the CSV 'kept_raw' column)")


# ---------------------------------------------------------------------------
# Which setting to use, per file
# ---------------------------------------------------------------------------


def _setting(row):
    """How to get ``row``'s result: ``method Llevel``."""
    return f"{row['method']} L{row['level']}"


def _cpersist_compress(row):
    """The ``compress=`` that reproduces a cpersist row, or None for a peer."""
    if row.get("family") != "cpersist":
        return None
    from .methods import all_methods

    name = str(row["method"]).split("@")[0]
    threads = str(row["method"]).split("@")[1][:-1] if "@" in str(row["method"]) else None
    for m in all_methods():
        if m.name == name:
            return m.usage(int(row["level"]), f", n_threads={threads}" if threads else "")
    return None


def recommendations(rows, source=None):
    """Per dataset: the fastest write, fastest read, smallest file and best
    balance, each overall and among cpersist's settings.

    The best balance is the highest geometric mean of the ratio, the write
    speed and the read speed, each divided by the best of that dataset.
    cpersist rows whose codec kept most chunks raw are left out of the
    speed goals (they wrote about what ``compress=0`` writes), unless no
    other cpersist row ran.

    Parameters
    ----------
    rows : list of dict
        Storage-suite rows (``status == "ok"`` rows are used).
    source : str, optional
        Only datasets of this source (``"file"`` for the user's files).

    Returns
    -------
    list of dict
        ``dataset``, ``goal``, ``best`` (row), ``cpersist`` (row or None),
        ``compress`` (the call that writes the cpersist row's file).
    """
    ok = [r for r in rows if r.get("status") == "ok" and (source is None or r.get("source") == source)
          and all(_f(r.get(k)) for k in ("ratio", "write_MBps", "read_MBps"))]
    out = []
    for name in dict.fromkeys(r["dataset"] for r in ok):
        rs = [r for r in ok if r["dataset"] == name]
        # A cpersist codec that kept most chunks raw wrote about what
        # compress=0 writes: its timings differ from that by noise, and
        # advising it for speed would mislead (its size still counts).
        kept_raw = [r for r in rs if r.get("family") == "cpersist"
                    and (_f(r.get("kept_raw")) or 0) >= 0.5]
        fast = rs
        if len(kept_raw) < sum(r.get("family") == "cpersist" for r in rs):
            fast = [r for r in rs if not any(r is k for k in kept_raw)]
        top = {k: max(_f(r[k]) for r in fast) for k in ("ratio", "write_MBps", "read_MBps")}

        def balance(r):
            return math.prod(_f(r[k]) / top[k] for k in top) ** (1 / 3)

        goals = (("fastest write", fast, lambda r: _f(r["write_MBps"])),
                 ("fastest read", fast, lambda r: _f(r["read_MBps"])),
                 ("smallest file", rs, lambda r: (_f(r["ratio"]), _f(r["write_MBps"]))),
                 ("best balance", fast, balance))
        for goal, pool, key in goals:
            best = max(pool, key=key)
            mine = [r for r in pool if r.get("family") == "cpersist"]
            own = max(mine, key=key) if mine else None
            out.append({"dataset": name, "goal": goal, "best": best, "cpersist": own,
                        "compress": _cpersist_compress(own) if own else None})
    return out


def _figures(row):
    return (f"ratio {_fmt(row['ratio'], '.2f')}, write {_fmt(row['write_MBps'], '.0f')} MB/s, "
            f"read {_fmt(row['read_MBps'], '.0f')} MB/s")


def format_recommendations(rows, source=None):
    """The printed "which setting should I use" table of :func:`recommendations`."""
    recs = recommendations(rows, source)
    if not recs:
        return ""
    lines = ["Which setting to use, per file (measured on this machine, one run; the best "
             "balance is the highest geometric mean of ratio, write and read speed, each "
             "relative to the best for that file)"]
    for name in dict.fromkeys(r["dataset"] for r in recs):
        cells = []
        for rec in (r for r in recs if r["dataset"] == name):
            best, own = rec["best"], rec["cpersist"]
            cells.append([rec["goal"], _setting(best), _figures(best)])
            if own is not None and own is not best:
                cells.append(["", _setting(own), _figures(own)])
            if rec["compress"]:
                kept = _f(own.get("kept_raw"))
                hint = ("  (most array chunks kept raw: see the table's note)"
                        if kept is not None and kept >= 0.5 else "")
                cells.append(["", "", rec["compress"] + hint])
        lines += ["", name, _table(None, cells, indent="  ")]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# cpersist max against the smallest peer file
# ---------------------------------------------------------------------------


def max_vs_peers(rows, max_method="cpersist max"):
    """Per dataset, the ``max`` preset's file against the smallest peer file.

    A peer is any method outside the cpersist family, at any level it ran.

    Returns
    -------
    list of dict
        ``dataset``, ``max_bytes``, ``peer`` (method and level),
        ``peer_bytes`` and ``ratio`` (``max_bytes / peer_bytes``: at most 1
        means the ``max`` file is no larger); empty when no row of
        ``max_method`` was measured.
    """
    ok = [r for r in rows if r.get("status") == "ok" and _f(r.get("disk_bytes"))]
    out = []
    for name in dict.fromkeys(r["dataset"] for r in ok):
        mine = [r for r in ok if r["dataset"] == name and r["method"] == max_method]
        peers = [r for r in ok if r["dataset"] == name and r["family"] != "cpersist"]
        if not mine or not peers:
            continue
        best = min(peers, key=lambda r: _f(r["disk_bytes"]))
        mx, pb = _f(mine[0]["disk_bytes"]), _f(best["disk_bytes"])
        out.append({"dataset": name, "max_bytes": int(mx), "peer": f"{best['method']} L{best['level']}",
                    "peer_bytes": int(pb), "ratio": round(mx / pb, 4)})
    return out


def format_max_vs_peers(entries):
    """Printed table of :func:`max_vs_peers`."""
    return ("cpersist max against the smallest peer file (size ratio: <= 1.00 means max is no larger)\n"
            + _table(["dataset", "max MB", "smallest peer", "peer MB", "ratio"],
                     [[e["dataset"], f"{e['max_bytes'] / 1e6:.4f}", e["peer"],
                       f"{e['peer_bytes'] / 1e6:.4f}", f"{e['ratio']:.2f}"] for e in entries],
                     right=(1, 3, 4)))
