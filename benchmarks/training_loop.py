"""What saving a checkpoint costs a training loop: background dumps against
torch.save and orbax's asynchronous save, and what a background dump's call
and completion cost against a copy of its arrays and a plain dump.

``calls``: a checkpoint of ``--mb`` MB (arrays of 64 MB), timed in turn
round after round: a copy of its arrays into memory copied into before
(``np.copyto``), a plain ``cpersist.dump``, and ``dump(...,
background=True)``: the call, and until ``result()`` returns.
Both sides wait for the disk: a dump written directly ends once the disk
has its bytes, and a plain dump replacing its file on ext4 has most of its
bytes written out by the rename (``auto_da_alloc``: 0.7-1 GB of 1 GiB
during a 0.3-0.45 s ``os.replace``, measured here).

"background dump" writes the large arrays from the first on, from the
originals' memory, while the call copies them from the last one back, until
the two meet (as cpersist does); with ``--copy-first``, "bg copy first"
copies all of them before the dump starts
(``cpersist.pickling.background.OVERLAP_COPIES = False``); with
``--unpaced``, "bg unpaced" copies as fast as it can from the start rather
than leave to the dump what it can write in about the time a copy takes
(``cpersist.pickling.copy_pace.CALL_BUDGET = 0``); with ``--cached``, "bg
page cache" writes its file through the page cache as a plain dump does,
rather than around it (``cpersist.pickling.background.DIRECT_FROM``). Every
dump replaces the file it wrote the round before (the first, untimed round
writes them), as a loop saving its checkpoint does; after each contender,
untimed, the deletion of the file it replaced and the write-back of the
page cache are waited for, so that none pays for the one before. Beside each
ratio of medians and of minimums, the median of the ratios of each round's
pair, in wall and in CPU time (the process's, all threads). With
``--fsync``, both dumps end once the file is on disk rather than in the page
cache, whose writing back otherwise varies with the machine's other writes.

``loop``: the steps per second of a numpy, torch or jax loop whose state
(weights and momentum of ``--mb`` MB in all, layers of ``--side`` x
``--side`` float32, 4096 by default) takes one step of a linear layer's
forward pass, gradient (batch ``--batch``) and momentum update per layer,
checkpointing it every ``--every`` steps with each of ``--savers``: not at
all (``none``), ``cpersist.dump(background=True)`` (``background``), the same
with its call copying all it can (``unpaced``), with its copies made
before it writes (``copy-first``) or with its file written through the page
cache (``cached``), a plain
``cpersist.dump`` (``dump``), ``torch.save`` (``torch``, torch loop) or
orbax's ``StandardCheckpointer`` without waiting (``orbax``, jax loop,
``force=True`` to one directory), or, jax loop, a background dump that
holds the JAX arrays' buffers until written rather than copying them
(``pinned``: ``cpersist.pickling.snapshot_pickler.COPY_JAX = False``; a
jitted step that donates them then writes its results into fresh memory).
By default: none, background, and the framework's own (torch.save, orbax
async; a plain dump for numpy).

``cpu``: the CPU seconds each checkpoint of the same loop costs (median and
minimum over ``--rounds``), all threads together and by thread: the call or
the save on the loop's thread, a background dump on its own, its checksums
on cpersist's pool, its direct writes on the thread writing them; for ``cpersist.dump(background=True)``, the same
written through the page cache, and torch.save (torch loop) or a plain
dump (and, jax loop, ``pinned``). The loop trains ``--every`` steps after each checkpoint, so that the
dump runs beside it; "all" is the process's CPU time (every thread) beyond
that of the same steps without saving (run in turn with the savers), of
which what the steps cost beyond is the checkpoint's too: a jax loop that donates its state cannot reuse
buffers a background dump still reads (``pinned``), and pays for fresh memory in the
step after. CPU times, unlike steps per second, change little when the
machine is busy.

A run takes ``--steps`` steps and checkpoints before steps 0, ``every``,
``2 * every``...: each checkpoint is followed by ``every`` timed steps, which
an asynchronous save overlaps, and the clock stops once the last checkpoint
is written (a save still running when the next one starts waits for it, as
in a training loop that keeps checkpointing). So a run of 30 steps, every
10, costs what 30 steps of a long run do. Each figure is the median over
``--rounds`` rounds, the savers run in turn with the order rotated each
round, after a warm-up of one step and one save each; after each run, its
files are removed and the page cache written back, untimed (a run does not
pay for the write-back of an earlier run's files). Beside steps per second of
wall time, steps per second of the process's CPU time (all its
threads: the loop's, the writer's, orbax's), which a loaded machine
disturbs less.

Run from the repository root:

    python benchmarks/training_loop.py calls --mb 1024 --rounds 7
    python benchmarks/training_loop.py loop --framework torch --mb 1024 --rounds 3
    python benchmarks/training_loop.py loop --framework jax --savers none,background,orbax
    python benchmarks/training_loop.py cpu --framework torch --mb 1024 --rounds 3
"""

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cpersist  # noqa: E402
from cpersist._runtime.threads import run_later as _run_later  # noqa: E402
from cpersist.container import direct_io as _direct_io  # noqa: E402
from cpersist.pickling import background as _background  # noqa: E402
from cpersist.pickling import copy_pace as _copy_pace  # noqa: E402
from cpersist.pickling import snapshot_pickler as _snapshot_pickler  # noqa: E402

