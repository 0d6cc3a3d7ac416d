#!/usr/bin/env python
"""Django's command-line utility; `sparkops` is the same thing installed as a console script."""

import sys

from sparkops.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv))
