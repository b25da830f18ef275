"""The experiments whose numbers the chapters compute in the page, and the figures that show them.

- :mod:`~addnorm_lib.experiments.depth`: per-layer probes of activations and gradients, deep MLPs.
- :mod:`~addnorm_lib.experiments.deepnorm`: training deep Post-LN and DeepNorm sequence models.
- :mod:`~addnorm_lib.experiments.placement`: Pre-LN against Post-LN training and warm-up sweeps.
- :mod:`~addnorm_lib.experiments.timing`: interleaved timing of competing implementations.
- :mod:`~addnorm_lib.experiments.norm_training`: a small model trained with a learner's norm
  and with torch's, side by side (the norm exercises' last cell).
- :mod:`~addnorm_lib.experiments.plots`: the book's figure styles.
"""
