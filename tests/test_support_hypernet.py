"""The support-conditioned hypernetwork learner (hypernet/meta/support_hypernet.py).

Exact checks: at initialisation the generated head gives Prototypical Networks'
squared-Euclidean logits; with a non-zero hypernetwork the head follows the module's
equations (numpy); meta-gradients through the generation (and through Proto-MAML inner
steps, second order) match float64 central finite differences; it trains in the one
loop on real few-shot episodes (scikit-learn digits) well above chance.
"""
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from hypernet import config_lib

from hypernet.training import loop
from hypernet.core import functional
from hypernet.meta import support_hypernet
from tests.test_meta import central_fd, small_bn_net
from tests.test_support_adapter import random_5way_batch

LOSS = "sparse_softmax_cross_entropy"


def _task(seed, ways=3, shots=2, queries=2):
  rng = np.random.default_rng(seed)
  sy = np.repeat(np.arange(ways), shots)
  qy = np.repeat(np.arange(ways), queries)
  return (tf.constant(rng.normal(size=(ways * shots, 2))), tf.constant(sy),
          tf.constant(rng.normal(size=(ways * queries, 2))), tf.constant(qy))


def _body_features(learner, x):
  return functional.functional_call(learner.body, {}, x, training=True).numpy()


def test_initial_head_gives_prototypical_network_logits():
  model = small_bn_net()
  learner = support_hypernet.SupportHypernetwork(model, LOSS, generator_widths=(5,))
  assert learner.generated_paths == ["head/kernel", "head/bias"]
  sx, sy, qx, _ = _task(0)
  fast, _ = learner.adapt(sx, sy)
  f_s = _body_features(learner, sx)
  protos = np.stack([f_s[sy.numpy() == c].mean(0) for c in range(3)])
  f_q = _body_features(learner, qx)
  logits = f_q @ fast["head/kernel"].numpy() + fast["head/bias"].numpy()
  sq_dist = ((f_q[:, None, :] - protos[None]) ** 2).sum(-1)
  # s = 2: logits = -||f - p_c||^2 + ||f||^2 (Snell et al. 2017, Sec. 2.4).
  np.testing.assert_allclose(logits, -sq_dist + (f_q ** 2).sum(-1, keepdims=True),
                             rtol=1e-12, atol=1e-12)


def test_under_a_mixed_policy_the_head_is_float32_and_equals_protonet_at_start():
  """mixed_bfloat16: the body's features come in bfloat16; the prototypes, the generator
  and the head are float32 (the variables' dtype; the prototypes' sum met a float32
  generator output and failed), the loss at a zero generator output is ProtoNet's, and
  the generator gets finite gradients."""
  import keras  # pylint: disable=g-import-not-at-top
  from hypernet.meta import conv4, meta_batch, protonet  # pylint: disable=g-import-not-at-top
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    keras.utils.set_random_seed(5)
    model = conv4.make_conv4(5, (8, 8, 1), filters=4, num_blocks=2)
    learner = support_hypernet.SupportHypernetwork(model, LOSS, generator_widths=(4,),
                                                   inner_steps=1, inner_lr=0.1)
    proto = protonet.PrototypicalNetwork(model, LOSS)
    batch = random_5way_batch()
    fast, _ = learner.adapt(batch["support_x"][0], batch["support_y"][0], inner_steps=0)
    assert {fast[p].dtype for p in learner.generated_paths} == {tf.float32}
    mine = meta_batch.meta_batch_loss(learner, batch, before_metrics=False,
                                      adapt_options={"inner_steps": 0}).loss
    theirs = meta_batch.meta_batch_loss(proto, batch, before_metrics=False).loss
    assert float(mine) == pytest.approx(float(theirs), rel=1e-6)
    with tf.GradientTape() as tape:  # with its inner step on the head
      loss = meta_batch.meta_batch_loss(learner, batch, before_metrics=False).loss
    grads = tape.gradient(loss, learner.trainable_variables)
    assert all(g is not None and np.all(np.isfinite(g.numpy())) for g in grads)
  finally:
    keras.mixed_precision.set_global_policy("float32")


