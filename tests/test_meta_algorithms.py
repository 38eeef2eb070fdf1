"""Implicit MAML, second order with recomputed inner steps, and MAML++'s parts (LSLR,
multi-step loss, derivative-order annealing): closed forms, hand-computed values and
float64 central finite differences."""
import numpy as np
import pytest
import keras
import tensorflow as tf

from hypernet.core import functional
from hypernet.meta import implicit, inner_loop, meta_batch
from test_meta import (central_fd, classification_task, small_bn_net, squared_error,
                       toy_inputs, toy_meta_step, toy_target)


def mse(y, f):
  return tf.reduce_mean(tf.square(f - tf.cast(y, f.dtype)))


def linear_net(d_in=3, d_out=2):
  keras.utils.set_random_seed(3)
  return keras.Sequential([keras.Input((d_in,), dtype="float64"), keras.layers.Dense(
      d_out, use_bias=False, name="w", dtype="float64")], name="lin")


# ------------------------------------------------------------------------ implicit MAML.

def test_conjugate_gradient_solves_spd_system():
  rng = np.random.default_rng(0)
  m = rng.normal(size=(5, 5))
  a = m @ m.T + 5 * np.eye(5)
  b = rng.normal(size=5)
  x = implicit.conjugate_gradient(lambda v: [tf.linalg.matvec(tf.constant(a), v[0])],
                                  [tf.constant(b)], steps=8)
  np.testing.assert_allclose(x[0].numpy(), np.linalg.solve(a, b), rtol=1e-12)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_implicit_meta_gradient_equals_closed_form_on_quadratic(mode):
  """Linear model W (3x2), L_s = mean((Xs W - Ys)^2): the proximal inner problem has
  W* = (A + lam I)^-1 (lam Theta + Xs^T Ys / n) with A = Xs^T Xs / n, and
  dL_q/dTheta = lam (A + lam I)^-1 grad L_q(W*) (Rajeswaran et al. 2019, Eq. 6)."""
  rng = np.random.default_rng(1)
  n, nq, lam = 5, 7, 2.0
  xs, ys = rng.normal(size=(n, 3)) * 0.7, rng.normal(size=(n, 2))
  xq, yq = rng.normal(size=(nq, 3)), rng.normal(size=(nq, 2))
  model = linear_net()
  theta = model.trainable_variables[0].numpy()
  a = xs.T @ xs / n
  w_star = np.linalg.solve(a + lam * np.eye(3), lam * theta + xs.T @ ys / n)
  g_q = xq.T @ (xq @ w_star - yq) / nq
  expected = lam * np.linalg.solve(a + lam * np.eye(3), g_q)

  # Gradient descent on the regularised objective contracts by 1 - (lam + min eig) /
  # (lam + max eig) <= 0.25 per step at this rate: 40 steps solve it to float64.
  rate = 1.0 / (lam + np.linalg.eigvalsh(a).max())
  assert 1 - (lam + np.linalg.eigvalsh(a).min()) * rate <= 0.25
  learner = implicit.ImplicitMAML(model, mse, inner_lr=float(rate), inner_steps=40,
                                  proximal_lambda=lam, cg_steps=6)

  def step():
    with tf.GradientTape() as tape:
      fast, _ = learner.adapt(tf.constant(xs), tf.constant(ys))
      loss = mse(yq, functional.functional_call(model, fast, tf.constant(xq)))
    return fast["w/kernel"], tape.gradient(loss, model.trainable_variables)[0]

  if mode == "function":
    step = tf.function(step)
  w, grad = step()
  np.testing.assert_allclose(w.numpy(), w_star, rtol=1e-12)
  np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-10)
  # Not MAML's gradient: first order (the query gradient at W*) differs.
  assert np.abs(g_q - expected).max() > 1e-2


