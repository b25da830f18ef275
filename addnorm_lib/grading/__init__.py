"""The grader: ``python -m addnorm_lib.grading submissions/ --out grades/``.

One module per stage, run in this order by :mod:`~addnorm_lib.grading.pipeline`:
:mod:`~addnorm_lib.grading.settings` (every default, and the command line built from them),
:mod:`~addnorm_lib.grading.discover` (the submissions), :mod:`~addnorm_lib.grading.assemble` (the
graded notebook), :mod:`~addnorm_lib.grading.sandbox` (isolating the kernel),
:mod:`~addnorm_lib.grading.execute` (running it under nbval), :mod:`~addnorm_lib.grading.judge`
(the points) and :mod:`~addnorm_lib.grading.report` (CSV, JSON and feedback pages).

Kept light on purpose: graded kernels import :mod:`~addnorm_lib.grading._graded_kernel`, which
must not pull in the grader's own dependencies (nbformat, jinja2, the pipeline).
"""

import sys

# jsonschema, which nbformat imports, compiles a grammar for checking IRIs when the optional
# rfc3987_syntax is installed (jupyter-events asks for it): 0.7 s in every process that imports
# nbformat. nbformat's schema checks no IRI, so the grader's processes import jsonschema without it.
sys.modules.setdefault("rfc3987_syntax", None)
