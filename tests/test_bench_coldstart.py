"""The lab's cold-start and small-object targets (coldstart.csv, made by
``python -m benchmarks.coldstart``), and the lab's serializer comparison's
small-object timing."""

import pickle
import sys

from cpersist.benchmarks.turns import RATIO_COLUMNS

from ._fresh import ROOT

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import coldstart  # noqa: E402
from benchmarks.serializers import _small_calls, run_small_objects  # noqa: E402


def test_every_comparison_is_measured_as_a_keyed_ratio():
    rows = coldstart.run_cold_start(runs=1, number=20)
    assert all(set(r) == set(RATIO_COLUMNS) for r in rows)
    assert [r for r in rows if r["status"] != "ok"] == []
    by = {r["target"]: r for r in rows}
    expected = {
        "one-shot script (import, dump, load), compress=0: time / joblib's": "one_shot",
        "one-shot script (import, dump, load), compress=3: time / joblib's": "one_shot",
        "first compress=3 dump of a 48 MB array in a process: time / the second's": "first_call",
        "first compress=3 load of a 48 MB array in a process: time / the second's": "first_call",
        "cpersist info on a compressed file, whole command: time / python -c 'import numpy'":
            "info_command",
        "dumps of 'people': time / pickle.dumps (protocol 5)": "dumps_vs_pickle",
        "loads of 'people': time / pickle.loads (protocol 5)": "loads_vs_pickle",
        "dumps of 'people': bytes beyond pickle's / 128": "dumps_bytes",
        "dump of {'people': [{'name': 'Alice'}]} to a file: time / joblib.dump": "file_dump",
        "load of {'people': [{'name': 'Alice'}]} to a file: time / joblib.load": "file_load",
        "dump of {'people': [{'name': 'Alice'}]} to a file: bytes beyond pickle's / 128":
            "file_bytes",
    }
    for target, key in expected.items():
        assert by[target]["key"] == "coldstart." + key, target
        assert by[target]["ratio"] > 0, target
    # Sizes are not noisy: the compact dump adds 112 bytes to the pickle stream.
    assert by["dumps of 'people': bytes beyond pickle's / 128"]["ratio"] == round(112 / 128, 3)


def test_pickle_rows_time_pickle_itself():
    """Not a wrapper around a Pickler and a BytesIO, which cost more than
    pickling a small object: pickle's figures are those ``timeit`` gives."""
    space, dumps, loads = _small_calls("pickle5", None, None)
    assert space["dumps"] is pickle.dumps and space["loads"] is pickle.loads
    assert (dumps, loads, space["p"]) == ("dumps(obj, protocol=p)", "loads(data)", 5)
    rows = {(r["serializer"], r["object"]): r for r in run_small_objects(number=20)}
    assert rows[("pickle5", "people")]["bytes"] == len(
        pickle.dumps({"people": [{"name": "Alice"}]}, protocol=5))
    assert rows[("cpersist dumps/loads", "people")]["status"] == "ok"
