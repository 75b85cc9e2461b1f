"""What runs on a file rather than on an object: ``inspect``, ``verify`` and
``reseal``, ``convert`` (re-encoding, and migrating joblib files, pickles and
torch/safetensors checkpoints), the reports of the command line, and the text
tables it and the benchmark draw.
"""
