"""``tf.map_fn`` that leaves the process as it found it when the mapped function raises.

Traced (in a ``tf.function``), ``tf.map_fn`` sets a caching device on the current
variable scope before it traces ``fn`` and clears it after, outside any ``finally``: an
exception from ``fn`` (a user's loss that branches in Python on a tensor, a shape error)
leaves the caching device set on the variable scope that the eager context shares. From
then on every variable created under a ``tf.distribute`` strategy in that process fails
("Caching devices is not yet supported when eager execution is enabled", or
"``colocate_vars_with`` must only be passed a variable created in this
tf.distribute.Strategy.scope()"): one error in a notebook breaks every later model.
:func:`map_fn` puts the scope's caching device back in that case, through the public
``tf.compat.v1.get_variable_scope()``. Seen in TensorFlow 2.19 to 2.21.
"""
from __future__ import annotations

import tensorflow as tf


def map_fn(fn, elems, **kwargs):
  """``tf.map_fn(fn, elems, **kwargs)``, the same values and errors; when ``fn`` raises
  while it is traced, the variable scope's caching device is restored before the error
  goes on (see the module docstring).

  Args:
    fn: the function mapped over the first axis of ``elems`` (as ``tf.map_fn``).
    elems: a tensor or a nest of tensors ``[n, ...]``.
    **kwargs: ``tf.map_fn``'s other arguments (``fn_output_signature``,
      ``parallel_iterations``, ...).

  Returns:
    What ``tf.map_fn`` returns: the stacked results ``[n, ...]``.
  """
  scope = tf.compat.v1.get_variable_scope()
  caching_device = scope.caching_device
  try:
    return tf.map_fn(fn, elems, **kwargs)
  except BaseException:
    if scope.caching_device is not caching_device:
      scope.set_caching_device(caching_device)
    raise
