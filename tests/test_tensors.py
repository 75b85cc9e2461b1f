"""torch tensors stored through their storages: round trips of every dtype
and view, memory maps, restricted loads, and what ``info`` reports."""

import collections
import os
import io
import pickle
import re

import numpy as np
import pytest

import cpersist
from cpersist.format import names as _format_names
from cpersist.stream.opcodes import walk

from .conftest import spy_reads

torch = pytest.importorskip("torch")

ALL_DTYPES = sorted(
    {d for d in vars(torch).values() if isinstance(d, torch.dtype)
     and not str(d).startswith(("torch.qint", "torch.quint"))}, key=str)


def _bits(t):
    """The tensor's elements as bytes, in its logical order (any dtype, any view)."""
    if t.numel() == 0:
        return b""
    size = t.dtype.itemsize
    whole = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).numpy()
    return np.lib.stride_tricks.as_strided(
        whole[t.storage_offset() * size:], tuple(t.shape) + (size,),
        tuple(s * size for s in t.stride()) + (1,)).tobytes()


def _random(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = int(np.prod(shape)) * dtype.itemsize
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g).view(dtype).reshape(shape)


def assert_same_tensor(back, orig):
    assert type(back) is type(orig)
    assert back.dtype == orig.dtype and back.shape == orig.shape
    assert back.stride() == orig.stride() and back.storage_offset() == orig.storage_offset()
    assert back.requires_grad == orig.requires_grad
    assert back.device.type == "cpu"
    assert _bits(back) == _bits(orig)
    assert back.untyped_storage().nbytes() == orig.untyped_storage().nbytes()


def _views(dtype):
    base = _random(dtype, (6, 8))
    return {"base": base, "t": base.t(), "row": base[2], "cols": base[:, 1:7:2],
            "offset": base.reshape(-1)[5:17].reshape(3, 4), "zero_d": base[1, 1],
            "expand": base[0:1].expand(4, 8), "empty": base[:0], "other": _random(dtype, (5,), 1)}


def _same_storage(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _check_views(back, orig):
    for key in orig:
        assert_same_tensor(back[key], orig[key])
    for key in ("t", "row", "cols", "offset", "zero_d", "expand"):
        assert _same_storage(back[key], back["base"]), key
    assert not _same_storage(back["other"], back["base"])


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_every_dtype_and_view_round_trips_sharing_its_storage(tmp_path, dtype):
    orig = _views(dtype)
    path = tmp_path / "t.cp"
    cpersist.dump(orig, path)
    _check_views(cpersist.load(path), orig)
    # One section per storage.
    assert len(cpersist.inspect(path)["arrays"]) == 2


@pytest.mark.parametrize("how", ["compressed", "mmap_r", "mmap_c", "mmap_r+", "dumps",
                                 "restricted", "max"])
def test_every_way_to_load(tmp_path, how):
    orig = _views(torch.bfloat16)
    orig["f32"] = torch.randn(300, 70)
    orig["f32_t"] = orig["f32"].t()
    path = tmp_path / "t.cp"
    compress = {"compressed": 3, "max": "max"}.get(how, 0)
    if how == "dumps":
        back = cpersist.loads(cpersist.dumps(orig))
    else:
        cpersist.dump(orig, path, compress=compress)
        mmap_mode = how[5:] if how.startswith("mmap") else None
        back = cpersist.load(path, mmap_mode=mmap_mode, trusted=how != "restricted")
    _check_views(back, {k: v for k, v in orig.items() if not k.startswith("f32")})
    assert_same_tensor(back["f32_t"], orig["f32_t"])
    assert _same_storage(back["f32"], back["f32_t"])


def test_module_state_optimizer_and_parameters_load_restricted(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 8))
    model[2].weight = torch.nn.Parameter(model[0].weight.t())  # tied, transposed
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(3, 8)).sum().backward()
    opt.step()
    params = dict(model.named_parameters())
    params["0.weight"].marker = "kept"  # an attribute, kept as torch.save keeps it
    ck = {"model": model.state_dict(), "params": params, "optimizer": opt.state_dict(),
          "step": 7, "config": {"lr": 1e-3, "betas": (0.9, 0.999)}}
    path = tmp_path / "ck.cp"
    cpersist.dump(ck, path, compress=3)
    named = {g for g in walk(_stream(path)).globals}
    assert not any(g.startswith("torch") for g in named)
    assert _format_names.REBUILD_TENSOR in named
    back = cpersist.load(path, trusted=False)
    assert type(back["model"]) is collections.OrderedDict
    assert back["model"]._metadata == ck["model"]._metadata
    for key, value in ck["model"].items():
        assert_same_tensor(back["model"][key], value)
    for key, value in params.items():
        assert_same_tensor(back["params"][key], value)
        assert isinstance(back["params"][key], torch.nn.Parameter)
    assert back["params"]["0.weight"].marker == "kept"
    assert _same_storage(back["params"]["0.weight"], back["params"]["2.weight"])
    assert _same_storage(back["model"]["0.weight"], back["params"]["0.weight"])
    state = back["optimizer"]["state"]
    for i, slots in ck["optimizer"]["state"].items():
        for name, value in slots.items():
            assert_same_tensor(state[i][name], value)
    assert back["optimizer"]["param_groups"] == ck["optimizer"]["param_groups"]
    # A fresh model takes the state.
    model.load_state_dict(back["model"])
    # Modules, classes and functions are still refused.
    cpersist.dump({"m": torch.nn.Linear(2, 2)}, path)
    with pytest.raises(cpersist.UntrustedObjectError, match="torch"):
        cpersist.load(path, trusted=False)


