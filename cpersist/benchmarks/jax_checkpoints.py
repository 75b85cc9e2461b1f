"""JAX training states: cpersist against orbax-checkpoint and flax's msgpack.

Part of the checkpoints suite (:mod:`.checkpoints`): a flax model of
``nn.Dense`` layers with its optax Adam state, about 300 MB in float32 and
in bfloat16; save, blocking and restore times and sizes, every contender
once in turn per round. Without jax, flax, optax or orbax-checkpoint the
rows say ``not installed`` (``pip install 'cpersist[jax]'``).
"""

import os
import time

import cpersist

from .turns import contest_table, dumps_then_loads, medians, not_installed, ratio_row, ratio_rows

MB = 1 << 20
#: (layers, width) of the generated states, full size and ``--quick``.
SHAPES = {"float32": (6, 2048), "bfloat16": (12, 2048)}
QUICK_SHAPES = {"float32": (2, 64), "bfloat16": (2, 64)}
#: What the part needs, as modules and as pip names them.
NEEDS = (("jax", "jax"), ("flax", "flax"), ("optax", "optax"),
         ("orbax.checkpoint", "orbax-checkpoint"))


def missing():
    """The pip name of the first of :data:`NEEDS` not installed, or None."""
    return not_installed(NEEDS)


def training_state(dtype, layers, width, seed=0):
    """``{"params", "opt_state", "step"}``: a flax MLP of ``layers`` dense
    layers of ``width`` in ``dtype`` and its optax Adam state after one
    update with random gradients."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(layers):
                x = nn.relu(nn.Dense(width)(x))
            return x

    params = MLP().init(jax.random.key(seed), jnp.ones((1, width)))
    params = jax.tree.map(lambda p: p.astype(dtype), params)
    tx = optax.adam(1e-3)
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
    grads = jax.tree.unflatten(tree, [(jax.random.normal(k, p.shape) * 0.01).astype(dtype)
                                      for k, p in zip(keys, leaves)])
    updates, opt_state = tx.update(grads, tx.init(params), params)
    return jax.block_until_ready({"params": optax.apply_updates(params, updates),
                                  "opt_state": opt_state, "step": 1000})


def _leaves(state):
    import jax
    import numpy as np
    return [np.asarray(x) for x in jax.tree.leaves(state)]


def _check(expected, got, jax_arrays=True):
    """Same tree structure and leaf types, dtypes, shapes and bytes."""
    import jax
    assert jax.tree.structure(expected) == jax.tree.structure(got)
    assert not jax_arrays or all(type(a) is type(b) for a, b in zip(
        jax.tree.leaves(expected), jax.tree.leaves(got)))
    for a, b in zip(_leaves(expected), _leaves(got)):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def measure(name, state, directory, rounds):
    """Times and sizes of every contender on one training state."""
    import jax
    import orbax.checkpoint as ocp
    from flax import serialization
    p = {k: os.path.abspath(os.path.join(directory, f"jax-{name}.{k}"))
         for k in ("cp", "cp3", "bg", "orbax", "orbax_async", "msgpack")}
    checkpointer = ocp.StandardCheckpointer()
    calls = {"cpersist background=True": [], "orbax async save": []}

    def timed_call(name, start, finish):
        t0 = time.perf_counter()
        pending = start()
        calls[name].append(time.perf_counter() - t0)
        finish(pending)

    def msgpack_save():
        with open(p["msgpack"], "wb") as file:
            file.write(serialization.to_bytes(state))

    def msgpack_load():
        with open(p["msgpack"], "rb") as file:
            return serialization.from_bytes(state, file.read())

    def orbax_save(path):
        checkpointer.save(path, state)
        checkpointer.wait_until_finished()

    dumps = {
        "cpersist raw": (lambda: cpersist.dump(state, p["cp"]), "cp"),
        "cpersist compress=3": (lambda: cpersist.dump(state, p["cp3"], compress=3), "cp3"),
        "cpersist background=True": (lambda: timed_call(
            "cpersist background=True", lambda: cpersist.dump(state, p["bg"], background=True),
            lambda future: future.result()), "bg"),
        "orbax save": (lambda: orbax_save(p["orbax"]), "orbax"),
        "orbax async save": (lambda: timed_call(
            "orbax async save", lambda: checkpointer.save(p["orbax_async"], state),
            lambda _: checkpointer.wait_until_finished()), "orbax_async"),
        "flax msgpack": (msgpack_save, "msgpack"),
    }
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
    loads = {
        "cpersist.load": lambda: jax.block_until_ready(cpersist.load(p["cp"])),
        "cpersist.load compress=3": lambda: jax.block_until_ready(cpersist.load(p["cp3"])),
        "cpersist.load mmap_mode='r'": lambda: cpersist.load(p["cp"], mmap_mode="r"),
        "orbax restore": lambda: jax.block_until_ready(
            checkpointer.restore(p["orbax"], abstract)),
        "flax msgpack": msgpack_load,
    }

    def check():
        for n in ("cpersist.load", "cpersist.load compress=3", "cpersist.load mmap_mode='r'",
                  "orbax restore"):
            _check(state, loads[n]())
        _check(state, cpersist.load(p["bg"]))
        _check(state, msgpack_load(), jax_arrays=False)  # flax gives numpy arrays

    try:
        result = dumps_then_loads(dumps, loads, p, rounds, check)
    finally:
        checkpointer.close()
    calls = {n: times[1:] for n, times in calls.items()}  # the first round is untimed
    leaves = _leaves(state)
    return {"name": name, "array_mb": sum(x.nbytes for x in leaves) / MB, "arrays": len(leaves),
            "call_s": medians(calls), "call_rounds_s": calls, **result}


def run(directory, quick=False, rounds=5):
    """Every generated state measured: ``{"states": [...]}``, or
    ``{"missing": pip name}``."""
    absent = missing()
    if absent:
        return {"missing": absent}
    import jax.numpy as jnp
    states = []
    for dtype, (layers, width) in (QUICK_SHAPES if quick else SHAPES).items():
        state = training_state(getattr(jnp, dtype), layers, width)
        states.append(measure(dtype, state, directory, rounds))
        del state
    return {"states": states, "quick": quick}


#: The comparisons on each state, in order (:func:`.turns.ratio_rows`).
COMPARISONS = (
    ("compress=3 dump time / orbax StandardCheckpointer save's", "dump", "cpersist compress=3",
     "orbax save"),
    ("raw dump time / orbax save's", "dump", "cpersist raw", "orbax save"),
    ("compress=3 load time / orbax restore's", "load", "cpersist.load compress=3",
     "orbax restore"),
    ("raw load time / orbax restore's", "load", "cpersist.load", "orbax restore"),
    ("mmap_mode='r' load time / orbax restore's", "load", "cpersist.load mmap_mode='r'",
     "orbax restore"),
    ("compress=3 file size / orbax's", "{a:,} B / {b:,} B", "cp3", "orbax"),
    ("background=True call / orbax async save call", "call", "cpersist background=True",
     "orbax async save"),
    ("background=True until written / orbax async until written", "dump",
     "cpersist background=True", "orbax async save"),
    ("raw dump time / flax msgpack to_bytes and write", "dump", "cpersist raw", "flax msgpack"),
    ("raw load time / flax msgpack read and from_bytes", "load", "cpersist.load",
     "flax msgpack"),
)


def ratios(results):
    """Ratio rows: cpersist's time or size over orbax's (and flax's)."""
    if results.get("missing"):
        return [ratio_row("checkpoints", "JAX training state", missing=results["missing"])]
    return [row for r in results["states"] for row in ratio_rows(
        "checkpoints", f"JAX {r['name']} state ({r['array_mb']:.0f} MB, {r['arrays']} arrays)",
        COMPARISONS, r, ranges=False)]


def format_results(results):
    """Every contender's median time, its range and size, per state."""
    if results.get("missing"):
        return ""
    return "\n".join(f"JAX {r['name']} state: {r['array_mb']:.0f} MB in {r['arrays']} arrays\n"
                     f"{contest_table(r, ('dump', 'call', 'load'))}" for r in results["states"])