def test_implicit_meta_gradient_through_meta_batch_matches_loss_gradient():
  """With BatchNorm (float64) the accumulated meta-batch gradient equals one tape over
  meta_batch_loss; fewer CG steps give a different (approximate) gradient."""
  model = small_bn_net()
  tasks = [classification_task(s) for s in (0, 1)]
  batch = {k: tf.stack([t[i] for t in tasks])
           for i, k in enumerate(meta_batch.BATCH_KEYS)}
  learner = implicit.ImplicitMAML(model, "sparse_softmax_cross_entropy", inner_lr=0.3,
                                  inner_steps=2, proximal_lambda=1.0, cg_steps=4)
  variables = model.trainable_variables
  acc = tf.function(lambda: meta_batch.meta_batch_gradients(learner, batch, variables))()
  with tf.GradientTape() as tape:
    loss = meta_batch.meta_batch_loss(learner, batch).loss
  direct = tape.gradient(loss, variables)
  for v, a, d in zip(variables, acc.variable_grads, direct):
    np.testing.assert_allclose(a.numpy(), d.numpy(), rtol=1e-9, atol=1e-12, err_msg=v.path)
  one_cg = implicit.ImplicitMAML(model, "sparse_softmax_cross_entropy", inner_lr=0.3,
                                 inner_steps=2, proximal_lambda=1.0, cg_steps=1)
  with tf.GradientTape() as tape:
    loss1 = meta_batch.meta_batch_loss(one_cg, batch).loss
  rough = tape.gradient(loss1, variables)
  assert max(np.abs(a.numpy() - b.numpy()).max() for a, b in zip(rough, direct)) > 1e-6


def test_implicit_bad_arguments_name_the_field():
  """The constructor's arguments are the config.meta fields of the same names."""
  with pytest.raises(ValueError, match="^proximal_lambda must be a float > 0"):
    implicit.ImplicitMAML(linear_net(), mse, proximal_lambda=0.0)
  with pytest.raises(ValueError, match="^cg_steps must be an int >= 1"):
    implicit.ImplicitMAML(linear_net(), mse, cg_steps=0)


def test_implicit_lam_keyword_still_works_with_a_deprecation_warning():
  with pytest.warns(DeprecationWarning, match="proximal_lambda"):
    learner = implicit.ImplicitMAML(linear_net(), mse, lam=2.5)
  assert learner.proximal_lambda == 2.5
  with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="proximal_lambda"):
    implicit.ImplicitMAML(linear_net(), mse, lam=-1.0)


# ---------------------------------------------------- second order, recomputed steps.

def _grads(learner, task, variables, fn=None):
  sx, sy, qx, qy = task

  def run():
    with tf.GradientTape() as tape:
      fast, state = learner.adapt(sx, sy)
      out = functional.functional_call(learner.model, fast, qx, training=True, state=state)
      loss = learner.loss_fn(qy, out)
    return loss, tape.gradient(loss, variables)
  return (tf.function(run) if fn else run)()


@pytest.mark.parametrize("adapt,mode", [(None, "eager"), ("head/*", "eager"),
                                        ("head/*", "function")])
def test_recompute_equals_stored_second_order(adapt, mode):
  """Same loss and meta-gradient (float64), also for weights that are not adapted (whose
  meta-gradient has a second-order part through the inner loop) and LSLR rates."""
  model = small_bn_net()
  kwargs = dict(inner_lr=0.5, inner_steps=3, adapt=adapt, lslr=True)
  stored = inner_loop.MAML(model, "sparse_softmax_cross_entropy", **kwargs)
  recomputed = inner_loop.MAML(model, "sparse_softmax_cross_entropy", recompute=True,
                               **kwargs)
  task = classification_task(0)
  fn = mode == "function"
  loss_a, ga = _grads(stored, task, model.trainable_variables + list(stored.trainable_variables),
                      fn)
  loss_b, gb = _grads(recomputed, task,
                      model.trainable_variables + list(recomputed.trainable_variables), fn)
  np.testing.assert_allclose(loss_b.numpy(), loss_a.numpy(), rtol=1e-14)
  for a, b in zip(ga, gb):
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-10, atol=1e-14)
  assert max(np.abs(g.numpy()).max() for g in gb[len(model.trainable_variables):]) > 1e-4


def test_recompute_toy_values_exact():
  """The toy problem of test_meta: 2 steps, d L_q/d theta0 = 2 (0.36 - 3) 0.8^2."""
  learner = inner_loop.MAML(toy_target("dense", "float64"), squared_error, inner_lr=0.1,
                            inner_steps=2, recompute=True)
  model = learner.model
  with tf.GradientTape() as tape:
    fast, _ = learner.adapt(tf.ones([1, 1], tf.float64), tf.constant([1.0]))
    loss = squared_error(tf.constant([3.0]), functional.functional_call(
        model, fast, tf.ones([1, 1], tf.float64)))
  grad = tape.gradient(loss, model.trainable_variables)[0]
  np.testing.assert_allclose(grad.numpy().ravel(), [2 * (0.36 - 3) * 0.64], rtol=1e-14)


