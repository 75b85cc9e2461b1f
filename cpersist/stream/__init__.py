"""Reading a pickle stream without running it: each opcode's argument, the
opcode walker and its symbolic stack machine, and where each array sits in
the pickled object.
"""

#: Longer bytes are never shown as a dict key, so they are not kept. Here,
#: not with the walker, because a dump's array-path finder needs it too (as
#: it does :data:`MAX_PATH`), and importing this package imports nothing.
MAX_KEPT_BYTES = 200
#: Longest path given to an array; one deeper in the object gets ``"?"``.
MAX_PATH = 4096
