"""Tests for hypernet.numerics.compat: every private hook checks itself at first use.

Each canary is tested by simulating the broken hook (as the portability audit's
simulations did: a private function replaced by a wrong one, or removed); the outcome
must be a fallback to public code with the right values, or one clear error, never a
silently wrong value. Also: the switches' traces, the order of first calls, other
libraries wrapping the same Keras methods, and Keras' moved backend modules.
"""
import json
import logging
import os
import sys
import textwrap
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import forked
from hypernet.core import functional, weight_roles
from hypernet.meta import inner_loop
from hypernet.numerics import compat, fused_norm, plain_bias, second_order
from hypernet.training import distribute

from hypernet.tasks import continual_learning
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXACT = 0.4278768  # LayerNormalization f'' of second_order's docstring example
KERAS_OWN = 0.9404  # the same through tf.nn.moments (the mean's gradient stopped)


@pytest.fixture
def fresh_canaries(monkeypatch):
  """Runs each canary again after the test's simulation, and once more afterwards with
  the real hooks; the modules' fallback flags are restored."""
  names = ["moments", "tape_query", "record_query", "fused_batch_norm", "plain_bias",
           "instance_call", "optimizer_sum", "sublayers", "trace_root", "seed_state",
           "normalize", "convolution_op", "own_variables", "pfor_converters",
           "hparams_config", "symbolic_build", "multi_worker_logs", "backup_progress",
           "adam_slots"]
  for name in names:
    compat.reset_canary(name)
  monkeypatch.setattr(fused_norm, "_unavailable", None)
  monkeypatch.setattr(plain_bias, "_unavailable", None)
  monkeypatch.setattr(compat, "_warned", set())
  yield
  for name in names:
    compat.reset_canary(name)


def _ln_model():
  inp = keras.Input((3,))
  return keras.Model(inp, keras.layers.LayerNormalization(epsilon=1e-3)(inp))


def _ln_second_derivative(model) -> float:
  c = tf.constant([0.3, -1.2, 0.7])
  a = tf.constant(0.2)
  with tf.GradientTape() as t2:
    t2.watch(a)
    with tf.GradientTape() as t1:
      t1.watch(a)
      y = functional.functional_call(model, None, tf.stack([a, 0.5, -1.0])[None])
      f = tf.reduce_sum(y[0] * c)
    g = t1.gradient(f, a)
  return float(t2.gradient(g, a))


def _bn_model(shape=(4, 4, 3)):
  keras.utils.set_random_seed(0)
  inp = keras.Input(shape)
  bn = keras.layers.BatchNormalization(name="bn", momentum=0.8)
  model = keras.Model(inp, bn(inp))
  rng = np.random.default_rng(1)
  for v in bn.weights:
    v.assign(rng.uniform(0.5, 1.5, v.shape).astype(v.dtype))
  return model


def _ops(fn, *args):
  """Op types of ``fn``'s trace and of every function in it (branches, gradients)."""
  graph = tf.function(fn, autograph=False).get_concrete_function(*args).graph.as_graph_def()
  found = {n.op for n in graph.node}
  for f in graph.library.function:
    found |= {n.op for n in f.node_def}
  return found


# Scripts that need a process of their own (first calls, process-wide installs), by name;
# each test's is defined above it.
_FRESH_SCRIPTS = {}

@pytest.fixture(scope="module")
def fresh_processes(tmp_path_factory):
  """Runs each script of ``_FRESH_SCRIPTS`` in a fresh process (a child forked before any
  hypernet import, one launch of Python for all): ``{name: (status, stdout, stderr)}``."""
  folder = tmp_path_factory.mktemp("fresh")
  runs = {name: (textwrap.dedent(code), {}, []) for name, code in _FRESH_SCRIPTS.items()}
  return forked.run_each(folder, runs, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), 600)


def _run_script(fresh_processes, name: str) -> dict:
  """The JSON object ``_FRESH_SCRIPTS[name]`` printed last in its fresh process."""
  status, out, err = fresh_processes[name]
  assert status == 0, err[-3000:]
  return json.loads(out.strip().splitlines()[-1])


# --- the canaries, with the hook broken ---------------------------------------------

def test_all_canaries_pass_on_this_install():
  assert _ln_second_derivative(_ln_model()) == pytest.approx(EXACT, abs=1e-6)
  with plain_bias.plain_bias_scope(), fused_norm.fused_batch_norm_scope():
    pass
  assert compat.possible_gradient_types() is not None
  assert compat.should_record_backprop() is not None
  report = compat.canary_report()
  for name in ("moments", "tape_query", "record_query", "fused_batch_norm", "plain_bias",
               "trace_root"):
    assert report[name] is None, (name, report[name])


def test_moments_hook_no_longer_reached_raises_one_clear_line(monkeypatch, fresh_canaries):
  # A Keras that inlines tf.nn.moments: the replaced _compute_moments is never called,
  # and second derivatives through LayerNorm would be Keras' own (0.9404), silently.
  _inline_keras_moments(monkeypatch)
  with pytest.raises(compat.UnsupportedVersionError) as error:
    _ln_second_derivative(_ln_model())
  message = str(error.value)
  assert "\n" not in message and "Supported versions" in message
  assert "LayerNormalization f'' 0.940" in message  # Keras' own: 0.9404


def _dense_model():
  inp = keras.Input((3,))
  model = keras.Model(inp, keras.layers.Dense(2, name="d")(inp))
  model.get_layer("d").kernel.assign([[1.0, 0.0], [2.0, -1.0], [0.0, 3.0]])
  model.get_layer("d").bias.assign([0.5, -0.5])
  return model


def _inline_keras_moments(monkeypatch):
  # A Keras that inlines tf.nn.moments: the replaced _compute_moments is never called.
  second_order._install()  # pylint: disable=protected-access  (the hook in place first)
  # Its stop-gradient through the mean written out: TensorFlow >= 2.22's own
  # tf.nn.moments keeps that gradient (a Keras inlining it there would be exact).
  def inlined(x, axes, keepdims=False, synchronized=False):
    del synchronized
    mean = tf.reduce_mean(x, axes, keepdims=True)
    var = tf.reduce_mean(tf.square(x - tf.stop_gradient(mean)), axes, keepdims=keepdims)
    return (mean if keepdims else tf.squeeze(mean, axes)), var

  nn = compat.keras_backend("nn", "moments")
  # Defined as if in Keras' own module (hypernet looks for _compute_moments beside it).
  inlined = types.FunctionType(inlined.__code__, vars(nn), "moments", inlined.__defaults__)
  monkeypatch.setattr(nn, "moments", inlined)
  compat.reset_canary("moments")


