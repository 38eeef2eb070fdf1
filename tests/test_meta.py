"""Inner-loop learners (MAML, first order, Meta-SGD, ANIL): exact values and float64
central finite differences of the meta-gradient."""
import numpy as np
import pytest
import keras
import tensorflow as tf

from hypernet.core import functional
from hypernet.meta import anil, inner_loop, losses


def squared_error(y, f):
  """Sum of squared errors, not halved (the toy problem has one example)."""
  return tf.reduce_sum(tf.square(tf.reshape(f, [-1]) - tf.reshape(tf.cast(y, f.dtype), [-1])))


def toy_target(kind, dtype="float32", name="w"):
  """f(x) = theta * x with theta0 = 0, as Dense(1, no bias) or a 1x1 Conv2D."""
  if kind == "dense":
    return keras.Sequential([keras.Input((1,), dtype=dtype), keras.layers.Dense(
        1, use_bias=False, kernel_initializer="zeros", name=name, dtype=dtype)])
  return keras.Sequential([keras.Input((1, 1, 1), dtype=dtype), keras.layers.Conv2D(
      1, 1, use_bias=False, kernel_initializer="zeros", name=name, dtype=dtype)])


def toy_inputs(kind, x):
  shape = [1, 1] if kind == "dense" else [1, 1, 1, 1]
  return tf.fill(shape, tf.constant(x, tf.float32))


def toy_meta_step(learner, kind, **options):
  """Support (x=1, y=1), query (x=1, y=3): returns (theta', query loss, meta-grad)."""
  model = learner.model
  with tf.GradientTape() as tape:
    fast, _ = learner.adapt(toy_inputs(kind, 1.0), tf.constant([1.0]), **options)
    query_loss = squared_error(tf.constant([3.0]), functional.functional_call(
        model, fast, toy_inputs(kind, 1.0)))
  variables = model.trainable_variables + list(learner.trainable_variables)
  grads = tape.gradient(query_loss, variables)
  return (tf.reshape(fast["w/kernel"], []), query_loss,
          [tf.reshape(g, [-1]) for g in grads])


# (inner steps, first order) -> (theta', query loss, meta-gradient d L_query / d theta0).
# theta0 = 0, alpha = 0.1, L_s = (theta - 1)^2, L_q = (theta - 3)^2:
#   theta' = theta0 - 2 alpha (theta0 - 1) = 0.2,  d theta'/d theta0 = 1 - 2 alpha = 0.8,
#   second order: 2 (0.2 - 3) * 0.8 = -4.48; first order: 2 (0.2 - 3) = -5.6;
#   theta'' = 0.2 - 2 alpha (0.2 - 1) = 0.36; second order: 2 (0.36 - 3) * 0.8^2 = -3.3792,
#   first order: 2 (0.36 - 3) = -5.28.
TOY_EXPECTED = {
    (1, False): (0.2, 7.84, -4.48),
    (1, True): (0.2, 7.84, -5.6),
    (2, False): (0.36, (0.36 - 3) ** 2, -3.3792),
    (2, True): (0.36, (0.36 - 3) ** 2, -5.28),
}


@pytest.mark.parametrize("kind", ["dense", "conv"])
@pytest.mark.parametrize("steps,first_order", sorted(TOY_EXPECTED))
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_maml_toy_exact(kind, steps, first_order, mode):
  learner = inner_loop.MAML(toy_target(kind), squared_error, inner_lr=0.1,
                            inner_steps=steps, first_order=first_order)
  theta, loss, grad = TOY_EXPECTED[(steps, first_order)]
  step = (lambda: toy_meta_step(learner, kind))
  if mode == "function":
    step = tf.function(step)
  for _ in range(3):
    got_theta, got_loss, (got_grad,) = step()
    np.testing.assert_allclose(got_theta, theta, rtol=1e-6)
    np.testing.assert_allclose(got_loss, loss, rtol=1e-6)
    np.testing.assert_allclose(got_grad, [grad], rtol=1e-5)
  if mode == "function":
    assert step.experimental_get_tracing_count() == 1


def test_first_order_maml_class_matches_flag():
  learner = inner_loop.FirstOrderMAML(toy_target("dense"), squared_error, inner_lr=0.1,
                                      inner_steps=2)
  assert learner.first_order
  _, _, (grad,) = toy_meta_step(learner, "dense")
  np.testing.assert_allclose(grad, [-5.28], rtol=1e-5)
  with pytest.raises(TypeError, match="always first order"):
    inner_loop.FirstOrderMAML(toy_target("dense"), squared_error, first_order=False)


