"""Where a dump's bytes come from and go to: the one resolver of what the
user passes (a path, URL, ``(file system, path)`` pair, file object or
buffer) and one package per remote backend.

:mod:`.open` tells what a source is, once, and makes the container's byte
source of it (``load``, ``open``, ``inspect``, ``verify``, ``convert``);
:mod:`.targets` makes the target a dump is written into;
:mod:`.small_files` reads a small local file in one call (the quick path of
a compact dump). :mod:`.fsspec` is the fsspec backend, reading and writing.

It sits above the container (whose byte sources and local targets it picks
among) and the process services, and below everything that loads or dumps.
"""
