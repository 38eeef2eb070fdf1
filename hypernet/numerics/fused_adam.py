"""Adam's update as one TensorFlow kernel per variable: :class:`FusedAdam`.

Keras 3's :class:`keras.optimizers.Adam` writes its update as about twenty element-wise
ops per variable; in a small network's step their dispatch, not their arithmetic, is
what the optimiser costs. ``tf.raw_ops.ResourceApplyAdam`` (TensorFlow's own fused
kernel) does the same update in one op: on the hypernetwork step's 9 variables it takes
0.36x Keras' time, on a small transformer's 67 variables 0.48x
(``benchmarks/adam_step.py``; docs/performance.md).

The Trainer uses it with ``config.optim.name = "fused_adam"``; in a step of your own,
``hn.FusedAdam(1e-3)`` where you had ``keras.optimizers.Adam(1e-3)``.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from hypernet.numerics import compat


@keras.saving.register_keras_serializable(package="hypernet")
class FusedAdam(keras.optimizers.Adam):
  """:class:`keras.optimizers.Adam` whose dense update is one
  ``tf.raw_ops.ResourceApplyAdam`` per variable.

  The same update (Kingma & Ba 2015, Algorithm 1, with the bias correction in the step
  size, ``alpha_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)``, and ``epsilon`` added
  to ``sqrt(v_t)``, as Keras and TensorFlow write it), the same slot variables in the
  same order and names (a checkpoint of either optimiser restores into the other) and
  the same :meth:`get_config`. Only the rounding differs: the kernel forms ``1 - beta_1``
  and ``1 - beta_2`` in the variable's dtype (float32: ``1 - 0.999f = 0.00099998713``),
  Keras in Python floats. In float32 ``1 - beta_2`` is then off by 1.3e-5 relative from
  Keras' at 0.999 (1.4e-3 at 0.99999), and so is the second moment; the steps, which
  scale with its square root, differ by about half that, a constant offset rather than
  one that grows with the steps. In float64 this class is Algorithm 1 to the last bit
  (tested against NumPy), where Keras 3.15's Adam is off by about 1e-6 relative: it
  casts ``beta_1`` and ``beta_2`` to the variable's dtype through float32 for the bias
  correction.

  Keras' own update runs instead, for that variable, where the fused kernel does not
  apply: ``amsgrad=True``, a sparse gradient (``tf.IndexedSlices``), a variable or slot
  without a resource handle (a distributed variable outside its update context), or a
  Keras that keeps Adam's slots elsewhere than :func:`hypernet.numerics.compat.adam_slots`
  finds them (its canary; one warning).

  Args:
    learning_rate: a float or a ``keras.optimizers.schedules`` schedule, as Adam's.
    beta_1: the first moment's decay, as Adam's.
    beta_2: the second moment's decay, as Adam's.
    epsilon: added to ``sqrt(v_t)``, as Adam's.
    amsgrad: as Adam's (Keras' own update runs then).
    name: defaults to ``"adam"``, so that slot variables are named as Adam's.
    **kwargs: Keras' optimizer arguments (``global_clipnorm``, ``weight_decay``, ...).
  """

  def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
               amsgrad=False, name="adam", **kwargs):
    super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2,
                     epsilon=epsilon, amsgrad=amsgrad, name=name, **kwargs)

  def update_step(self, gradient, variable, learning_rate):
    """One variable's update (called by Keras' ``apply`` for each variable)."""
    slots = None
    if not (self.amsgrad or isinstance(gradient, tf.IndexedSlices)):
      slots = compat.adam_slots(self, variable)
    if slots is None:
      return super().update_step(gradient, variable, learning_rate)
    m, v = slots
    try:
      handles = [x.handle for x in (variable, m, v)]
    except (AttributeError, ValueError, RuntimeError):
      return super().update_step(gradient, variable, learning_rate)
    dtype = variable.dtype
    # tf.constant, not tf.cast: a Python float cast to float64 passes through float32.
    const = lambda x: tf.constant(x, dtype)
    step = tf.cast(self.iterations + 1, dtype)
    return tf.raw_ops.ResourceApplyAdam(
        var=handles[0], m=handles[1], v=handles[2],
        beta1_power=tf.pow(const(self.beta_1), step),
        beta2_power=tf.pow(const(self.beta_2), step),
        lr=tf.cast(learning_rate, dtype), beta1=const(self.beta_1),
        beta2=const(self.beta_2), epsilon=const(self.epsilon),
        grad=tf.cast(gradient, dtype))
