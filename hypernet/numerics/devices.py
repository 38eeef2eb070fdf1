"""Device facts that decide which kernels run (one place, so every choice reads the same).

The fused CPU kernels of :mod:`hypernet.numerics.norm_relu_pool` and the plain bias
additions of :mod:`hypernet.numerics.plain_bias` are CPU optimisations: they are off as
soon as TensorFlow sees a GPU.
"""
import tensorflow as tf


def cpu_only() -> bool:
  """Whether TensorFlow sees no GPU (logical devices: what the process may place ops on)."""
  return not tf.config.list_logical_devices("GPU")
