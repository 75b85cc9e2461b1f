"""The hostile corpus (``tests/hostile/``): forged files, one or more per
known way a stranger's file attacked the restricted load, and the inputs the
fuzzer found (``found-*.cp``).

Every file is read by ``cpersist info``, :func:`cpersist.verify`,
``cpersist.load(path, trusted=False)`` and ``cpersist.loads(bytes,
trusted=False)`` in a fresh interpreter under a 2 GiB address-space limit
(:mod:`tests.hostile.check`, which reads the files one after the other and
goes on in a new interpreter after a crash, a kill or a change to the
process). Each read must end with a result or a cpersist error, within 5 s
and 1 GiB of peak memory, with no crash and no change to the process
(numpy's masked singleton, its built-in dtypes, the globals a stream may
name); a file's expectation (``README.md``) adds: refused, no uninitialised
bytes in what it loads, or the same object as a trusted load.
"""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from ._fresh import ROOT, fresh_env, run_python
from .hostile import make
from .hostile.check import HARD_SECONDS, READERS

CORPUS = os.path.join(ROOT, "tests", "hostile")
SECONDS = 5
PEAK_MB = 1024
pytestmark = pytest.mark.skipif(sys.platform != "linux",
                                reason="RLIMIT_AS and /proc are Linux's")


def corpus_files():
    """``{file name: expectation}`` of every file in the corpus."""
    expected = make.expectations()
    files = {}
    for name in sorted(os.listdir(CORPUS)):
        if name.endswith(".cp"):
            files[name] = expected.get(name, make.ANY if name.startswith("found-") else None)
    return files


def _needs_torch(name):
    return "torch" in name or "tensor" in name


def run_jobs(jobs):
    """``{(file name, reader): result}`` of :mod:`tests.hostile.check` run on
    ``jobs``, a new interpreter after each that ended the one before it."""
    results = {}
    start = 0
    while start < len(jobs):
        todo = jobs[start:]
        done = run_python("-m", "tests.hostile.check", json.dumps(todo), cwd=ROOT,
                          timeout=HARD_SECONDS * len(todo) + 120)
        started = None
        for line in done.stdout.splitlines():
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
                continue
            name = os.path.basename(record["path"])
            results[(name, record["reader"])] = record
            started = None
            start += 1
        if done.returncode == 0:
            assert start == len(jobs), done.stderr[-3000:]
            break
        if started is None:
            # Ended between jobs: a change to the process, reported in its line.
            assert done.returncode == 3, done.stderr[-3000:]
            continue
        path, _, reader = todo[started]
        code = -done.returncode
        results[(os.path.basename(path), reader)] = {
            "outcome": "KILLED after %d s" % HARD_SECONDS if code == signal.SIGALRM else
            f"CRASHED with {signal.Signals(code).name if code > 0 else done.returncode}",
            "stderr": done.stderr[-1500:]}
        start += 1
    return results


@pytest.fixture(scope="module")
def corpus_results():
    """Every file of the corpus read by every reader, once for the module."""
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    jobs = [[os.path.join(CORPUS, name), expected, reader]
            for name, expected in corpus_files().items()
            if have_torch or not _needs_torch(name) for reader in READERS]
    return run_jobs(jobs)


