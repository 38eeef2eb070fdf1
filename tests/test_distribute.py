"""Distributed training gives the single-device answer (tf.distribute, 2 logical CPUs).

conftest.py splits the CPU into /cpu:0 and /cpu:1 before TensorFlow starts, so
``distribution="mirrored"`` runs two replicas here and ``"one_device"`` one.
"""
import json
import pathlib
import tempfile

import keras
import ml_collections
import numpy as np
import pytest
import tensorflow as tf

from hypernet import config_lib

from hypernet.training import distribute, loop
from hypernet.core import functional
from hypernet.numerics import devices
from hypernet.data import sinusoid

# -- small tasks with analytic answers (the task interface of hypernet.tasks.classification) -----------


def _layout(global_batch_size, ctx):
  """(per-replica batch, local replicas, first global slot) for an input pipeline."""
  if ctx is None:
    return global_batch_size, 1, 0
  n = ctx.num_replicas_in_sync
  local = n // ctx.num_input_pipelines
  return global_batch_size // n, local, ctx.input_pipeline_id * local


class ScalarTask:
  """pred = w * x with one weight (Dense(1, no bias)); per-example loss ``loss_fn``.

  Every step sees the same global batch ``(xs, ys)``; replica ``r`` gets the ``r``-th
  contiguous slice.
  """
  metric_names = ["loss"]

  def __init__(self, xs, ys, loss_fn=lambda p, y: tf.square(p - y), kernel=0.0):
    self.xs = np.asarray(xs, np.float32)
    self.ys = np.asarray(ys, np.float32)
    self.loss_fn = loss_fn
    self.model = keras.Sequential(
        [keras.Input((1,)), keras.layers.Dense(
            1, use_bias=False, name="w", kernel_initializer=keras.initializers.Constant(kernel))],
        name="scalar")

  @property
  def trainable_variables(self):
    return self.model.trainable_variables

  def trackables(self):
    return {"target": self.model}

  def train_dataset(self, global_batch_size, seed, start_step=0, input_context=None):
    b, local, first = _layout(global_batch_size, input_context)
    slots = range(first, first + local)
    xs = np.stack([self.xs[s * b:(s + 1) * b] for s in slots])
    ys = np.stack([self.ys[s * b:(s + 1) * b] for s in slots])
    return tf.data.Dataset.from_tensor_slices({"x": xs, "y": ys}).repeat()

  def train_loss(self, batch, global_batch_size):
    pred = functional.functional_call(self.model, None, batch["x"][:, None], training=True)
    per_example = self.loss_fn(tf.cast(pred[:, 0], tf.float32), batch["y"])
    loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
    count = tf.cast(tf.size(per_example), tf.float32)
    return loss, {"loss": (tf.reduce_sum(per_example), count)}, {}

  def apply_state(self, state):
    del state


class MetaSineTask:
  """A minimal MAML meta-step (Finn et al. 2017, Alg. 2) on sinusoid tasks.

  One inner SGD step on the support set per task (second order: the inner gradient is
  taken under the outer tape), query MSE at the fast weights, mean over the meta-batch;
  the meta-batch of ``T`` tasks is split across replicas.
  """
  metric_names = ["loss"]

  def __init__(self, inner_lr=0.05):
    self.inner_lr = inner_lr
    self.task_fn = sinusoid.make_sinusoid_task_fn(num_support=5, num_query=5, seed=3)
    self.model = keras.Sequential(
        [keras.Input((1,)),
         keras.layers.Dense(16, activation="tanh", name="hidden",
                            kernel_initializer=keras.initializers.GlorotUniform(seed=1)),
         keras.layers.Dense(1, name="out",
                            kernel_initializer=keras.initializers.GlorotUniform(seed=2))],
        name="learner")

  @property
  def trainable_variables(self):
    return self.model.trainable_variables

  def trackables(self):
    return {"target": self.model}

  def train_dataset(self, global_batch_size, seed, start_step=0, input_context=None):
    t, local, first = _layout(global_batch_size, input_context)

    def indices(k):
      step, slot = k // local, first + k % local
      return step * global_batch_size + slot * t + tf.range(t, dtype=tf.int64)

    ds = tf.data.Dataset.range(start_step * local, 10**9).map(indices).unbatch()
    return ds.map(self.task_fn).batch(t, drop_remainder=True)

  def train_loss(self, batch, global_batch_size):
    params = functional.variable_paths(self.model, trainable=True)
    per_task = []
    for i in range(batch["support_x"].shape[0]):
      w0 = {p: tf.convert_to_tensor(v) for p, v in params.items()}
      with tf.GradientTape() as inner:
        inner.watch(list(w0.values()))
        pred = functional.functional_call(self.model, w0, batch["support_x"][i])
        support_loss = tf.reduce_mean(tf.square(pred - batch["support_y"][i]))
      grads = inner.gradient(support_loss, w0)
      fast = {p: w0[p] - self.inner_lr * grads[p] for p in w0}
      pred = functional.functional_call(self.model, fast, batch["query_x"][i])
      per_task.append(tf.reduce_mean(tf.square(pred - batch["query_y"][i])))
    per_task = tf.stack(per_task)
    loss = tf.nn.compute_average_loss(per_task, global_batch_size=global_batch_size)
    return loss, {"loss": (tf.reduce_sum(per_task), tf.cast(tf.size(per_task), tf.float32))}, {}

  def apply_state(self, state):
    del state


