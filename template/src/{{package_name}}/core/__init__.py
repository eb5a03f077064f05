"""The shared core: configuration, errors, devices, processes, seeds, checkpoint files, provenance.

Everything else imports from here; the core imports nothing of the package
but itself (and ``models/extensions.py``, never). Start at ``config.py``: every key a run
reads, with its default and its check.
"""

PACKAGE = __package__.rpartition(".")[0]  # the top package (the project's import name): files and names hang on it
