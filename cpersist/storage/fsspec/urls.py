"""fsspec's names for remote storage: telling a URL (or a ``(file system,
path)`` pair, or an :class:`fsspec.core.OpenFile`) from a path, and
resolving it to a file system and a path, for reading (:mod:`.read`) and
writing (:mod:`.write`) alike.

fsspec is optional: it is imported only when a URL is given.
"""

#: What to install for URLs.
REMOTE_EXTRA = "pip install fsspec s3fs (the remote extra: pip install '.[remote]' in a checkout)"

_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_SCHEME = _LETTERS | frozenset("0123456789+.-")


def is_url(obj):
    """Whether ``obj`` is a URL string (``s3://...``, ``memory://...``).

    A scheme of two or more characters, then ``://`` or ``::`` (chained,
    ``simplecache::s3://...``); not ``C:\\``. Checked without a regular
    expression, whose compilation every first dump or load would pay.
    """
    if not isinstance(obj, str):
        return False
    colon = obj.find(":")
    return (colon >= 2 and obj[0] in _LETTERS and obj.startswith(("//", ":"), colon + 1)
            and all(c in _SCHEME for c in obj[1:colon]))


def is_filesystem(obj):
    # Checked by name: fsspec need not be installed (nor imported) for paths.
    return any(cls.__module__ == "fsspec.spec" and cls.__name__ == "AbstractFileSystem"
               for cls in type(obj).__mro__)


def is_remote(obj):
    """Whether ``obj`` names something fsspec opens: a URL, a ``(file
    system, path)`` pair or an :class:`fsspec.core.OpenFile`."""
    if is_url(obj):
        return True
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[1], str):
        return is_filesystem(obj[0])
    return type(obj).__name__ == "OpenFile" and type(obj).__module__ == "fsspec.core"


def _import_fsspec(url):
    try:
        import fsspec
    except ImportError:
        raise ImportError(
            f"{url}: reading and writing URLs needs fsspec: {REMOTE_EXTRA}") from None
    return fsspec


def resolve(obj, storage_options=None):
    """``(fs, path, name)`` of a URL, a ``(fs, path)`` pair or an OpenFile;
    ``fs`` is None for a local file (``file://``), ``path`` then a local path.

    Raises
    ------
    ImportError
        For a URL when fsspec (or the package of its protocol, such as
        s3fs) is not installed, naming what to install.
    ValueError
        For storage options given with a file system or an OpenFile.
    """
    if isinstance(obj, tuple) or not is_url(obj):
        if storage_options:
            raise ValueError("storage_options apply to URLs; a file system given "
                             "already has its options")
        fs, path = obj if isinstance(obj, tuple) else (obj.fs, obj.path)
    else:
        fsspec = _import_fsspec(obj)
        try:
            fs, path = fsspec.core.url_to_fs(obj, **(storage_options or {}))
        except ImportError as exc:
            raise ImportError(f"{obj}: {exc}; or {REMOTE_EXTRA}") from None
    if "file" in protocols_of(fs):
        return None, fs._strip_protocol(path), path
    name = obj if is_url(obj) else fs.unstrip_protocol(path)
    return fs, path, name


def protocols_of(fs):
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)
