"""Checkpoints to and from the files of torch and safetensors, for :func:`cpersist.convert`.

``torch.save``'s zip files are read with ``torch.load(weights_only=True)``,
which rebuilds tensors and plain containers and runs nothing a file names,
so they convert without a trust flag; the legacy (pre-zip) format is a
full pickle and needs ``trust_pickles``. A safetensors file is a flat dict
of tensors. The other way, a cpersist file whose object is a flat dict of
tensors (a state dict) is written as a safetensors file; it is loaded
with ``trusted=False``, so converting it runs nothing either.
"""

import json
import os
import struct

from ..container.files import is_path
from ..exceptions import CpersistError, UntrustedPickleError

#: The first torch whose ``torch.load(weights_only=True)`` has no published
#: way around it: before 2.6 it handed TorchScript archives to the
#: unrestricted ``torch.jit.load`` (CVE-2025-32434); before 2.10 a file could
#: corrupt memory by ``SETITEM`` on a tensor or a storage shorter than its
#: tensors (CVE-2026-24747).
WEIGHTS_ONLY_SAFE_FROM = (2, 10)
#: The number torch's legacy format pickles first (torch.serialization.MAGIC_NUMBER).
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_ZIP = b"PK\x03\x04"


class Kind:
    """What a non-cpersist source holds: ``label`` is what messages call it."""

    def __init__(self, name, label):
        self.name = name
        self.label = label


def detect(source):
    """The :class:`Kind` of a torch or safetensors file in ``source``, or None."""
    head = bytes(source.read(0, min(64, source.size)))
    if len(head) >= 10 and head[8:9] == b"{":
        (n,) = struct.unpack("<Q", head[:8])
        if 2 <= n <= source.size - 8:
            return Kind("safetensors", "safetensors file")
    if head.startswith(_ZIP) and _zip_holds_pickle(source):
        return Kind("torch", "torch.save zip file")
    if head[:1] == b"\x80" and _legacy_magic(head):
        return Kind("torch-legacy", "torch.save legacy file (a full pickle)")
    return None


def _zip_holds_pickle(source):
    import io
    import zipfile

    try:
        data = io.BytesIO(bytes(source.read(0, source.size)))
        names = zipfile.ZipFile(data).namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return False
    return any(n.endswith("/data.pkl") or n == "data.pkl" for n in names)


def _legacy_magic(head):
    """Whether a pickle stream starts with torch's legacy magic number."""
    import pickletools

    try:
        ops = pickletools.genops(head)
        next(ops)  # PROTO
        op, arg, _ = next(ops)
    except (ValueError, StopIteration):
        return False
    return op.name in ("LONG1", "LONG4", "LONG") and arg == _LEGACY_MAGIC


def load_source(kind, src, source, trust_pickles):
    """The object in a torch or safetensors file."""
    import torch

    target = os.fspath(src) if is_path(src) else _bytes_io(source)
    if kind.name == "safetensors":
        from safetensors.torch import load, load_file

        if isinstance(target, str):
            return load_file(target)
        return load(target.getvalue())
    if kind.name == "torch-legacy" and not trust_pickles:
        raise UntrustedPickleError(
            f"{source.name} is a {kind.label}: converting it means loading it, which runs "
            f"any code it names. Convert only files you trust: pass --trust-pickles to "
            f"'cpersist convert' or trust_pickles=True to cpersist.convert(). Nothing was "
            f"written.")
    if kind.name == "torch" and not trust_pickles and not weights_only_is_safe(torch.__version__):
        raise UntrustedPickleError(
            f"{source.name} is a {kind.label}, read with torch.load(weights_only=True); torch "
            f"{torch.__version__} has published ways around weights_only that run code or "
            f"corrupt memory (fixed in torch "
            f"{'.'.join(map(str, WEIGHTS_ONLY_SAFE_FROM))}). Upgrade torch, or pass "
            f"--trust-pickles (trust_pickles=True) only for a file you trust. Nothing was "
            f"written.")
    options = {"map_location": "cpu", "weights_only": kind.name == "torch" or not trust_pickles}
    if isinstance(target, str) and kind.name == "torch":
        options["mmap"] = True  # no copy of the weights before they are written again
    try:
        return torch.load(target, **options)
    except Exception as exc:  # torch raises UnpicklingError for what weights_only refuses
        if options["weights_only"] and not trust_pickles and "weights_only" in str(exc):
            raise UntrustedPickleError(
                f"{source.name} is a {kind.label} holding more than tensors and plain "
                f"containers, which torch.load(weights_only=True) refuses ({exc}). Loading "
                f"it fully runs any code it names: pass --trust-pickles (trust_pickles=True) "
                f"only for a file you trust. Nothing was written.") from None
        raise


