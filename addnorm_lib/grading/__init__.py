"""The grader: ``python -m addnorm_lib.grading submissions/ --out grades/``.

Kept light on purpose: graded kernels import :mod:`~addnorm_lib.grading._graded_kernel`, which
must not pull in the grader's own dependencies.
"""
