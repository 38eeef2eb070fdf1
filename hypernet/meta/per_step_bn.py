"""BatchNorm with per-inner-step statistics and weights (MAML++: Antoniou, Edwards, Storkey
2019, "How to train your MAML", Sec. 4 "Per-step batch normalization running statistics"
and "Per-step batch normalization weights and biases").

:class:`PerStepBatchNormalization` keeps ``S`` rows of moving mean and variance (and,
optionally, of ``gamma`` / ``beta``): row ``k`` belongs to inner step ``k`` and row ``K``
(the last, clipped) to the query pass after ``K`` inner steps. Which row a call uses is
the *current step* of this thread, set by the inner loops of :mod:`hypernet.meta.
inner_loop` around each support pass (:func:`step_scope`) and left at ``K`` when the
loop ends, so that the query pass that follows uses row ``K``. It is read when a call
is traced, so one traced graph holds one row per step.

In training mode a call normalises with the batch's statistics (exact second order:
:func:`hypernet.numerics.second_order.exact_moments`) and moves only its row of the
moving statistics; in inference mode it normalises with its row. The rows are ordinary
non-trainable variables of the target: meta-batches average them over tasks, the train
loop assigns them, checkpoints keep and restore them.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import keras
import tensorflow as tf

from hypernet.numerics import second_order

_state = threading.local()


def current_step() -> int:
  """The inner step whose row per-step layers use in this thread (0 outside loops)."""
  return getattr(_state, "step", 0)


def set_step(step: int) -> None:
  """Sets the current step of this thread (the inner loops call it)."""
  _state.step = int(step)


@contextlib.contextmanager
def step_scope(step: int) -> Iterator[None]:
  """Within the block, per-step layers use row ``step``; afterwards the step is left at
  ``step + 1`` (the next pass's row)."""
  set_step(step)
  try:
    yield
  finally:
    set_step(step + 1)


class PerStepBatchNormalization(keras.layers.Layer):
  """Batch normalisation over all axes but the last with ``num_rows`` rows of state.

  ``y = gamma_k (x - mu) / sqrt(var + epsilon) + beta_k`` with ``(mu, var)`` the batch's
  moments in training mode, row ``k`` of the moving statistics in inference mode;
  ``k = min(current_step(), num_rows - 1)``.

  The moving statistics are exponential averages from Keras' initial values (mean 0,
  variance 1) with ``momentum``; inference reads them *debiased* by the row's update
  count ``n`` (``updates``): ``(moving - m^n init) / (1 - m^n)``, the average of the
  batch moments seen so far, weighted as the exponential average weighs them (Kingma &
  Ba 2015's bias correction). A meta-learner updates each row once per meta-step, so
  without it the variance is still ``m^n`` parts its initial 1 after ``n`` meta-steps
  (0.08 after 250 at m = 0.99, against batch variances ~0.001 of a first conv layer on
  Omniglot): evaluations early in a run normalised with it were near chance.

  Args:
    num_rows: rows of state (inner steps + 1 for the query pass).
    per_step_statistics: one row of moving mean / variance per step (else one row:
      Keras' ``BatchNormalization``).
    per_step_weights: one row of ``gamma`` / ``beta`` per step (else one, shared).
    momentum: as ``keras.layers.BatchNormalization`` (0.99).
    epsilon: as ``keras.layers.BatchNormalization`` (1e-3).

  Inputs ``[..., C]`` float; outputs the same shape and dtype. Weights: ``gamma`` /
  ``beta`` ``[R, C]`` (R = ``num_rows`` with ``per_step_weights``, else 1),
  ``moving_mean`` / ``moving_variance`` ``[R', C]`` likewise, ``updates`` ``[R']``
  (float; 0 in a checkpoint written without it: the moving statistics are then read as
  they are).

  Raises:
    ValueError: ``num_rows`` < 1.
  """

  def __init__(self, num_rows: int, *, per_step_statistics: bool = True,
               per_step_weights: bool = False, momentum: float = 0.99,
               epsilon: float = 1e-3, **kwargs):
    super().__init__(**kwargs)
    if num_rows < 1:
      raise ValueError(f"PerStepBatchNormalization: num_rows must be >= 1 (inner steps + "
                       f"1), got {num_rows}.")
    self.num_rows = int(num_rows)
    self.per_step_statistics = bool(per_step_statistics)
    self.per_step_weights = bool(per_step_weights)
    self.momentum = float(momentum)
    self.epsilon = float(epsilon)

  def build(self, input_shape):
    c = int(input_shape[-1])
    rw = self.num_rows if self.per_step_weights else 1
    rs = self.num_rows if self.per_step_statistics else 1
    self.gamma = self.add_weight(shape=(rw, c), initializer="ones", name="gamma")
    self.beta = self.add_weight(shape=(rw, c), initializer="zeros", name="beta")
    self.moving_mean = self.add_weight(shape=(rs, c), initializer="zeros",
                                       name="moving_mean", trainable=False)
    self.moving_variance = self.add_weight(shape=(rs, c), initializer="ones",
                                           name="moving_variance", trainable=False)
    self.updates = self.add_weight(shape=(rs,), initializer="zeros", name="updates",
                                   trainable=False)

  def _row(self, rows: int) -> int:
    return min(current_step(), rows - 1)

  def call(self, x, training=None):
    x = tf.convert_to_tensor(x)
    kw = self._row(self.gamma.shape[0])
    ks = self._row(self.moving_mean.shape[0])
    gamma = tf.cast(tf.convert_to_tensor(self.gamma)[kw], x.dtype)
    beta = tf.cast(tf.convert_to_tensor(self.beta)[kw], x.dtype)
    moving_mean = tf.convert_to_tensor(self.moving_mean)
    moving_variance = tf.convert_to_tensor(self.moving_variance)
    if training:
      axes = list(range(x.shape.rank - 1))
      mean, variance = second_order.exact_moments(x, axes)
      m = tf.constant(self.momentum, moving_mean.dtype)
      # Only row ks moves.
      onehot = tf.one_hot(ks, moving_mean.shape[0], dtype=moving_mean.dtype)[:, None]
      self.moving_mean.assign(moving_mean + onehot * (1 - m) * (
          tf.cast(mean, moving_mean.dtype)[None] - moving_mean))
      self.moving_variance.assign(moving_variance + onehot * (1 - m) * (
          tf.cast(variance, moving_variance.dtype)[None] - moving_variance))
      self.updates.assign(tf.convert_to_tensor(self.updates) + onehot[:, 0])
    else:
      # Debiased by the row's update count (class doc); no update yet: as stored.
      n = tf.convert_to_tensor(self.updates)[ks]
      decay = tf.pow(tf.constant(self.momentum, moving_mean.dtype), n)
      debias = tf.where(n > 0, 1.0 - decay, tf.ones_like(decay))
      init_share = tf.where(n > 0, decay, tf.zeros_like(decay))
      mean = tf.cast(moving_mean[ks] / debias, x.dtype)
      variance = tf.cast((moving_variance[ks] - init_share) / debias, x.dtype)
    return (x - mean) * tf.math.rsqrt(variance + self.epsilon) * gamma + beta

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    return dict(super().get_config(), num_rows=self.num_rows,
                per_step_statistics=self.per_step_statistics,
                per_step_weights=self.per_step_weights, momentum=self.momentum,
                epsilon=self.epsilon)