def _config(distribution, batch_size=4, optim="sgd", lr=1.0, **kw):
  c = config_lib.base_config()
  c.distribution = distribution
  c.jit_compile = "false"
  c.batch_size = batch_size
  c.num_steps = 10
  c.optim.name = optim
  c.optim.lr = lr
  c.optim.momentum = 0.0
  c.optim.schedule = "constant"
  return _override(c, kw)


def _override(config, overrides):
  """Sets ``{"optim__lr": 0.1}`` style overrides (``__`` separates nested fields)."""
  config.update_from_flattened_dict({k.replace("__", "."): v for k, v in overrides.items()})
  return config


def _trainer(config, tmp_path, task_fn, name="run"):
  return loop.Trainer(config, str(tmp_path / name), build_task=lambda _: task_fn())


def _values(trainer, var):
  return [v.numpy() for v in distribute.local_values(trainer.strategy, var)]


# -- strategy and roles ----------------------------------------------------------------

def test_get_strategy_replicas_and_errors():
  assert distribute.get_strategy("mirrored").num_replicas_in_sync == 2
  assert distribute.get_strategy("one_device").num_replicas_in_sync == 1
  assert distribute.get_strategy("auto").num_replicas_in_sync == 1   # CPU only: one device
  with pytest.raises(ValueError, match="config.distribution='gpus'.*mirrored"):
    distribute.get_strategy("gpus")
  if not tf.config.list_logical_devices("TPU"):
    with pytest.raises(ValueError, match="no TPU"):
      distribute.get_strategy("tpu")


@pytest.mark.parametrize("tf_config, chief", [
    (None, True),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}, True),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}, False),
    ({"cluster": {"chief": ["c:0"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}},
     False),
    ({"cluster": {"chief": ["c:0"], "worker": ["a:1"]}, "task": {"type": "chief", "index": 0}},
     True),
])
def test_is_chief_follows_tf_config(monkeypatch, tmp_path, tf_config, chief):
  if tf_config is None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
  else:
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
  strategy = tf.distribute.get_strategy()
  assert distribute.is_chief(strategy) is chief
  path = distribute.write_dir(str(tmp_path), strategy)
  assert (path == str(tmp_path)) is chief
  distribute.remove_write_dir(path, str(tmp_path))
  assert tmp_path.is_dir()


# -- the exact two-replica cases ----------------------------------------------------------

@pytest.mark.parametrize("distribution", ["one_device", "mirrored"])
def test_applied_gradient_is_the_global_mean_gradient(tmp_path, distribution):
  # pred = w*x, w = 0, x = 1, y = [1, 2, 3, 4] split [1, 2] | [3, 4]; loss mean (w - y)^2:
  # dL/dw = mean(2 (w - y)) = -5. A replica-local mean summed over replicas would give -10
  # (w = 10), a global mean averaged over replicas -2.5 (w = 2.5). SGD(lr=1): w = 5.
  trainer = _trainer(_config(distribution), tmp_path,
                     lambda: ScalarTask([1, 1, 1, 1], [1, 2, 3, 4]))
  assert trainer.num_replicas == (2 if distribution == "mirrored" else 1)
  metrics, first_bad = trainer.train_chunk(trainer.train_iterator(0), 1)
  assert first_bad == -1
  assert metrics["loss"] == pytest.approx((1 + 4 + 9 + 16) / 4, abs=1e-6)
  assert metrics["grad_norm"] == pytest.approx(5.0, abs=1e-6)
  for value in _values(trainer, trainer.variables[0]):
    np.testing.assert_allclose(value, [[5.0]], atol=1e-6)


