"""bfloat16 tensors are compressed by the codec's faster form at levels 1-3
(Blosc's bit shuffle with LZ4); every other kind of data is written as
before."""

import numpy as np
import pytest

import cpersist
from cpersist.codecs import get_codec
from cpersist.container import VERBATIM

from .test_codecs import ZSTD_MAGIC, chunk_heads
from .test_tensors import assert_same_tensor

torch = pytest.importorskip("torch")

#: Blosc2 chunk header: flags at byte 2 (inner compressor format in bits
#: 5-7: 1 LZ4, 4 Zstandard), filters at bytes 16-21 (1 byte shuffle, 2 bit
#: shuffle, 35 byte delta).
LZ4_FORMAT, ZSTD_FORMAT = 1, 4
BITSHUFFLE, SHUFFLE, BYTEDELTA = 2, 1, 35


def chunk_forms(path):
    """``{array's path: [form of each chunk]}``, a form being 'stored',
    'zstd' (a plain frame), 'bitshuffle+lz4' or 'shuffle+bytedelta+zstd'."""
    paths = {a["section"]: a["path"] for a in cpersist.inspect(path)["arrays"]}
    names = {BITSHUFFLE: "bitshuffle", SHUFFLE: "shuffle", BYTEDELTA: "bytedelta"}
    forms = {}
    for index, heads in enumerate(chunk_heads(path, 32)):
        kinds = []
        for flag, head in heads:
            if flag == VERBATIM:
                kinds.append("stored")
            elif head[:4] == ZSTD_MAGIC:
                kinds.append("zstd")
            else:
                inner = {LZ4_FORMAT: "lz4", ZSTD_FORMAT: "zstd"}[head[2] >> 5]
                kinds.append("+".join([names[f] for f in head[16:22] if f] + [inner]))
        forms[paths.get(index, index)] = kinds
    return forms


def weights(dtype, *shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 0.02).to(dtype)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_bf16_weights_are_bit_shuffled_with_lz4_at_levels_1_to_3(tmp_path, level):
    # 1.5 MiB (probed on a sample) and 2 KiB (not judged: plain Zstandard).
    # An optimiser's second moment, on which the fast form is over a tenth
    # larger: plain Zstandard frames (at level 1).
    big, small = weights(torch.bfloat16, 1200, 640), weights(torch.bfloat16, 1024, seed=1)
    obj = {"w": big, "wt": big.t(), "b": small, "m2": second_moment(1200, 640), "step": 5}
    path = tmp_path / "bf16.cp"
    cpersist.dump(obj, path, compress=level)
    back = cpersist.load(path)
    for key in ("w", "wt", "b", "m2"):
        assert_same_tensor(back[key], obj[key])
    assert back["wt"].untyped_storage().data_ptr() == back["w"].untyped_storage().data_ptr()
    forms = chunk_forms(path)
    assert forms["obj['w']"] == ["bitshuffle+lz4"] and forms["obj['b']"] == ["zstd"]
    assert forms["obj['m2']"] == ["zstd"]
    [section] = [s for s in cpersist.inspect(path)["arrays"] if s["path"] == "obj['w']"]
    assert section["raw_bytes"] / section["stored_bytes"] >= 1.25
    # Bit-shuffled as 4-byte items, two values each: Blosc's AVX2 code path.
    assert {head[3] for _, head in chunk_heads(path, 32)[section["section"]]} == {4}
    # Recorded as the codec it is: every reader decodes it the same way.
    assert (section["codec"], section["level"]) == ("zstd-auto", level)


def test_bf16_weights_at_level_6_and_other_dtypes_keep_the_default_forms(tmp_path):
    w = weights(torch.bfloat16, 1200, 640)
    cpersist.dump({"w": w}, tmp_path / "six.cp", compress=6)
    assert "bitshuffle+lz4" not in chunk_forms(tmp_path / "six.cp")["obj['w']"]
    # The same bits in a numpy uint16 array, and float16 / int16 tensors:
    # not the data the fast form is asked for.
    bits = w.view(torch.int16).numpy().view(np.uint16)
    steps = torch.randint(-3, 4, (1 << 20,), generator=torch.Generator().manual_seed(2))
    obj = {"bits": bits, "f16": weights(torch.float16, 1200, 640),
           "i16": torch.cumsum(steps, 0).to(torch.int16)}
    cpersist.dump(obj, tmp_path / "other.cp", compress=3)
    forms = chunk_forms(tmp_path / "other.cp")
    assert forms["obj['bits']"] == ["shuffle+bytedelta+zstd"]
    assert forms["obj['i16']"] == ["shuffle+bytedelta+zstd"]
    assert "bitshuffle+lz4" not in forms["obj['f16']"]


