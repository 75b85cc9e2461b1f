"""A model of many small arrays against pickle: the storage suite's random
forest dumped raw and loaded by cpersist (trusted, and restricted) and by
pickle 5, in turns in this process, warm page cache, as ratios of medians."""

import os
import pickle

import cpersist

from .pagecache import remove_output
from .ratios import ratio_row
from .turns import medians, timed_in_turn

__all__ = ["TITLE", "ratios"]

TITLE = ("A random forest (many small arrays) against pickle protocol 5: raw dump and load, "
         "in turns in one process, warm page cache")
#: What a restricted load of the forest trusts beyond the allowlist.
TRUSTED = ["sklearn"]


def ratios(model, work_dir, repeats=15):
    """The ratio rows of ``model`` (a fitted scikit-learn estimator) dumped
    and loaded ``repeats`` times by each contender, in turns, in ``work_dir``."""
    cp_path = os.path.join(work_dir, "forest.cp")
    pk_path = os.path.join(work_dir, "forest.pkl")

    def pickle_dump():
        with open(pk_path, "wb") as file:
            pickle.dump(model, file, protocol=5)

    def pickle_load():
        with open(pk_path, "rb") as file:
            return pickle.load(file)

    steps = {
        "pickle dump": pickle_dump,
        "cpersist dump": lambda: cpersist.dump(model, cp_path, compress=0),
        "pickle load": pickle_load,
        "cpersist load": lambda: cpersist.load(cp_path),
        "cpersist restricted load": lambda: cpersist.load(cp_path, trusted=TRUSTED),
    }
    try:
        med = medians(timed_in_turn(steps, repeats))
    finally:
        for path in (cp_path, pk_path):
            remove_output(path)

    def row(target, mine, theirs):
        return ratio_row("forest", target, med[mine] / med[theirs],
                         measured=f"{med[mine] * 1e3:.2f} ms / {med[theirs] * 1e3:.2f} ms, "
                                  f"medians of {repeats}")

    return [row("raw dump / pickle 5 dump", "cpersist dump", "pickle dump"),
            row("raw load / pickle 5 load", "cpersist load", "pickle load"),
            row("restricted load (trusted=['sklearn']) / pickle 5 load",
                "cpersist restricted load", "pickle load")]