def _stream(path):
    with cpersist.open(path) as f:
        return bytes(f._root_stream(f._reader()).getbuffer())


def test_requires_grad_and_integer_tensors():
    a = torch.randn(3, requires_grad=True)
    b = torch.arange(4)
    back = cpersist.loads(cpersist.dumps([a, b, a]))
    assert back[0].requires_grad and not back[1].requires_grad
    assert back[0] is back[2]  # the same object twice stays one


@pytest.mark.usefixtures("sections")
def test_a_write_to_an_r_mapped_tensor_stays_in_the_process(tmp_path):
    orig = {"w": torch.randn(1000), "n": np.arange(1000.0)}
    path = tmp_path / "t.cp"
    cpersist.dump(orig, path)
    back = cpersist.load(path, mmap_mode="r")
    assert not back["n"].flags.writeable and back["n"].mode == "r"
    back["w"][:] = 5  # private map: no crash, the file unchanged
    assert (back["w"] == 5).all()
    assert torch.equal(cpersist.load(path)["w"], orig["w"])
    cpersist.verify(path)
    mapped = cpersist.load(path, mmap_mode="r+")
    mapped["w"][0] = 7  # r+ keeps its meaning: writes reach the file
    del mapped
    assert cpersist.load(path)["w"][0] == 7


def test_r_mapped_tensors_read_nothing(tmp_path):
    from cpersist.benchmarks.measure import rss_bytes

    def rss():
        return rss_bytes()[0]

    path = tmp_path / "big.cp"
    cpersist.dump({"w": torch.ones(64 << 20, dtype=torch.uint8)}, path)
    before = rss()
    back = cpersist.load(path, mmap_mode="r")
    assert rss() - before < (16 << 20)
    assert int(back["w"][-1]) == 1


def test_untorched_tensors_keep_torch_pickling_and_info_names_them(tmp_path):
    sparse = torch.eye(4).to_sparse()
    obj = {"sparse": sparse, "dense": torch.ones(3)}
    path = tmp_path / "t.cp"
    cpersist.dump(obj, path)
    back = cpersist.load(path)
    assert torch.equal(back["sparse"].to_dense(), torch.eye(4))
    info = cpersist.inspect(path)
    assert [p["path"] for p in info["torch_pickled"]] == ["obj['sparse']"]
    assert {t["path"] for t in info["tensors"]} >= {"obj['dense']"}
    with pytest.raises(cpersist.UntrustedObjectError):
        cpersist.load(path, trusted=False)


