"""``python -m <package>`` runs the same program as the console script."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
