"""Inner update rules (hypernet/meta/rules.py) and the learners' registry."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional
from hypernet.meta import inner_loop, learner as learner_lib, meta_batch, rules
from hypernet import config_lib


def mse(y, out):
  return tf.reduce_mean(tf.square(out - y))


def small_net(seed=0, dtype="float64"):
  """Dense(3, tanh) -> Dense(2) on 2 inputs, float64, fixed weights."""
  model = keras.Sequential([keras.Input((2,), dtype=dtype),
                            keras.layers.Dense(3, activation="tanh", name="hidden",
                                               dtype=dtype),
                            keras.layers.Dense(2, name="head", dtype=dtype)])
  rng = np.random.default_rng(seed)
  for v in model.trainable_variables:
    v.assign(rng.normal(0, 0.7, v.shape))
  return model


def task(dtype=tf.float64):
  rng = np.random.default_rng(7)
  sx, sy = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
  qx, qy = rng.normal(size=(4, 2)), rng.normal(size=(4, 2))
  return [tf.constant(a, dtype) for a in (sx, sy, qx, qy)]


def query_loss(learner, flat, shapes, paths):
  """The query loss after adaptation from the initial weights ``flat`` (one vector)."""
  sx, sy, qx, qy = task()
  weights, k = {}, 0
  for p, s in zip(paths, shapes):
    n = int(np.prod(s))
    weights[p] = tf.reshape(flat[k:k + n], s)
    k += n
  fast, _ = learner.adapt(sx, sy, weights=weights)
  return mse(qy, functional.functional_call(learner.model, fast, qx))


@pytest.mark.parametrize("rule", [rules.Momentum(0.1, momentum=0.8),
                                  rules.Momentum(0.1, momentum=0.8, nesterov=True),
                                  rules.Adam(0.05, epsilon=1e-3),
                                  rules.Adam(0.05, beta1=0.5, beta2=0.9, epsilon=1e-8)],
                         ids=["momentum", "nesterov", "adam", "adam_small_eps"])
def test_stateful_rule_meta_gradient_matches_finite_differences(rule):
  """Exact second order through the rule's state: the meta-gradient of the query loss
  after 2 inner steps equals float64 central finite differences."""
  model = small_net()
  learner = inner_loop.MAML(model, mse, inner_lr=0.1, inner_steps=2, inner_rule=rule)
  paths = list(functional.variable_paths(model, trainable=True))
  shapes = [tuple(functional.variable_paths(model)[p].shape) for p in paths]
  flat0 = tf.concat([tf.reshape(functional.variable_paths(model)[p], [-1]) for p in paths],
                    0)
  with tf.GradientTape() as tape:
    tape.watch(flat0)
    loss = query_loss(learner, flat0, shapes, paths)
  grad = tape.gradient(loss, flat0).numpy()

  def central(i, h):
    e = np.zeros_like(grad)
    e[i] = h
    return (query_loss(learner, flat0 + e, shapes, paths).numpy()
            - query_loss(learner, flat0 - e, shapes, paths).numpy()) / (2 * h)

  # Central differences with one Richardson step (error O(h^4)): Adam's normalised step
  # is strongly curved, and plain central differences at h = 1e-5 are off by ~1e-6.
  h = 2e-5
  fd = np.array([(4 * central(i, h / 2) - central(i, h)) / 3 for i in range(len(grad))])
  np.testing.assert_allclose(grad, fd, rtol=1e-7, atol=1e-10)
  # Not the first-order gradient: the second-order terms matter here.
  fo = inner_loop.MAML(model, mse, inner_lr=0.1, inner_steps=2, inner_rule=rule,
                       first_order=True)
  with tf.GradientTape() as tape:
    tape.watch(flat0)
    loss = query_loss(fo, flat0, shapes, paths)
  assert np.abs(tape.gradient(loss, flat0).numpy() - grad).max() > 1e-3


def linear_net():
  model = keras.Sequential([keras.Input((3,), dtype="float64"),
                            keras.layers.Dense(2, name="d", dtype="float64")])
  model.layers[0].kernel.assign(np.arange(6.0).reshape(3, 2) / 10 - 0.2)
  model.layers[0].bias.assign([0.3, -0.1])
  return model


def linear_grads(w, b, x, y):
  """NumPy: gradients of mean((x w + b - y)^2) over all entries."""
  r = 2.0 * (x @ w + b - y) / y.size
  return x.T @ r, r.sum(0)


def test_adam_steps_match_numpy():
  """Adam's first step is lr * g / (|g| + eps) (bias-corrected moments); the second
  follows Kingma & Ba's Alg. 1, computed here in NumPy."""
  model = linear_net()
  rng = np.random.default_rng(3)
  x, y = rng.normal(size=(4, 3)), rng.normal(size=(4, 2))
  lr, b1, b2, eps = 0.05, 0.9, 0.999, 1e-8
  w, b = model.layers[0].kernel.numpy(), model.layers[0].bias.numpy()
  gw, gb = linear_grads(w, b, x, y)
  learner = inner_loop.MAML(model, mse, inner_lr=lr, inner_steps=1, inner_rule="adam")
  fast, _ = learner.adapt(tf.constant(x), tf.constant(y))
  np.testing.assert_allclose(fast["d/kernel"].numpy(), w - lr * gw / (np.abs(gw) + eps),
                             rtol=1e-13)
  np.testing.assert_allclose(fast["d/bias"].numpy(), b - lr * gb / (np.abs(gb) + eps),
                             rtol=1e-13)
  # Two steps in NumPy.
  params, m, v = [w, b], [0 * w, 0 * b], [0 * w, 0 * b]
  for t in (1, 2):
    grads = linear_grads(params[0], params[1], x, y)
    for i, g in enumerate(grads):
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      params[i] = params[i] - lr * (m[i] / (1 - b1 ** t)) / (
          np.sqrt(v[i] / (1 - b2 ** t)) + eps)
  fast, _ = inner_loop.MAML(model, mse, inner_lr=lr, inner_steps=2,
                            inner_rule="adam").adapt(tf.constant(x), tf.constant(y))
  np.testing.assert_allclose(fast["d/kernel"].numpy(), params[0], rtol=1e-12)
  np.testing.assert_allclose(fast["d/bias"].numpy(), params[1], rtol=1e-12)