@pytest.mark.parametrize("kind", ["dense", "conv"])
def test_meta_sgd_learning_rate_gradient_analytic(kind):
  """Meta-SGD on the toy problem (theta0 = 0, alpha0 = 0.1, support (1, 1), query (1, 3)).

  One step: g0 = 2 (theta0 - 1) = -2, theta1 = theta0 - alpha g0 = 2 alpha = 0.2,
    d theta1 / d alpha = -g0 = 2, so d L_q / d alpha = 2 (theta1 - 3) * 2 = -11.2,
    d L_q / d theta0 = 2 (theta1 - 3) (1 - 2 alpha) = -4.48 (as MAML).
  Two steps: theta2 = theta1 - 2 alpha (theta1 - 1) = 0.36,
    d theta2 / d alpha = d theta1/d alpha (1 - 2 alpha) - 2 (theta1 - 1)
                       = 2 * 0.8 + 1.6 = 3.2, so d L_q / d alpha = 2 (0.36 - 3) * 3.2
                       = -16.896; d L_q / d theta0 = 2 (0.36 - 3) * 0.8^2 = -3.3792.
  """
  for steps, d_theta, d_alpha in [(1, -4.48, -11.2), (2, -3.3792, -16.896)]:
    learner = inner_loop.MetaSGD(toy_target(kind), squared_error, inner_lr=0.1,
                                 inner_steps=steps)
    (alpha,) = learner.trainable_variables
    assert isinstance(alpha, tf.Variable) and alpha.trainable
    assert tuple(alpha.shape) == tuple(learner.model.trainable_variables[0].shape)
    np.testing.assert_allclose(alpha.numpy(), 0.1)
    _, _, grads = tf.function(lambda: toy_meta_step(learner, kind))()
    np.testing.assert_allclose(np.concatenate(grads), [d_theta, d_alpha], rtol=1e-5)


def test_meta_sgd_learning_rates_are_per_parameter():
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d")])
  learner = inner_loop.MetaSGD(model, "mse", inner_lr=0.05, adapt="d/kernel")
  assert list(learner.inner_lrs) == ["d/kernel"]
  assert tuple(learner.inner_lrs["d/kernel"].shape) == (3, 2)
  # A different rate per element: the step of each element scales with its own rate.
  learner.inner_lrs["d/kernel"].assign(np.arange(1, 7, dtype=np.float32).reshape(3, 2) / 10)
  x, y = tf.ones([1, 3]), tf.zeros([1, 2])
  kernel = model.get_layer("d").kernel.numpy()
  fast, _ = learner.adapt(x, y)
  with tf.GradientTape() as tape:
    loss = losses.mean_squared_error(y, model(x))
  g = tape.gradient(loss, model.get_layer("d").kernel).numpy()
  np.testing.assert_allclose(fast["d/kernel"].numpy(),
                             kernel - learner.inner_lrs["d/kernel"].numpy() * g, rtol=1e-6)


# ---------------------------------------------------------------- finite differences.

def mean_query_loss(learner, model, tasks):
  """The learner's mean query loss over ``tasks`` (``(support_x, support_y, query_x,
  query_y)`` each): adapt on the support set, run the target on the fast weights."""
  total = 0.0
  for sx, sy, qx, qy in tasks:
    fast, state = learner.adapt(sx, sy)
    out = functional.functional_call(model, fast, qx, training=True, state=state)
    total += learner.loss_fn(qy, out) / len(tasks)
  return total


def central_fd(f, variables, eps=1e-6):
  """Central finite differences of the scalar ``f()`` w.r.t. each element of each
  (float64) variable: ``(f(v + eps e_i) - f(v - eps e_i)) / (2 eps)``."""
  grads = []
  for v in variables:
    base = np.array(v.numpy())  # 0-d for scalar variables
    g = np.zeros_like(base)
    for i in np.ndindex(base.shape):
      for sign in (1, -1):
        pert = base.copy()
        pert[i] += sign * eps
        v.assign(pert)
        g[i] += sign * float(f()) / (2 * eps)
    v.assign(base)
    grads.append(g)
  return grads


