"""Codecs keyed by name, and the parsing of the user's ``compress`` argument."""

from .abc import LEVELS, Codec

_registry = {}
#: Short names that stand for a registered codec.
ALIASES = {"blosc": "blosc:lz4"}
#: Codec used when ``compress`` is an int or True. Chosen by measurement on
#: the built-in benchmark datasets (see docs/benchmarks.rst).
DEFAULT_CODEC = "zstd-auto"
#: Level used when ``compress`` is True or a bare codec name.
DEFAULT_LEVEL = 3


def register_codec(cls):
    """Register a :class:`Codec` subclass under its ``codec_id``.

    Can be used as a class decorator. Returns ``cls``.
    """
    if not (isinstance(cls, type) and issubclass(cls, Codec)) or not cls.codec_id:
        raise TypeError(f"{cls!r} is not a Codec subclass with a codec_id")
    _registry[cls.codec_id] = cls
    return cls


def available_codecs():
    """Names of the registered codecs, sorted.

    Returns
    -------
    list of str
    """
    return sorted(_registry)


def get_codec(name, level=DEFAULT_LEVEL):
    """Return the codec registered as ``name`` (or an alias) at ``level``.

    Raises
    ------
    ValueError
        If no codec has that name, or the level is not 1–9.
    """
    cls = _registry.get(ALIASES.get(name, name)) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(
            f"unknown codec {name!r}; accepted names: "
            f"{', '.join(available_codecs() + sorted(ALIASES))}"
        )
    return cls(level)


def codec_from_config(config):
    """Rebuild a codec from the ``get_config()`` dict recorded in a file.

    Raises
    ------
    KeyError, ValueError, TypeError
        If the configuration names no known codec or a bad level; callers
        reading files turn these into :class:`~cpersist.CorruptFileError`.
    """
    return get_codec(config["id"], config["level"])


def _compress_error(compress):
    return ValueError(
        f"invalid compress={compress!r}: use 0/False (raw), True (default codec "
        f"{DEFAULT_CODEC} at level {DEFAULT_LEVEL}), an int 0-9, a codec name "
        f"({', '.join(available_codecs() + sorted(ALIASES))}) or a (name, level) "
        f"tuple with level 0-9"
    )


def parse_compress(compress):
    """Turn a user's ``compress`` argument into a codec, or None for raw.

    Parameters
    ----------
    compress : bool, int, str or (str, int)
        ``0``/``False``: raw. ``True``: the default codec at level 3. An int
        1–9: the default codec at that level. A codec name: that codec at
        level 3. A ``(name, level)`` tuple: that codec at that level, where
        level 0 means raw (as in joblib).

    Returns
    -------
    Codec or None

    Raises
    ------
    ValueError
        For anything else, naming the accepted values.
    """
    if compress is True:
        return get_codec(DEFAULT_CODEC, DEFAULT_LEVEL)
    if compress is False or compress is None:
        return None
    if isinstance(compress, int):
        if compress == 0:
            return None
        if compress in LEVELS:
            return get_codec(DEFAULT_CODEC, compress)
        raise _compress_error(compress)
    if isinstance(compress, str):
        try:
            # "max" searches for the smallest chunk, whatever the level;
            # level 9 only makes a small saving count (see codecs.max).
            return get_codec(compress, 9 if compress == "max" else DEFAULT_LEVEL)
        except ValueError:
            raise _compress_error(compress) from None
    if isinstance(compress, tuple) and len(compress) == 2:
        name, level = compress
        if (
            isinstance(name, str)
            and isinstance(level, int)
            and not isinstance(level, bool)
            and (level == 0 or level in LEVELS)
        ):
            try:
                codec = get_codec(name, level or DEFAULT_LEVEL)
            except ValueError:
                raise _compress_error(compress) from None
            return codec if level else None
    raise _compress_error(compress)
