"""Transformer pieces the chapters and checks build on: sublayers, other architectures, a model zoo.

- :mod:`~addnorm_lib.transformer.sublayers`: self-attention and feed-forward sublayers.
- :mod:`~addnorm_lib.transformer.architectures`: sandwich, parallel and output-norm blocks.
- :mod:`~addnorm_lib.transformer.model_zoo`: small models in the styles of published Transformers.
"""
