"""Reading a pickle stream without running it: each opcode's argument, the
opcode walker and its symbolic stack machine, and where each array sits in
the pickled object.
"""

#: Longer bytes are never shown as a dict key, so they are not kept. Here,
#: not with the walker, because a dump's array-path finder needs it too.
MAX_KEPT_BYTES = 200