def test_generated_head_follows_the_equations():
  model = small_bn_net()
  learner = support_hypernet.SupportHypernetwork(model, LOSS, generator_widths=(5,),
                                                 scale=0.7)
  rng = np.random.default_rng(3)
  for w, b in learner.generator:
    w.assign(rng.normal(size=w.shape))
    b.assign(rng.normal(size=b.shape))
  features = rng.normal(size=(6, 4))
  labels = np.array([2, 0, 1, 1, 0, 2])
  head = learner.generate_head(tf.constant(features), tf.constant(labels))
  protos = np.stack([features[labels == c].mean(0) for c in range(3)])
  (w1, b1), (w2, b2) = [(w.numpy(), b.numpy()) for w, b in learner.generator]
  delta = np.maximum(protos @ w1 + b1, 0) @ w2 + b2
  rows = protos + delta[:, :4]
  np.testing.assert_allclose(head["head/kernel"].numpy(), 0.7 * rows.T, rtol=1e-12)
  np.testing.assert_allclose(head["head/bias"].numpy(),
                             0.7 * (-0.5 * (rows ** 2).sum(-1) + delta[:, 4]), rtol=1e-12)


def test_a_head_wider_than_the_episode_masks_the_classes_it_lacks():
  """A 5-output head on a 3-way episode (meta.train_ways > num_ways, or the reverse):
  the 3 classes' logits, loss and meta-gradient are those of a 3-output head with the
  same weights; the other 2 classes get probability exactly 0."""
  narrow = support_hypernet.SupportHypernetwork(small_bn_net(head_units=3), LOSS,
                                                generator_widths=(5,), scale=0.7)
  wide = support_hypernet.SupportHypernetwork(small_bn_net(head_units=5), LOSS,
                                              generator_widths=(5,), scale=0.7)
  rng = np.random.default_rng(4)
  for (w3, b3), (w5, b5) in zip(narrow.generator, wide.generator):
    for a, b in ((w3, w5), (b3, b5)):
      value = rng.normal(size=a.shape)
      a.assign(value)
      b.assign(value)
  task = _task(1)
  sx, sy, qx, qy = task
  outs, grads = [], []
  for learner in (narrow, wide):
    with tf.GradientTape() as tape:
      fast, state = learner.adapt(sx, sy)
      logits = functional.functional_call(learner.model, fast, qx, training=True,
                                          state=state)
      loss = learner.loss_fn(qy, logits)
    outs.append((logits.numpy(), loss.numpy()))
    grads.append([g.numpy() for g in tape.gradient(
        loss, [v for pair in learner.generator for v in pair] + [learner.log_scale])])
  (l3, loss3), (l5, loss5) = outs
  np.testing.assert_allclose(l5[:, :3], l3, rtol=1e-12)
  probs = tf.nn.softmax(l5).numpy()
  assert np.all(probs[:, 3:] == 0.0) and np.all(np.isfinite(l5))
  np.testing.assert_allclose(loss5, loss3, rtol=1e-12)
  for g3, g5 in zip(*grads):
    np.testing.assert_allclose(g5, g3, rtol=1e-10, atol=1e-12)
  with pytest.raises(tf.errors.InvalidArgumentError, match="has no support example"):
    wide.generate_head(tf.constant(rng.normal(size=(4, 4))), tf.constant([0, 2, 2, 0]))


def _query_loss(learner, task):
  sx, sy, qx, qy = task

  def f():
    fast, state = learner.adapt(sx, sy)
    out = functional.functional_call(learner.model, fast, qx, training=True, state=state)
    return learner.loss_fn(qy, out)
  return f


@pytest.mark.parametrize("inner_steps", [0, 2])
def test_meta_gradient_matches_finite_differences(inner_steps):
  model = small_bn_net()
  learner = support_hypernet.SupportHypernetwork(
      model, LOSS, generator_widths=(3,), inner_steps=inner_steps, inner_lr=0.3)
  rng = np.random.default_rng(1)
  for w, b in learner.generator:  # Away from the zero start, so every path matters.
    w.assign(0.3 * rng.normal(size=w.shape))
    b.assign(0.3 * rng.normal(size=b.shape))
  trained = [v for p, v in functional.variable_paths(model, trainable=True).items()
             if p not in learner.generated_paths]
  assert len(trained) == 4  # body kernel/bias, bn gamma/beta
  variables = trained + list(learner.trainable_variables)
  assert len(learner.trainable_variables) == 5  # phi0 kernel/bias, out kernel/bias, scale
  f = _query_loss(learner, _task(2))
  with tf.GradientTape() as tape:
    loss = f()
  grads = tape.gradient(loss, variables)
  fd = central_fd(tf.function(f), variables)  # Traced: the same values, ~10x less CPU.
  for v, g, n in zip(variables, grads, fd):
    np.testing.assert_allclose(g.numpy(), n, rtol=1e-5, atol=1e-8, err_msg=v.name)
  with tf.GradientTape() as tape:
    loss = f()
  assert tape.gradient(loss, model.get_layer("head").kernel) is None  # generated instead
  if inner_steps:  # First-order inner steps give another (approximate) meta-gradient.
    fo = support_hypernet.SupportHypernetwork(
        model, LOSS, generator_widths=(3,), inner_steps=inner_steps, inner_lr=0.3,
        first_order=True)
    for (w, b), (w0, b0) in zip(fo.generator, learner.generator):
      w.assign(w0)
      b.assign(b0)
    with tf.GradientTape() as tape:
      fo_loss = _query_loss(fo, _task(2))()
    np.testing.assert_allclose(fo_loss.numpy(), loss.numpy(), rtol=1e-12)
    fo_grads = tape.gradient(fo_loss, trained)
    assert max(np.abs(a - b.numpy()).max() for a, b in zip(fd, fo_grads)) > 1e-4