#: ``background.DIRECT_FROM`` for a background dump written through the page cache.
NEVER_DIRECT = 1 << 62

MB = 1 << 20


def load_average():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.split("average:")[-1].strip()


def in_turn(contenders, rounds, untimed_round=True):
    """Each contender's results over ``rounds`` rounds (after one untimed,
    with ``untimed_round``), the order rotated each round; a contender
    returns its seconds (or any figure)."""
    names = list(contenders)
    times = {name: [] for name in names}
    for number in range(0 if untimed_round else 1, rounds + 1):
        for i in range(len(names)):
            name = names[(number + i) % len(names)]
            elapsed = contenders[name]()
            if number:
                times[name].append(elapsed)
    return times


def calls(args, directory):
    """The call of a background dump against a copy, and its end against a plain dump."""
    rng = np.random.default_rng(0)
    n = max(1, args.mb // 64)
    obj = {f"layer{i}": rng.standard_normal(args.mb * MB // 4 // n, np.float32)
           for i in range(n)}
    copies = {k: np.empty_like(v) for k, v in obj.items()}

    def path_of(name):
        # Each dump replaces the file it wrote the round before, as a loop
        # saving its checkpoint does: the old file's pages are freed only
        # once the new one is written. (Removing each file after its dump
        # would let the next dump's writes reuse the pages just freed,
        # which a checkpointing loop's dumps never do: on a virtual machine
        # that gives freed memory back to its host, several times cheaper.)
        return os.path.join(directory, name.replace(" ", "-") + ".cp")

    def timed(work):
        """``work``'s wall and CPU seconds (the process's: all its threads),
        then, untimed, what it left to be done after it returned."""
        def run():
            t0, c0 = time.perf_counter(), time.process_time()
            work()
            elapsed = time.perf_counter() - t0, time.process_time() - c0
            settle()
            return elapsed
        return run

    def settle():
        """Wait for the deletion of the files the last dump replaced
        (deferred to cpersist's run_later thread, which also writes direct
        files' buffers) and write back the page cache: a contender does not
        pay for the one before, as a loop's checkpoint, which comes steps
        after the last, does not. (A replaced 1 GB file's deletion took 0.2
        s of the disk here; without this, a background dump run right after
        another dump started writing that much later.)"""
        done = threading.Event()
        _run_later(done.set)
        done.wait()
        os.sync()

    def memcpy():
        for k, v in obj.items():
            np.copyto(copies[k], v)

    def plain():
        # As the background dump does: same codec, threads and fsync.
        cpersist.dump(obj, path_of("plain"), compress=args.compress, fsync=args.fsync)

    def in_background(name, **variant):
        def work():
            with background_variant(**variant):
                t0 = time.perf_counter()
                future = cpersist.dump(obj, path_of(name), compress=args.compress,
                                       fsync=args.fsync, background=True)
                call_times[name].append(time.perf_counter() - t0)
                future.result()
        return work

    contenders = {"memcpy": memcpy, "plain dump": plain,
                  "background dump": in_background("background dump")}
    if args.copy_first:
        contenders["bg copy first"] = in_background("bg copy first", overlap=False)
    if args.unpaced:
        contenders["bg unpaced"] = in_background("bg unpaced", paced=False)
    if args.cached:
        contenders["bg page cache"] = in_background("bg page cache", cached=True)
    call_times = {name: [] for name in contenders if name.startswith("b")}
    before = load_average()
    results = in_turn({name: timed(work) for name, work in contenders.items()}, args.rounds)
    times = {name: [r[0] for r in runs] for name, runs in results.items()}
    cpu = {name: [r[1] for r in runs] for name, runs in results.items()}
    for name, runs in call_times.items():
        times[name.replace(" dump", "") + " call"] = runs[1:]
    print(f"{args.mb} MB in {n} arrays, compress={args.compress}, fsync={args.fsync}, "
          f"{args.rounds} rounds; "
          f"load average {before} -> {load_average()}")
    for name, runs in times.items():
        line = (f"  {name:18s} median {statistics.median(runs) * 1e3:7.1f} ms  min "
                f"{min(runs) * 1e3:7.1f} ms  ({' '.join(f'{t * 1e3:.0f}' for t in runs)})")
        if name in cpu:
            line += f"  cpu median {statistics.median(cpu[name]) * 1e3:.0f} ms"
        print(line)
    pairs = [pair for name in call_times
             for pair in ((name.replace(" dump", "") + " call", "memcpy"), (name, "plain dump"))]
    for mine, peer in pairs:
        # Each round times both within seconds of each other: the ratio of
        # a round's pair is less drift-prone than a ratio of two medians.
        paired = [a / b for a, b in zip(times[mine], times[peer])]
        line = (f"  {mine} / {peer}: median {statistics.median(times[mine]) / statistics.median(times[peer]):.3f}"
                f", min {min(times[mine]) / min(times[peer]):.3f}, per round median "
                f"{statistics.median(paired):.3f}")
        if mine in cpu:
            paired_cpu = [a / b for a, b in zip(cpu[mine], cpu[peer])]
            line += f"; cpu per round median {statistics.median(paired_cpu):.3f}"
        print(line)


def _numpy_loop(n, side, batch):
    rng = np.random.default_rng(0)
    state = {"w": [rng.standard_normal((side, side), np.float32) * 0.01 for _ in range(n)],
             "m": [np.zeros((side, side), np.float32) for _ in range(n)], "step": 0}
    x = rng.standard_normal((batch, side), np.float32)

    def step():
        for w, m in zip(state["w"], state["m"]):
            g = x.T @ np.tanh(x @ w)
            m *= 0.9
            m += g
            w -= 1e-4 * m
        state["step"] += 1
    return state, step


def _torch_loop(n, side, batch):
    import torch

    g = torch.Generator().manual_seed(0)
    state = {"w": [torch.randn(side, side, generator=g) * 0.01 for _ in range(n)],
             "m": [torch.zeros(side, side) for _ in range(n)], "step": 0}
    x = torch.randn(batch, side, generator=g)

    @torch.no_grad()
    def step():
        for w, m in zip(state["w"], state["m"]):
            m.mul_(0.9).add_(x.T @ torch.tanh(x @ w))
            w.sub_(m, alpha=1e-4)
        state["step"] += 1
    return state, step


def _jax_loop(n, side, batch):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(0), n + 1)
    state = {"w": [jax.random.normal(k, (side, side)) * 0.01 for k in keys[:n]],
             "m": [jnp.zeros((side, side)) for _ in range(n)], "step": 0}
    x = jax.random.normal(keys[n], (batch, side))

    def update(w, m, x):
        m = 0.9 * m + x.T @ jnp.tanh(x @ w)
        return w - 1e-4 * m, m
    update = jax.jit(update, donate_argnums=(0, 1))

    def step():
        pairs = [update(w, m, x) for w, m in zip(state["w"], state["m"])]
        state["w"], state["m"] = [p[0] for p in pairs], [p[1] for p in pairs]
        state["step"] += 1
        jax.block_until_ready(state["w"])
    return state, step


@contextlib.contextmanager
def background_variant(overlap=True, paced=True, cached=False, pinned=False):
    """The background dump's settings for one of the lab's variants, put
    back after the block: ``overlap=False``, the call copies every array
    before the dump writes; ``paced=False``, it copies as fast as it can;
    ``cached``, the file goes through the page cache; ``pinned``, JAX
    arrays are held, not copied (with memory of its own for the copies of
    the rest: the other variants' memory stays theirs to reuse)."""
    saved = (_background.OVERLAP_COPIES, _copy_pace.CALL_BUDGET, _background.DIRECT_FROM,
             _snapshot_pickler.COPY_JAX, _background._buffers)
    _background.OVERLAP_COPIES = overlap
    if not paced:
        _copy_pace.CALL_BUDGET = 0
    if cached:
        _background.DIRECT_FROM = NEVER_DIRECT
    if pinned:
        _snapshot_pickler.COPY_JAX = False
        _background._buffers = _pinned_buffers
    try:
        yield
    finally:
        (_background.OVERLAP_COPIES, _copy_pace.CALL_BUDGET, _background.DIRECT_FROM,
         _snapshot_pickler.COPY_JAX, shared) = saved
        if pinned:
            _background._buffers = shared


_pinned_buffers = _snapshot_pickler.Buffers()


#: The loop's savers that are background dumps, and their settings
#: (:func:`background_variant`).
BACKGROUND_VARIANTS = {"background": {}, "unpaced": {"paced": False},
                       "cached": {"cached": True}, "copy-first": {"overlap": False},
                       "pinned": {"pinned": True}}
#: Savers each framework's loop runs unless told (see ``--savers``).
DEFAULT_SAVERS = {"numpy": "none,background,dump", "torch": "none,background,torch",
                  "jax": "none,background,orbax"}
SAVER_NAMES = {"none": "none", "background": "cpersist background",
               "pinned": "bg pinned",
               "unpaced": "bg unpaced", "copy-first": "bg copy first",
               "cached": "bg page cache",
               "dump": "cpersist dump",
               "torch": "torch.save", "orbax": "orbax async"}


def loop(args, directory):
    """Steps per second of a loop saving its state every ``args.every`` steps."""
    wanted = (args.savers or DEFAULT_SAVERS[args.framework]).split(",")
    unknown = [name for name in wanted if name not in SAVER_NAMES]
    if unknown or ("torch" in wanted and args.framework != "torch") or (
            "orbax" in wanted and args.framework != "jax") or (
            "pinned" in wanted and args.framework != "jax"):
        raise SystemExit(f"--savers: {','.join(wanted)} names a saver unknown or not of "
                         f"the {args.framework} loop; choose from {', '.join(SAVER_NAMES)}")
    layer_mb = args.side * args.side * 4 / MB
    n = max(1, round(args.mb / (2 * layer_mb)))  # weights and momentum per layer
    state, step = {"numpy": _numpy_loop, "torch": _torch_loop, "jax": _jax_loop}[
        args.framework](n, args.side, args.batch)
    path = os.path.join(directory, "loop.cp")
    pending = []
    checkpointer = None
    savers = {}
    for name in wanted:
        if name == "none":
            save = None
        elif name in BACKGROUND_VARIANTS:
            def save(variant=BACKGROUND_VARIANTS[name]):
                with background_variant(**variant):
                    pending.append(cpersist.dump(state, path, compress=args.compress,
                                                 background=True))
        elif name == "dump":
            def save():
                cpersist.dump(state, path, compress=args.compress)
        elif name == "torch":
            import torch

            def save():
                torch.save(state, os.path.join(directory, "loop.pt"))
        else:
            import orbax.checkpoint as ocp

            checkpointer = ocp.StandardCheckpointer()

            def save():
                checkpointer.save(os.path.join(directory, "orbax"), state, force=True)
        savers[SAVER_NAMES[name]] = save

    def finish_saves():
        while pending:
            pending.pop().result()
        if checkpointer is not None:
            checkpointer.wait_until_finished()

    def run(name, save, steps):
        def timed():
            print(f"  {name} ...", end="", file=sys.stderr, flush=True)
            t0, c0 = time.perf_counter(), time.process_time()
            for number in range(steps):
                if save is not None and number % args.every == 0:
                    save()
                step()
            finish_saves()  # the last checkpoint's cost is the run's too
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(f" {wall:.1f} s wall, {cpu:.1f} s cpu", file=sys.stderr, flush=True)
            clean_up()
            return steps / wall, steps / cpu
        return timed

    def clean_up():
        """Untimed: remove what the run wrote and write back what else is in
        the page cache, so that no run pays for the write-back of files an
        earlier one left (1 GB files cross the kernel's dirty-page limit
        in two or three saves)."""
        for name in os.listdir(directory):
            where = os.path.join(directory, name)
            if os.path.isdir(where):
                shutil.rmtree(where, ignore_errors=True)
            else:
                os.unlink(where)
        os.sync()

    before = load_average()
    try:
        # Warm-up: the first save allocates (a background dump's snapshot
        # memory, orbax's threads), and jax compiles the step.
        in_turn({name: run(name, save, 1) for name, save in savers.items()}, 0)
        results = in_turn({name: run(name, save, args.steps) for name, save in savers.items()},
                          args.rounds, untimed_round=False)
    finally:
        if checkpointer is not None:
            checkpointer.close()
    print(f"{args.framework} loop: {n} layers, checkpoint {2 * n * layer_mb:.0f} MB every "
          f"{args.every} steps, {args.steps} steps per run, batch {args.batch}, "
          f"compress={args.compress}, {args.rounds} rounds; load average {before} -> "
          f"{load_average()}")
    base_wall = statistics.median(r[0] for r in results["none"]) if "none" in results else None
    base_cpu = statistics.median(r[1] for r in results["none"]) if "none" in results else None
    for name, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        line = (f"  {name:20s} {wall:6.3f} steps/s (median; {' '.join(f'{r[0]:.3f}' for r in runs)})"
                f"  {cpu:6.3f} steps/cpu-s")
        if base_wall is not None:
            line += f"  loss {1 - wall / base_wall:+.1%} wall, {1 - cpu / base_cpu:+.1%} cpu"
            # Against the same round's loop without saving: drift between rounds cancels.
            paired = [1 - r[0] / b[0] for r, b in zip(runs, results["none"])]
            line += f"; per round median {statistics.median(paired):+.1%} wall"
        print(line)


def checkpoint_cpu(args, directory):
    """CPU seconds each checkpoint costs the process while its loop trains
    on: the call's (or the save's) on the loop's thread, a background
    dump's on its own thread, its checksums on cpersist's pool, its direct
    writes on the thread writing them (see direct_io.DirectFile). Each saver
    saves, the loop takes ``--every`` steps, and the dump is waited for;
    the savers in turn, each replacing its own file, ``--rounds`` rounds
    after an untimed one."""
    import resource
    from concurrent.futures import Future

    from cpersist.pickling import dump as _dump

    layer_mb = args.side * args.side * 4 / MB
    n = max(1, round(args.mb / (2 * layer_mb)))
    state, step = {"numpy": _numpy_loop, "torch": _torch_loop, "jax": _jax_loop}[
        args.framework](n, args.side, args.batch)
    dump_thread = []
    write_to = _dump.write_to

    def thread_cpu():
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        return usage.ru_utime + usage.ru_stime

    def measured_write_to(*given, **named):  # runs on the dump's thread
        start = thread_cpu()
        try:
            return write_to(*given, **named)
        finally:
            dump_thread.append(thread_cpu() - start)

    writer_ids = []  # the native id of the thread writing direct files' buffers
    write_buffer = _direct_io._write_buffer

    def recorded_write_buffer(*given):  # on that thread
        if not writer_ids:
            writer_ids.append(threading.get_native_id())
        return write_buffer(*given)

    def task_cpu(native_id):
        with open(f"/proc/self/task/{native_id}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def pool_cpu():
        return sum(task_cpu(thread.native_id) for thread in threading.enumerate()
                   if thread.name.startswith("cpersist_"))

    def writer_cpu():
        return task_cpu(writer_ids[0]) if writer_ids else 0.0

    def background(name, **variant):
        def save():
            with background_variant(**variant):
                return cpersist.dump(state, os.path.join(directory, f"{name}.cp"),
                                     compress=args.compress, background=True)
        return save

    savers = {"none": lambda: None, "cpersist background": background("bg"),
              "bg page cache": background("cached", cached=True)}
    if args.framework == "torch":
        import torch

        savers["torch.save"] = lambda: torch.save(state, os.path.join(directory, "loop.pt"))
    else:
        savers["cpersist dump"] = lambda: cpersist.dump(
            state, os.path.join(directory, "plain.cp"), compress=args.compress)
    if args.framework == "jax":
        savers["bg pinned"] = background("pinned", pinned=True)

    def run(save):
        def measure():
            total = time.process_time()
            pool, writes, call = pool_cpu(), writer_cpu(), thread_cpu()
            future = save()
            call = thread_cpu() - call
            for _ in range(args.every):
                step()
            dumped = 0.0
            if isinstance(future, Future):  # a background dump's
                future.result()
                dumped = dump_thread.pop()
            return (call, dumped, pool_cpu() - pool, writer_cpu() - writes,
                    time.process_time() - total)
        return measure

    _dump.write_to = measured_write_to
    _direct_io._write_buffer = recorded_write_buffer
    before = load_average()
    try:
        results = in_turn({name: run(save) for name, save in savers.items()}, args.rounds)
    finally:
        _dump.write_to = write_to
        _direct_io._write_buffer = write_buffer
    print(f"{args.framework} loop, checkpoint {2 * n * layer_mb:.0f} MB, {args.every} steps "
          f"after each, {args.rounds} rounds; load average {before} -> {load_average()}")
    print("  CPU seconds per checkpoint, median (min): all (the process's beyond the loop's "
          "without saving); the call on the loop's thread, the dump's thread, cpersist's pool, "
          "the thread writing direct files' buffers (and deleting replaced files), the steps "
          "after it beyond the loop's without saving")
    # Against the same round's steps without saving: drift between rounds cancels.
    results = {name: [run[:4] + (run[4] - none[4] - sum(run[:4]),)
                      for run, none in zip(runs, results["none"])]
               for name, runs in results.items() if name != "none"}
    for name, runs in results.items():
        totals = [sum(run) for run in runs]
        parts = ", ".join(f"{statistics.median(r[i] for r in runs):+.2f}" if i == 4 else
                          f"{statistics.median(r[i] for r in runs):.2f}" for i in range(5))
        print(f"  {name:20s} {statistics.median(totals):5.2f} ({min(totals):.2f}); {parts}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("calls", "loop", "cpu"))
    parser.add_argument("--framework", choices=("numpy", "torch", "jax"), default="numpy")
    parser.add_argument("--mb", type=int, default=1024, help="checkpoint size")
    parser.add_argument("--compress", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30, help="steps per run")
    parser.add_argument("--every", type=int, default=10, help="steps between checkpoints")
    parser.add_argument("--batch", type=int, default=256, help="rows of a step's input")
    parser.add_argument("--side", type=int, default=4096, help="a layer's weights are side x side")
    parser.add_argument("--fsync", action="store_true",
                        help="calls: both dumps fsync the file (the end is then on disk)")
    parser.add_argument("--copy-first", action="store_true",
                        help="calls: also time background dumps that copy every array first")
    parser.add_argument("--unpaced", action="store_true",
                        help="calls: also time background dumps whose call copies all it can")
    parser.add_argument("--cached", action="store_true",
                        help="calls: also time background dumps written through the page cache")
    parser.add_argument("--savers", help="loop: comma-separated, of " + ", ".join(SAVER_NAMES)
                        + " (default: none, background and the framework's own)")
    args = parser.parse_args(argv)
    directory = tempfile.mkdtemp(prefix="cpersist-training-loop-")
    try:
        {"calls": calls, "loop": loop, "cpu": checkpoint_cpu}[args.part](args, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