def weights_only_is_safe(version):
    """Whether torch ``version`` (``torch.__version__``, such as
    ``"2.9.1+cpu"``) is at least :data:`WEIGHTS_ONLY_SAFE_FROM`."""
    numbers = []
    for part in str(version).split("+")[0].split(".")[:2]:
        digits = part[:len(part) - len(part.lstrip("0123456789"))]
        if not digits:
            return False
        numbers.append(int(digits))
    return tuple(numbers) >= WEIGHTS_ONLY_SAFE_FROM


def _bytes_io(source):
    import io

    return io.BytesIO(bytes(source.read(0, source.size)))


def convert_from(kind, src, source, dst, *, trust_pickles, compress, chunk_size, n_threads,
                 fsync, storage_options):
    """Load a torch or safetensors file and dump its object to ``dst``."""
    from .migrate import dump_loaded

    return dump_loaded([load_source(kind, src, source, trust_pickles)], kind, source, dst,
                       compress=compress, chunk_size=chunk_size, n_threads=n_threads,
                       fsync=fsync, storage_options=storage_options)


def flat_tensors(obj, name):
    """``obj`` as the ``{str: tensor}`` dict safetensors stores, or an error
    saying what is not."""
    import torch

    if not isinstance(obj, dict):
        raise CpersistError(
            f"{name}: holds a {type(obj).__name__}, not a dict of tensors: a safetensors "
            f"file holds a flat dict of tensors (a state dict); dump the state dict alone")
    for key, value in obj.items():
        if type(key) is not str or not isinstance(value, torch.Tensor):
            raise CpersistError(
                f"{name}: obj[{key!r}] is a {type(value).__name__}, not a tensor: a "
                f"safetensors file holds a flat dict of tensors (a state dict); dump the "
                f"state dict alone")
    out, seen = {}, set()
    for key, value in obj.items():
        value = value.detach()
        # safetensors refuses tensors sharing memory: each gets its own copy.
        ptr = value.untyped_storage().data_ptr()
        if ptr in seen or not value.is_contiguous() or value.storage_offset() or \
                value.numel() * value.dtype.itemsize != value.untyped_storage().nbytes():
            value = value.clone(memory_format=torch.contiguous_format)
        seen.add(ptr)
        out[key] = value
    return out


def convert_to_safetensors(source, dst, fsync, whole):
    """Write the flat dict of tensors in the cpersist file ``source`` as ``dst``."""
    import tempfile

    from safetensors.torch import save_file

    from .._runtime.threads import default_n_threads
    from ..pickling.read import load_source
    from ..pickling.unpickler import normalize_trusted

    restricted, allowed, prefixes = normalize_trusted(False)
    obj = load_source(source, mmap_mode=None, restricted=restricted, allowed=allowed,
                prefixes=prefixes, verify=True, n_threads=default_n_threads(), whole=whole)
    tensors = flat_tensors(obj, source.name)
    directory, base = os.path.split(os.path.abspath(os.fspath(dst)))
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".cpersist-tmp", dir=directory)
    os.close(fd)
    try:
        save_file(tensors, tmp)
        if fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    size = os.path.getsize(dst)
    with open(dst, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        json.loads(f.read(n))  # written whole
    return {
        "source_kind": "cpersist file",
        "sections": len(tensors),
        "raw_bytes": sum(t.numel() * t.dtype.itemsize for t in tensors.values()),
        "stored_bytes_before": source.size,
        "stored_bytes_after": size,
    }