def test_reported_loss_counts_each_example_once(tmp_path):
  # Per-example losses [2, 3] on replica 0 and [4, 5] on replica 1 report 3.5.
  ys = -np.sqrt(np.array([2.0, 3.0, 4.0, 5.0]))
  trainer = _trainer(_config("mirrored", lr=0.01), tmp_path, lambda: ScalarTask([1] * 4, ys))
  metrics, _ = trainer.train_chunk(trainer.train_iterator(0), 1)
  assert metrics["loss"] == pytest.approx(3.5, abs=1e-5)
  # dL/dw at w=0 is mean(-2 y) = 2 * mean(sqrt([2, 3, 4, 5])).
  expected = -0.01 * 2 * np.mean(np.sqrt([2.0, 3.0, 4.0, 5.0]))
  for value in _values(trainer, trainer.variables[0]):
    np.testing.assert_allclose(value, [[expected]], rtol=1e-6)


def test_global_clipnorm_clips_the_summed_gradient(tmp_path):
  # The summed gradient -5 clipped to norm 1 moves w by 1; Keras's own per-replica
  # clipping would clip the shares -1.5 and -3.5 to -1 each and move it by 2.
  trainer = _trainer(_config("mirrored", optim__grad_clip_norm=1.0), tmp_path,
                     lambda: ScalarTask([1] * 4, [1, 2, 3, 4]))
  metrics, _ = trainer.train_chunk(trainer.train_iterator(0), 1)
  assert metrics["grad_norm"] == pytest.approx(5.0, abs=1e-6)   # before clipping
  for value in _values(trainer, trainer.variables[0]):
    np.testing.assert_allclose(value, [[1.0]], atol=1e-6)


def test_nan_guard_flag_agrees_across_replicas(tmp_path):
  # Only replica 1's gradient is NaN: sqrt(|p - y|) at p = y is 0 with slope inf * 0.
  loss_fn = lambda p, y: tf.sqrt(tf.abs(p - y))
  trainer = _trainer(_config("mirrored"), tmp_path,
                     lambda: ScalarTask([1] * 4, [1, 2, 0, 0], loss_fn=loss_fn, kernel=0.0))
  iterator = trainer.train_iterator(0)
  step = tf.function(lambda b: trainer.strategy.run(trainer._replica_step_fn, args=(b,)))
  _, flags = step(next(iterator))
  assert [float(f) for f in distribute.local_values(trainer.strategy, flags)] == [1.0, 1.0]
  _, first_bad = trainer.train_chunk(iterator, 2)
  assert first_bad == 1


def test_checkpoint_keeps_adam_slots_under_mirrored(tmp_path):
  # Dense(1, no bias), kernel 0, Adam(lr=0.1), x = 1, y = 1, squared error. Two steps give
  # 0.19958584; restoring without the Adam moments would give 0.19999917.
  config = _config("mirrored", batch_size=2, optim="adam", lr=0.1)
  make = lambda: ScalarTask([1, 1], [1, 1])
  straight = _trainer(config, tmp_path, make, "straight")
  straight.train_chunk(straight.train_iterator(0), 2)
  first = _trainer(config, tmp_path, make, "resumed")
  first.train_chunk(first.train_iterator(0), 1)
  first.step.assign(1)
  first.manager.save(checkpoint_number=1)
  second = _trainer(config, tmp_path, make, "resumed")
  assert second.restore() == 1
  second.train_chunk(second.train_iterator(1), 1)
  for trainer in (straight, second):
    for value in _values(trainer, trainer.variables[0]):
      np.testing.assert_allclose(value, [[0.19958584]], atol=2e-7)


def test_non_chief_resumes_from_the_chief_and_writes_elsewhere(tmp_path, monkeypatch):
  (tmp_path / "tmp").mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
  config = _config("one_device", batch_size=2, optim="adam", lr=0.1)
  make = lambda: ScalarTask([1, 1], [1, 1])
  chief = _trainer(config, tmp_path, make, "wd")
  chief.train_chunk(chief.train_iterator(0), 1)
  chief.step.assign(1)
  chief.manager.save(checkpoint_number=1)
  saved = sorted(p.name for p in (tmp_path / "wd" / "checkpoints").iterdir())
  monkeypatch.setenv("TF_CONFIG", json.dumps(
      {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
       "task": {"type": "worker", "index": 1}}))
  worker = _trainer(config, tmp_path, make, "wd")
  assert not worker.is_chief
  assert worker.restore() == 1
  worker.train_chunk(worker.train_iterator(1), 1)
  np.testing.assert_allclose(worker.variables[0].numpy(), [[0.19958584]], atol=2e-7)
  worker.step.assign(2)
  worker.manager.save(checkpoint_number=2)
  assert sorted(p.name for p in (tmp_path / "wd" / "checkpoints").iterdir()) == saved
  assert worker.write_dir.startswith(str(tmp_path / "tmp"))
  assert any(pathlib.Path(worker.write_dir).rglob("ckpt-2*"))
  worker.close()
  assert not pathlib.Path(worker.write_dir).exists()