def test_failed_moments_canary_blocks_only_second_order(monkeypatch, fresh_canaries, caplog):
  _inline_keras_moments(monkeypatch)
  model = _dense_model()
  x = tf.constant([[1.0, 2.0, 3.0]])
  kernel = tf.constant([[1.0, 0.0], [2.0, -1.0], [0.0, 3.0]])
  with caplog.at_level(logging.WARNING):
    with tf.GradientTape() as tape:
      tape.watch(kernel)
      y = functional.functional_call(model, {"d/kernel": kernel}, x)
      loss = tf.reduce_sum(y * tf.constant([[1.0, 2.0]]))
    grad = tape.gradient(loss, kernel)
    functional.functional_call(model, None, x)  # again: no second warning
  np.testing.assert_allclose(y.numpy(), [[5.5, 6.5]])
  np.testing.assert_allclose(grad.numpy(), [[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
  assert caplog.text.count("First-order training is unaffected") == 1
  assert "Supported versions" not in caplog.text
  # Nested tapes through a model without a normalisation layer: nothing to refuse.
  with tf.GradientTape() as outer:
    outer.watch(kernel)
    with tf.GradientTape() as inner:
      inner.watch(kernel)
      f2 = tf.reduce_sum(tf.square(functional.functional_call(model, {"d/kernel": kernel}, x)))
    g = tf.reduce_sum(inner.gradient(f2, kernel))
  np.testing.assert_allclose(outer.gradient(g, kernel).numpy(),
                             [[12.0, 12.0], [24.0, 24.0], [36.0, 36.0]])
  # A second-order learner refuses at construction, in one line; first order is built.
  mse = lambda y, p: tf.reduce_mean(tf.square(y - p))
  with pytest.raises(compat.UnsupportedVersionError) as error:
    inner_loop.MAML(model, mse)
  message = str(error.value)
  assert "\n" not in message and message.startswith("Second-order MAML needs exact second")
  assert "LayerNormalization f'' 0.940" in message and "first_order=True" in message
  inner_loop.MAML(model, mse, first_order=True)


def test_wrong_tape_query_falls_back_to_exact_moments(monkeypatch, fresh_canaries, caplog):
  # A TensorFlow whose tape query answers "first order only" under nested tapes: Keras'
  # cheap moments would be kept and f'' would be 0.9404 without a word.
  monkeypatch.setattr(compat, "_tape_query", lambda: (lambda tensors: 1))
  with caplog.at_level(logging.WARNING):
    assert _ln_second_derivative(_ln_model()) == pytest.approx(EXACT, abs=1e-6)
  assert compat.possible_gradient_types() is None
  assert "stay exact everywhere" in caplog.text


def test_fused_kernel_convention_change_falls_back_to_keras_batch_norm(
    monkeypatch, fresh_canaries, caplog):
  # A TensorFlow whose FusedBatchNormV3 returns the biased batch variance: hypernet's
  # Bessel rescaling would make the moving variance wrong, silently.
  real = tf.raw_ops.FusedBatchNormV3

  def biased(**kwargs):
    out = list(real(**kwargs))
    n = float(np.prod(kwargs["x"].shape[:3]))
    out[2] = out[2] * (n - 1.0) / n
    return tuple(out)

  monkeypatch.setattr(tf.raw_ops, "FusedBatchNormV3", biased)
  model = _bn_model()
  x = tf.constant(np.random.default_rng(2).normal(1.0, 2.0, (6, 4, 4, 3)), tf.float32)
  call = lambda x: functional.functional_call(model, {}, x, training=True, return_state=True)
  with caplog.at_level(logging.WARNING):
    y, state = call(x)
  assert "does not match" in caplog.text and "moving variance" in caplog.text
  assert not fused_norm.is_active() and "FusedBatchNormV3" not in _ops(call, x)
  # Keras' own values and moving statistics (computed here without hypernet).
  mean, var = np.mean(x.numpy(), (0, 1, 2)), np.var(x.numpy(), (0, 1, 2))
  bn = model.get_layer("bn")
  want = (bn.gamma.numpy() * (x.numpy() - mean) / np.sqrt(var + bn.epsilon)
          + bn.beta.numpy())
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(state["bn/moving_variance"].numpy(),
                             0.8 * bn.moving_variance.numpy() + 0.2 * var, rtol=1e-5)


def test_plain_bias_follows_keras_add_where_keras_refuses(monkeypatch):
  # Keras 3.16's add refuses [2, 3, 5] + [3] (not a numpy broadcast); a copy of 3.15's
  # bias_add shortcut would still add along axis 1 inside the scope.
  plain_bias._install()
  real = plain_bias._original_add  # pylint: disable=protected-access

  def numpy_add(x1, x2):
    tf.broadcast_static_shape(tf.TensorShape(x1.shape), tf.TensorShape(x2.shape))
    return real(x1, x2)

  monkeypatch.setattr(plain_bias, "_original_add", numpy_add)
  x1, x2 = tf.ones([2, 3, 5]), tf.ones([3])
  with pytest.raises(ValueError):
    keras.ops.add(x1, x2)
  with plain_bias.plain_bias_scope():
    assert plain_bias.is_active()
    with pytest.raises(ValueError):
      keras.ops.add(x1, x2)
    # A Dense bias still becomes a plain add, with Keras' values.
    y = keras.ops.add(tf.ones([2, 5]), tf.range(5, dtype=tf.float32))
  np.testing.assert_array_equal(y.numpy(), np.ones([2, 5]) + np.arange(5))


def test_plain_bias_differing_from_keras_add_falls_back(monkeypatch, fresh_canaries, caplog):
  # A Keras whose add computes something else for a bias (here: plus one): the plain add
  # would keep the old semantics inside meta-learners' calls.
  plain_bias._install()
  real = plain_bias._original_add  # pylint: disable=protected-access
  monkeypatch.setattr(plain_bias, "_original_add", lambda x1, x2: real(x1, x2) + 1.0)
  compat.reset_canary("plain_bias")
  with caplog.at_level(logging.WARNING), plain_bias.plain_bias_scope():
    assert not plain_bias.is_active()
    y = keras.ops.add(tf.zeros([2, 3]), tf.ones([3]))
  assert "differ from Keras" in caplog.text
  np.testing.assert_array_equal(y.numpy(), np.full([2, 3], 2.0))  # Keras' (changed) own


def test_instance_call_ignored_raises_for_overrides(monkeypatch, fresh_canaries):
  # A Keras that calls the class's call, not the instance attribute: overrides= would
  # silently do nothing (ablations showing no effect).
  inp = keras.Input((2,))
  model = keras.Model(inp, keras.layers.Dense(1, name="d")(inp))
  monkeypatch.setattr(keras.layers.Dense, "__call__",
                      lambda self, *a, **k: type(self).call(self, *a))
  with pytest.raises(compat.UnsupportedVersionError, match="instance-level call"):
    functional.functional_call(model, None, tf.ones([1, 2]),
                               overrides={"d": lambda h: h + 1.0})


def _keras_sums_elsewhere(monkeypatch):
  # A Keras that sums over replicas without _all_reduce_sum_gradients: switching that
  # method off would leave the sum in place, and the step would sum twice (x replicas).
  from keras.src.backend.tensorflow import optimizer as tf_optimizer  # pylint: disable=g-import-not-at-top

  def update_step(self, grads, trainable_variables, learning_rate):
    variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
    tf.__internal__.distribute.interim.maybe_merge_call(
        self._distributed_tf_update_step, self._distribution_strategy,
        list(zip(grads, variables)), learning_rate)

  monkeypatch.setattr(tf_optimizer.TFOptimizer, "_backend_update_step", update_step)


def _keras_adam_keeps_slots_elsewhere(monkeypatch):
  """A Keras whose Adam holds its slots under other names (its own update finds them)."""
  adam = keras.optimizers.Adam
  build, update_step = adam.build, adam.update_step

  def moved_build(self, var_list):
    built = self.built
    build(self, var_list)
    if not built:
      self._moved = (self.__dict__.pop("_momentums"), self.__dict__.pop("_velocities"))

  def moved_update_step(self, gradient, variable, learning_rate):
    self.__dict__["_momentums"], self.__dict__["_velocities"] = self._moved
    try:
      return update_step(self, gradient, variable, learning_rate)
    finally:
      del self.__dict__["_momentums"], self.__dict__["_velocities"]

  monkeypatch.setattr(adam, "build", moved_build)
  monkeypatch.setattr(adam, "update_step", moved_update_step)


def test_adam_slots_elsewhere_fused_adam_runs_keras_update(monkeypatch, fresh_canaries,
                                                           caplog):
  """hn.FusedAdam on a Keras that keeps Adam's slots elsewhere: Keras' own update, equal
  to keras.optimizers.Adam's bit for bit, with one warning (speed only)."""
  from hypernet.numerics.fused_adam import FusedAdam  # pylint: disable=g-import-not-at-top
  _keras_adam_keeps_slots_elsewhere(monkeypatch)

  def train(optimizer):
    v = tf.Variable([1.0, -2.0, 0.5])
    for k in range(3):
      optimizer.apply([tf.constant([0.3, -1.0, 2.0]) * (k + 1)], [v])
    return v.numpy()
  with caplog.at_level(logging.WARNING):
    fused = train(FusedAdam(0.1))
  np.testing.assert_array_equal(fused, train(keras.optimizers.Adam(0.1)))
  assert "keeps Adam's slot variables elsewhere" in caplog.text
  assert compat.canary_report()["adam_slots"].startswith("keras.optimizers.Adam has no")


def test_optimizer_summing_elsewhere_refuses_only_several_replicas(monkeypatch, fresh_canaries):
  _keras_sums_elsewhere(monkeypatch)
  # One device: Keras' own sum over one replica is the gradient itself; training runs.
  optimizer = distribute.apply_reduced_gradients(keras.optimizers.SGD(0.1), 1)
  v = keras.Variable([1.0, 2.0])
  optimizer.apply([tf.constant([1.0, -3.0])], [v])
  np.testing.assert_allclose(v.numpy(), [0.9, 2.3], rtol=1e-6)
  assert compat.canary_report()["optimizer_sum"] is not None
  # Two replicas (two logical CPUs, tests/conftest.py): refused, in one line.
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  with strategy.scope(), pytest.raises(compat.UnsupportedVersionError) as error:
    distribute.apply_reduced_gradients(keras.optimizers.SGD(0.1))
  message = str(error.value)
  assert "\n" not in message and "would sum twice over 2 replicas" in message


def test_missing_record_query_warns_that_the_guard_is_off(monkeypatch, fresh_canaries, caplog):
  monkeypatch.setattr(compat, "_record_query", lambda: None)
  x = tf.constant(1.0)
  with caplog.at_level(logging.WARNING), tf.GradientTape() as tape:
    tape.watch(x)
    assert not inner_loop._is_recorded(x * 2.0)  # pylint: disable=protected-access
  assert "cannot check that the outer tape" in caplog.text


def test_layer_tracking_change_falls_back_to_attributes(monkeypatch, fresh_canaries, caplog):
  monkeypatch.setattr(compat, "_flatten",
                      lambda layer, get: [layer])  # a Keras whose _layers is gone
  inner = keras.Sequential([keras.layers.Dense(2, name="d1")], name="inner")
  with caplog.at_level(logging.WARNING):
    found = compat.sublayers(inner)
  assert [l.name for l in found] == ["d1"]
  assert "layer tracking changed" in caplog.text


def test_trace_root_failure_warns_and_keeps_one_root(monkeypatch, fresh_canaries, caplog):
  # A TensorFlow without FuncGraph.outer_graph: traces cannot be told apart.
  monkeypatch.setattr(compat, "_graph_root_walk",
                      lambda: None if tf.executing_eagerly() else tf.compat.v1.get_default_graph())
  with caplog.at_level(logging.WARNING):
    assert compat.trace_root() is None
  assert "cannot tell traces apart" in caplog.text


def test_seed_state_layout_change_raises_under_replicas(monkeypatch, fresh_canaries):
  # A Keras that names or lays out the seed state differently: replicas would draw the
  # same dropout masks without a word.
  assert compat._seed_state_canary() is None  # pylint: disable=protected-access
  real = keras.random.SeedGenerator.__init__

  def renamed(self, *args, **kwargs):
    real(self, *args, **kwargs)
    self.state.assign(tf.reverse(self.state, [0]))  # [counter, seed]

  monkeypatch.setattr(keras.random.SeedGenerator, "__init__", renamed)
  with pytest.raises(compat.UnsupportedVersionError, match="same dropout masks"):
    compat.check_seed_state()


def test_speed_only_fallbacks_warn_calmly(monkeypatch, fresh_canaries, caplog):
  # BatchNormalization.call / MaxPooling2D.call / the backend add gain a parameter: the
  # fused paths are off, and the warnings say that only speed is lost.
  from hypernet.numerics import norm_relu_pool  # pylint: disable=g-import-not-at-top

  def changed(owner, name, dispatcher, parameters=None):
    raise compat.unsupported(f"Keras {keras.__version__}'s {name} takes (self, inputs, "
                             "extra), not (self, inputs) as hypernet expects")

  monkeypatch.setattr(compat, "install_dispatcher", changed)
  monkeypatch.setattr(norm_relu_pool, "_unavailable", None)
  with caplog.at_level(logging.WARNING):
    assert not fused_norm._install()  # pylint: disable=protected-access
    norm_relu_pool._install()  # pylint: disable=protected-access
    plain_bias._install()  # pylint: disable=protected-access
  assert caplog.text.count("only speed is affected") == 3
  assert "Supported versions" not in caplog.text and "install a Keras" not in caplog.text


def test_dispatcher_names_a_module_owner_without_a_leading_dot():
  module = types.ModuleType("keras_like.ops")
  with pytest.raises(compat.UnsupportedVersionError) as error:
    compat.install_dispatcher(module, "_missing", lambda: None)
  assert " has no keras_like.ops._missing, which" in str(error.value)
  assert error.value.detail.endswith("which hypernet replaces inside its calls")


def test_normalize_hook_parameter_change_is_not_installed():
  # A Keras whose _normalize gains a parameter: installing would make every
  # keras.ops.normalize call of the process fail with a TypeError.
  module = types.ModuleType("keras_like.nn")
  def _normalize(x, axis=-1, order=2, epsilon=None, new=None):
    return x
  module._normalize = _normalize
  module.normalize = lambda x: _normalize(x)
  module.normalize.__module__ = "keras_like.nn"
  original = compat.defining_module
  try:
    compat.defining_module = lambda fn: module
    with pytest.raises(compat.UnsupportedVersionError, match=r"takes \(x, axis, order, "
                       r"epsilon, new\), not \(x, axis, order, epsilon\)"):
      compat.normalize_hook(lambda x, axis=-1, order=2, epsilon=None: x)
  finally:
    compat.defining_module = original
  assert module._normalize is _normalize


def test_normalize_hook_no_longer_reached_warns_and_keeps_keras_normalize(
    monkeypatch, fresh_canaries, caplog):
  # A Keras whose keras.ops.normalize computes the norm inline (not through _normalize):
  # UnitNormalization keeps Keras' own derivatives, with one warning saying what.
  second_order._install()  # pylint: disable=protected-access
  real = second_order._original_normalize  # pylint: disable=protected-access
  monkeypatch.setattr(keras.ops, "normalize", lambda x, axis=-1, order=2, epsilon=None:
                      real(x, axis=axis, order=order, epsilon=epsilon))
  compat.reset_canary("normalize")
  inp = keras.Input((2,))
  dense = keras.layers.Dense(2, use_bias=False, kernel_initializer="identity")
  model = keras.Model(inp, keras.layers.UnitNormalization()(dense(inp)))
  with caplog.at_level(logging.WARNING):
    y = functional.functional_call(model, None, tf.constant([[3.0, 4.0]]))
  np.testing.assert_allclose(y.numpy(), [[0.6, 0.8]], rtol=1e-6)
  assert "keras.ops.normalize keeps Keras" in caplog.text and "NaN" in caplog.text
  assert "has no test_compat._normalize" in caplog.text
  # Where the module still has a _normalize that nothing calls, the canary says so, if
  # Keras' own second derivative at the zero vector is not finite (NaN up to Keras 3.15;
  # Keras 3.16's is finite, and then the canary rightly passes: it checks values).
  x = tf.constant([[0.0, 0.0]], tf.float64)
  with tf.GradientTape() as t2:
    t2.watch(x)
    with tf.GradientTape() as t1:
      t1.watch(x)
      f = tf.reduce_sum(real(x, axis=-1, order=2, epsilon=None) * [[0.3, -1.2]])
    h = tf.reduce_sum(t1.gradient(f, x) * [[0.3, -1.2]])
  keras_finite = bool(np.all(np.isfinite(t2.gradient(h, x).numpy())))
  reason = second_order._normalize_canary()  # pylint: disable=protected-access
  assert (reason is None) if keras_finite else ("no longer reaches its _normalize" in reason)


def test_layer_of_op_does_not_need_keras_private_flatten_layers(monkeypatch):
  inner = keras.Sequential([keras.layers.Dense(2, name="head")], name="block")
  inp = keras.Input((3,))
  model = keras.Model(inp, inner(keras.layers.Dense(3, name="stem")(inp)), name="net")
  def gone(*args, **kwargs):
    raise AttributeError("_flatten_layers")
  monkeypatch.setattr(keras.layers.Layer, "_flatten_layers", gone)
  assert second_order.layer_of_op(model, "net/block/head/MatMul") == "block/head"
  assert second_order.layer_of_op(model, "net/stem_1/Add") == "stem"
  assert second_order.layer_of_op(model, "other/MatMul") == ""


def test_convolution_op_ignored_refuses_im2col_in_one_line(monkeypatch, fresh_canaries):
  # A Keras whose Conv2D calls the class's convolution_op: im2col would do nothing.
  from hypernet.hypernetworks import batched  # pylint: disable=g-import-not-at-top
  inp = keras.Input((4, 4, 1))
  model = keras.Model(inp, keras.layers.Conv2D(2, 3, name="c")(inp))
  real = keras.layers.Conv2D.call
  monkeypatch.setattr(keras.layers.Conv2D, "call", lambda self, inputs: keras.ops.add(
      type(self).convolution_op(self, inputs, self.kernel), self.bias))
  del real
  weights = {"c/kernel": tf.ones([2, 3, 3, 1, 2])}
  with pytest.raises(compat.UnsupportedVersionError) as error:
    batched.batched_functional_call(model, weights, tf.ones([1, 4, 4, 1]), shared_inputs=True,
                                    conv="im2col")
  message = str(error.value)
  assert "\n" not in message and "parallel='map_fn'" in message
  assert "gives 0.0, not 5.0" in compat.canary_report()["convolution_op"] or \
      "not 5.0" in compat.canary_report()["convolution_op"]


def test_pfor_converter_change_falls_back_to_im2col(monkeypatch, fresh_canaries, caplog):
  # A TensorFlow whose pfor _create_op builds something else: batched kernels would be
  # convolved wrongly; the canary compares with a loop and im2col takes over.
  from hypernet.hypernetworks import batched  # pylint: disable=g-import-not-at-top
  real = compat.pfor_create_op
  monkeypatch.setattr(compat, "pfor_create_op", lambda op_type, inputs, dtypes, attrs: real(
      op_type, [inputs[0], inputs[1] * 2.0], dtypes, attrs))
  monkeypatch.setattr(batched, "_PROBED", {})
  with caplog.at_level(logging.WARNING):
    assert not batched.grouped_conv_available(tf.float32)
  assert compat.canary_report()["pfor_converters"] == \
      "Conv2D batched over kernels differs from a loop"
  assert "batch by im2col (only speed is affected)" in caplog.text


def test_own_variables_through_keras_public_save(monkeypatch, fresh_canaries):
  layer = compat._OwnVariableCanaryLayer()  # pylint: disable=protected-access
  layer.build((1, 2))
  want = list(layer._trainable_variables) + list(layer._non_trainable_variables)  # pylint: disable=protected-access
  assert [id(v) for v in compat.own_variables(layer)] == [id(v) for v in want]
  # A Keras that saves copies: hypernet's models could not be reloaded; one line.
  real = keras.layers.Layer.save_own_variables
  def copies(self, store):
    real(self, store)
    for key in list(store.keys()):
      store[key] = np.asarray(store[key])
  monkeypatch.setattr(keras.layers.Layer, "save_own_variables", copies)
  compat.reset_canary("own_variables")
  with pytest.raises(compat.UnsupportedVersionError, match="cannot be saved or loaded"):
    compat.own_variables(layer)


def test_seed_states_not_saved_when_keras_changes_their_layout(monkeypatch, fresh_canaries,
                                                              caplog):
  keras.utils.set_random_seed(0)
  inp = keras.Input((3,))
  model = keras.Model(inp, keras.layers.Dropout(0.5, seed=3)(inp))
  assert [v.path.rsplit("/", 1)[-1] for v in compat.seed_states(model)] == \
      ["seed_generator_state"]
  real = keras.random.SeedGenerator.__init__
  def renamed(self, *args, **kwargs):
    real(self, *args, **kwargs)
    self.state.assign(tf.reverse(self.state, [0]))  # [counter, seed]
  monkeypatch.setattr(keras.random.SeedGenerator, "__init__", renamed)
  compat.reset_canary("seed_state")
  with caplog.at_level(logging.WARNING):
    assert compat.seed_states(model) == []
  assert "dropout streams, which restart when reloaded" in caplog.text


def test_hparams_config_marks_key_fields_or_falls_back(monkeypatch, fresh_canaries, caplog):
  from tensorboard.plugins.hparams import plugin_data_pb2  # pylint: disable=g-import-not-at-top
  hp = compat.hparams_api()
  read = lambda pb: [(i.name, i.differs) for i in plugin_data_pb2.HParamsPluginData.FromString(
      pb.value[0].metadata.plugin_data.content).experiment.hparam_infos]
  args = ([hp.HParam("lr"), hp.HParam("seed")], [hp.Metric("accuracy")])
  assert read(compat.hparams_config_summary(*args, first=["lr"])) == [
      ("lr", True), ("seed", False)]
  # A TensorBoard without the plugin-data proto: the table unmarked, one warning.
  monkeypatch.setattr(compat, "_hparams_plugin_data", lambda: None)
  compat.reset_canary("hparams_config")
  with caplog.at_level(logging.WARNING):
    pb = compat.hparams_config_summary(*args, first=["lr"])
  assert read(pb) == [("lr", False), ("seed", False)]
  assert "cannot mark the key hyperparameters" in caplog.text


# --- public names instead of private ones --------------------------------------------

def test_learning_rate_kept_when_keras_renames_its_private_attribute():
  # The audit's simulation: the learning-rate variable under another private name. Read
  # through the private name, the reset zeroed it (training after task 1 stopped).
  v = keras.Variable([1.0, 2.0])
  opt = keras.optimizers.Adam(1e-3)
  opt.build([v])
  lr = opt.learning_rate
  opt.__dict__["_lr_renamed"] = opt.__dict__.pop("_learning_rate")
  opt.__class__ = type("RenamedAdam", (keras.optimizers.Adam,),
                       {"learning_rate": property(lambda self: self._lr_renamed)})
  opt.variables[-1].assign([5.0, 5.0])
  continual_learning._reset_optimizer_slots(opt)  # pylint: disable=protected-access
  assert float(lr.numpy()) == pytest.approx(1e-3)
  assert not np.any(opt.variables[-1].numpy())


def test_kernel_fans_found_when_keras_renames_its_private_attribute():
  # Keras keeps Dense's kernel as "_kernel" behind a public property; matched by that
  # private name, a rename made it "other" and changed hypernetwork init silently.
  class RenamedDense(keras.layers.Dense):
    kernel = property(lambda self: self.__dict__["_w" if "_w" in self.__dict__ else "_kernel"])

  layer = RenamedDense(5, name="dense")
  inp = keras.Input((7,))
  model = keras.Model(inp, layer(inp))
  layer.__dict__["_w"] = layer.__dict__.pop("_kernel")
  roles = weight_roles.weight_roles(model)
  assert tuple(roles["dense/kernel"][:3]) == ("kernel", 7, 5)
  assert tuple(roles["dense/bias"][:3]) == ("bias", 7, 5)


def test_conv_lstm_kernels_found_through_the_public_layer():
  inp = keras.Input((4, 6, 2))
  model = keras.Model(inp, keras.layers.ConvLSTM1D(3, 3, name="lstm")(inp))
  roles = weight_roles.weight_roles(model)
  # kernel [3, 2, 4 * 3]: fans (3 * 2, 3 * 3) per gate; recurrent [3, 3, 12]: (9, 9).
  kernel = [p for p in roles if p.endswith("/kernel") and "recurrent" not in p]
  recurrent = [p for p in roles if p.endswith("recurrent_kernel")]
  assert len(kernel) == 1 and len(recurrent) == 1, list(roles)
  assert tuple(roles[kernel[0]][:3]) == ("kernel", 6, 9)
  assert tuple(roles[recurrent[0]][:3]) == ("kernel", 9, 9)


def test_backend_module_found_in_the_keras_316_layout(monkeypatch):
  # Keras 3.16 moved keras.src.backend.tensorflow.{nn,numpy,core} under .ops.
  real = compat.keras_backend("nn", "moments")
  package = types.ModuleType("keras.src.backend.tensorflow.ops")
  package.nn = real
  import keras.src.backend as backend  # pylint: disable=g-import-not-at-top
  import keras.src.backend.tensorflow as tf_backend  # pylint: disable=g-import-not-at-top
  # (On Keras >= 3.16 these attributes are already gone: nothing to delete.)
  monkeypatch.delattr(backend, "nn", raising=False)
  monkeypatch.delattr(tf_backend, "nn", raising=False)
  monkeypatch.setitem(sys.modules, "keras.src.backend.nn", None)
  monkeypatch.setitem(sys.modules, "keras.src.backend.tensorflow.nn", None)
  monkeypatch.setitem(sys.modules, "keras.src.backend.tensorflow.ops", package)
  monkeypatch.setattr(tf_backend, "ops", package, raising=False)
  assert compat.keras_backend("nn", "moments") is real
  monkeypatch.setattr(package, "nn", None)
  monkeypatch.setitem(sys.modules, "keras.src.backend.tensorflow.ops.nn", None)
  with pytest.raises(compat.UnsupportedVersionError) as error:
    compat.keras_backend("nn", "moments")
  assert "\n" not in str(error.value) and "nn.moments" in str(error.value)


_FRESH_SCRIPTS["keras_316_layout"] = """
    import importlib, json, sys, types
    import keras, tensorflow as tf
    import keras.src.backend.tensorflow as tfb
    ops = types.ModuleType("keras.src.backend.tensorflow.ops")
    for name in ("nn", "numpy", "core"):
      if hasattr(tfb, name):  # Keras <= 3.15; on >= 3.16 the layout is already the new one.
        module = getattr(tfb, name)
        delattr(tfb, name)
      else:
        module = importlib.import_module("keras.src.backend.tensorflow.ops." + name)
      setattr(ops, name, module)
      sys.modules["keras.src.backend.tensorflow.ops." + name] = module
      sys.modules["keras.src.backend.tensorflow." + name] = None
    sys.modules["keras.src.backend.tensorflow.ops"] = ops
    tfb.ops = ops
    import hypernet.meta  # imported these modules by path
    from hypernet.core import functional
    from hypernet.numerics import compat, plain_bias
    inp = keras.Input((3,))
    model = keras.Model(inp, keras.layers.LayerNormalization(epsilon=1e-3)(inp))
    c = tf.constant([0.3, -1.2, 0.7])
    a = tf.constant(0.2)
    with tf.GradientTape() as t2:
      t2.watch(a)
      with tf.GradientTape() as t1:
        t1.watch(a)
        f = tf.reduce_sum(functional.functional_call(model, None, tf.stack([a, 0.5, -1.0])[None])[0] * c)
      g = t1.gradient(f, a)
    with plain_bias.plain_bias_scope():
      active = plain_bias.is_active()
    print(json.dumps({"f2": float(t2.gradient(g, a)), "plain_bias": active,
                      "canaries": compat.canary_report()}))
"""


def test_hypernet_runs_with_the_keras_316_module_layout(fresh_processes):
  # A fresh process in which the old module paths are gone (as in keras-nightly 3.16):
  # importing them by path failed at `import hypernet.meta` and the first functional call.
  out = _run_script(fresh_processes, "keras_316_layout")
  assert out["f2"] == pytest.approx(EXACT, abs=1e-6)
  assert out["plain_bias"] == (not tf.config.list_logical_devices("GPU"))
  assert all(v is None for v in out["canaries"].values()), out["canaries"]


# --- the switches ---------------------------------------------------------------------

def test_trace_does_not_depend_on_switches_around_its_call(caplog):
  # Before, a tf.function first traced inside `disabled()` kept Keras' BatchNorm for
  # every later call (and one traced outside kept the kernel inside the block).
  model = _bn_model()
  x = tf.ones([2, 4, 4, 3])
  call = lambda x: functional.functional_call(model, None, x, training=True)
  with caplog.at_level(logging.WARNING), fused_norm.disabled():
    traced_inside = _ops(call, x)
  traced_outside = _ops(call, x)
  assert "FusedBatchNormV3" in traced_inside and traced_inside == traced_outside
  assert "fused_norm.disabled() was entered outside the tf.function" in caplog.text


def test_switch_entered_in_the_trace_reaches_its_control_flow_and_nested_functions():
  model = _bn_model()
  x = tf.ones([2, 4, 4, 3])
  nested = lambda: tf.function(  # (a tf.function of its own per caller: see ARCHITECTURE.md)
      lambda x: functional.functional_call(model, None, x, training=True), autograph=False)

  def unfused(x):
    with fused_norm.disabled():
      inner = nested()
      branch = tf.cond(tf.reduce_sum(x) > 0, lambda: inner(x), lambda: x)
      return branch + functional.functional_call(model, None, x, training=True)

  def fused(x):
    inner = nested()
    return tf.cond(tf.reduce_sum(x) > 0, lambda: inner(x), lambda: x)

  assert "FusedBatchNormV3" not in _ops(unfused, x)
  assert "FusedBatchNormV3" in _ops(fused, x)
  # Eagerly, the switch applies to the eager calls it surrounds.
  with fused_norm.fused_batch_norm_scope():
    assert fused_norm.is_active()
    with fused_norm.disabled():
      assert not fused_norm.is_active()


def test_exact_moments_decided_by_the_trace_not_by_its_caller():
  # all_tapes_visible() entered eagerly must not reach a trace: inside one, moments
  # stay exact unless the traced function itself vouches for its tapes.
  model = _ln_model()

  @tf.function(autograph=False)
  def second_derivative(a):
    c = tf.constant([0.3, -1.2, 0.7])
    with tf.GradientTape() as t2:
      t2.watch(a)
      with tf.GradientTape() as t1:
        t1.watch(a)
        y = functional.functional_call(model, None, tf.stack([a, 0.5, -1.0])[None])
        f = tf.reduce_sum(y[0] * c)
      g = t1.gradient(f, a)
    return t2.gradient(g, a)

  with second_order.all_tapes_visible():
    first = float(second_derivative(tf.constant(0.2)))
  assert first == pytest.approx(EXACT, abs=1e-6)
  assert float(second_derivative(tf.constant(0.2))) == pytest.approx(EXACT, abs=1e-6)
  # Exact moments entered eagerly do reach a trace (exact is right in every trace).
  layer = keras.layers.LayerNormalization(epsilon=1e-3)
  plain = tf.function(lambda x: layer(x), autograph=False)
  a = tf.constant(0.2)
  with second_order.exact_moments_scope(), tf.GradientTape() as t2:
    t2.watch(a)
    with tf.GradientTape() as t1:
      t1.watch(a)
      f = tf.reduce_sum(plain(tf.stack([a, 0.5, -1.0])[None])[0] * [0.3, -1.2, 0.7])
    g = t1.gradient(f, a)
  assert float(t2.gradient(g, a)) == pytest.approx(EXACT, abs=1e-6)


_FRESH_SCRIPTS["overrides_first_call"] = """
    import json
    import keras, tensorflow as tf
    from hypernet.core import functional
    inp = keras.Input((4, 4, 3))
    model = keras.Model(inp, keras.layers.BatchNormalization(name="bn")(inp))
    def fused():
      f = tf.function(lambda x: functional.functional_call(
          model, None, x, training=True, overrides={"bn": lambda h: h * 2.0}), autograph=False)
      graph = f.get_concrete_function(tf.TensorSpec([2, 4, 4, 3])).graph
      return "FusedBatchNormV3" in {op.type for op in graph.get_operations()}
    print(json.dumps([fused(), fused()]))
"""


def test_first_functional_call_with_overrides_on_batch_norm_runs_the_fused_kernel(fresh_processes):
  # Before, overrides bound the layer's call before the fused dispatcher was installed:
  # the first such call in a process ran Keras' BatchNorm, later ones the kernel.
  out = _run_script(fresh_processes, "overrides_first_call")
  assert out == [True, True]


_FRESH_SCRIPTS["wrappers"] = """
    import collections, functools, json
    import keras, numpy as np, tensorflow as tf
    from hypernet.core import functional
    from hypernet.numerics import compat
    calls = collections.Counter()
    def wrap(owner, name, tag):
      original = getattr(owner, name)
      @functools.wraps(original)
      def wrapper(*args, **kwargs):
        calls[tag] += 1
        return original(*args, **kwargs)
      setattr(owner, name, wrapper)
    nn = compat.defining_module(compat.keras_backend("nn", "moments").moments)
    BN = keras.layers.BatchNormalization
    wrap(BN, "call", "bn_before"); wrap(nn, "_compute_moments", "moments_before")
    inp = keras.Input((4, 4, 3))
    model = keras.Model(inp, BN(name="bn")(inp))
    lin = keras.Input((3,))
    ln = keras.Model(lin, keras.layers.LayerNormalization()(lin))
    x = tf.random.stateless_normal([2, 4, 4, 3], [1, 2])
    first = functional.functional_call(model, None, x, training=False)
    functional.functional_call(ln, None, x[:, 0, 0])
    wrap(BN, "call", "bn_after"); wrap(nn, "_compute_moments", "moments_after")
    outs = [functional.functional_call(model, None, x, training=False) for _ in range(3)]
    with tf.GradientTape() as tape:  # one tape: Keras' own moments, through the wrappers
      tape.watch(x)
      lns = [functional.functional_call(ln, None, x[:, 0, 0]) for _ in range(3)]
    ref = model(x, training=False)
    ref_ln = ln(x[:, 0, 0])
    print(json.dumps({"calls": calls, "bn": max(float(tf.reduce_max(tf.abs(o - ref))) for o in outs),
                      "ln": max(float(tf.reduce_max(tf.abs(o - ref_ln))) for o in lns)}))
"""


def test_other_libraries_wrapping_the_same_keras_methods_cause_no_recursion(fresh_processes):
  # One wrapper installed before hypernet's first use, one after; before, the next
  # install wrapped the later wrapper (which calls hypernet's dispatcher) as "original":
  # unbounded recursion on the first call that falls through to Keras.
  out = _run_script(fresh_processes, "wrappers")
  assert out["bn"] == 0.0 and out["ln"] < 1e-6
  for tag in ("bn_before", "bn_after", "moments_before", "moments_after"):
    assert out["calls"].get(tag, 0) >= 3, out["calls"]


def test_dispatcher_put_back_after_its_original_is_restored():
  fused_norm._install()  # pylint: disable=protected-access
  original = fused_norm._original_call  # pylint: disable=protected-access
  keras.layers.BatchNormalization.call = original  # e.g. another tool's teardown
  try:
    with fused_norm.fused_batch_norm_scope():
      assert keras.layers.BatchNormalization.call is fused_norm._dispatching_call  # pylint: disable=protected-access
  finally:
    fused_norm._install()  # pylint: disable=protected-access


def test_multi_worker_fit_hooks_and_their_fallbacks(monkeypatch, fresh_canaries, caplog):
  # hn.keras models under MultiWorkerMirroredStrategy over several workers (which one
  # process cannot create; tests/test_keras_restart.py runs two): the symbolic build
  # takes this worker's first replica's batch, the step logs get an axis for Keras'
  # multi-worker mean.
  calls = []

  class Base(keras.Model):
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
      calls.append((iterator, data_batch))

  class Model(compat.MultiWorkerFit, Base):
    pass

  model, batch, logs = Model(), (tf.ones([2, 3]), tf.zeros([2])), {"loss": tf.constant(1.5)}
  batches = [(0, 0, iter([batch]))]
  model._maybe_symbolic_build(iterator=batches)  # pylint: disable=protected-access
  assert model.step_logs(logs) is logs  # One worker: Keras' own.
  assert calls.pop() == (batches, None)
  monkeypatch.setattr(compat, "multi_worker", lambda strategy: True)
  model._maybe_symbolic_build(iterator=batches)  # pylint: disable=protected-access
  assert calls.pop() == (None, batch)
  assert model.step_logs(logs)["loss"].shape == [1]
  assert compat.canary_report()["symbolic_build"] is None
  assert compat.canary_report()["multi_worker_logs"] is None
  # A Keras whose methods changed: its own code runs, with one warning each.
  monkeypatch.setattr(keras.Model, "_maybe_symbolic_build",
                      lambda self, iterator=None, data_batch=None, extra=None: None)
  trainer = compat.defining_module(keras.Model.make_train_function)
  monkeypatch.setattr(trainer, "reduce_per_replica", lambda values, *args, **kwargs: values)
  for name in ("symbolic_build", "multi_worker_logs"):
    compat.reset_canary(name)
  with caplog.at_level(logging.WARNING):
    model._maybe_symbolic_build(iterator=batches)  # pylint: disable=protected-access
    assert model.step_logs(logs) is logs
  assert calls.pop() == (batches, None)
  assert "fit() under MultiWorkerMirroredStrategy runs Keras' own code" in caplog.text
  assert "passed on unchanged under MultiWorkerMirroredStrategy" in caplog.text


def test_backup_progress_and_its_fallback(monkeypatch, fresh_canaries, caplog, tmp_path):
  # How far into its epoch a batch-level BackupAndRestore backup is (hn.keras models
  # resume after it, hypernet/keras/resume.py).
  assert compat.backup_progress(str(tmp_path / "none")) is None  # No backup folder.
  assert compat.canary_report().get("backup_progress", "not run") == "not run"
  assert compat.backup_progress(str(tmp_path)) is None  # No progress file in it.
  (tmp_path / "training_metadata.json").write_text('{"epoch": 2, "batch": 3}')
  assert compat.backup_progress(str(tmp_path)) == (2, 4)
  # A Keras that records it elsewhere: none, warned (the epoch restarts, as in Keras).
  monkeypatch.setattr(compat, "_BACKUP_METADATA", "progress.json")
  compat.reset_canary("backup_progress")
  with caplog.at_level(logging.WARNING):
    assert compat.backup_progress(str(tmp_path)) is None
  assert "trains the epoch's first batches again" in caplog.text


def test_a_users_tf_function_traces_hypernet_as_written(monkeypatch, caplog):
  """``compat.exempt_from_autograph`` (at import): a user's ``tf.function`` over a
  second-order MAML meta-batch (``meta_batch_loss``: the learner's ``adapt``, the
  functional calls) converts none of hypernet's functions, the user's own step still is,
  and the meta-gradient equals the eager one (a cProfile of test_meta_batch's conv4 MAML
  case before the exemption: 4,001 calls of AutoGraph's converter, 14 of the test's 46 s;
  counted here at the converter, a private hook, tests only). Its fallback: rules that no longer exempt the package
  warn once that only tracing time is lost."""
  from tensorflow.python.autograph.core import config  # pylint: disable=g-import-not-at-top
  from tensorflow.python.autograph.impl import api  # pylint: disable=g-import-not-at-top
  from hypernet.meta import meta_batch  # pylint: disable=g-import-not-at-top
  converted = []
  real = api._convert_actual  # pylint: disable=protected-access

  def counting(entity, program_ctx):
    converted.append(f"{getattr(entity, '__module__', '')}."
                     f"{getattr(entity, '__qualname__', entity)}")
    return real(entity, program_ctx)

  monkeypatch.setattr(api, "_convert_actual", counting)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                            keras.layers.Dense(2)])
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.5,
                            inner_steps=2)
  rng = np.random.default_rng(0)
  batch = {"support_x": tf.constant(rng.normal(size=(2, 4, 3)), tf.float32),
           "support_y": tf.constant([[0, 1, 0, 1]] * 2),
           "query_x": tf.constant(rng.normal(size=(2, 4, 3)), tf.float32),
           "query_y": tf.constant([[1, 0, 1, 0]] * 2)}

  def step(batch):
    with tf.GradientTape() as tape:
      loss = meta_batch.meta_batch_loss(learner, batch).loss
    return tape.gradient(loss, model.trainable_variables)

  traced = tf.function(step)(batch)
  assert converted and not [c for c in converted if c.startswith("hypernet")], converted
  for got, want in zip(traced, step(batch)):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-7)
  # The rules exempt hypernet; rules that another library put first and that convert it
  # leave the traces converting, with one warning (speed only).
  assert compat.exempt_from_autograph() is None
  from tensorflow.python.autograph.core import config_lib  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(config, "CONVERSION_RULES",
                      (config_lib.Convert("hypernet"),) + tuple(config.CONVERSION_RULES))
  monkeypatch.setattr(compat, "_warned", set())
  with caplog.at_level(logging.WARNING):
    reason = compat.exempt_from_autograph()
  assert reason and "CONVERT" in reason, reason
  assert [r.getMessage() for r in caplog.records if "AutoGraph" in r.getMessage()] == [
      f"hypernet: cannot exempt hypernet from AutoGraph in TensorFlow {tf.__version__} "
      f"({reason}): traces convert its functions (slower traces, same values)."]


