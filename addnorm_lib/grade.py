"""Alias kept for pages and habits that say ``python -m addnorm_lib.grade``: see
:mod:`addnorm_lib.grading`."""

import sys

from addnorm_lib.grading.pipeline import main

if __name__ == "__main__":
    sys.exit(main())
