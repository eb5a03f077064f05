"""``python -m <package>`` runs the same program as the console script."""

from .cli import entry

if __name__ == "__main__":
    entry()