def test_a_loss_fn_handed_to_hypernet_is_traced_as_written_or_converted_by_its_tf_function():
  """What docs/write-your-own-task.md says: inside a user's ``tf.function`` hypernet
  calls a user's ``loss_fn`` unconverted (a Python ``if`` on a tensor fails with
  TensorFlow's own line naming the fix); wrapped in ``tf.function`` it is converted, and
  the meta-gradient equals the eager one."""
  from hypernet.meta import meta_batch  # pylint: disable=g-import-not-at-top

  def branchy_mse(y, pred):
    error = tf.reduce_mean(tf.square(y - pred))
    if error > 1e6:  # a Python branch on a tensor: needs AutoGraph in a trace
      error = tf.constant(1e6)
    return error

  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(3, activation="tanh"),
                            keras.layers.Dense(1)])
  rng = np.random.default_rng(1)
  batch = {k: tf.constant(rng.normal(size=(2, 3, 1)), tf.float32)
           for k in ("support_x", "support_y", "query_x", "query_y")}

  def step(learner):
    with tf.GradientTape() as tape:
      loss = meta_batch.meta_batch_loss(learner, batch).loss
    return tape.gradient(loss, model.trainable_variables)

  as_written = inner_loop.MAML(model, branchy_mse, inner_lr=0.1)
  with pytest.raises(TypeError, match="decorate this function with @tf.function"):
    tf.function(step)(as_written)
  wrapped = inner_loop.MAML(model, tf.function(branchy_mse), inner_lr=0.1)
  for got, want in zip(tf.function(step)(wrapped), step(as_written)):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-7)
