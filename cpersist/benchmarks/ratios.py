"""Comparisons measured within one run as ratios (cpersist's time over a
peer's, one size over another), the rows of ``checkpoints.csv``,
``appends.csv``, ``raw.csv`` and ``forest.csv``. ``key``, empty here, is
where the maintainers' lab names a comparison it holds to a bound.
"""

from ..tools.table import format_table

#: Columns of a ratio row.
RATIO_COLUMNS = ["suite", "target", "key", "ratio", "measured", "status", "reason"]


def ratio_row(suite, target, ratio=None, measured="", key="", missing=None):
    """One ratio row; ``missing`` names a library that is not installed."""
    row = {"suite": suite, "target": target, "key": key, "ratio": "", "measured": measured,
           "status": "ok", "reason": ""}
    if missing:
        row.update(status="not installed", reason=f"needs {missing} (pip install {missing})",
                   measured="")
        return row
    row["ratio"] = round(ratio, 3)
    return row


def failed_row(suite, target, reason, key=""):
    """A comparison that could not be measured."""
    return dict(ratio_row(suite, target, 0, key=key), ratio="", status="failed", reason=reason)


def format_ratios(rows):
    """The ratio rows as a text table."""
    return format_table(["comparison", "ratio", "measured"], [
        [r["target"], f"{float(r['ratio']):.3f}", r["measured"]]
        if r["status"] == "ok" else [r["target"], f"{r['status']}: {r['reason']}"]
        for r in rows], right=(1,))
