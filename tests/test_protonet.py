"""Prototypical Networks (hypernet/meta/protonet.py; Snell et al. 2017).

Exact checks against NumPy on embeddings from a plain Keras body model (no hypernet
code): the prototypes (Eq. 1), the logits (Eq. 2) and their softmax, the query loss and
accuracy of the meta-batch code, the head a wider target masks; the meta-gradient
(through the support and the query embeddings) against float64 central finite
differences, by the accumulation loop the trainer uses. On the real Omniglot: the CLI's
train_and_evaluate and hn.keras.MetaModel's fit for a few steps, MetaModel's
predictions at more ways than it was trained at, the committed configs' smoke tests,
and a field of another learner refused in one line.
"""
import importlib.util
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet import config_lib
from hypernet.core import functional
from hypernet.data import episodes, omniglot
from hypernet.keras import MetaModel
from hypernet.meta import conv4, meta_batch, protonet
from hypernet.training import loop
from tests.test_meta import central_fd, mean_query_loss, small_bn_net

LOSS = "sparse_softmax_cross_entropy"
CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"
SUBSET = "images_background_small1.zip,images_background_small2.zip"


def _task(seed, ways=3, shots=2, queries=2):
  rng = np.random.default_rng(seed)
  sy = np.repeat(np.arange(ways), shots)
  qy = np.tile(np.arange(ways), queries)
  return (tf.constant(rng.normal(size=(ways * shots, 2))), tf.constant(sy),
          tf.constant(rng.normal(size=(ways * queries, 2))), tf.constant(qy))


def _plain_body(model):
  """The target's layers before its head as a plain Keras model (shares the weights)."""
  return keras.Sequential([keras.Input(model.input_shape[1:], dtype=model.inputs[0].dtype)]
                          + model.layers[:-1])


def _numpy_protonet(f_s, sy, f_q, ways):
  """Eq. 1-2 in NumPy: prototypes ``[n, D]`` and logits ``-||f_q - p_c||^2``."""
  protos = np.stack([f_s[sy == c].mean(0) for c in range(ways)])
  return protos, -((f_q[:, None, :] - protos[None]) ** 2).sum(-1)


