"""The acceleration policy of functional calls (hypernet/numerics/accel.py).

Checks: the policy table per device kind; a learner's second-order step through plain
``functional_call(..., accelerate="meta")`` traces the same graph as the deprecated
``plain_bias.call`` wrapper (no ``BiasAdd``, every conv4 block on the fused kernel) and
gives bit-for-bit the same loss, meta-gradient and state; the default call keeps Keras'
bias adds and blocks (the hypernetwork step, unchanged); ``accelerate=False`` and
:func:`accel.disabled` give Keras' own ops; bad arguments raise one line.
"""
import warnings

import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional
from hypernet.numerics import accel, plain_bias

from test_norm_relu_pool import OP, _conv4, _weights
from test_plain_bias import _op_types


def test_policy_table_per_device_kind():
  table = {(a, kind): accel.choose(a, kind) for a in accel.PROFILES for kind in
           ("cpu", "gpu", "tpu")}
  on = {"fused_batch_norm": True, "plain_bias": True, "fused_blocks": True}
  default = {"fused_batch_norm": True, "plain_bias": False, "fused_blocks": False}
  off = {"fused_batch_norm": False, "plain_bias": False, "fused_blocks": False}
  assert table == {(True, "cpu"): default, (True, "gpu"): default, (True, "tpu"): default,
                   ("meta", "cpu"): on, ("meta", "gpu"): default, ("meta", "tpu"): default,
                   (False, "cpu"): off, (False, "gpu"): off, (False, "tpu"): off}
  for bad in ("fast", 1, None):
    with pytest.raises(ValueError, match="accelerate=.* is unknown"):
      accel.choose(bad)
  with pytest.raises(ValueError, match="unknown acceleration"):
    with accel.disabled("bias"):
      pass


def _meta_step(call, model, labels):
  """One second-order MAML task on ``model``: an inner SGD step on (x, labels) and the
  query loss at the fast weights, differentiated to the initial weights; every
  functional call made by ``call(model, weights, x)``."""
  def step(weights, x):
    with tf.GradientTape() as outer:
      outer.watch(weights)
      with tf.GradientTape() as inner:
        inner.watch(weights)
        out, _ = call(model, weights, x)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, out))
      grads = inner.gradient(loss, weights)
      fast = {p: w - 0.4 * grads[p] for p, w in weights.items()}
      out, state = call(model, fast, x)
      query = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, out))
    return query, outer.gradient(query, weights), state
  return step


def _wrapped(model, weights, x):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    return plain_bias.call(functional.functional_call, model, weights, x, training=True,
                           return_state=True)


def _meta(model, weights, x):
  return functional.functional_call(model, weights, x, training=True, return_state=True,
                                    accelerate="meta")


def _default(model, weights, x):
  return functional.functional_call(model, weights, x, training=True, return_state=True)


def _traced(call, model, weights, x, labels, around=None):
  step = _meta_step(call, model, labels)
  if around is not None:
    inner = step

    def step(weights, x):  # pylint: disable=function-redefined
      with around():
        return inner(weights, x)
  concrete = tf.function(step).get_concrete_function(weights, x)
  return _op_types(concrete), concrete(weights, x)


def _data():
  model = _conv4()
  x = tf.constant(np.random.default_rng(3).normal(size=(6, 16, 16, 1)), tf.float32)
  return model, _weights(model), x, tf.constant(np.arange(6) % 3)


def test_meta_calls_equal_the_wrapped_path_bit_for_bit_without_bias_add():
  model, weights, x, labels = _data()
  ops, (loss, grads, state) = _traced(_meta, model, weights, x, labels)
  old_ops, (old_loss, old_grads, old_state) = _traced(_wrapped, model, weights, x, labels)
  assert ops == old_ops
  assert ops["BiasAdd"] == 0 and ops["BiasAddGrad"] == 0, ops
  assert ops[OP] == 8 and ops["MaxPool"] == 0, ops  # 4 blocks, support and query pass
  assert float(loss) == float(old_loss)
  for p in weights:
    np.testing.assert_array_equal(grads[p].numpy(), old_grads[p].numpy(), err_msg=p)
  for p in state:
    np.testing.assert_array_equal(state[p].numpy(), old_state[p].numpy(), err_msg=p)


def test_default_call_keeps_keras_bias_adds_and_blocks():
  """The hypernetwork step's calls: BiasAdd and separate pools as before accel; values
  within rounding of the meta calls'."""
  model, weights, x, labels = _data()
  ops, (loss, grads, _) = _traced(_default, model, weights, x, labels)
  meta_ops, (meta_loss, meta_grads, _) = _traced(_meta, model, weights, x, labels)
  assert ops["BiasAdd"] == 10 and ops[OP] == 0 and ops["MaxPool"] == 8, ops
  assert ops["FusedBatchNormV3"] == 8, ops
  np.testing.assert_allclose(float(loss), float(meta_loss), rtol=1e-5)
  for p in weights:
    np.testing.assert_allclose(grads[p].numpy(), meta_grads[p].numpy(), rtol=1e-3,
                               atol=1e-5, err_msg=p)


def test_accelerate_false_and_disabled_give_keras_own_ops():
  model, weights, x, labels = _data()
  keras_own = lambda m, w, x: functional.functional_call(
      m, w, x, training=True, return_state=True, accelerate=False)
  ops, (loss, grads, _) = _traced(keras_own, model, weights, x, labels)
  assert ops["FusedBatchNormV3"] == 0 and ops[OP] == 0 and ops["BiasAdd"] == 10, ops
  off_ops, (off_loss, off_grads, _) = _traced(_meta, model, weights, x, labels,
                                              around=accel.disabled)
  assert off_ops == ops
  assert float(off_loss) == float(loss)
  for p in weights:
    np.testing.assert_array_equal(off_grads[p].numpy(), grads[p].numpy(), err_msg=p)
  # One acceleration off: the fused blocks (a jit_compile step), plain bias adds kept.
  blocks_off = lambda: accel.disabled("fused_blocks")
  some, _ = _traced(_meta, model, weights, x, labels, around=blocks_off)
  assert some[OP] == 0 and some["MaxPool"] == 8 and some["BiasAdd"] == 0, some
  assert some["FusedBatchNormV3"] == 8, some


def test_plain_bias_call_is_a_deprecated_alias():
  model, weights, x, _ = _data()
  with pytest.warns(DeprecationWarning, match="accelerate='meta'"):
    plain_bias.call(functional.functional_call, model, weights, x)
