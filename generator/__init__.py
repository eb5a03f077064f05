"""torch-scaffold: the copier template for PyTorch training projects, and its command."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("torch-scaffold")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"