def small_bn_net(name="net", head_units=3):
  """float64 MLP with BatchNorm: Dense(4) -> BN -> tanh -> Dense(head_units) "head"."""
  keras.utils.set_random_seed(1)
  return keras.Sequential([
      keras.Input((2,), dtype="float64"),
      keras.layers.Dense(4, name="body", dtype="float64"),
      keras.layers.BatchNormalization(name="bn", dtype="float64"),
      keras.layers.Activation("tanh", name="tanh", dtype="float64"),
      keras.layers.Dense(head_units, name="head", dtype="float64"),
  ], name=name)


def classification_task(seed, n=6, classes=3):
  rng = np.random.default_rng(seed)
  sx = tf.constant(rng.normal(size=(n, 2)))
  qx = tf.constant(rng.normal(size=(n, 2)))
  sy = tf.constant(np.arange(n) % classes)
  qy = tf.constant((np.arange(n) + 1) % classes)
  return sx, sy, qx, qy


def query_loss_fn(learner, task, weights_fn=None):
  sx, sy, qx, qy = task

  def f():
    weights = weights_fn() if weights_fn else None
    fast, state = learner.adapt(sx, sy, weights=weights)
    out = functional.functional_call(learner.model, fast, qx, training=True, state=state)
    return learner.loss_fn(qy, out)
  return f


def test_maml_second_order_through_batchnorm_matches_finite_differences():
  model = small_bn_net()
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.5,
                            inner_steps=2)
  f = query_loss_fn(learner, classification_task(0))
  with tf.GradientTape() as tape:
    loss = f()
  grads = tape.gradient(loss, model.trainable_variables)
  fd = central_fd(f, model.trainable_variables)
  for v, g, n in zip(model.trainable_variables, grads, fd):
    np.testing.assert_allclose(g.numpy(), n, rtol=1e-5, atol=1e-8, err_msg=v.path)
  # First order differs from the exact meta-gradient (second-order terms are not zero).
  fo = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.5,
                       inner_steps=2, first_order=True)
  with tf.GradientTape() as tape:
    fo_loss = query_loss_fn(fo, classification_task(0))()
  fo_grads = tape.gradient(fo_loss, model.trainable_variables)
  np.testing.assert_allclose(fo_loss.numpy(), loss.numpy(), rtol=1e-12)
  assert max(np.abs(a - b.numpy()).max() for a, b in zip(fd, fo_grads)) > 1e-3


def test_maml_second_order_through_conv_relu_maxpool_matches_finite_differences():
  """Two [conv3x3, ReLU, 2x2 max-pool] blocks (conv4's structure, without BatchNorm):
  second derivatives through MaxPoolGrad (MaxPoolGradGrad) and Conv2DBackpropFilter."""
  keras.utils.set_random_seed(0)
  layers = [keras.Input((8, 8, 1), dtype="float64")]
  for i in range(2):
    layers += [keras.layers.Conv2D(2, 3, padding="same", name=f"conv{i}", dtype="float64",
                                   bias_initializer="random_normal"),
               keras.layers.ReLU(dtype="float64"),
               keras.layers.MaxPooling2D(2, dtype="float64")]
  layers += [keras.layers.Flatten(dtype="float64"),
             keras.layers.Dense(3, name="head", dtype="float64")]
  model = keras.Sequential(layers)
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.4,
                            inner_steps=2)
  rng = np.random.default_rng(0)
  task = (tf.constant(rng.normal(size=(3, 8, 8, 1))), tf.range(3),
          tf.constant(rng.normal(size=(6, 8, 8, 1))), tf.constant([0, 1, 2, 2, 1, 0]))
  f = query_loss_fn(learner, task)
  with tf.GradientTape() as tape:
    loss = f()
  grads = tape.gradient(loss, model.trainable_variables)
  fd = central_fd(f, model.trainable_variables)
  for v, g, n in zip(model.trainable_variables, grads, fd):
    np.testing.assert_allclose(g.numpy(), n, rtol=1e-5, atol=1e-8, err_msg=v.path)