def test_recompute_meta_batch_gradients_match():
  model = small_bn_net()
  tasks = [classification_task(s) for s in (0, 1, 2)]
  batch = {k: tf.stack([t[i] for t in tasks])
           for i, k in enumerate(meta_batch.BATCH_KEYS)}
  out = []
  for recompute in (False, True):
    learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.5,
                              inner_steps=2, recompute=recompute)
    out.append(tf.function(lambda: meta_batch.meta_batch_gradients(
        learner, batch, model.trainable_variables, parallel_iterations=2,
        staggered=True))().variable_grads)
  for a, b in zip(*out):
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-10, atol=1e-14)


# ------------------------------------------------------------------------------ MAML++.

def test_lslr_learning_rate_gradient_matches_finite_differences():
  model = small_bn_net()
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.4,
                            inner_steps=2, lslr=True)
  assert [tuple(v.shape) for v in learner.step_lrs.values()] == [(2,)] * 6
  sx, sy, qx, qy = classification_task(4)

  def f():
    fast, state = learner.adapt(sx, sy)
    return learner.loss_fn(qy, functional.functional_call(model, fast, qx, training=True,
                                                           state=state))
  with tf.GradientTape() as tape:
    loss = f()
  rates = list(learner.step_lrs.values())
  grads = tape.gradient(loss, rates)
  fd = central_fd(tf.function(f), rates)  # Traced: the same values, less CPU.
  for v, g, n in zip(rates, grads, fd):
    np.testing.assert_allclose(g.numpy(), n, rtol=1e-6, atol=1e-10, err_msg=v.name)
  # The rates are per step: different gradients at step 0 and 1.
  assert abs(grads[0].numpy()[0] - grads[0].numpy()[1]) > 1e-6


def test_lslr_toy_per_step_rates():
  """theta1 = theta0 - 2 a0 (theta0 - 1), theta2 = theta1 - 2 a1 (theta1 - 1) with
  theta0 = 0, a0 = 0.1, a1 = 0.2: theta1 = 0.2, theta2 = 0.52;
  dL/da1 = 2 (theta2 - 3) * (-2 (theta1 - 1)) = 2 (-2.48) (1.6) = -7.936."""
  learner = inner_loop.MAML(toy_target("dense", "float64"), squared_error, inner_lr=0.1,
                            inner_steps=2, lslr=True)
  learner.step_lrs["w/kernel"].assign([0.1, 0.2])
  model = learner.model
  with tf.GradientTape() as tape:
    fast, _ = learner.adapt(tf.ones([1, 1], tf.float64), tf.constant([1.0]))
    loss = squared_error(tf.constant([3.0]), functional.functional_call(
        model, fast, tf.ones([1, 1], tf.float64)))
  np.testing.assert_allclose(fast["w/kernel"].numpy().ravel(), [0.52], rtol=1e-14)
  g = tape.gradient(loss, learner.step_lrs["w/kernel"])
  # dtheta2/da0 = -2 (theta0 - 1) (1 - 2 a1) = 2 * 0.6 = 1.2 -> dL/da0 = 2(-2.48)(1.2)
  np.testing.assert_allclose(g.numpy(), [2 * -2.48 * 1.2, -7.936], rtol=1e-12)


def _toy_batch():
  x = tf.ones([1, 1, 1], tf.float64)
  return {"support_x": x, "support_y": tf.constant([[1.0]], tf.float64),
          "query_x": x, "query_y": tf.constant([[3.0]], tf.float64)}


