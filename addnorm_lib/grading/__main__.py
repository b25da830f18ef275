"""``python -m addnorm_lib.grading``: grade one notebook or a folder of them."""

import sys

from addnorm_lib.grading.pipeline import main

sys.exit(main())
