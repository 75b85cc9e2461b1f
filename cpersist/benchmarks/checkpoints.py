"""Model checkpoints: cpersist against torch.save, safetensors and joblib.

On generated transformer-shaped checkpoints (float32, 340 MB; bfloat16,
98 MB) or the user's own ``.pt`` / ``.safetensors`` files: dump and load
times, file sizes and compression ratios, side by side in one run; a JAX
training state against orbax and flax is :mod:`.jax_checkpoints`. Times
are medians of rounds in which every contender runs once in turn
(:func:`.turns.timed_in_turn`), warm page cache, in this process.
"""

import os
import time

import cpersist

from . import jax_checkpoints
from .output import measure_into
from .turns import contest_table, dumps_then_loads, not_installed, ratio_row, ratio_rows

MB = 1 << 20
#: (layers, width) of the generated checkpoints, full size and ``--quick``.
SHAPES = {"float32": (12, 768), "bfloat16": (10, 640)}
QUICK_SHAPES = {"float32": (4, 256), "bfloat16": (4, 256)}
#: Suffixes of users' checkpoint files.
SUFFIXES = (".pt", ".pth", ".safetensors")


def is_checkpoint_file(path):
    return str(path).endswith(SUFFIXES)


def transformer_checkpoint(dtype, layers, width, seed=0):
    """A checkpoint dict: ``model`` (a state dict of ``layers`` encoder
    layers of ``width``, feed-forward ``4 * width``), ``optimizer``,
    ``step`` and ``config``."""
    import torch
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(dt)

    sd = {}
    d, ff = width, 4 * width
    shapes = {"self_attn.in_proj_weight": (3 * d, d), "self_attn.in_proj_bias": (3 * d,),
              "self_attn.out_proj.weight": (d, d), "self_attn.out_proj.bias": (d,),
              "linear1.weight": (ff, d), "linear1.bias": (ff,), "linear2.weight": (d, ff),
              "linear2.bias": (d,)}
    for i in range(layers):
        sd.update((f"{i}.{name}", w(*shape)) for name, shape in shapes.items())
        for norm in ("norm1", "norm2"):
            sd[f"{i}.{norm}.weight"] = torch.ones(d, dtype=dt)
            sd[f"{i}.{norm}.bias"] = torch.zeros(d, dtype=dt)
    optimizer = {"state": {}, "param_groups": [{
        "lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01,
        "amsgrad": False, "params": list(range(len(sd)))}]}
    return {"model": sd, "optimizer": optimizer, "step": 1000,
            "config": {"layers": layers, "width": width, "dtype": dtype}}


def _state_dict(obj):
    """The flat dict of tensors in a checkpoint, for safetensors (or None)."""
    import torch
    for candidate in (obj, obj.get("model") if isinstance(obj, dict) else None,
                      obj.get("state_dict") if isinstance(obj, dict) else None):
        if isinstance(candidate, dict) and candidate and all(
                isinstance(v, torch.Tensor) for v in candidate.values()):
            return {k: v.detach().contiguous() for k, v in candidate.items()}
    return None


