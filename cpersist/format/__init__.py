"""What a cpersist pickle stream may name and what reading one may cost:
the format's global names, the ml_dtypes types stored by name, and the
:class:`~cpersist.Limits` of reading a stream. Below both the stream walker
(:mod:`cpersist.stream`) and the pickling (:mod:`cpersist.pickling`), which
each read them; it imports nothing of the package but its exceptions.
"""