# -- real configs: 1 replica == 2 replicas -------------------------------------------------

def _hyper_config(distribution, **kw):
  from configs import digits_hyper  # pylint: disable=g-import-not-at-top
  c = digits_hyper.get_config()
  c.distribution = distribution
  c.jit_compile = "false"
  c.batch_size = 32
  c.model.conv_widths = (8,)
  c.model.dense_widths = (16,)
  c.model.dropout = 0.0
  c.hypernet.chunk_size = 256
  c.hypernet.hidden = (16,)
  c.optim.name = "sgd"
  c.optim.momentum = 0.0
  c.optim.lr = 0.1
  c.optim.schedule = "constant"
  return _override(c, kw)


def _train_and_read(config, tmp_path, name, steps=1):
  trainer = loop.Trainer(config, str(tmp_path / name))
  initial = {v.path: v.numpy() for v in trainer.variables}
  metrics, first_bad = trainer.train_chunk(trainer.train_iterator(0), steps)
  assert first_bad == -1
  values = {}
  for v in trainer.variables + trainer.task.target.non_trainable_variables:
    copies = _values(trainer, v)
    for c in copies[1:]:   # Replicas never drift apart.
      np.testing.assert_array_equal(c, copies[0], err_msg=v.path)
    values[v.path] = copies[0]
  return metrics, values, initial


@pytest.fixture(scope="module")
def one_device_hyper_step(tmp_path_factory):
  """(metrics, parameters after, parameters before) of one step on one device."""
  return _train_and_read(_hyper_config("one_device"), tmp_path_factory.mktemp("one"), "one")


@pytest.mark.parametrize("jit", ["false", pytest.param("true", marks=pytest.mark.slow)])
def test_hypernetwork_step_same_on_one_and_two_replicas(tmp_path, one_device_hyper_step, jit):
  ref_metrics, ref, init = one_device_hyper_step
  metrics, got, _ = _train_and_read(_hyper_config("mirrored", jit_compile=jit), tmp_path, "two")
  assert metrics["loss"] == pytest.approx(ref_metrics["loss"], abs=1e-5)
  assert metrics["accuracy"] == pytest.approx(ref_metrics["accuracy"], abs=1e-6)
  assert metrics["grad_norm"] == pytest.approx(ref_metrics["grad_norm"], rel=1e-5)
  assert ref_metrics["grad_norm"] > 0.1
  assert set(got) == set(ref)
  for path in ref:
    np.testing.assert_allclose(got[path], ref[path], atol=1e-5, err_msg=path)
  # The step moved the parameters by far more than the tolerance.
  assert max(float(np.abs(ref[p] - init[p]).max()) for p in init) > 1e-3


def test_maml_meta_step_same_on_one_and_two_replicas(tmp_path):
  results = []
  for distribution in ("one_device", "mirrored"):
    trainer = _trainer(_config(distribution, lr=0.1), tmp_path, MetaSineTask, distribution)
    before = [v.numpy() for v in trainer.variables]
    metrics, first_bad = trainer.train_chunk(trainer.train_iterator(0), 1)
    assert first_bad == -1
    after = [_values(trainer, v) for v in trainer.variables]
    for copies in after:
      np.testing.assert_array_equal(copies[-1], copies[0])
    results.append((metrics, [c[0] for c in after]))
  (m1, p1), (m2, p2) = results
  assert m2["loss"] == pytest.approx(m1["loss"], abs=1e-5)
  assert m2["grad_norm"] == pytest.approx(m1["grad_norm"], rel=1e-5)
  for a, b, w0 in zip(p1, p2, before):
    np.testing.assert_allclose(b, a, atol=1e-5)
  assert max(float(np.abs(a - w0).max()) for a, w0 in zip(p1, before)) > 1e-3


def test_batchnorm_statistics_are_all_reduced(tmp_path):
  # Per-replica BatchNorm normalises with local statistics, so the loss differs from one
  # device; the moving mean is linear in the batch mean and must equal one device's, and
  # both replicas must hold the same statistics.
  def stats(distribution):
    trainer = loop.Trainer(_hyper_config(distribution, model__batch_norm=True),
                                str(tmp_path / distribution))
    trainer.train_chunk(trainer.train_iterator(0), 1)
    target = trainer.task.target
    out = {}
    for v in target.non_trainable_variables:
      copies = _values(trainer, v)
      for c in copies[1:]:
        np.testing.assert_array_equal(c, copies[0], err_msg=v.path)
      out[v.path] = copies[0]
    return out

  one, two = stats("one_device"), stats("mirrored")
  mean_path = [p for p in one if p.endswith("moving_mean")][0]
  assert np.abs(one[mean_path]).max() > 1e-3   # It moved from its initial 0.
  np.testing.assert_allclose(two[mean_path], one[mean_path], atol=1e-6)


