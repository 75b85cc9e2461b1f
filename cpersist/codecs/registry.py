"""Codecs keyed by name, and the parsing of the user's ``compress`` argument.

Three sources of codecs, looked up in this order:

1. classes registered with :func:`register_codec` (including built-ins
   already imported);
2. the built-in codecs, a table of names and the module defining each, so
   that a codec's module (and the compression library behind it) is imported
   only when that codec is first used;
3. the ``cpersist.codecs`` entry-point group of installed packages, read only
   when a name is in neither of the above, or when codecs are listed.
"""

import importlib
import re
import threading

from .._runtime.fork import renew_after_fork
from .abc import LEVELS, Codec

#: Entry-point group third-party packages declare their codecs in.
ENTRY_POINT_GROUP = "cpersist.codecs"

#: The built-in codecs: name -> "module:Class". Adding a built-in codec means
#: adding its module and one line here.
BUILTIN_CODECS = {
    "zlib": "cpersist.codecs.zlib:Zlib",
    "lz4": "cpersist.codecs.lz4:LZ4",
    "zstd": "cpersist.codecs.zstd:Zstd",
    "zstd-auto": "cpersist.codecs.zstd_auto:ZstdAuto",
    "blosc:lz4": "cpersist.codecs.blosc:BloscLZ4",
    "blosc:zstd": "cpersist.codecs.blosc:BloscZstd",
    "blosc:zlib": "cpersist.codecs.blosc:BloscZlib",
    "blosc:blosclz": "cpersist.codecs.blosc:BloscBloscLZ",
    "gzip": "cpersist.codecs.gzip:Gzip",
    "bz2": "cpersist.codecs.bz2:BZ2",
    "lzma": "cpersist.codecs.lzma:LZMA",
    "xz": "cpersist.codecs.lzma:XZ",
    "max": "cpersist.codecs.max:Max",
}
#: Short names that stand for a registered codec.
ALIASES = {"blosc": "blosc:lz4"}
#: Codec used when ``compress`` is an int or True: on the benchmark's
#: datasets it gives the highest ratio of the built-in codecs and reads
#: about as fast as the fastest (docs/benchmark_results.rst).
DEFAULT_CODEC = "zstd-auto"
#: Level used when ``compress`` is True or a bare codec name.
DEFAULT_LEVEL = 3

# Valid codec ids: lower case because the command line lowercases its
# --compress value; no trailing ":<digits>", which NAME:LEVEL would read as a
# level. Kept as strings: re caches the compiled pattern at first use, so
# importing cpersist compiles nothing.
_VALID_ID = r"[a-z0-9][a-z0-9_.+:-]*"
_LEVEL_SUFFIX = r":[0-9]*$"

_registry = {}
# Held while a codec is looked up and registered, so that threads decoding
# chunks of a new file agree on one class per name.
_lock = threading.RLock()


renew_after_fork(globals(), _lock=threading.RLock)


class UnknownCodecError(ValueError):
    """No registered, built-in or installed codec has this name."""


def _qualified(cls):
    return f"{cls.__module__}:{cls.__qualname__}"


def register_codec(cls, *, replace=False):
    """Register a :class:`~cpersist.codecs.Codec` subclass under its ``codec_id``.

    Once registered, the codec is accepted wherever cpersist takes a codec
    name: ``cpersist.dump(obj, path, compress="name")``, ``(name, level)``,
    ``cpersist.convert`` and ``cpersist convert --compress name:level``.
    Files record the codec's ``get_config()``, so a file written with it can
    be loaded only where the same codec is registered (or installed through
    the ``cpersist.codecs`` entry-point group, see :func:`get_codec`).

    Parameters
    ----------
    cls : type
        A concrete subclass of :class:`~cpersist.codecs.Codec` whose
        ``codec_id`` is a lower-case name (letters, digits, ``_.+-`` and
        ``:`` separators, not ending in ``:`` and digits, which would read as
        a level).
    replace : bool
        Registering a different class under a name already taken (a built-in
        codec, an earlier registration) raises :class:`ValueError` unless
        this is True: files record only the name, so a silent replacement
        would change how existing files decode. Registering the same class
        again is always allowed and does nothing.

    Returns
    -------
    type
        ``cls``, so that ``register_codec`` can decorate a class.

    Raises
    ------
    TypeError
        If ``cls`` is not a concrete Codec subclass.
    ValueError
        If its ``codec_id`` is not a valid name, is an alias, or is taken and
        ``replace`` is False.
    """
    if not (isinstance(cls, type) and issubclass(cls, Codec)):
        raise TypeError(f"register_codec expects a Codec subclass, got {cls!r}")
    if cls.__abstractmethods__:
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise TypeError(f"{cls.__qualname__} does not implement {missing}")
    name = cls.codec_id
    if (not isinstance(name, str) or not re.fullmatch(_VALID_ID, name)
            or re.search(_LEVEL_SUFFIX, name)):
        raise ValueError(
            f"{cls.__qualname__}.codec_id={name!r} is not a valid codec name: use lower-case "
            f"letters, digits and _.+-, with optional ':' separators, not ending in ':<digits>'"
        )
    if name in ALIASES:
        raise ValueError(f"codec name {name!r} is an alias of {ALIASES[name]!r}")
    with _lock:
        current = _registry.get(name)
        if current is None and name in BUILTIN_CODECS:
            if BUILTIN_CODECS[name] == _qualified(cls):
                current = cls  # the built-in module registering its own class
            elif not replace:
                current = BUILTIN_CODECS[name]
        if current is not None and current is not cls and not replace:
            taken = current if isinstance(current, str) else _qualified(current)
            raise ValueError(
                f"codec name {name!r} is already registered to {taken}; pass "
                f"replace=True to replace it (files record only the name)"
            )
        _registry[name] = cls
    return cls


