"""Support library of the addnorm course.

- :mod:`addnorm_lib.reference.norms`: numpy reference implementations of the norms and their
  backward passes.
- :mod:`addnorm_lib.reference.modules`: torch modules with ``torch.nn``'s signatures, built on
  hand-written math.
- :mod:`addnorm_lib.checks`: the self-checks that exercises and graded tests call.
- :mod:`addnorm_lib.authoring.release`: generates ``exercises/`` from ``solutions/``.
- :mod:`addnorm_lib.grading.pipeline`: grades notebooks (one, or a folder of them) with nbval,
  tamper-proof.
"""

__version__ = "0.1.0"