def test_converting_to_a_fast_level_finds_the_bf16_storages(tmp_path, monkeypatch):
    # Re-encoded by convert, a storage is plain integers: the stream says
    # which ones hold bfloat16 tensors.
    from cpersist.tools import convert

    obj = {"w": weights(torch.bfloat16, 1200, 640), "f16": weights(torch.float16, 1200, 640)}
    cpersist.dump(obj, tmp_path / "raw.cp")
    cpersist.convert(tmp_path / "raw.cp", tmp_path / "c3.cp", compress=3)
    forms = chunk_forms(tmp_path / "c3.cp")
    assert forms["obj['w']"] == ["bitshuffle+lz4"]
    assert "bitshuffle+lz4" not in forms["obj['f16']"]
    back = cpersist.load(tmp_path / "c3.cp", trusted=False)
    assert_same_tensor(back["w"], obj["w"])
    assert_same_tensor(back["f16"], obj["f16"])
    # A stream whose walk would exceed the limits, or too large to read
    # whole for this: converted all the same, in the usual form.
    from cpersist.stream import opcodes

    cpersist.dump({"w": obj["w"], "ids": list(range(20_000))}, tmp_path / "ids.cp")
    monkeypatch.setattr(opcodes, "DEFAULT", cpersist.Limits(max_objects=2))
    cpersist.convert(tmp_path / "ids.cp", tmp_path / "limited.cp", compress=3)
    assert chunk_forms(tmp_path / "limited.cp")["obj['w']"] == ["shuffle+bytedelta+zstd"]
    monkeypatch.undo()
    monkeypatch.setattr(convert, "WALKED_UP_TO", 10)
    cpersist.convert(tmp_path / "raw.cp", tmp_path / "usual.cp", compress=3)
    assert chunk_forms(tmp_path / "usual.cp")["obj['w']"] == ["shuffle+bytedelta+zstd"]
    assert_same_tensor(cpersist.load(tmp_path / "usual.cp")["w"], obj["w"])


def _counter(n):
    steps = np.random.default_rng(3).integers(-3, 4, n)
    return np.cumsum(steps).astype(np.int16)


DATA = {
    "counter": _counter,  # where shuffle + byte delta + Zstandard does far better
    "smooth": lambda n: np.round(np.sin(np.linspace(0, 40, n)) * 8).astype(np.float16),
    "quantized": lambda n: (torch.randint(-8, 8, (n,), generator=torch.Generator().manual_seed(4))
                            * 0.01).bfloat16().view(torch.int16).numpy(),  # plain zstd's case
    "bf16": lambda n: weights(torch.bfloat16, n).view(torch.int16).numpy(),  # the fast form's
    # An Adam optimiser's second moment: the fast form over a tenth larger;
    # plain Zstandard at level 1 as small as any form and the quickest.
    "second moment": lambda n: second_moment(n).view(torch.int16).numpy(),
}


def second_moment(*shape, seed=0):
    """Adam's second moment after one step, 0.001 g**2, computed in bfloat16."""
    grads = weights(torch.bfloat16, *shape, seed=seed) / 2
    return grads * grads * 1e-3


@pytest.mark.parametrize("name", DATA)
@pytest.mark.parametrize("n", [50000, 400000])  # chosen on the whole chunk / on samples
@pytest.mark.parametrize("level", [1, 3])
def test_favouring_speed_costs_at_most_a_tenth_of_the_space(name, n, level):
    data = DATA[name](n)
    codec = get_codec("zstd-auto", level)
    fast = codec.favouring_speed()
    assert fast.get_config() == codec.get_config() and fast.favouring_speed() is fast
    buf = memoryview(data).cast("B")
    smallest, quick = codec.encode(buf, 2), fast.encode(buf, 2)
    assert len(quick) <= 1.1 * len(smallest)
    if name == "bf16":
        assert quick[2] >> 5 == LZ4_FORMAT and smallest[2] >> 5 == ZSTD_FORMAT
    elif name == "second moment":
        assert bytes(quick) == bytes(get_codec("zstd", 1).encode(buf))
        assert len(fast._filtered(buf, 2, "fast")) > 1.1 * len(smallest)
    else:  # the fast form is too large: the codec's choice, or a level-1 frame about as small
        level_1 = bytes(get_codec("zstd", 1).encode(buf))
        assert bytes(quick) in (bytes(smallest), level_1)
        if n == 50000:  # judged on the whole chunk, not on a sample
            assert len(quick) <= 1.01 * len(smallest)
    out = np.empty_like(data)
    codec.decode_into(quick, memoryview(out).cast("B"))  # the plain codec reads it
    assert out.tobytes() == data.tobytes()


def test_codecs_without_a_faster_form_return_themselves():
    for name, level in [("zstd-auto", 4), ("zstd", 3), ("lz4", 1), ("blosc:lz4", 3), ("max", 9)]:
        codec = get_codec(name, level)
        assert codec.favouring_speed() is codec