def test_batchnorm_state_is_threaded_through_inner_steps():
  model = small_bn_net()
  bn = model.get_layer("bn")
  before = bn.moving_mean.numpy().copy()
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.5,
                            inner_steps=2)
  sx, sy, _, _ = classification_task(0)
  _, state = learner.adapt(sx, sy)
  # Replay the two training-mode calls by hand: momentum 0.99 applied twice.
  _, s1 = functional.functional_call(model, {}, sx, training=True, return_state=True)
  step1 = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.5,
                          inner_steps=1)
  fast1, _ = step1.adapt(sx, sy)
  _, s2 = functional.functional_call(model, fast1, sx, training=True, return_state=True,
                                     state=s1)
  np.testing.assert_allclose(state["bn/moving_mean"].numpy(),
                             s2["bn/moving_mean"].numpy(), rtol=1e-12)
  assert not np.allclose(state["bn/moving_mean"].numpy(), before)
  np.testing.assert_array_equal(bn.moving_mean.numpy(), before)  # never written


def test_hypernetwork_plus_maml_meta_gradient_matches_finite_differences():
  """A toy generator variable z produces the initial weights; MAML adapts them."""
  model = small_bn_net(head_units=3)
  spec = functional.weight_spec(model)
  rng = np.random.default_rng(3)
  z = tf.Variable(rng.normal(size=(4,)) * 0.5, name="z")
  projections = {p: tf.constant(rng.normal(size=(4, int(np.prod(s.shape)))) * 0.5)
                 for p, s in spec.items()}

  def generate():
    return {p: tf.reshape(tf.tanh(tf.linalg.matvec(projections[p], z, transpose_a=True)),
                          spec[p].shape) for p in spec}

  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.5,
                            inner_steps=2)
  f = query_loss_fn(learner, classification_task(1), weights_fn=generate)
  with tf.GradientTape() as tape:
    loss = f()
  grad_z, *grad_own = tape.gradient(loss, [z] + model.trainable_variables)
  assert all(g is None for g in grad_own)  # every weight came from the generator
  (fd,) = central_fd(f, [z])
  np.testing.assert_allclose(grad_z.numpy(), fd, rtol=1e-5, atol=1e-9)


# ---------------------------------------------------------------- ANIL.

def two_scalar_net(body=1.0, head=0.0):
  return keras.Sequential([
      keras.Input((1,)),
      keras.layers.Dense(1, use_bias=False, name="body",
                         kernel_initializer=keras.initializers.Constant(body)),
      keras.layers.Dense(1, use_bias=False, name="head",
                         kernel_initializer=keras.initializers.Constant(head)),
  ])


@pytest.mark.parametrize("first_order", [False, True])
def test_anil_exact(first_order):
  """f(x) = w * b * x, body b0 = 1, head w0 = 0, alpha = 0.1, support (1, 1), query (1, 3).

  Inner (head only): w' = w - 2 alpha (w b - 1) b = 0.2, the body unchanged.
  L_q = (w' b - 3)^2 = 7.84.  dw'/dw = 1 - 2 alpha b^2 = 0.8,
  dw'/db = -2 alpha (2 w b - 1) = 0.2 (through the support features).
  Second order: dL_q/dw = 2 (w' b - 3) b * 0.8 = -4.48,
                dL_q/db = 2 (w' b - 3) (w' + b dw'/db) = -5.6 * 0.4 = -2.24.
  First order (dw' taken as constant 1 w.r.t. w and 0 w.r.t. b):
                dL_q/dw = -5.6, dL_q/db = 2 (w' b - 3) w' = -1.12 (outer loss only).
  """
  model = two_scalar_net()
  learner = anil.ANIL(model, squared_error, head="head/*", inner_lr=0.1,
                      first_order=first_order)
  assert learner.adapted_paths == ["head/kernel"]

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      fast, _ = learner.adapt(tf.ones([1, 1]), tf.constant([1.0]))
      loss = squared_error(tf.constant([3.0]), functional.functional_call(
          model, fast, tf.ones([1, 1])))
    return fast, loss, tape.gradient(loss, model.trainable_variables)

  fast, loss, (g_body, g_head) = step()
  np.testing.assert_allclose(fast["head/kernel"].numpy(), [[0.2]], rtol=1e-6)
  assert "body/kernel" not in fast  # the body is read from its variable, not adapted
  np.testing.assert_allclose(loss.numpy(), 7.84, rtol=1e-6)
  expected = (-5.6, -1.12) if first_order else (-4.48, -2.24)
  np.testing.assert_allclose([g_head.numpy().item(), g_body.numpy().item()], expected,
                             rtol=1e-5)


