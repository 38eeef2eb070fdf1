"""The inner-loop learners plug into the one train loop (hypernet.training.loop.Trainer).

``LearnerTask`` below is the small adapter a meta-learning task in ``hypernet/tasks/classification.py``
needs (the task interface of that module): the learner's ``meta_batch_loss`` gives the
per-task query losses, scaled by the *global* meta-batch size so that a meta-batch split
across replicas gives the single-device step.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet import config_lib

from hypernet.training import loop
from hypernet.core import functional
from hypernet.data import sinusoid
from hypernet.meta import inner_loop, meta_batch


class LearnerTask:
  """Sinusoid regression (Finn et al. 2017 Sec. 5.1) meta-trained with Meta-SGD."""
  metric_names = ["loss", "loss_before"]

  def __init__(self):
    self.task_fn = sinusoid.make_sinusoid_task_fn(num_support=5, num_query=5, seed=3)
    self.model = keras.Sequential([
        keras.Input((1,)),
        keras.layers.Dense(16, activation="tanh", name="hidden",
                           kernel_initializer=keras.initializers.GlorotUniform(seed=1)),
        keras.layers.Dense(1, name="out",
                           kernel_initializer=keras.initializers.GlorotUniform(seed=2))])
    self.learner = inner_loop.MetaSGD(self.model, "mse", inner_lr=0.05, inner_steps=2)

  @property
  def trainable_variables(self):
    return self.model.trainable_variables + list(self.learner.trainable_variables)

  def trackables(self):
    return {"target": self.model, "learner": self.learner}

  def train_dataset(self, global_batch_size, seed, start_step=0, input_context=None):
    """Meta-batch ``s`` holds tasks ``s*T .. s*T+T-1``; replica r gets the r-th slice."""
    del seed
    n = input_context.num_replicas_in_sync if input_context else 1
    local = n // input_context.num_input_pipelines if input_context else 1
    first = input_context.input_pipeline_id * local if input_context else 0
    t = global_batch_size // n

    def indices(k):
      step, slot = k // local, first + k % local
      return step * global_batch_size + slot * t + tf.range(t, dtype=tf.int64)

    ds = tf.data.Dataset.range(start_step * local, 10**9).map(indices).unbatch()
    return ds.map(self.task_fn).batch(t, drop_remainder=True)

  def train_loss(self, batch, global_batch_size):
    result = meta_batch.meta_batch_loss(self.learner, batch)
    per_task = result.per_task
    count = tf.cast(tf.size(per_task["loss"]), tf.float32)
    loss = tf.nn.compute_average_loss(per_task["loss"],
                                      global_batch_size=global_batch_size)
    sums = {"loss": (tf.reduce_sum(per_task["loss"]), count),
            "loss_before": (tf.reduce_sum(per_task["loss_before"]), count)}
    return loss, sums, result.state

  def apply_state(self, state):
    if state:
      functional.assign_state(self.model, state)


def _config(distribution):
  c = config_lib.base_config()
  c.distribution = distribution
  c.jit_compile = "false"
  c.batch_size = 4  # tasks per meta-batch
  c.num_steps = 2
  c.optim.name = "sgd"
  c.optim.lr = 0.1
  c.optim.momentum = 0.0
  c.optim.schedule = "constant"
  return c


def _run(distribution, tmp_path):
  trainer = loop.Trainer(_config(distribution), str(tmp_path / distribution),
                              build_task=lambda _: LearnerTask())
  metrics, first_bad = trainer.train_chunk(trainer.train_iterator(0), 2)
  assert first_bad == -1
  values = [np.asarray(trainer.strategy.experimental_local_results(v)[0])
            for v in trainer.variables]
  return trainer, metrics, values


def test_trainer_runs_meta_sgd_as_a_manual_meta_step(tmp_path):
  trainer, metrics, values = _run("one_device", tmp_path)
  # The same two steps by hand: plain SGD on the meta-gradient of the mean query loss.
  task = LearnerTask()
  variables = task.trainable_variables
  batches = iter(task.train_dataset(4, 0))
  losses = []
  for _ in range(2):
    batch = next(batches)
    with tf.GradientTape() as tape:
      loss = meta_batch.meta_batch_loss(task.learner, batch).loss
    for v, g in zip(variables, tape.gradient(loss, variables)):
      v.assign_sub(0.1 * g)
    losses.append(float(loss))
  assert len(values) == 8  # 4 target weights + their 4 learned inner learning rates
  for v, got in zip(variables, values):
    np.testing.assert_allclose(got, v.numpy(), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(metrics["loss"], np.mean(losses), rtol=1e-5)
  assert not any(np.allclose(a, 0.05) for a in values[4:])  # inner lrs were trained
  # The learned learning rates are checkpointed with the target.
  trainer.step.assign(2)
  trainer.manager.save(checkpoint_number=2)
  restored = loop.Trainer(_config("one_device"), str(tmp_path / "one_device"),
                               build_task=lambda _: LearnerTask())
  assert restored.restore() == 2
  for alpha, value in zip(restored.task.learner.trainable_variables, values[4:]):
    np.testing.assert_allclose(alpha.numpy(), value, rtol=1e-7)


def test_meta_batch_split_across_two_replicas_gives_the_one_device_step(tmp_path):
  if len(tf.config.list_logical_devices("CPU")) < 2:
    pytest.skip("needs the two logical CPUs set up by conftest.py")
  _, one_metrics, one = _run("one_device", tmp_path)
  _, two_metrics, two = _run("mirrored", tmp_path)
  for a, b in zip(one, two):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(two_metrics["loss"], one_metrics["loss"], rtol=1e-5)
