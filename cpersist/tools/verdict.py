"""Whether a restricted load accepts a dump: a dry run of its machine over
the pickle stream, with stand-ins of the stored arrays."""

import io

import numpy as np

from ..exceptions import CpersistError
from ..pickling.read import array_layout


def restricted_verdict(reader, stream, limits=None):
    """Whether ``cpersist.load(..., trusted=False)`` accepts the file: its
    machine run over ``stream`` without reading any array (each stored array
    is a read-only stand-in of its dtype and shape, taking no memory) and
    building no tensor.

    Returns
    -------
    dict
        ``{"accepted": bool, "refusal": str or None}``: the refusal is the
        message of the error a restricted load would raise.
    """
    from ..format.named_dtypes import ITEMSIZES
    from ..pickling.checks import brief
    from ..pickling.unpickler import ArrayUnpickler

    stand_ins = {}

    def stand_in(index):
        if type(index) is not int or not 0 <= index < len(reader.sections) or (
                index == reader.root):
            raise reader.error(f"the pickle stream refers to a bad array section {brief(index)}")
        if index not in stand_ins:
            # An ml_dtypes type stands in as bytes of its size: a dry run
            # needs shapes and sizes, not ml_dtypes.
            dtype, shape, _, _ = array_layout(reader, reader.sections[index], resolve=False)
            if type(dtype) is str:
                dtype = np.dtype(f"V{ITEMSIZES[dtype]}")
            stand_ins[index] = np.broadcast_to(np.zeros((), dtype), shape)
        return stand_ins[index]

    unpickler = ArrayUnpickler(io.BytesIO(stream), stand_in, restricted=True, source=reader.name,
                               limits=limits, dry=True, buffers=_stand_in_buffers(reader))
    try:
        unpickler.load()
    except CpersistError as exc:
        text = str(exc)
        if text.startswith(f"{reader.name}: "):
            text = text[len(reader.name) + 2:]
        return {"accepted": False, "refusal": f"{type(exc).__name__}: {text}"}
    return {"accepted": True, "refusal": None}


def _stand_in_buffers(reader):
    """Stand-ins of the dump's out-of-band buffers, or None for a dump
    without buffer blocks: slices of one buffer of zeros as long as the
    longest (at most a block's bytes), none of the blocks read."""
    from ..pickling.buffer_blocks import block_sections

    sizes = [n for _, block, _ in block_sections(reader) for n in block]
    if not sizes:
        return None
    zeros = memoryview(bytearray(max(sizes)))
    return [zeros[:n] for n in sizes]
