"""The process-level services the rest of the package shares: thread pools and
the work spread over them, pausing the garbage collector, file locks,
temporary files and their clean-up, and renewing locks in a forked child.
"""
