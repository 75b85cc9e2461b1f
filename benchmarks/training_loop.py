"""What saving a checkpoint costs a training loop: background dumps against
torch.save and orbax's asynchronous save, and what a background dump's call
and completion cost against a copy of its arrays and a plain dump.

``calls``: a checkpoint of ``--mb`` MB (arrays of 64 MB), timed in turn
round after round: a copy of its arrays into memory copied into before
(``np.copyto``), a plain ``cpersist.dump``, and ``dump(...,
background=True)``: the call, and until ``result()`` returns.

"background dump" writes the large arrays from the first on, from the
originals' memory, while the call copies them from the last one back, until
the two meet (as cpersist does); "bg copy first" copies all of them before
the dump starts (``cpersist.pickling.background.OVERLAP_COPIES = False``).

``loop``: the steps per second of a numpy, torch or jax loop whose state
(weights and momentum of ``--mb`` MB in all, layers of ``--side`` x
``--side`` float32, 4096 by default)
takes one step of a linear layer's forward pass, gradient (batch
``--batch``) and momentum update per layer, checkpointing it every
``--every`` steps: not at all, with ``cpersist.dump(background=True)``, a
plain ``cpersist.dump``, ``torch.save`` (torch) or orbax's
``StandardCheckpointer`` without waiting (jax, ``force=True`` to one
directory). Each run takes ``--steps`` steps; the runs of one round run in
turn, with the order rotated each round; a pending checkpoint is waited for
after a run's clock stops.

Run from the repository root:

    python benchmarks/training_loop.py calls --mb 1024 --rounds 7
    python benchmarks/training_loop.py loop --framework numpy --mb 1024 --rounds 5
    python benchmarks/training_loop.py loop --framework jax --compress 3
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cpersist  # noqa: E402
from cpersist.pickling import background as _background  # noqa: E402

MB = 1 << 20


def load_average():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.split("average:")[-1].strip()


def in_turn(contenders, rounds):
    """Each contender's times over ``rounds`` rounds (after one untimed),
    the order rotated each round; a contender returns its seconds."""
    names = list(contenders)
    times = {name: [] for name in names}
    for number in range(rounds + 1):
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
    path = os.path.join(directory, "calls.cp")

    def memcpy():
        t0 = time.perf_counter()
        for k, v in obj.items():
            np.copyto(copies[k], v)
        return time.perf_counter() - t0

    def plain():
        t0 = time.perf_counter()
        cpersist.dump(obj, path, compress=args.compress)
        elapsed = time.perf_counter() - t0
        os.unlink(path)
        return elapsed

    def in_background(overlap):
        def timed():
            _background.OVERLAP_COPIES = overlap
            t0 = time.perf_counter()
            future = cpersist.dump(obj, path, compress=args.compress, background=True)
            call_times[overlap].append(time.perf_counter() - t0)
            future.result()
            elapsed = time.perf_counter() - t0
            _background.OVERLAP_COPIES = True
            os.unlink(path)
            return elapsed
        return timed

    call_times = {True: [], False: []}
    before = load_average()
    times = in_turn({"memcpy": memcpy, "plain dump": plain, "background dump": in_background(True),
                     "bg copy first": in_background(False)}, args.rounds)
    times["background call"] = call_times[True][1:]
    times["bg copy first call"] = call_times[False][1:]
    print(f"{args.mb} MB in {n} arrays, compress={args.compress}, {args.rounds} rounds; "
          f"load average {before} -> {load_average()}")
    for name, runs in times.items():
        print(f"  {name:18s} median {statistics.median(runs) * 1e3:7.1f} ms  min "
              f"{min(runs) * 1e3:7.1f} ms  ({' '.join(f'{t * 1e3:.0f}' for t in runs)})")
    for mine, peer in (("background call", "memcpy"), ("background dump", "plain dump"),
                       ("bg copy first call", "memcpy"), ("bg copy first", "plain dump")):
        print(f"  {mine} / {peer}: median {statistics.median(times[mine]) / statistics.median(times[peer]):.3f}"
              f", min {min(times[mine]) / min(times[peer]):.3f}")


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


def copy_first(call):
    """``call()`` with the background dump's copies made before it writes."""
    _background.OVERLAP_COPIES = False
    try:
        return call()
    finally:
        _background.OVERLAP_COPIES = True


def loop(args, directory):
    """Steps per second of a loop saving its state every ``args.every`` steps."""
    layer_mb = args.side * args.side * 4 / MB
    n = max(1, round(args.mb / (2 * layer_mb)))  # weights and momentum per layer
    state, step = {"numpy": _numpy_loop, "torch": _torch_loop, "jax": _jax_loop}[
        args.framework](n, args.side, args.batch)
    path = os.path.join(directory, "loop.cp")
    pending = []
    savers = {"none": None,
              "cpersist background": lambda: pending.append(
                  cpersist.dump(state, path, compress=args.compress, background=True)),
              "bg copy first": lambda: pending.append(copy_first(
                  lambda: cpersist.dump(state, path, compress=args.compress, background=True))),
              "cpersist dump": lambda: cpersist.dump(state, path, compress=args.compress)}
    checkpointer = None
    if args.framework == "torch":
        import torch

        savers["torch.save"] = lambda: torch.save(state, os.path.join(directory, "loop.pt"))
    if args.framework == "jax":
        import orbax.checkpoint as ocp

        checkpointer = ocp.StandardCheckpointer()
        savers["orbax async"] = lambda: checkpointer.save(
            os.path.join(directory, "orbax"), state, force=True)

    def run(save):
        def timed():
            t0 = time.perf_counter()
            for number in range(1, args.steps + 1):
                step()
                if save is not None and number % args.every == 0:
                    save()
            elapsed = time.perf_counter() - t0
            while pending:  # untimed: the next run starts with nothing pending
                pending.pop().result()
            if checkpointer is not None:
                checkpointer.wait_until_finished()
            return args.steps / elapsed
        return timed

    before = load_average()
    try:
        rates = in_turn({name: run(save) for name, save in savers.items()}, args.rounds)
    finally:
        if checkpointer is not None:
            checkpointer.close()
    print(f"{args.framework} loop: {n} layers, checkpoint {2 * n * layer_mb:.0f} MB every {args.every} "
          f"steps, {args.steps} steps per run, compress={args.compress}, {args.rounds} rounds; "
          f"load average {before} -> {load_average()}")
    base = statistics.median(rates["none"])
    for name, runs in rates.items():
        rate = statistics.median(runs)
        print(f"  {name:20s} {rate:6.3f} steps/s (median; {' '.join(f'{r:.3f}' for r in runs)})"
              f"  loss {1 - rate / base:+.1%}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("calls", "loop"))
    parser.add_argument("--framework", choices=("numpy", "torch", "jax"), default="numpy")
    parser.add_argument("--mb", type=int, default=1024, help="checkpoint size")
    parser.add_argument("--compress", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30, help="steps per run")
    parser.add_argument("--every", type=int, default=10, help="steps between checkpoints")
    parser.add_argument("--batch", type=int, default=256, help="rows of a step's input")
    parser.add_argument("--side", type=int, default=4096, help="a layer's weights are side x side")
    args = parser.parse_args(argv)
    directory = tempfile.mkdtemp(prefix="cpersist-training-loop-")
    try:
        (calls if args.part == "calls" else loop)(args, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