def _numpy_loss(logits, qy):
  shifted = logits - logits.max(-1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
  return -log_probs[np.arange(len(qy)), qy].mean()


def test_logits_loss_and_accuracy_are_snell_et_als_on_the_bodys_embeddings():
  """A 3-way episode on a 5-output head: the head holds 2 p_c and -||p_c||^2 (the two
  classes the episode lacks masked), the target's logits are Eq. 2's plus ||f(x)||^2,
  distance_logits are Eq. 2's, and the meta-batch's loss and accuracy are NumPy's."""
  model = small_bn_net(head_units=5)
  learner = protonet.PrototypicalNetwork(model, LOSS)
  assert learner.untrained_paths == ["head/kernel", "head/bias"]
  assert not learner.trainable_variables and learner.num_ways == 5
  body = _plain_body(model)
  tasks = [_task(0), _task(1)]
  losses, accuracies = [], []
  for sx, sy, qx, qy in tasks:
    f_s = body(sx, training=True).numpy()   # BatchNorm on each set's batch statistics
    f_q = body(qx, training=True).numpy()
    protos, logits = _numpy_protonet(f_s, sy.numpy(), f_q, 3)
    fast, state = learner.adapt(sx, sy)
    np.testing.assert_allclose(fast["head/kernel"].numpy()[:, :3], 2 * protos.T, rtol=1e-12)
    np.testing.assert_allclose(fast["head/bias"].numpy()[:3], -(protos ** 2).sum(-1),
                               rtol=1e-12)
    assert np.all(fast["head/kernel"].numpy()[:, 3:] == 0)
    assert np.all(fast["head/bias"].numpy()[3:] == 0.5 * np.finfo(np.float64).min)
    out = functional.functional_call(model, fast, qx, training=True, state=state).numpy()
    np.testing.assert_allclose(out[:, :3], logits + (f_q ** 2).sum(-1, keepdims=True),
                               rtol=1e-10, atol=1e-12)
    probs = tf.nn.softmax(out).numpy()
    assert np.all(probs[:, 3:] == 0.0)
    np.testing.assert_allclose(probs[:, :3], tf.nn.softmax(logits).numpy(), rtol=1e-10)
    np.testing.assert_allclose(learner.distance_logits(sx, sy, qx).numpy(), logits,
                               rtol=1e-12, atol=1e-12)
    losses.append(_numpy_loss(logits, qy.numpy()))
    accuracies.append(np.mean(logits.argmax(-1) == qy.numpy()))
  batch = {k: tf.stack([t[i] for t in tasks]) for i, k in enumerate(meta_batch.BATCH_KEYS)}
  result = meta_batch.meta_batch_loss(learner, batch, before_metrics=False)
  assert float(result.loss) == pytest.approx(np.mean(losses), rel=1e-10)
  assert float(result.metrics["accuracy"]) == pytest.approx(np.mean(accuracies))
  assert sorted(result.metrics) == ["accuracy", "loss"]


def test_meta_gradient_matches_float64_finite_differences():
  """The meta-gradient of the mean query loss of two 3-way tasks on a 4-output head
  (through the support and the query embeddings), by a tape and by the trainer's
  per-task accumulation loop, against central differences; the head gets none."""
  model = small_bn_net(head_units=4)
  learner = protonet.PrototypicalNetwork(model, LOSS)
  tasks = [_task(2), _task(4)]
  body = [v for p, v in functional.variable_paths(model, trainable=True).items()
          if not p.startswith("head/")]
  assert len(body) == 4   # body kernel/bias, bn gamma/beta

  def loss():
    return mean_query_loss(learner, model, tasks)

  fd = central_fd(tf.function(loss), body)  # Traced: the same values, less CPU.
  with tf.GradientTape() as tape:
    value = loss()
  head = [model.get_layer("head").kernel, model.get_layer("head").bias]
  grads = tape.gradient(value, body + head)
  assert grads[4:] == [None, None]
  batch = {k: tf.stack([t[i] for t in tasks]) for i, k in enumerate(meta_batch.BATCH_KEYS)}
  accumulated = meta_batch.meta_batch_gradients(learner, batch, body)
  assert float(accumulated.loss) == pytest.approx(float(value), rel=1e-12)
  for v, g, a, n in zip(body, grads, accumulated.variable_grads, fd):
    np.testing.assert_allclose(g.numpy(), n, rtol=1e-6, atol=1e-9, err_msg=v.name)
    np.testing.assert_allclose(a.numpy(), n, rtol=1e-6, atol=1e-9, err_msg=v.name)


def test_bad_targets_and_episodes_are_named():
  model = small_bn_net(head_units=4)
  with pytest.raises(ValueError, match=r"^Pattern 'nohead/\*' matches no trainable weight"):
    protonet.PrototypicalNetwork(model, LOSS, head="nohead/*")
  with pytest.raises(ValueError, match="must be one Dense layer"):
    protonet.PrototypicalNetwork(model, LOSS, head="head/kernel")
  learner = protonet.PrototypicalNetwork(model, LOSS)
  features = tf.constant(np.random.default_rng(0).normal(size=(4, 4)))
  with pytest.raises(tf.errors.InvalidArgumentError, match="has no support example"):
    learner.generate_head(features, tf.constant([0, 2, 2, 0]))


def _config(name):
  spec = importlib.util.spec_from_file_location(name, CONFIGS / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def test_another_learners_field_is_refused_in_one_line():
  c = _config("omniglot_standard_protonet")
  config_lib.validate(c)
  c.meta.inner_lr = 0.1
  with pytest.raises(config_lib.ConfigError,
                     match=r"^config\.meta\.inner_lr=0\.1 is not read by learner 'protonet' "
                           r"\(its fields: \['head'\]\); set it back to 0\.4\.$"):
    config_lib.validate(c)
  c = _config("omniglot_standard_protonet")
  c.meta.train_before_metrics = True
  with pytest.raises(config_lib.ConfigError, match=r"learner='protonet': its head is "):
    config_lib.validate(c)


def test_the_configs_halve_the_rate_every_2000_episodes():
  """Snell et al.'s schedule (optim.schedule='step'): Adam at 1e-3 halved every 2,000
  episodes, two episodes a meta-step in the CPU config and one in the full one."""
  for name, every in (("omniglot_standard_protonet", 1000),
                      ("omniglot_standard_protonet_full", 2000)):
    c = _config(name)
    optimizer = loop.make_optimizer(c.optim, c.num_steps)
    assert every * c.batch_size == 2000
    for step, expected in ((0, 1e-3), (every - 1, 1e-3), (every, 5e-4),
                           (5 * every - 1, 1e-3 / 16), (5 * every, 1e-3 / 32)):
      optimizer.iterations.assign(step)   # The rate at the optimiser's step.
      assert float(optimizer.learning_rate) == pytest.approx(expected, rel=1e-6), (name, step)
  c = _config("omniglot_standard_protonet")
  c.optim.decay_every = 0
  with pytest.raises(config_lib.ConfigError, match=r"^config\.optim\.decay_every must be >= 1"):
    config_lib.validate(c)
  c = _config("omniglot_standard_protonet")
  c.optim.warmup_steps = 10
  with pytest.raises(config_lib.ConfigError, match=r"^config\.optim\.warmup_steps=10 with "
                                                   r"schedule='step'"):
    config_lib.validate(c)
  assert "optim.decay_every" in config_lib.used_fields(c)
  c.optim.schedule = "cosine"
  assert "optim.decay_every" not in config_lib.used_fields(c)


def test_full_budget_config_is_the_cpu_config_at_snell_et_als_way_and_length():
  """The GPU config validates and differs from the CPU one (run below) only in the way of
  its meta-training episodes, the episodes per step and their number."""
  cpu, full = _config("omniglot_standard_protonet"), _config("omniglot_standard_protonet_full")
  config_lib.validate(full)
  assert (full.meta.train_ways, full.batch_size, full.num_steps) == (60, 1, 20000)
  for group in ("data", "model"):
    assert full[group] == cpu[group], group
  for field in ("learner", "num_ways", "num_shots", "num_queries", "eval_queries",
                "eval_episodes"):
    assert full.meta[field] == cpu.meta[field], field


@pytest.mark.slow   # 30-40 s on 2 loaded cores, most of it tracing the meta-step.
@pytest.mark.parametrize("name", ["omniglot_standard_protonet"])
def test_committed_config_runs_on_omniglot(name, data_dir, tmp_path):
  """Each config as committed (learner, ways, queries, optimiser) on the two small
  Omniglot zips, 2 meta-steps through train_and_evaluate (what python -m hypernet.train
  runs), evaluated 5-way on held-out characters."""
  c = _config(name)
  config_lib.validate(c)
  c.data.data_dir = str(data_dir / "omniglot")
  c.data.omniglot_zips, c.data.num_test_characters = SUBSET, 50
  c.meta.eval_episodes, c.meta.eval_queries, c.eval_batch_size = 10, 5, 10
  c.num_steps, c.log_every, c.eval_every, c.checkpoint_every = 2, 1, 0, 2
  result = loop.train_and_evaluate(c, str(tmp_path))
  assert 0.2 < result["accuracy"] <= 1.0 and np.isfinite(result["loss"])
  assert not [k for k in result if "_before" in k], sorted(result)


def _omniglot_episodes(data_dir, ways, tasks, seed):
  images = omniglot.load_omniglot(["images_background_small1.zip"],
                                  data_dir=str(data_dir / "omniglot"), image_size=28)
  data = episodes.class_indexed(images.images, images.labels)
  fn = episodes.make_episode_fn(data, num_ways=ways, num_shots=1, num_queries=2, seed=seed)
  return tf.data.Dataset.range(10 ** 6).map(fn).batch(tasks)


def test_meta_model_fits_on_omniglot_and_predicts_at_more_ways(data_dir):
  """MetaModel(conv4, "protonet"): fit() on 5-way episodes trains the body, not the
  head; predict() on 20-way episodes gives Eq. 2's classes from the plain body model."""
  keras.utils.set_random_seed(3)
  target = conv4.make_conv4(20, (28, 28, 1))
  head = [v.numpy() for v in target.get_layer("head").weights]
  model = MetaModel(target, "protonet")
  assert len(model.trainable_weights) == len(target.trainable_weights) - 2
  before = [v.numpy() for v in model.trainable_weights]
  model.compile(optimizer=keras.optimizers.Adam(1e-3))
  history = model.fit(_omniglot_episodes(data_dir, 5, 2, 0), steps_per_epoch=3, epochs=1,
                      verbose=0)
  assert np.isfinite(history.history["loss"][0])
  assert max(np.abs(a - b.numpy()).max() for a, b in zip(before, model.trainable_weights)) > 0
  for a, b in zip(head, target.get_layer("head").weights):
    np.testing.assert_array_equal(a, b.numpy())   # Never trained.
  batch = next(iter(_omniglot_episodes(data_dir, 20, 1, 1)))
  out = model.predict(tf.data.Dataset.from_tensors(batch), verbose=0)[0]
  body = _plain_body(target)
  f_s = body(batch["support_x"][0], training=True).numpy().astype(np.float64)
  f_q = body(batch["query_x"][0], training=True).numpy().astype(np.float64)
  assert f_s.shape == (20, 64)   # conv4's flattened last block at 28x28
  _, logits = _numpy_protonet(f_s, batch["support_y"][0].numpy(), f_q, 20)
  np.testing.assert_allclose(out, logits + (f_q ** 2).sum(-1, keepdims=True),
                             rtol=1e-4, atol=1e-3)
  np.testing.assert_array_equal(out.argmax(-1), logits.argmax(-1))