@pytest.mark.parametrize("recompute", [False, True])
def test_multi_step_loss_is_weighted_sum_of_per_step_meta_gradients(recompute):
  """Toy quadratic (test_meta): d L_q(theta1)/d theta0 = -4.48, d L_q(theta2)/d theta0 =
  -3.3792; the MSL with w = (0.3, 0.7) has 0.3 (-4.48) + 0.7 (-3.3792)."""
  learner = inner_loop.MAML(toy_target("dense", "float64"), squared_error, inner_lr=0.1,
                            inner_steps=2, multi_step_loss=True, recompute=recompute)
  msl = tf.constant([0.3, 0.7], tf.float64)
  variables = learner.model.trainable_variables
  expected = 0.3 * -4.48 + 0.7 * -3.3792
  with tf.GradientTape() as tape:
    result = meta_batch.meta_batch_loss(learner, _toy_batch(), msl_weights=msl)
  np.testing.assert_allclose(tape.gradient(result.loss, variables)[0].numpy().ravel(),
                             [expected], rtol=1e-13)
  np.testing.assert_allclose(result.loss.numpy(),
                             0.3 * (0.2 - 3) ** 2 + 0.7 * (0.36 - 3) ** 2, rtol=1e-13)
  # The reported query loss is the last step's.
  np.testing.assert_allclose(result.metrics["loss"].numpy(), (0.36 - 3) ** 2,
                             rtol=1e-13)
  acc = tf.function(lambda: meta_batch.meta_batch_gradients(
      learner, _toy_batch(), variables, parallel_iterations=2, staggered=True,
      msl_weights=msl))()
  np.testing.assert_allclose(acc.variable_grads[0].numpy().ravel(), [expected], rtol=1e-13)


def test_msl_weights_schedule():
  """K = 5, annealed over 100 meta-steps: 1/5 each at step 0; at step 50 the non-final
  ones are 0.2 - 0.5/5 = 0.1 and the last 0.2 + 0.5 * 4/5 = 0.6; at the end the floor
  0.03/5 and 1 - 4 * 0.006."""
  w = lambda s: inner_loop.msl_weights(s, 100, 5, tf.float64).numpy()
  np.testing.assert_allclose(w(0), [0.2] * 5, rtol=1e-15)
  np.testing.assert_allclose(w(50), [0.1] * 4 + [0.6], rtol=1e-14)
  np.testing.assert_allclose(w(1000), [0.006] * 4 + [0.976], rtol=1e-14)
  for s in (0, 37, 50, 99, 1000):
    np.testing.assert_allclose(w(s).sum(), 1.0, rtol=1e-14)
  with pytest.raises(ValueError, match="msl_anneal_steps"):
    inner_loop.msl_weights(0, 0, 5)


@pytest.mark.parametrize("recompute", [False, True])
def test_derivative_order_annealing_switches_in_one_trace(recompute):
  """adapt(first_order=<bool tensor>): first order (-5.28) while true, second order
  (-3.3792) after, in one traced function (the toy problem, 2 steps); the learner is not
  modified while tracing."""
  learner = inner_loop.MAML(toy_target("dense"), squared_error, inner_lr=0.1,
                            inner_steps=2, recompute=recompute)
  flag = tf.Variable(True)
  before = dict(vars(learner))

  @tf.function
  def step():
    return toy_meta_step(learner, "dense", first_order=tf.identity(flag))
  np.testing.assert_allclose(step()[2][0].numpy(), [-5.28], rtol=1e-6)
  flag.assign(False)
  np.testing.assert_allclose(step()[2][0].numpy(), [-3.3792], rtol=1e-6)
  assert step.experimental_get_tracing_count() == 1
  assert dict(vars(learner)) == before


# ----------------------------------------------------------------- per-step BatchNorm.

def per_step_net(rows, statistics=True, weights=False):
  """float64 Dense(3) -> per-step BN -> tanh -> Dense(3) "head"."""
  from hypernet.meta import per_step_bn
  keras.utils.set_random_seed(2)
  return keras.Sequential([
      keras.Input((2,), dtype="float64"),
      keras.layers.Dense(3, name="body", dtype="float64"),
      per_step_bn.PerStepBatchNormalization(rows, per_step_statistics=statistics,
                                            per_step_weights=weights, name="bn",
                                            dtype="float64"),
      keras.layers.Activation("tanh", name="tanh", dtype="float64"),
      keras.layers.Dense(3, name="head", dtype="float64"),
  ], name="psnet")


