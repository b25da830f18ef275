"""The course's ground truth: the answers to the exercises, and the mistakes that imitate them.

Graded kernels never see this folder (the grader hides it as a whole), so nothing a learner's
notebook runs may import it: the checks import it only on the judging side.

- :mod:`~addnorm_lib.reference.norms`: numpy BatchNorm, LayerNorm and RMSNorm with backward passes.
- :mod:`~addnorm_lib.reference.modules`: torch twins of those norms, with ``torch.nn``'s signatures.
- :mod:`~addnorm_lib.reference.residuals`: numpy plain and residual blocks, forward and backward.
- :mod:`~addnorm_lib.reference.deepnorm`: DeepNorm's constants and its residual step.
- :mod:`~addnorm_lib.reference.placement`: Post-LN and Pre-LN blocks and stacks, warm-up schedules.
- :mod:`~addnorm_lib.reference.mistakes`: one file per topic of wrong implementations, each with
  the diagnosis a learner is shown when their code behaves like it.
"""