def test_dropout_masks_differ_across_replicas_and_seed_state_agrees():
  strategy = distribute.get_strategy("mirrored")
  with strategy.scope():
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dropout(0.5, seed=7)])
  seed_path = [p for p in functional.variable_paths(model, trainable=False)
               if p.endswith("seed_generator_state")][0]
  initial = functional.variable_paths(model)[seed_path].numpy()
  x = tf.ones([4, 64])

  @tf.function
  def step():
    def fn():
      out, state = functional.functional_call(model, None, x, training=True, return_state=True)
      return out, distribute.all_reduce_state(state)
    return strategy.run(fn)

  out, state = step()
  outs = distribute.local_values(strategy, out)
  single = functional.functional_call(model, None, x, training=True)
  np.testing.assert_array_equal(outs[0].numpy(), single.numpy())   # Replica 0: unchanged.
  assert np.mean(outs[0].numpy() != outs[1].numpy()) > 0.3          # Different masks.
  for s in distribute.local_values(strategy, state[seed_path]):
    np.testing.assert_array_equal(s.numpy(), initial + [0, 1])


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_hypernetwork_step(tmp_path, one_device_hyper_step, policy):
  ref_metrics, ref, _ = one_device_hyper_step
  config = _hyper_config("mirrored", dtype_policy=policy)
  if devices.precision_error(policy):  # bfloat16 conv gradients wrong here (no AVX-512)
    with pytest.raises(ValueError, match=rf"config.dtype_policy='{policy}' would train"):
      loop.Trainer(config, str(tmp_path / policy))
    return
  trainer = loop.Trainer(config, str(tmp_path / policy))
  assert keras.config.dtype_policy().name == "float32"   # Restored after building.
  assert trainer.loss_scaling is (policy == "mixed_float16")
  generated = trainer.task.source.weights()
  assert {w.dtype for w in generated.values()} == {tf.float32}
  assert trainer.task.target.layers[0].compute_dtype == policy.split("_")[1]
  metrics, first_bad = trainer.train_chunk(trainer.train_iterator(0), 1)
  assert first_bad == -1
  assert metrics["loss"] == pytest.approx(ref_metrics["loss"], rel=2e-2)
  assert metrics["grad_norm"] == pytest.approx(ref_metrics["grad_norm"], rel=5e-2)
  for v in trainer.variables:
    copies = _values(trainer, v)
    np.testing.assert_array_equal(copies[1], copies[0])
    assert v.dtype == "float32"
    # bf16 keeps 8 bits of mantissa in the forward and backward pass. Measured largest
    # difference from the float32 step: 0.0038 (hidden1 kernel, mixed_bfloat16) with the
    # chunked hypernetwork's centred init, below 0.003 before it (the chunk embeddings'
    # update shrank from 0.073 to 0.019 at its largest while bf16's absolute error did
    # not: their gradient is a sum over chunks that now cancels more).
    np.testing.assert_allclose(copies[0], ref[v.path], atol=5e-3, err_msg=v.path)


def test_loss_scaling_skips_overflow_on_every_replica(tmp_path):
  # Replica 1's gradient is infinite: under mixed_float16 both replicas skip the step and
  # halve the loss scale (not a NaN-guard stop), and the weights stay identical.
  loss_fn = lambda p, y: tf.sqrt(tf.abs(p - y))
  config = _config("mirrored", dtype_policy="mixed_float16")
  trainer = _trainer(config, tmp_path,
                     lambda: ScalarTask([1] * 4, [1, 2, 0, 0], loss_fn=loss_fn, kernel=0.0))
  scale = float(trainer.optimizer.dynamic_scale.numpy())
  metrics, first_bad = trainer.train_chunk(trainer.train_iterator(0), 1)
  assert first_bad == -1
  assert float(trainer.optimizer.dynamic_scale.numpy()) == scale / 2
  for value in _values(trainer, trainer.variables[0]):
    np.testing.assert_array_equal(value, [[0.0]])


def test_bad_dtype_policy_names_the_field(tmp_path):
  with pytest.raises(ValueError, match="config.dtype_policy='float16'"):
    _trainer(_config("one_device", dtype_policy="float16"), tmp_path,
             lambda: ScalarTask([1], [1]))