def test_per_step_statistics_move_one_row_per_step():
  """Inner step k moves row k by (1 - 0.99) (batch mean - row) of the pre-BN features at
  that step's weights; the query pass moves row K; inference reads row K."""
  model = per_step_net(rows=4)
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.5,
                            inner_steps=2)
  sx, sy, qx, qy = classification_task(5)
  steps, state = learner.adapt_steps(sx, sy)
  weights = [learner.initial_weights()] + steps
  pre = lambda w, x: (x.numpy() @ w["body/kernel"].numpy() + w["body/bias"].numpy())
  mean = state["bn/moving_mean"].numpy()
  for k in range(2):
    np.testing.assert_allclose(mean[k], 0.01 * pre(weights[k], sx).mean(0), rtol=1e-12)
    var = pre(weights[k], sx).var(0)
    np.testing.assert_allclose(state["bn/moving_variance"].numpy()[k], 0.99 + 0.01 * var,
                               rtol=1e-12)
  np.testing.assert_array_equal(mean[2:], 0.0)  # not moved by the inner loop
  out, new_state = functional.functional_call(model, steps[-1], qx, training=True,
                                              return_state=True, state=state)
  np.testing.assert_allclose(new_state["bn/moving_mean"].numpy()[2],
                             0.01 * pre(steps[-1], qx).mean(0), rtol=1e-12)
  np.testing.assert_array_equal(new_state["bn/moving_mean"].numpy()[:2], mean[:2])
  # Inference mode at the query pass (row K = 2) normalises with that row, debiased by
  # its one update: the query batch's own moments.
  np.testing.assert_array_equal(new_state["bn/updates"].numpy(), [1.0, 1.0, 1.0, 0.0])
  out = functional.functional_call(model, steps[-1], qx, training=False, state=new_state)
  h = pre(steps[-1], qx)
  m, v = h.mean(0), h.var(0)
  bn = ((h - m) / np.sqrt(v + 1e-3) * steps[-1]["bn/gamma"].numpy()[0]
        + steps[-1]["bn/beta"].numpy()[0])  # (adapted; one row without per-step weights)
  expected = np.tanh(bn) @ steps[-1]["head/kernel"].numpy() + steps[-1]["head/bias"].numpy()
  np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("recompute", [False, True])
def test_per_step_bn_weights_meta_gradient_matches_finite_differences(recompute):
  """Second order through per-step gamma / beta (not adapted: MAML++) and per-step
  statistics: the meta-gradient equals central finite differences; every row of gamma
  used (steps 0, 1 and the query pass) gets a gradient."""
  model = per_step_net(rows=3, weights=True)
  keras.utils.set_random_seed(0)
  for v in model.get_layer("bn").trainable_variables:
    v.assign(np.random.default_rng(1).normal(size=v.shape) * 0.3 + v.numpy())
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.5,
                            inner_steps=2, adapt="body/*,head/*", recompute=recompute)
  sx, sy, qx, qy = classification_task(6)

  def f():
    fast, state = learner.adapt(sx, sy)
    return learner.loss_fn(qy, functional.functional_call(model, fast, qx, training=True,
                                                           state=state))
  variables = model.trainable_variables
  with tf.GradientTape() as tape:
    loss = f()
  grads = tape.gradient(loss, variables)
  fd = central_fd(tf.function(f), variables)  # Traced: the same values, less CPU.
  for v, g, n in zip(variables, grads, fd):
    np.testing.assert_allclose(g.numpy(), n, rtol=1e-5, atol=1e-8, err_msg=v.path)
  gamma = grads[[v.path for v in variables].index("psnet/bn/gamma")].numpy()
  assert np.all(np.abs(gamma).max(axis=1) > 1e-6)


# ------------------------------------------- the Omniglot configs, tiny, through the loop.

def _tiny(name, data_dir):
  import importlib.util
  import pathlib
  from hypernet import config_lib
  path = pathlib.Path(__file__).resolve().parents[1] / "configs" / f"{name}.py"
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  c = module.get_config()
  config_lib.validate(c)
  assert c.meta.num_ways == 5 and c.meta.num_shots == 1 and c.meta.eval_episodes == 600
  assert "images_background_small1.zip" in c.data.omniglot_zips
  c.data.data_dir = str(data_dir / "omniglot")
  c.model.conv_widths = (8, 8)
  c.batch_size, c.eval_batch_size = 2, 4
  c.meta.num_queries = c.meta.eval_queries = 1
  c.meta.eval_episodes = 4
  c.meta.inner_steps = c.meta.eval_inner_steps = 2
  c.num_steps, c.log_every, c.eval_every, c.checkpoint_every = 2, 1, 0, 2
  return c