def test_info_details_show_views_of_storages(tmp_path, capsys):
    from cpersist.cli import main

    x = torch.randn(4, 5)
    path = tmp_path / "t.cp"
    cpersist.dump({"x": x, "xt": x.t()}, path)
    assert main(["info", "--details", str(path)]) == 0
    out = capsys.readouterr().out
    assert "torch tensors: 2, viewing 1 stored storage(s)" in out
    assert "obj['xt']  (5, 4)  float32" in out


def _six_layer_checkpoint(d=64, ff=256, vocab=500):
    """A transformer's checkpoint: bf16 weights, fp32 norms, the output
    head tied to the embedding, and a small numpy array beside them."""
    g = torch.Generator().manual_seed(0)
    model = {"embed.weight": torch.randn(vocab, d, generator=g).bfloat16()}
    for i in range(6):
        for name in "qkvo":
            model[f"layers.{i}.attn.{name}.weight"] = torch.randn(d, d, generator=g).bfloat16()
        model[f"layers.{i}.mlp.up.weight"] = torch.randn(ff, d, generator=g).bfloat16()
        model[f"layers.{i}.mlp.down.weight"] = torch.randn(d, ff, generator=g).bfloat16()
        for norm in ("ln1", "ln2"):
            model[f"layers.{i}.{norm}.weight"] = torch.ones(d)
            model[f"layers.{i}.{norm}.bias"] = torch.zeros(d)
    model["norm.weight"] = torch.ones(d)
    model["lm_head.weight"] = model["embed.weight"]
    return {"model": model, "step": 1200, "seen": np.arange(10, dtype=np.uint32)}


