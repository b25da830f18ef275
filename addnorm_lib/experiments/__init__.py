"""The experiments whose numbers the chapters compute in the page, and the figures that show them.

- :mod:`~addnorm_lib.experiments.depth`: per-layer probes of activations and gradients, deep MLPs.
- :mod:`~addnorm_lib.experiments.depth_checks`: dead ReLU units over training, and which shifts of
  the inputs a norm undoes (the depth chapter).
- :mod:`~addnorm_lib.experiments.residual_scaling`: how a residual branch's last weight starts
  (default, 1/sqrt(L), zero) and what that does to training (the residuals chapter).
- :mod:`~addnorm_lib.experiments.batchnorm_extras`: GroupNorm, InstanceNorm and BatchNorm's backward
  written out (the BatchNorm chapter).
- :mod:`~addnorm_lib.experiments.rmsnorm_extras`: partial-RMS sampling errors over draws of feature
  scales (the RMSNorm chapter).
- :mod:`~addnorm_lib.experiments.deepnorm`: training deep Post-LN and DeepNorm sequence models.
- :mod:`~addnorm_lib.experiments.placement`: Pre-LN against Post-LN training and warm-up sweeps.
- :mod:`~addnorm_lib.experiments.timing`: interleaved timing of competing implementations.
- :mod:`~addnorm_lib.experiments.norm_training`: a small model trained with a learner's norm
  and with torch's, side by side (the norm exercises' last cell).
- :mod:`~addnorm_lib.experiments.plots`: the book's figure styles.
"""