def measure(name, obj, directory, rounds):
    """Times and sizes of every contender on one checkpoint."""
    import joblib
    import safetensors.torch as st
    import torch
    sd = _state_dict(obj)  # None: no flat dict of tensors for safetensors
    p = {k: os.path.join(directory, f"{name}.{k}") for k in ("cp", "cp3", "pt", "st", "jl")}
    dumps = {
        "cpersist raw": (lambda: cpersist.dump(obj, p["cp"]), "cp"),
        "cpersist compress=3": (lambda: cpersist.dump(obj, p["cp3"], compress=3), "cp3"),
        "torch.save": (lambda: torch.save(obj, p["pt"]), "pt"),
        "joblib.dump": (lambda: joblib.dump(obj, p["jl"]), "jl"),
    }
    if sd is not None:
        dumps["safetensors save_file"] = (lambda: st.save_file(sd, p["st"]), "st")
    loads = {
        "cpersist.load": lambda: cpersist.load(p["cp"]),
        "cpersist.load trusted=False": lambda: cpersist.load(p["cp"], trusted=False),
        "cpersist.load mmap_mode='r'": lambda: cpersist.load(p["cp"], mmap_mode="r"),
        "cpersist.load compress=3": lambda: cpersist.load(p["cp3"]),
        "torch.load weights_only": lambda: torch.load(p["pt"], weights_only=True),
        "torch.load mmap": lambda: torch.load(p["pt"], weights_only=True, mmap=True),
        "joblib.load": lambda: joblib.load(p["jl"]),
        "joblib.load mmap_mode='r'": lambda: joblib.load(p["jl"], mmap_mode="r"),
    }
    if sd is not None:
        loads["safetensors load_file"] = lambda: st.load_file(p["st"])

    def check():
        _check(obj, cpersist.load(p["cp"], trusted=False))
        _check(obj, cpersist.load(p["cp3"]))

    tensors = _tensors(obj)
    return {"name": name, "tensor_mb": sum(t.numel() * t.dtype.itemsize for t in tensors) / MB,
            "tensors": len(tensors), **dumps_then_loads(dumps, loads, p, rounds, check)}


#: ``--quick``: compress="max" on this many elements of the largest weight.
QUICK_MAX_ELEMENTS = 1 << 14


def measure_max(obj, directory, quick=False):
    """compress='max' on the largest weight of a checkpoint (it is slow by design)."""
    import torch
    w = max(_tensors(obj), key=lambda t: t.numel())
    if quick:
        w = w.reshape(-1)[:QUICK_MAX_ELEMENTS].clone()
    path = os.path.join(directory, "max.cp")
    t0 = time.perf_counter()
    cpersist.dump({"w": w}, path, compress="max")
    dump_s = time.perf_counter() - t0
    ratio = w.numel() * w.dtype.itemsize / os.path.getsize(path)
    assert torch.equal(cpersist.load(path)["w"], w)
    os.unlink(path)
    return {"dtype": str(w.dtype).rpartition(".")[2], "tensor_mb": w.numel() * w.dtype.itemsize
            / MB, "ratio": ratio, "dump_s": dump_s}


