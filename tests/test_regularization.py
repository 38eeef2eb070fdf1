"""Regularizer penalties and add_loss terms of a target: computed on the weights actually
used (generated ones included), added to the objective by the train loop, and logged."""
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional
from hypernet.training import loop
from hypernet.tasks import protocol
from hypernet.hypernetworks import batched

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "configs"))
import digits_hyper  # noqa: E402  pylint: disable=g-import-not-at-top


def _l2_dense():
  inputs = keras.Input((1,))
  layer = keras.layers.Dense(1, use_bias=False, kernel_regularizer=keras.regularizers.L2(0.5),
                             name="d")
  model = keras.Model(inputs, layer(inputs))
  layer.kernel.assign([[1.0]])
  return model


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "function"])
def test_penalty_of_the_generated_kernel_and_its_gradient(compiled):
  """L2(0.5) with the variable at 1.0, run on a generated kernel w = 2.0: penalty
  0.5 * 2^2 = 2.0 and d/dw = 2 * 0.5 * 2 = 2.0 (not the variable's 0.5 / 1.0)."""
  model = _l2_dense()
  w = tf.Variable([[2.0]])

  def run():
    with tf.GradientTape() as tape:
      out, losses = functional.functional_call(model, {"d/kernel": w}, tf.ones((1, 1)),
                                               return_losses=True)
      total = tf.add_n(losses)
    return out, total, tape.gradient(total, w)

  out, total, grad = (tf.function(run) if compiled else run)()
  assert float(out[0, 0]) == 2.0
  assert float(total) == pytest.approx(2.0)
  assert float(grad[0, 0]) == pytest.approx(2.0)
  # With state too: Keras' stateless_call order (outputs, state, losses).
  out, state, losses = functional.functional_call(model, {"d/kernel": w}, tf.ones((1, 1)),
                                                  return_state=True, return_losses=True)
  assert state == {} and float(losses[0]) == pytest.approx(2.0)


class _AddsLoss(keras.layers.Layer):
  def call(self, x):
    self.add_loss(tf.reduce_sum(x) * 0.25)
    return x


def test_activity_regularizer_and_add_loss_are_returned():
  inputs = keras.Input((2,))
  h = keras.layers.Dense(2, use_bias=False, kernel_initializer="ones",
                         activity_regularizer=keras.regularizers.L2(0.1), name="d")(inputs)
  model = keras.Model(inputs, _AddsLoss(name="extra")(h))
  x = tf.constant([[1.0, 2.0]])
  w = tf.constant([[1.0, 0.0], [0.0, 2.0]])   # h = [1, 4]
  _, losses = functional.functional_call(model, {"d/kernel": w}, x, return_losses=True)
  # activity: 0.1 * (1 + 16) / batch 1 = 1.7; add_loss: 0.25 * 5 = 1.25.
  assert sorted(round(float(l), 6) for l in losses) == [1.25, 1.7]
  assert functional.functional_call(model, None, x, return_losses=False).shape == (1, 2)


def test_batched_weight_sets_each_get_their_penalty():
  model = _l2_dense()
  w = tf.constant([[[1.0]], [[2.0]], [[3.0]]])           # three weight sets
  out, losses = batched.batched_functional_call(model, {"d/kernel": w}, tf.ones((3, 1, 1)),
                                                return_losses=True)
  np.testing.assert_allclose(out.numpy().ravel(), [1.0, 2.0, 3.0])
  np.testing.assert_allclose(losses[0].numpy(), [0.5, 2.0, 4.5])


def _config(**overrides):
  c = digits_hyper.get_config()
  c.num_steps = 20
  c.log_every = 10
  c.eval_every = 20
  c.checkpoint_every = 20
  c.optim.schedule = "constant"
  c.model.kernel_l2 = 1e-3
  c.update_from_flattened_dict(overrides)
  return c


def test_train_loss_adds_the_penalty_of_the_generated_weights():
  task = protocol.build_task(_config())
  assert "regularization_loss" in task.metric_names
  batch = next(iter(task.train_dataset(32, seed=0)))
  loss, sums, _ = task.train_loss(batch, 32)
  weights = task.source.weights()
  kernels = [p for p in weights if p.endswith("kernel")]
  assert kernels == ["conv1/kernel", "conv2/kernel", "dense1/kernel", "head/kernel"]
  expected = 1e-3 * sum(float(tf.reduce_sum(tf.square(weights[p]))) for p in kernels)
  assert float(sums["regularization_loss"][0]) == pytest.approx(expected, rel=1e-5)
  assert float(loss) == pytest.approx(
      float(sums["loss"][0]) / 32 + expected, rel=1e-5)
  # Without a penalty there is no such metric and the loss is the data loss alone.
  plain = protocol.build_task(_config(**{"model.kernel_l2": 0.0}))
  assert "regularization_loss" not in plain.metric_names


def test_train_loop_logs_the_penalty(tmp_path):
  result = loop.train_and_evaluate(_config(), str(tmp_path))
  assert result["regularization_loss"] > 0


def test_meta_learning_refuses_a_penalised_target_naming_the_field(tmp_path):
  import omniglot_fomaml  # pylint: disable=g-import-not-at-top
  from hypernet.tasks import meta_learning  # pylint: disable=g-import-not-at-top
  c = omniglot_fomaml.get_config()
  c.model.name = "cnn"
  c.model.kernel_l2 = 0.5
  with pytest.raises(ValueError, match=r"config.model.kernel_l2=0.5: meta-learning tasks"):
    meta_learning.make_meta_target(c, (28, 28, 1), 5)
