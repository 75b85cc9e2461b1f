"""Reading a pickle stream without running it: each opcode's argument, the
opcode walker and its symbolic stack machine, and where each array sits in
the pickled object.
"""