def test_bad_arguments_name_the_argument():
  model = small_bn_net()
  with pytest.raises(ValueError, match="inner_steps must be an int >= 0"):
    support_hypernet.SupportHypernetwork(model, LOSS, inner_steps=-1)
  with pytest.raises(ValueError, match="scale must be a float > 0"):
    support_hypernet.SupportHypernetwork(model, LOSS, scale=0.0)
  with pytest.raises(ValueError, match="generator_widths"):
    support_hypernet.SupportHypernetwork(model, LOSS, generator_widths=(0,))
  with pytest.raises(ValueError, match="one Dense layer"):
    support_hypernet.SupportHypernetwork(model, LOSS, head="head/kernel")


@pytest.mark.parametrize("train_ways", [0, 10])
def test_trains_in_the_one_loop_on_digits_episodes(tmp_path, train_ways):
  """5-way 1-shot on scikit-learn digits (train episodes from the train images, test
  episodes from the test images): the generated head alone (no inner step) learns."""
  c = config_lib.base_config()
  c.task, c.data.name = "few_shot", "digits"
  c.model.name, c.model.conv_widths = "conv4", (16, 16)
  c.meta.learner, c.meta.inner_steps = "support_hypernet", 0
  c.meta.num_queries, c.meta.eval_queries, c.meta.eval_episodes = 3, 3, 40
  c.meta.eval_steps_sweep = (0, 1)
  c.meta.train_ways = train_ways  # 10: trained 10-way, tested 5-way (a 10-output head)
  c.batch_size, c.eval_batch_size = 4, 20
  c.num_steps, c.log_every, c.eval_every, c.checkpoint_every = 40, 40, 0, 40
  c.optim.lr, c.optim.schedule, c.jit_compile = 3e-3, "constant", "false"
  trainer = loop.Trainer(c, str(tmp_path))
  before = trainer.evaluate()
  trainer.train_chunk(trainer.train_iterator(0), 40)
  after = trainer.evaluate()
  # Prototypes of untrained features already beat chance (20%); training improves them.
  assert before["accuracy"] > 0.3
  assert after["accuracy"] > before["accuracy"] + 0.1 and after["accuracy"] > 0.8
  assert after["accuracy_steps_0"] == pytest.approx(after["accuracy"], abs=1e-6)
  assert "accuracy_steps_1_ci95" in after
  # The target's own head is never used: no "before adaptation" metrics of it.
  assert not [k for k in after if "_before" in k], sorted(after)
  head = {id(v) for v in trainer.task.target.get_layer("head").trainable_variables}
  assert not head & {id(v) for v in trainer.variables}  # generated, not trained
  # D = 2 * 2 * 16 = 64 features; phi: 64 -> 64 (ReLU) -> 64 + 1, and the scale.
  assert trainer.task.describe()["generator"] == 64 * 64 + 64 + 64 * 65 + 65 + 1


@pytest.mark.slow
def test_wide_episodes_on_the_standard_split_train(tmp_path, data_dir):
  """Two 72-way episodes a meta-step on the full standard split (4,800 classes), three
  steps through the command line's loop: Grappler folded the meta-batch loop's gradient
  sum into one many-input AddN, and its memory optimiser rewrote that into a temporary
  variable which collided inside the loop (AlreadyExistsError within the first chunk;
  one step alone ran, 64-way ran, 68-way did not; tensorflow/tensorflow#23780). Now the
  steps run, and the model is far above chance (1 / 72)."""
  c = config_lib.load_config_file(str(pathlib.Path(__file__).parents[1] / "configs" /
                                      "omniglot_standard_support_hypernet.py"))
  c.data.data_dir = str(data_dir / "omniglot")
  c.meta.train_ways = 72
  c.num_steps, c.eval_every, c.checkpoint_every = 3, 0, 3
  c.meta.eval_episodes = 10
  metrics = loop.train_and_evaluate(c, str(tmp_path))  # As python -m hypernet.train does.
  assert metrics["step"] == 3 and metrics["accuracy"] > 5 / 72, metrics