def test_omniglot_mamlpp_config_trains_evaluates_and_restores_per_step_state(
    data_dir, tmp_path):
  from hypernet.training import loop
  c = _tiny("omniglot_mamlpp", data_dir)
  assert c.meta.bn_mode == "transductive" and c.meta.per_step_bn_weights
  c.meta.bn_mode = "per_step"  # the per-step running statistics, kept and restored
  c.meta.first_order_steps = 1  # step 0 first order, step 1 second order
  c.meta.msl_anneal_steps = 2
  trainer = loop.Trainer(c, str(tmp_path))
  task = trainer.task
  assert task.learner.lslr and task.learner.multi_step_loss and task.learner.recompute
  assert task.bn_mode == "per_step"
  bn = task.target.get_layer("bn1")
  assert tuple(bn.moving_mean.shape) == (3, 8) and tuple(bn.gamma.shape) == (3, 8)
  metrics, first_bad = trainer.train_chunk(trainer.train_iterator(0), 2)
  assert first_bad == -1 and np.isfinite(metrics["loss"])
  moved = bn.moving_mean.numpy()
  assert np.all(np.abs(moved).max(axis=1) > 0)  # every row (2 steps + query) moved
  rates = {p: v.numpy() for p, v in task.learner.step_lrs.items()}
  assert any(np.abs(r - 0.1).max() > 0 for r in rates.values())  # LSLR trained
  ev = trainer.evaluate()
  assert 0.0 <= ev["accuracy"] <= 1.0 and ev["accuracy_ci95"] >= 0.0
  trainer.step.assign(2)
  trainer.manager.save(checkpoint_number=2)
  restored = loop.Trainer(c, str(tmp_path))
  assert restored.restore() == 2
  np.testing.assert_array_equal(restored.task.target.get_layer("bn1").moving_mean.numpy(),
                                moved)
  for p, r in rates.items():
    np.testing.assert_array_equal(restored.task.learner.step_lrs[p].numpy(), r)


def test_omniglot_imaml_config_trains_and_evaluates(data_dir, tmp_path):
  from hypernet.training import loop
  c = _tiny("omniglot_imaml", data_dir)
  c.meta.cg_steps = 2
  trainer = loop.Trainer(c, str(tmp_path))
  assert trainer.task.learner.proximal_lambda == 2.0 and trainer.task.learner.cg_steps == 2
  before = [v.numpy() for v in trainer.variables]
  metrics, first_bad = trainer.train_chunk(trainer.train_iterator(0), 2)
  assert first_bad == -1 and np.isfinite(metrics["loss"])
  # Every kernel moved (a conv bias before BatchNorm has no gradient in training mode).
  assert all(np.abs(a - v.numpy()).max() > 0 for a, v in zip(before, trainer.variables)
             if "kernel" in v.path)
  ev = trainer.evaluate()
  assert 0.0 <= ev["accuracy"] <= 1.0 and ev["accuracy_ci95"] >= 0.0


@pytest.mark.parametrize("bn_mode", ["transductive", "inference"])
def test_bn_mode_at_meta_test(bn_mode):
  """config.meta.bn_mode: at meta-test the query loss at the initial weights is the
  target's own Keras call in inference mode (running statistics: each query on its own)
  for "inference", in training mode (the query set's batch statistics) for
  "transductive"."""
  from hypernet.tasks import meta_learning
  from test_meta_tasks import _digits_config
  c = _digits_config()
  c.meta.bn_mode = bn_mode
  task = meta_learning.MetaLearningTask(c)
  # Running statistics away from their initial values, so that the modes differ.
  for layer in task.target.layers:
    if isinstance(layer, keras.layers.BatchNormalization):
      layer.moving_mean.assign(np.full(layer.moving_mean.shape, 0.3, np.float32))
      layer.moving_variance.assign(np.full(layer.moving_variance.shape, 2.0, np.float32))
  batch = next(iter(task.eval_dataset(c.eval_batch_size)))
  got = task._adapted_meta_batch(batch, 1).per_task["loss_before"].numpy()
  training = bn_mode == "transductive"
  expected = [float(task.learner.loss_fn(qy, task.target(qx, training=training)))
              for qx, qy in zip(batch["query_x"], batch["query_y"])]
  np.testing.assert_allclose(got, expected, rtol=1e-5)
  other = [float(task.learner.loss_fn(qy, task.target(qx, training=not training)))
           for qx, qy in zip(batch["query_x"], batch["query_y"])]
  assert np.abs(np.array(other) - got).max() > 1e-3


