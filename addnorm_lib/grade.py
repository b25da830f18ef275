"""An alias of :mod:`addnorm_lib.grading`, the grader.

Kept for the pages and habits that say ``python -m addnorm_lib.grade``; new code runs
``python -m addnorm_lib.grading``.
"""

import sys

from addnorm_lib.grading.pipeline import main

if __name__ == "__main__":
    sys.exit(main())