def _tensors(obj):
    import torch
    found, stack, seen = [], [obj], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, torch.Tensor):
            found.append(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return found


def _check(expected, got):
    import torch
    a, b = _tensors(expected), _tensors(got)
    assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def load_user_checkpoint(path):
    """A user's ``.pt`` (``torch.load(weights_only=True)``) or ``.safetensors`` file."""
    import torch
    if str(path).endswith(".safetensors"):
        from safetensors.torch import load_file
        return load_file(path)
    return torch.load(path, weights_only=True, map_location="cpu")


#: Timed rounds by default: a load's time on a shared machine now and then
#: doubles for a call or two, which the median of a few rounds does not hide.
ROUNDS = 9


def run(out_dir, quick=False, rounds=ROUNDS, files=()):
    """Run the suite; write ``out_dir/checkpoints.json`` (unless a library it
    needs is missing); return the results."""
    results = {"quick": quick, "rounds": rounds, "cpus": os.cpu_count(), "checkpoints": [],
               "missing": missing()}
    if results["missing"]:
        return results

    def measure_all(directory):
        if files:
            results["checkpoints"] += [measure(os.path.basename(path), load_user_checkpoint(path),
                                               directory, rounds) for path in files]
            return results
        for dtype, (layers, width) in (QUICK_SHAPES if quick else SHAPES).items():
            obj = transformer_checkpoint(dtype, layers, width)
            results["checkpoints"].append(dict(measure(dtype, obj, directory, rounds),
                                               generated=True))
            if dtype == "float32":
                results["max"] = measure_max(obj, directory, quick)
            del obj
        results["jax"] = jax_checkpoints.run(directory, quick, rounds)
        return results

    return measure_into(out_dir, "checkpoints.json", "cpersist-checkpoints-", measure_all)


#: Heads the table of :func:`ratios`: which way every ratio reads.
TITLE = ("Model checkpoints: each ratio is cpersist's time or file size over the other's "
         "(below 1, cpersist is faster or smaller)")
#: What the suite needs, as pip names them.
NEEDS = ("torch", "safetensors", "joblib")


def missing():
    """The first of :data:`NEEDS` not installed, or None."""
    return not_installed((name, name) for name in NEEDS)


#: The comparisons on each checkpoint, in order: (what follows its name,
#: the figure, cpersist's contender, the peer's); see :func:`.turns.ratio_rows`.
COMPARISONS = (
    ("dump time / torch.save's", "dump", "cpersist raw", "torch.save"),
    ("load time / torch.load(weights_only)'s", "load", "cpersist.load", "torch.load weights_only"),
    # In bytes: the files differ by kilobytes, which megabytes would hide.
    ("file size / torch.save's", "{a:,} B / {b:,} B ({d:+,} B)", "cp", "pt"),
    ("mmap_mode='r' load time / torch.load(mmap)'s", "load", "cpersist.load mmap_mode='r'",
     "torch.load mmap"),
    ("mmap_mode='r' load time / safetensors load_file's", "load", "cpersist.load mmap_mode='r'",
     "safetensors load_file"),
    ("trusted=False load time / trusted's", "load", "cpersist.load trusted=False",
     "cpersist.load"),
    ("compress=3 file size / torch.save's", "{a_mb:.1f} MB / {b_mb:.1f} MB", "cp3", "pt"),
    ("compress=3 dump time / raw dump's", "dump", "cpersist compress=3", "cpersist raw"),
    ("compress=3 load time / torch.load(weights_only)'s", "load", "cpersist.load compress=3",
     "torch.load weights_only"),
)


def ratios(results):
    """Ratio rows (:data:`.turns.RATIO_COLUMNS`): each comparison measured in
    this run."""
    if results.get("missing"):
        return [ratio_row("checkpoints", "model checkpoints", missing=results["missing"])]
    rows = [row for r in results["checkpoints"] for row in ratio_rows(
        "checkpoints", f"{r['name']} ({r['tensor_mb']:.0f} MB, {r['tensors']} tensors)",
        COMPARISONS, r)]
    if "jax" in results:
        rows += jax_checkpoints.ratios(results["jax"])
    if "max" in results:
        m = results["max"]
        rows.append(ratio_row("checkpoints", f"compress='max' file size / the bytes of one "
                              f"{m['dtype']} weight ({m['tensor_mb']:.3g} MB)", 1 / m["ratio"],
                              f"{m['dump_s']:.1f} s to dump"))
    return rows


def setting_rows(results):
    """cpersist's settings (``compress=0`` and ``3``, and their loads) on each
    checkpoint as rows of the storage suite, for :func:`.report.recommendations`
    (a load with ``mmap_mode='r'`` reads no tensor until it is used: not one)."""
    rows = []
    for r in results["checkpoints"]:
        size = r["tensor_mb"] * MB
        for level, dump, load, key in ((0, "cpersist raw", "cpersist.load", "cp"), (
                3, "cpersist compress=3", "cpersist.load compress=3", "cp3")):
            rows.append({"dataset": r["name"], "description": f"checkpoint, {r['tensor_mb']:.3g}"
                         f" MB in {r['tensors']} tensors", "method": "cpersist", "family": "cpersist", "level": level,
                         "status": "ok", "ratio": size / r["file_bytes"][key],
                         "write_MBps": size / 1e6 / r["dump_s"][dump],
                         "read_MBps": size / 1e6 / r["load_s"][load],
                         "write_times": ";".join(map(str, r["dump_rounds_s"][dump])),
                         "read_times": ";".join(map(str, r["load_rounds_s"][load]))})
    return rows


def format_results(results):
    """Every contender's time (median and range over the rounds) and size,
    per checkpoint."""
    lines = []
    for r in results["checkpoints"]:
        lines += [f"{r['name']}: {r['tensor_mb']:.0f} MB in {r['tensors']} tensors (median of "
                  f"{results['rounds']} rounds, warm cache)", contest_table(r)]
    if "jax" in results:
        lines.append(jax_checkpoints.format_results(results["jax"]))
    return "\n".join(line for line in lines if line)