def test_anil_runs_body_once_and_matches_finite_differences():
  model = small_bn_net()
  calls = {"body": 0, "head": 0}
  for name in calls:
    layer = model.get_layer(name)
    original = layer.call

    def counted(*args, _original=original, _name=name, **kwargs):
      calls[_name] += 1
      return _original(*args, **kwargs)
    layer.call = counted
  learner = anil.ANIL(model, "sparse_softmax_cross_entropy", inner_lr=0.5, inner_steps=3)
  assert learner.adapted_paths == ["head/kernel", "head/bias"]
  task = classification_task(2)
  fast, _ = learner.adapt(task[0], task[1])
  assert calls == {"body": 1, "head": 3}  # body once, head once per inner step
  assert all(fast[p] is not None for p in ["head/kernel", "head/bias"])

  f = query_loss_fn(learner, task)
  with tf.GradientTape() as tape:
    loss = f()
  grads = tape.gradient(loss, model.trainable_variables)
  fd = central_fd(f, model.trainable_variables)
  for v, g, n in zip(model.trainable_variables, grads, fd):
    np.testing.assert_allclose(g.numpy(), n, rtol=1e-5, atol=1e-8, err_msg=v.path)
  # The same meta-gradient as MAML restricted to the head (body run each step).
  maml = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.5,
                         inner_steps=3, adapt="head/*")
  with tf.GradientTape() as tape:
    maml_loss = query_loss_fn(maml, task)()
  for g, m in zip(grads, tape.gradient(maml_loss, model.trainable_variables)):
    np.testing.assert_allclose(g.numpy(), m.numpy(), rtol=1e-10, atol=1e-12)


def test_anil_split_errors():
  inputs = keras.Input((1,))
  functional_model = keras.Model(inputs, keras.layers.Dense(1, name="head")(inputs))
  with pytest.raises(ValueError, match="keras.Sequential"):
    anil.ANIL(functional_model, "mse")
  with pytest.raises(ValueError, match="no body"):
    anil.ANIL(two_scalar_net(), "mse", head="body/*")
  with pytest.raises(TypeError, match="head="):
    anil.ANIL(two_scalar_net(), "mse", adapt="head/*")


# ---------------------------------------------------------------- errors.

class WithUnusedLayer(keras.Model):

  def __init__(self):
    super().__init__(name="unused_net")
    self.used = keras.layers.Dense(1, name="used")
    self.unused = keras.layers.Dense(1, name="unused")
    self.unused.build((None, 1))

  def call(self, x, training=None):
    return self.used(x)


@pytest.mark.parametrize("first_order", [False, True])
def test_missing_inner_gradient_raises_naming_the_weight(first_order):
  model = WithUnusedLayer()
  model(tf.ones([1, 1]))
  learner = inner_loop.MAML(model, squared_error, first_order=first_order)
  with tf.GradientTape():
    with pytest.raises(inner_loop.MissingInnerGradientError,
                       match=r"\['unused/kernel', 'unused/bias'\]"):
      learner.adapt(tf.ones([1, 1]), tf.ones([1]))
  # Excluding them works.
  ok = inner_loop.MAML(model, squared_error, exclude="unused/*")
  fast, _ = ok.adapt(tf.ones([1, 1]), tf.ones([1]))
  assert sorted(fast) == ["used/bias", "used/kernel"]


@tf.custom_gradient
def _square_with_detached_gradient(d):
  return tf.square(d), lambda up: tf.stop_gradient(up * 2.0 * d)


def detached_squared_error(y, f):
  return tf.reduce_sum(_square_with_detached_gradient(tf.reshape(f, [-1]) - y))


def test_unrecorded_second_order_inner_gradient_raises():
  model = toy_target("dense")
  learner = inner_loop.MAML(model, detached_squared_error, inner_lr=0.1)
  for call in [lambda f: f(), lambda f: tf.function(f)()]:
    def run():
      with tf.GradientTape():
        learner.adapt(tf.ones([1, 1]), tf.ones([1]))
    with pytest.raises(inner_loop.MissingInnerGradientError,
                       match=r"second order.*\['w/kernel'\]"):
      call(run)
  # First order does not need the inner gradient to be recorded: -5.6 as before.
  fo = inner_loop.MAML(model, detached_squared_error, inner_lr=0.1, first_order=True)
  _, _, (grad,) = toy_meta_step(fo, "dense")
  np.testing.assert_allclose(grad, [-5.6], rtol=1e-5)