def test_momentum_steps_match_numpy():
  """v' = mu v + g, theta' = theta - lr v' for two steps (v = 0 at the start)."""
  model = linear_net()
  rng = np.random.default_rng(4)
  x, y = rng.normal(size=(4, 3)), rng.normal(size=(4, 2))
  lr, mu = 0.1, 0.7
  params = [model.layers[0].kernel.numpy(), model.layers[0].bias.numpy()]
  vel = [0 * p for p in params]
  for _ in range(2):
    grads = linear_grads(params[0], params[1], x, y)
    vel = [mu * v + g for v, g in zip(vel, grads)]
    params = [p - lr * v for p, v in zip(params, vel)]
  learner = inner_loop.MAML(model, mse, inner_lr=lr, inner_steps=2, inner_rule="momentum",
                            inner_momentum=mu)
  fast, _ = learner.adapt(tf.constant(x), tf.constant(y))
  np.testing.assert_allclose(fast["d/kernel"].numpy(), params[0], rtol=1e-13)
  np.testing.assert_allclose(fast["d/bias"].numpy(), params[1], rtol=1e-13)


def test_adam_zero_gradient_has_finite_meta_gradient():
  """A weight whose inner gradient is exactly 0 (a ReLU unit dead on the support set)
  gets a finite second-order meta-gradient (sqrt's derivative at 0 taken as 0)."""
  model = keras.Sequential([keras.Input((1,), dtype="float64"),
                            keras.layers.Dense(2, activation="relu", name="h",
                                               dtype="float64"),
                            keras.layers.Dense(1, name="o", dtype="float64")])
  model.layers[0].kernel.assign([[1.0, -1.0]])
  model.layers[0].bias.assign([0.0, 0.0])
  learner = inner_loop.MAML(model, mse, inner_lr=0.1, inner_steps=2, inner_rule="adam")
  x = tf.constant([[1.0], [2.0]], tf.float64)  # unit 1 is dead: zero gradients
  with tf.GradientTape() as tape:
    fast, _ = learner.adapt(x, tf.constant([[1.0], [0.0]], tf.float64))
    loss = mse(tf.constant([[2.0], [1.0]], tf.float64),
               functional.functional_call(model, fast, x))
  grads = tape.gradient(loss, model.trainable_variables)
  assert all(np.isfinite(g.numpy()).all() for g in grads)


def test_sgd_rule_reproduces_maml_bit_for_bit():
  """MAML's default rule gives the fast weights of the plain update ``w - lr * g`` with
  the rate in the weights' dtype, bit for bit (float32 conv net, 3 steps)."""
  model = keras.Sequential([keras.Input((6, 6, 1)),
                            keras.layers.Conv2D(3, 3, name="conv"),
                            keras.layers.Flatten(),
                            keras.layers.Dense(4, name="head")])
  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(size=(8, 6, 6, 1)), tf.float32)
  y = tf.constant(rng.integers(0, 4, 8), tf.int32)
  loss = "sparse_softmax_cross_entropy"
  learner = inner_loop.MAML(model, loss, inner_lr=0.37, inner_steps=3)
  fast, _ = learner.adapt(x, y)
  weights = {p: tf.convert_to_tensor(v) for p, v in
             functional.variable_paths(model, trainable=True).items()}
  for _ in range(3):
    with tf.GradientTape() as tape:
      tape.watch(list(weights.values()))
      out = functional.functional_call(model, weights, x, training=True, accelerate="meta")
      value = learner.loss_fn(y, out)
    grads = tape.gradient(value, weights)
    weights = {p: w - tf.constant(0.37, tf.float32) * grads[p] for p, w in weights.items()}
  for p in weights:
    np.testing.assert_array_equal(fast[p].numpy(), weights[p].numpy())


