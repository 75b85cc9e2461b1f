"""Naming a value a stranger's file gave in a message, without running its
``repr`` (which a forged value makes slow or deep): light enough for every
load to import, restricted or not."""

#: Plain values: what a stream may hand to the code building numbers,
#: strings, dtypes and fill values.
SCALARS = frozenset((type(None), bool, int, float, complex, str, bytes))


def brief(value):
    """``value`` named in a message without running its ``repr``."""
    if type(value) in SCALARS and (type(value) not in (str, bytes) or len(value) <= 60):
        return repr(value)
    if type(value) in (tuple, list) and len(value) <= 16 and all(
            type(v) in SCALARS and (type(v) not in (str, bytes) or len(v) <= 60)
            for v in value):  # a shape, strides: short, flat, plain
        return repr(value)
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return f"a {type(value).__name__}"