def test_second_order_inner_loop_takes_nested_inputs():
  """A target with dict inputs (as a transformer's token ids and padding mask):
  f = theta * x * s on the toy problem (support x = s = y = 1, query y = 3, alpha 0.1)
  gives the meta-gradient -4.48 eagerly (the eager check of the inner gradient's ops
  traces one inner step on the inputs' structure) and traced."""
  x_in, s_in = keras.Input((1,), name="x"), keras.Input((1,), name="s")
  dense = keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros", name="w")
  model = keras.Model({"x": x_in, "s": s_in}, dense(x_in) * s_in)
  learner = inner_loop.MAML(model, squared_error, inner_lr=0.1)
  inputs = {"x": tf.ones([1, 1]), "s": tf.ones([1, 1])}

  def meta_gradient():
    with tf.GradientTape() as tape:
      fast, _ = learner.adapt(inputs, tf.constant([1.0]))
      loss = squared_error(tf.constant([3.0]), functional.functional_call(model, fast, inputs))
    return tape.gradient(loss, model.trainable_variables)[0]

  for call in (meta_gradient, tf.function(meta_gradient)):
    np.testing.assert_allclose(call().numpy(), [[-4.48]], rtol=1e-5)


def _branching_squared_error(y, f):
  """squared_error, after a Python ``if`` on a tensor (a trace needs AutoGraph)."""
  if tf.reduce_sum(tf.abs(f)) > 1e6:
    return tf.zeros([], f.dtype)
  return squared_error(y, f)


def test_eager_inner_gradient_check_traces_with_autograph_where_the_loss_needs_it():
  """The eager second-order check traces one inner step without AutoGraph (seconds
  faster on Keras models: 7 of a small transformer's 9 s); a loss that branches in
  Python on a tensor fails there, and the check traces it again with AutoGraph: the toy
  meta-gradient -4.48, eagerly."""
  with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
    tf.function(_branching_squared_error, autograph=False)(tf.ones([1]), tf.ones([1, 1]))
  learner = inner_loop.MAML(toy_target("dense"), _branching_squared_error, inner_lr=0.1)
  _, _, (grad,) = toy_meta_step(learner, "dense")
  np.testing.assert_allclose(grad, [-4.48], rtol=1e-5)


def test_bad_arguments():
  model = toy_target("dense")
  with pytest.raises(ValueError, match="inner_steps"):
    inner_loop.MAML(model, "mse", inner_steps=0)
  with pytest.raises(ValueError, match="inner_lr"):
    inner_loop.MAML(model, "mse", inner_lr=-1.0)
  with pytest.raises(ValueError, match="Unknown loss"):
    inner_loop.MAML(model, "hinge")
  with pytest.raises(ValueError, match="matches no"):
    inner_loop.MAML(model, "mse", adapt="nothing/*")
  learner = inner_loop.MAML(model, "mse")
  with pytest.raises(ValueError, match="not variables"):
    learner.adapt(tf.ones([1, 1]), tf.ones([1]), weights={"typo/kernel": tf.ones([1, 1])})


# --------------------------------------------- Python-number hyperparameters in float64.

@pytest.mark.parametrize("steps", [1, 2])
@pytest.mark.parametrize("kind", ["MAML", "FirstOrderMAML", "MetaSGD"])
def test_toy_values_exact_in_float64(kind, steps):
  """inner_lr = 0.1 enters as float64's 0.1 (not float32's 0.100000001490116): the toy
  values to 1e-12 (float32 gave -4.4799999785 for -4.48)."""
  model = toy_target("dense", dtype="float64")
  learner = getattr(inner_loop, kind)(model, squared_error, inner_lr=0.1, inner_steps=steps)
  first_order = kind == "FirstOrderMAML"
  theta, loss, grad = TOY_EXPECTED[(steps, first_order)]
  x = tf.ones([1, 1], tf.float64)
  for run in (lambda f: f(), lambda f: tf.function(f)()):
    def step():
      with tf.GradientTape() as tape:
        fast, _ = learner.adapt(x, tf.constant([1.0], tf.float64))
        query = squared_error(tf.constant([3.0], tf.float64),
                              functional.functional_call(model, fast, x))
      return fast["w/kernel"], query, tape.gradient(
          query, model.trainable_variables + list(learner.trainable_variables))
    got_theta, got_loss, grads = run(step)
    assert abs(float(tf.reshape(got_theta, [])) - theta) < 1e-12
    assert abs(float(got_loss) - loss) < 1e-12
    assert abs(float(tf.reshape(grads[0], [])) - grad) < 1e-12
    if kind == "MetaSGD" and steps == 1:
      # d L_q / d alpha = 2 (theta' - 3) * d theta'/d alpha = 2 (0.2 - 3) * 2 = -11.2.
      assert abs(float(tf.reshape(grads[1], [])) - (-11.2)) < 1e-12