def test_rule_errors():
  with pytest.raises(ValueError, match="inner_rule='rmsprop'"):
    inner_loop.MAML(linear_net(), mse, inner_rule="rmsprop")
  with pytest.raises(ValueError, match="recompute=True"):
    inner_loop.MAML(linear_net(), mse, inner_rule="adam", recompute=True)
  with pytest.raises(ValueError, match="momentum"):
    inner_loop.MAML(linear_net(), mse, inner_rule="momentum", inner_momentum=1.0)
  with pytest.raises(ValueError, match="lslr=True"):
    inner_loop.MAML(linear_net(), mse, inner_rule="adam", lslr=True)


def test_meta_batch_with_adam_matches_per_task_tapes():
  """meta_batch_gradients (accumulated in a while loop) equals the sum of per-task
  tapes for an Adam inner rule."""
  model = small_net(1)
  learner = inner_loop.MAML(model, mse, inner_lr=0.05, inner_steps=2, inner_rule="adam")
  sx, sy, qx, qy = task()
  batch = {"support_x": tf.stack([sx, sx * 0.5]), "support_y": tf.stack([sy, -sy]),
           "query_x": tf.stack([qx, qx]), "query_y": tf.stack([qy, qy * 2])}
  variables = model.trainable_variables
  result = tf.function(lambda: meta_batch.meta_batch_gradients(
      learner, batch, variables))()
  with tf.GradientTape() as tape:
    total = 0.0
    for t in range(2):
      fast, _ = learner.adapt(batch["support_x"][t], batch["support_y"][t])
      total += 0.5 * mse(batch["query_y"][t], functional.functional_call(
          model, fast, batch["query_x"][t]))
  for a, b in zip(result.variable_grads, tape.gradient(total, variables)):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


# ------------------------------------------------------------------ the registry.

def test_registry_lists_every_learner_and_agrees_with_the_config():
  assert set(learner_lib.LEARNERS.names()) == set(config_lib.CHOICES["meta.learner"])
  for name, cls in learner_lib.LEARNERS.items():
    assert issubclass(cls, learner_lib.Learner)
    assert learner_lib.LEARNERS.name_of(cls) == name


def test_every_registered_learner_builds_through_keras_and_the_config():
  """No drift: each registry entry is reachable from hn.keras.MetaModel (by name and by
  class) and from the train loop's make_learner."""
  import hypernet as hn
  from hypernet.tasks import meta_learning
  for name, cls in learner_lib.LEARNERS.items():
    target = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="body"),
                               keras.layers.Dense(2, name="head")])
    for spec in (name, cls):
      model = hn.keras.MetaModel(target, spec)
      assert type(model.learner) is cls
      assert model.get_config()["learner"] == name
    config = config_lib.base_config()
    config.meta.learner = name
    assert type(meta_learning.make_learner(config, target, "mse")) is cls


# ------------------------------------------------------------------ the protocol.

def test_a_learner_is_a_weight_source_whose_context_is_a_support_set():
  import hypernet as hn  # pylint: disable=import-outside-toplevel
  tf.random.set_seed(0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="out")])
  maml = hn.meta.MAML(model, "mse", inner_lr=0.1, inner_steps=1)
  assert isinstance(maml, hn.WeightSource) and maml.target is model
  x = tf.constant(np.random.default_rng(0).normal(size=(4, 3)), tf.float32)
  y = tf.constant(np.random.default_rng(1).normal(size=(4, 2)), tf.float32)
  fast = maml.weights((x, y))
  w, b = model.get_weights()
  grad_w = 2 * x.numpy().T @ (x.numpy() @ w + b - y.numpy()) / y.numpy().size
  np.testing.assert_allclose(fast["out/kernel"].numpy(), w - 0.1 * grad_w, rtol=1e-5)


def test_an_adapt_that_returns_the_wrong_thing_is_named_in_one_line():
  import hypernet as hn  # pylint: disable=import-outside-toplevel

  class OnlyFastWeights(hn.meta.Learner):
    def adapt(self, support_x, support_y, weights=None, state=None, **options):
      return self.initial_weights(weights)          # forgot the state

  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="out")])
  learner = OnlyFastWeights(model, "mse")
  with pytest.raises(ValueError, match=r"OnlyFastWeights.adapt returned a dict; it must "
                     r"return \(fast_weights, state\)"):
    learner.adapt(tf.zeros((4, 3)), tf.zeros((4, 2)))