def test_the_corpus_is_what_its_generator_writes(tmp_path):
    """Each forged file holds the stream :mod:`tests.hostile.make` forges, each
    file has an expectation, and none is over 1 MB."""
    from cpersist.container import ContainerReader

    files = corpus_files()
    assert {n for n, e in files.items() if e is None} == set(), "files make.py does not know"
    assert set(make.expectations()) <= set(files), "run python -m tests.hostile.make"
    for name in files:
        assert os.path.getsize(os.path.join(CORPUS, name)) <= 1 << 20, name
    for name, (stream, _) in make.FORGED.items():
        with open(os.path.join(CORPUS, f"{name}.cp"), "rb") as f:
            reader = ContainerReader(f.read())
        assert bytes(reader.read_bytes(reader.sections[reader.root])) == stream, name
    make.write_forged(str(tmp_path))
    for name in make.FORGED:
        with open(os.path.join(CORPUS, f"{name}.cp"), "rb") as f:
            assert (tmp_path / f"{name}.cp").read_bytes() == f.read(), name


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(corpus_files()))
def test_hostile_file(name, corpus_results):
    expected = corpus_files()[name]
    if _needs_torch(name):
        if os.environ.get("CI") == "true":
            import torch  # noqa: F401  (CI installs torch: its files must run there)
        else:
            pytest.importorskip("torch")
    problems = []
    for reader in READERS:
        got = corpus_results[(name, reader)]
        outcome = got["outcome"]
        if outcome.startswith(("BARE", "CRASHED", "KILLED")):
            problems.append(f"{reader}: {outcome} {got.get('stderr', '')[-600:]}")
            continue
        if got["changed"]:
            problems.append(f"{reader}: changed the process: {got['changed']}")
        if got["seconds"] > SECONDS:
            problems.append(f"{reader}: took {got['seconds']} s")
        if got["peak_mb"] > PEAK_MB:
            problems.append(f"{reader}: peak of {got['peak_mb']} MB")
        if reader not in ("load", "loads"):
            continue
        if got.get("unchecked"):
            problems.append(f"{reader}: loaded a {got['type']}, but {got['unchecked']}")
        if expected == make.REFUSED and outcome == "ok":
            problems.append(f"{reader}: loaded ({got['type']}), not refused")
        if expected == make.LIMIT and outcome != "LimitExceededError":
            problems.append(f"{reader}: {outcome} {got.get('message', '')[:200]}, not a "
                            f"LimitExceededError")
        if expected == make.ZEROS and got.get("nonzero"):
            problems.append(f"{reader}: gave back uninitialised bytes in a {got['type']}")
        if expected == make.SAME and not got.get("same"):
            problems.append(f"{reader}: {outcome} {got.get('message', '')[:200]}; "
                            f"a trusted load gives the object")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_fuzzer_runs(tmp_path):
    """``benchmarks/fuzz_restricted.py`` fuzzes (500 inputs in this process,
    seeded with benign dumps) without a finding, and its mutator rebuilds a
    dump around a changed pickle stream that loads as a file, and a dump
    with a buffer block as it was."""
    if os.environ.get("CI") != "true":
        pytest.importorskip("atheris")
    import io

    import cpersist
    from benchmarks.fuzz_restricted import small_arrays, take_apart, with_blocks, wrap
    from cpersist.container.layout import HEADER

    buf = io.BytesIO()
    obj = {"a": np.arange(20000, dtype=np.int32), "b": [1, "x"]}  # a section
    cpersist.dump(obj, buf)
    stream, arrays = take_apart(buf.getvalue())
    assert len(arrays) == 1 and stream.endswith(b".")
    rebuilt = cpersist.loads(wrap(stream.replace(b"\x8c\x01x", b"\x8c\x01y"), arrays),
                             trusted=False)
    assert rebuilt["b"] == [1, "y"] and rebuilt["a"].tolist() == obj["a"].tolist()
    # A file with a buffer block comes apart and is rebuilt as it was (format
    # 2.5), so that the mutator's edits of a block reach the readers.
    blocks = with_blocks(small_arrays())
    assert HEADER.unpack(blocks[:HEADER.size])[2] == 5
    assert wrap(*take_apart(blocks)) == blocks
    # libFuzzer's -rss_limit_mb reads the peak RSS (getrusage), which Linux
    # carries across exec from the forked copy of this process: started
    # straight from a test worker that has grown past 2 GiB, the fuzzer
    # reports an out-of-memory at its first input. A shell in between forks
    # the fuzzer from its own small image.
    args = [sys.executable, "-m", "benchmarks.fuzz_restricted", "--work", str(tmp_path),
            "--leave-out", "hostile-*", "--leave-out", "attack-*", "-fork=0", "-runs=500",
            "-seed=1"]
    done = subprocess.run(["/bin/sh", "-c", '"$@"; exit $?', "sh", *args], cwd=ROOT,
                          env=fresh_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # libFuzzer checks -runs between mutation batches, so it may stop a run
    # or two past it ("Done 501 runs").
    ran = re.search(r"Done (\d+) runs", done.stderr)
    assert ran and int(ran.group(1)) >= 500, done.stderr[-3000:]
    assert not os.listdir(tmp_path / "crashes")
    seeded = set(os.listdir(tmp_path / "corpus"))  # the seeds, where the corpus is
    assert {"fixture-2.3-records.cpl", "fixture-2.4-growing.cp", "dump-0-0.cp",
            "blocks-arrays.cp", "fixture-2.5-blocks-zstd-3.cp"} <= seeded