# ------------------------------------------ An unrecorded inner gradient, decided by loss.

@tf.custom_gradient
def _detached_matmul(h, w):
  def grad(up):  # Right first derivatives, computed where no outer tape can see them.
    return (tf.stop_gradient(tf.matmul(up, w, transpose_b=True)),
            tf.stop_gradient(tf.matmul(h, up, transpose_a=True)))
  return tf.matmul(h, w), grad


class DetachedDense(keras.layers.Layer):
  """y = h @ w whose gradient is not recorded by an outer tape (a detached custom op)."""

  def build(self, input_shape):
    self.kernel = self.add_weight(shape=(input_shape[-1], 1), initializer="ones", name="kernel")

  def call(self, h):
    return _detached_matmul(h, self.kernel)


def test_unrecorded_inner_gradient_of_a_constant_weight_raises():
  """The adapted head is a constant given through weights= (reset for every task); the
  support loss depends on the meta-parameter v through an op whose gradient is not
  recorded, so d fast / d v would silently be None: the learner raises instead."""
  model = keras.Sequential([keras.Input((1,)),
                            keras.layers.Dense(1, use_bias=False, name="v"),
                            DetachedDense(name="w")])
  learner = inner_loop.MAML(model, squared_error, adapt="w/*", inner_lr=0.1)
  head = {"w/kernel": tf.zeros((1, 1))}
  for call in (lambda f: f(), lambda f: tf.function(f)()):
    def run():
      with tf.GradientTape():
        learner.adapt(tf.ones([1, 1]), tf.ones([1]), weights=head)
    with pytest.raises(inner_loop.MissingInnerGradientError,
                       match=r"second order.*\['w/kernel'\]"):
      call(run)
  # With an ordinary Dense head the same setting is exact: fast = -0.1 * g, and
  # d fast / d v = -0.1 * d/dv [2 (0 - 1) * v x] = 0.2 at v = 1 (x = 1).
  plain = keras.Sequential([keras.Input((1,)),
                            keras.layers.Dense(1, use_bias=False, kernel_initializer="ones",
                                               name="v"),
                            keras.layers.Dense(1, use_bias=False, name="w")])
  ok = inner_loop.MAML(plain, squared_error, adapt="w/*", inner_lr=0.1)
  with tf.GradientTape() as tape:
    fast, _ = ok.adapt(tf.ones([1, 1]), tf.ones([1]), weights=head)
  v = plain.get_layer("v").kernel
  np.testing.assert_allclose(tape.gradient(fast["w/kernel"], v), [[0.2]], rtol=1e-6)


def test_zero_init_head_starts_every_task_at_zero_and_matches_finite_differences():
  model = small_bn_net()
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.5,
                            inner_steps=2, zero_init="head/*")
  assert learner.untrained_paths == ["head/kernel", "head/bias"]
  init = learner.initial_weights()
  assert all(not np.any(init[p].numpy()) for p in learner.untrained_paths)
  sx, sy, qx, qy = classification_task(4)
  # Pre-adaptation logits are all zero: the query loss is log N exactly (N = 3).
  out = functional.functional_call(model, init, qx, training=True)
  np.testing.assert_allclose(learner.loss_fn(qy, out).numpy(), np.log(3.0), rtol=1e-12)
  f = query_loss_fn(learner, (sx, sy, qx, qy))
  body = [v for p, v in functional.variable_paths(model, trainable=True).items()
          if p not in learner.untrained_paths]
  with tf.GradientTape() as tape:
    loss = f()
  grads = tape.gradient(loss, body + [model.get_layer("head").kernel])
  assert grads[-1] is None  # the head's variable is never read
  for v, g, n in zip(body, grads, central_fd(f, body)):
    np.testing.assert_allclose(g.numpy(), n, rtol=1e-5, atol=1e-8, err_msg=v.path)
  with pytest.raises(ValueError, match="does not adapt"):
    inner_loop.MAML(model, "mse", adapt="body/*", zero_init="head/*")