def _table_rows(out):
    """``{path: [dtype, shape, size, codec]}`` of the table of arrays ``cpersist info``
    prints under its header."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines)
              if re.split(r"\s{2,}", line.strip()) == ["path", "dtype", "shape", "size", "codec"])
    rows = {}
    for line in lines[at + 1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if not line.startswith("  "):
            break
        if len(cells) == 5:
            rows[cells[0]] = cells[1:]
    return rows


def test_info_of_a_model_fits_a_screen_with_names_dtypes_and_shapes(tmp_path, capsys):
    from cpersist.cli import main
    from cpersist.tools.report import human_size

    checkpoint = _six_layer_checkpoint()
    path = tmp_path / "model.cp"
    cpersist.dump(checkpoint, path, compress=3)
    report = cpersist.inspect(path)
    codec = {f"{a['codec']}:{a['level']}" for a in report["arrays"]}
    assert len(codec) == 1
    codec = codec.pop()
    tensors = {f"obj['model'][{k!r}]": t for k, t in checkpoint["model"].items()}
    tied = "obj['model']['lm_head.weight']"
    stored = {name: t for name, t in tensors.items() if name != tied}  # a tied one, once
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= 45
    in_memory = sum(t.nbytes for t in stored.values()) + checkpoint["seen"].nbytes
    assert lines[1] == (f"1 array (1 inside the pickle stream) and {len(stored)} torch "
                        f"tensors: {human_size(in_memory)} in memory, "
                        f"{human_size(path.stat().st_size)} in the file "
                        f"(ratio {in_memory / path.stat().st_size:.2f})")
    assert f"codec: {codec} ({len(stored)} sections)" in lines
    at = lines.index("globals needed to load: 3")
    assert lines[at + 1:at + 4] == ["  cpersist.pickler.inline_array",
                                    "  cpersist.pickler.rebuild_tensor", "  numpy.dtype"]
    assert "<u2" not in out  # bf16 is not shown as the integers it is stored as
    shown = _table_rows(out)
    more = [line for line in lines if line.strip().startswith("... ")]
    assert len(more) == 1 and "--all" in more[0] and "--details" in more[0]
    assert int(more[0].split()[1]) + len(shown) == len(tensors) + 1
    first, last = "obj['model']['embed.weight']", "obj['seen']"
    assert shown[first] == ["torch.bfloat16", "(500, 64)", "62.5 KiB", codec]
    assert shown[last] == ["uint32", "(10,)", "40 B", "in stream"]
    assert "in stream: kept inside the pickle stream (load() reads it" in out

    assert main(["info", "--all", str(path)]) == 0
    every = _table_rows(capsys.readouterr().out)
    assert list(every) == [first, tied, *list(stored)[1:], last]  # the tied one by its twin
    for name, tensor in tensors.items():
        assert every[name] == [str(tensor.dtype), str(tuple(tensor.shape)), human_size(tensor.nbytes),
                               f"same as {first}" if name == tied else codec]

    assert main(["info", "--details", str(path)]) == 0
    details = capsys.readouterr().out
    assert _table_rows(details) == every
    # How each is stored: sections of bf16 bits as <u2, the tensors' views of them.
    assert re.search(r"^ +section +path +shape +dtype +order +codec", details, re.M)
    assert re.search(r"^ +0 +obj\['model'\]\['embed.weight'\] +\(32000,\) +<u2 +C ", details,
                     re.M)
    assert f"torch tensors: {len(stored)}, viewing {len(stored)} stored storage(s)" in details


@pytest.mark.parametrize("forged, message", [
    ((0, "float32", 0, (5,), (1,), False, "tensor", None, None), "reaches past"),
    ((0, "float32", -1, (2,), (1,), False, "tensor", None, None), "offset"),
    ((0, "exec", 0, (2,), (1,), False, "tensor", None, None), "dtype"),
    ((0, "float32", 0, (2,), (-1,), False, "tensor", None, None), "strides"),
    ((0, "int64", 0, (1,), (1,), True, "tensor", None, None), "bad tensor"),
    ((0, "float32", 0, (1,), (1,), False, "module", None, None), "kind"),
])
def test_forged_tensor_calls_are_refused(forged, message):
    from cpersist.pickling.rebuild import rebuild_tensor

    data = np.zeros(4, np.uint8)
    with pytest.raises(pickle.UnpicklingError, match=message):
        rebuild_tensor(data, *forged[1:])


def test_damaged_tensor_chunk_names_its_path(tmp_path):
    path = tmp_path / "t.cp"
    w = torch.randn(256, 256)
    cpersist.dump({"layers": {"0.weight": w}}, path, compress=3, chunk_size=1 << 16)
    data = bytearray(path.read_bytes())
    section = cpersist.inspect(path)["arrays"][0]
    with cpersist.open(path) as f:
        offset = f._reader().sections[section["section"]].offset
    data[offset + 100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(cpersist.CorruptFileError, match=r"obj\['layers'\]\['0.weight'\]"):
        cpersist.load(path)


def test_bytes_io_round_trip():
    buf = io.BytesIO()
    orig = _views(torch.float16)
    cpersist.dump(orig, buf)
    buf.seek(0)
    _check_views(cpersist.load(buf), orig)


# -- lazy access ---------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@pytest.fixture(scope="module")
def lazy_file(tmp_path_factory):
    base = _random(torch.bfloat16, (40, 30), 3)
    obj = {"model": {"0.weight": base, "0.weight_t": base.t(), "part": base[5:17, 3:29:2],
                     "f32": torch.randn(50, 6, 7), "flat": base.reshape(-1)[7:600]},
           "step": 3}
    path = tmp_path_factory.mktemp("lazy") / "ck.cp"
    cpersist.dump(obj, path, compress=3, chunk_size=1 << 10)
    with cpersist.open(path) as f:
        yield obj, f


def _index(ndim):
    item = st.one_of(
        st.integers(-5, 45),
        st.builds(slice, st.none() | st.integers(-50, 50), st.none() | st.integers(-50, 50),
                  st.none() | st.integers(1, 7)))
    return st.lists(item, min_size=0, max_size=ndim).map(tuple)


@settings(max_examples=60)
@given(key=st.sampled_from(["0.weight", "0.weight_t", "part", "f32", "flat"]),
       index=_index(3), ellipsis=st.booleans())
def test_lazy_slices_equal_torch_indexing(lazy_file, key, index, ellipsis):
    obj, f = lazy_file
    orig = obj["model"][key]
    index = index[:orig.ndim]
    if ellipsis:
        index = (Ellipsis,) + index[1:]
    lazy = f.arrays[f"obj['model'][{key!r}]"]
    try:
        expected = orig[index]
    except IndexError:
        with pytest.raises(IndexError):
            lazy[index]
        return
    got = lazy[index]
    assert got.dtype == orig.dtype and got.shape == expected.shape
    assert _bits(got) == _bits(expected)


def test_lazy_listing_reads_only_the_chunks_a_slice_needs(lazy_file, monkeypatch):
    obj, f = lazy_file
    assert set(f.arrays) == {f"obj['model'][{k!r}]" for k in obj["model"]}
    lazy = f.arrays["obj['model']['f32']"]
    assert lazy.shape == obj["model"]["f32"].shape and lazy.dtype == torch.float32
    reads = spy_reads(monkeypatch)
    assert torch.equal(lazy[10:12], obj["model"]["f32"][10:12])
    total = sum(read.length for read in reads)
    assert 0 < total < 8 * 1024  # two rows of 168 bytes, one or two 1 KiB chunks
    back = f.load(lazy=True)
    assert back["step"] == 3
    assert _bits(back["model"]["part"][2:5]) == _bits(obj["model"]["part"][2:5])
    assert _bits(back["model"]["0.weight_t"].read()) == _bits(obj["model"]["0.weight_t"])


# -- conversion ----------------------------------------------------------------

def test_convert_from_safetensors_and_torch_and_back(tmp_path):
    from safetensors.torch import load_file, save_file

    from cpersist.cli import main

    sd = {"emb": torch.randn(50, 8), "bf": torch.randn(30).bfloat16(),
          "mask": torch.rand(7) > 0.5}
    save_file(sd, tmp_path / "m.safetensors")
    torch.save({"model": sd, "step": 4}, tmp_path / "m.pt")
    assert main(["convert", str(tmp_path / "m.safetensors"), str(tmp_path / "a.cp")]) == 0
    back = cpersist.load(tmp_path / "a.cp", mmap_mode="r", trusted=False)
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)
    assert main(["convert", str(tmp_path / "m.pt"), str(tmp_path / "b.cp"), "-c", "3"]) == 0
    back = cpersist.load(tmp_path / "b.cp", trusted=False)
    assert back["step"] == 4 and all(torch.equal(back["model"][k], sd[k]) for k in sd)
    # A flat dict of tensors goes to safetensors, ties and views copied apart.
    tied = dict(sd, tied=sd["emb"], t=sd["emb"].t(), p=torch.nn.Parameter(torch.ones(2)))
    cpersist.dump(tied, tmp_path / "c.cp")
    assert main(["convert", str(tmp_path / "c.cp"), str(tmp_path / "c.safetensors")]) == 0
    out = load_file(tmp_path / "c.safetensors")
    assert out.keys() == tied.keys() and all(torch.equal(out[k], tied[k]) for k in tied)
    # Anything else is refused, and nothing is written.
    with pytest.raises(cpersist.CpersistError, match=r"obj\['model'\] is a dict, not a tensor"):
        cpersist.convert(tmp_path / "b.cp", tmp_path / "d.safetensors")
    assert not (tmp_path / "d.safetensors").exists()


def test_a_legacy_torch_file_needs_trust(tmp_path):
    obj = {"w": torch.randn(3, 4), "step": 2}
    torch.save(obj, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(cpersist.UntrustedPickleError, match="legacy"):
        cpersist.convert(tmp_path / "old.pt", tmp_path / "x.cp")
    assert not (tmp_path / "x.cp").exists()
    cpersist.convert(tmp_path / "old.pt", tmp_path / "x.cp", trust_pickles=True)
    assert torch.equal(cpersist.load(tmp_path / "x.cp")["w"], obj["w"])


def test_a_torch_file_needs_trust_where_weights_only_has_published_bypasses(tmp_path,
                                                                          monkeypatch):
    from cpersist.tools.torch_files import weights_only_is_safe

    assert [weights_only_is_safe(v) for v in ("2.10.0", "2.13.0+cpu", "3.0", "2.9.1",
                                              "2.5.1+cu121", "1.13")] == [True] * 3 + [False] * 3
    torch.save({"w": torch.ones(3)}, tmp_path / "m.pt")
    monkeypatch.setattr(torch, "__version__", "2.9.1")  # as an older torch says it
    with pytest.raises(cpersist.UntrustedPickleError, match=r"torch 2\.9\.1 .* torch 2\.10"):
        cpersist.convert(tmp_path / "m.pt", tmp_path / "x.cp")
    assert not (tmp_path / "x.cp").exists()
    cpersist.convert(tmp_path / "m.pt", tmp_path / "x.cp", trust_pickles=True)
    assert torch.equal(cpersist.load(tmp_path / "x.cp", trusted=False)["w"], torch.ones(3))


def test_bf16_sections_are_grouped_by_two_bytes(tmp_path):
    w = torch.randn(512, 512, generator=torch.Generator().manual_seed(1)).bfloat16()
    cpersist.dump({"w": w}, tmp_path / "w.cp", compress=3)
    [section] = cpersist.inspect(tmp_path / "w.cp")["arrays"]
    assert section["dtype"] == "<u2"
    assert section["raw_bytes"] / section["stored_bytes"] >= 1.3


def test_the_device_a_tensor_was_dumped_from_is_recorded(tmp_path, monkeypatch, capsys):
    # No GPU here: the reducer is told the CPU tensor came from "cuda:0",
    # which is what it records for a tensor stored from a CPU copy.
    from cpersist.cli import main
    from cpersist.pickling.tensors import TensorReducer

    real = TensorReducer.reduce

    def from_gpu(self, tensor):
        func, args = real(self, tensor)
        return func, args[:-1] + ("cuda:0",)

    monkeypatch.setattr(TensorReducer, "reduce", from_gpu)
    w = torch.randn(3, 2)
    cpersist.dump({"w": w}, tmp_path / "g.cp")
    monkeypatch.undo()
    back = cpersist.load(tmp_path / "g.cp", trusted=False)["w"]
    assert back.device.type == "cpu" and torch.equal(back, w)
    assert cpersist.inspect(tmp_path / "g.cp")["tensors"][0]["device"] == "cuda:0"
    assert main(["info", "--details", str(tmp_path / "g.cp")]) == 0
    assert "tensor  cuda:0" in capsys.readouterr().out
    with cpersist.open(tmp_path / "g.cp") as f:
        assert f.arrays["obj['w']"].device == "cuda:0"


# -- files written before ------------------------------------------------------

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "tensors-2.1")


def fixture_object():
    """What the files under ``fixtures/tensors-2.1`` hold (written by format 2.1,
    the first to store tensors)."""
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    lin = torch.nn.Linear(6, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.arange(12.0).reshape(2, 6) / 8)
        lin.bias.copy_(torch.tensor([0.5, -0.5]))
    state = lin.state_dict()
    return {"model": state, "tied": state["weight"], "t": base.t(), "rows": base[1:3],
            "bf16": torch.arange(3000).to(torch.bfloat16), "f8": torch.arange(8).to(
                torch.float8_e4m3fn), "flag": torch.tensor(True), "param": torch.nn.Parameter(
                torch.ones(3)), "step": 7}


@pytest.mark.parametrize("name", ["raw.cp", "zstd3.cp"])
def test_files_written_by_format_2_1_load(name):
    expected = fixture_object()
    back = cpersist.load(os.path.join(FIXTURES, name), trusted=False)
    assert back["step"] == 7 and back["model"].keys() == expected["model"].keys()
    for key in ("t", "rows", "bf16", "f8", "flag", "param", "tied"):
        assert_same_tensor(back[key], expected[key])
    for key in expected["model"]:
        assert_same_tensor(back["model"][key], expected["model"][key])
    assert _same_storage(back["tied"], back["model"]["weight"])