def test_derivative_order_annealing_traces_a_first_order_step_without_second_order_work(
    data_dir, tmp_path):
  """The Trainer runs MAML++'s first-order steps from a function of their own: it holds
  fewer convolution gradients than the second-order one (a tensor switch kept both orders
  in one graph, and its first-order steps ran slower than second-order ones); a chunk
  crossing the switch runs both."""
  from hypernet.training import loop
  c = _tiny("omniglot_mamlpp", data_dir)
  c.meta.first_order_steps = 2
  c.num_steps = 3
  split = loop.Trainer(c, str(tmp_path / "split"))
  assert split.task.phase_boundaries() == (2,)
  assert [split.task.phase_at(s) for s in (0, 1, 2)] == ["first_order"] * 2 + [
      "second_order"]
  _, bad = split.train_chunk(split.train_iterator(0), 3)  # one chunk across the switch
  assert bad == -1 and split.current_step() == 3
  assert sorted(split._phase_steps) == ["first_order", "second_order"]  # pylint: disable=protected-access

  def conv_grads(fn):
    cf = fn.get_concrete_function(split.train_iterator(0), tf.constant(1, tf.int64))
    graph = cf.graph.as_graph_def()
    ops = [n.op for f in graph.library.function for n in f.node_def] + [
        n.op for n in graph.node]
    return sum(t.startswith("Conv2DBackprop") for t in ops)

  first = conv_grads(split._phase_steps["first_order"])  # pylint: disable=protected-access
  second = conv_grads(split._phase_steps["second_order"])  # pylint: disable=protected-access
  assert 0 < first < second, (first, second)


def test_per_step_running_statistics_are_debiased_by_their_update_count():
  """Inference reads each row's moving statistics debiased by its update count: after one
  update they are that batch's moments exactly, after three the exponential average of
  three batches renormalised (a meta-learner updates a row once per meta-step: undebiased,
  the variance stayed 0.99^n parts its initial 1 and early evaluations were near chance)."""
  from hypernet.meta import per_step_bn
  rng = np.random.default_rng(0)
  layer = per_step_bn.PerStepBatchNormalization(2, dtype="float64")
  batches = [rng.normal(0.3 * k, 0.02 * (k + 1), size=(6, 4, 4, 3)) for k in range(3)]
  x = rng.normal(size=(2, 4, 4, 3))
  moments = [(b.mean((0, 1, 2)), b.var((0, 1, 2))) for b in batches]
  gamma, beta, eps = 1.0, 0.0, layer.epsilon
  with per_step_bn.step_scope(0):
    layer(tf.constant(batches[0]), training=True)
  with per_step_bn.step_scope(0):
    y = layer(tf.constant(x), training=False).numpy()
  mean, var = moments[0]
  np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + eps) * gamma + beta, rtol=1e-9)
  for b in batches[1:]:
    with per_step_bn.step_scope(0):
      layer(tf.constant(b), training=True)
  weights = np.array([0.01 * 0.99 ** 2, 0.01 * 0.99, 0.01]) / (1 - 0.99 ** 3)
  mean = sum(w * m for w, (m, _) in zip(weights, moments))
  var = sum(w * v for w, (_, v) in zip(weights, moments))
  with per_step_bn.step_scope(0):
    y = layer(tf.constant(x), training=False).numpy()
  np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + eps), rtol=1e-9)
  np.testing.assert_array_equal(layer.updates.numpy(), [3.0, 0.0])
  with per_step_bn.step_scope(1):  # A row never updated reads its initial values.
    np.testing.assert_allclose(layer(tf.constant(x), training=False).numpy(),
                               x / np.sqrt(1 + eps), rtol=1e-9)