def _entry_points():
    """The installed ``cpersist.codecs`` entry points, by name."""
    from importlib.metadata import entry_points

    try:
        found = entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python 3.9: a dict of groups
        found = entry_points().get(ENTRY_POINT_GROUP, ())
    return {ep.name: ep for ep in found}


def _load_entry_point(ep):
    where = f"entry point {ep.name} = {ep.value} (group {ENTRY_POINT_GROUP!r}"
    dist = getattr(ep, "dist", None)
    if dist is not None:
        where += f", package {dist.metadata['Name']} {dist.version}"
    where += ")"
    try:
        cls = ep.load()
    except Exception as exc:
        raise ImportError(f"codec {ep.name!r}: {where} failed to load: "
                          f"{type(exc).__name__}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Codec)) or cls.codec_id != ep.name:
        raise ImportError(f"codec {ep.name!r}: {where} does not name a Codec subclass "
                          f"with codec_id {ep.name!r} (got {cls!r})")
    try:
        return register_codec(cls)
    except (TypeError, ValueError) as exc:
        raise ImportError(f"codec {ep.name!r}: {where} is not a valid codec: {exc}") from exc


def _codec_class(name):
    """The class registered, built in or installed as ``name``, or None."""
    with _lock:
        cls = _registry.get(name)
        if cls is not None:
            return cls
        if name in BUILTIN_CODECS:
            module, _, qualname = BUILTIN_CODECS[name].partition(":")
            cls = getattr(importlib.import_module(module), qualname)
            _registry[name] = cls
            return cls
    ep = _entry_points().get(name)
    if ep is None:
        return None
    with _lock:
        return _registry.get(name) or _load_entry_point(ep)


def available_codecs():
    """Names of the codecs cpersist can use here, sorted.

    The built-in codecs, those registered with
    :func:`cpersist.codecs.register_codec`, and those installed packages
    declare in the ``cpersist.codecs`` entry-point group (listed without
    importing them). Aliases (``"blosc"`` for ``"blosc:lz4"``) are not listed.

    Returns
    -------
    list of str
    """
    return sorted(set(BUILTIN_CODECS) | set(_registry) | set(_entry_points()))


def _accepted_names():
    return ", ".join(available_codecs() + sorted(ALIASES))


def get_codec(name, level=DEFAULT_LEVEL):
    """Return the codec registered as ``name`` (or an alias) at ``level``.

    A name that is neither registered nor built in is looked up in the
    ``cpersist.codecs`` entry-point group of installed packages; the class
    the entry point names is loaded and registered then.

    Parameters
    ----------
    name : str
        A codec name from :func:`available_codecs`, or an alias.
    level : int
        1–9.

    Returns
    -------
    Codec

    Raises
    ------
    ValueError
        If no codec has that name (:class:`UnknownCodecError`), or the level
        is not 1–9.
    ImportError
        If an entry point of that name fails to load or names no valid codec;
        the message names the entry point and its package.
    """
    cls = _codec_class(ALIASES.get(name, name)) if isinstance(name, str) else None
    if cls is None:
        raise UnknownCodecError(f"unknown codec {name!r}; accepted names: {_accepted_names()}")
    return cls(level)


def codec_from_config(config):
    """Rebuild a codec from the ``get_config()`` dict recorded in a file.

    Raises
    ------
    UnknownCodecError
        If no codec of that name is available here; the message names the
        codec and the entry point a package providing it would declare.
    ImportError
        If the entry point providing it fails to load.
    KeyError, ValueError, TypeError
        If the configuration is malformed or has a bad level.

    Callers reading files turn all of these into
    :class:`~cpersist.CorruptFileError` naming the file.
    """
    name = config["id"]
    try:
        return get_codec(name, config["level"])
    except UnknownCodecError:
        raise UnknownCodecError(
            f"the file uses codec {name!r}, which is not available here: it is not "
            f"built into this cpersist and no installed package provides it (a package "
            f"providing it declares a {ENTRY_POINT_GROUP!r} entry point named {name!r}; "
            f"install that package, or a newer cpersist). Available codecs: "
            f"{', '.join(available_codecs())}"
        ) from None


def _compress_error(compress):
    return ValueError(
        f"invalid compress={compress!r}: use 0/False/'raw' (raw), True (default codec "
        f"{DEFAULT_CODEC} at level {DEFAULT_LEVEL}), a level 1-9 for the default codec, a "
        f"codec name ({_accepted_names()}), 'NAME:LEVEL' such as 'zstd:9' or a (name, level) "
        f"tuple, with level 0-9 (0 = raw)"
    )


def _level_error(compress, level):
    general = str(_compress_error(compress)).split(": ", 1)[1]
    return ValueError(
        f"invalid compress={compress!r}: level {level} is out of range; levels are 1-9 "
        f"(0 = raw) whatever the codec, mapped onto the codec's own scale. Use {general}"
    )


#: Strings that mean raw, as ``0`` does.
RAW_NAMES = ("raw", "none", "0")


def parse_text(text):
    """The int or ``(name, level)`` a ``compress`` string stands for, or the
    name itself: ``'raw'``, ``'6'``, ``'zstd'``, ``'zstd:9'``, ``'blosc:lz4:5'``."""
    spec = text.strip().lower()
    if spec in RAW_NAMES:
        return 0
    if spec.isdigit():
        return int(spec)
    name, sep, level = spec.rpartition(":")
    if sep and name and level.isdigit():
        return (name, int(level))
    return spec


def parse_compress(compress):
    """Turn a user's ``compress`` argument into a codec, or None for raw.

    The one parser of compression settings: :func:`cpersist.dump`,
    :func:`cpersist.convert`, ``cpersist convert --compress`` and the
    joblib backend all accept the same spellings.

    Parameters
    ----------
    compress : bool, int, str or (str, int)
        ``0``/``False``/``"raw"``: raw. ``True``: the default codec at level
        3. An int 1–9 (or its digits as a string): the default codec at that
        level. A codec name: that codec at level 3. ``"NAME:LEVEL"`` (e.g.
        ``"zstd:9"``, ``"blosc:lz4:5"``) or a ``(name, level)`` tuple: that
        codec at that level, where level 0 means raw (as in joblib).

    Returns
    -------
    Codec or None

    Raises
    ------
    ValueError
        For anything else, naming the accepted values (and the allowed
        range, for a level outside 0-9).

    Examples
    --------
    >>> from cpersist.codecs import parse_compress
    >>> parse_compress("zstd:9").level == parse_compress(("zstd", 9)).level == 9
    True
    >>> parse_compress("raw") is None
    True
    """
    given = compress
    if isinstance(compress, str):
        compress = parse_text(compress)
    if compress is True:
        return get_codec(DEFAULT_CODEC, DEFAULT_LEVEL)
    if compress is False or compress is None:
        return None
    if isinstance(compress, int):
        if compress == 0:
            return None
        if compress in LEVELS:
            return get_codec(DEFAULT_CODEC, compress)
        raise _level_error(given, compress)
    if isinstance(compress, str):
        try:
            # "max" searches for the smallest chunk, whatever the level;
            # level 9 only makes a small saving count (see codecs.max).
            return get_codec(compress, 9 if compress == "max" else DEFAULT_LEVEL)
        except UnknownCodecError:
            raise _compress_error(given) from None
    if isinstance(compress, tuple) and len(compress) == 2:
        name, level = compress
        if isinstance(name, str) and isinstance(level, int) and not isinstance(level, bool):
            if not (level == 0 or level in LEVELS):
                raise _level_error(given, level)
            try:
                codec = get_codec(name, level or DEFAULT_LEVEL)
            except UnknownCodecError:
                raise _compress_error(given) from None
            return codec if level else None
    raise _compress_error(given)
