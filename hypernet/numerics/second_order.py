"""Exact second derivatives through Keras 3 layers run by a functional call.

Keras 3's TensorFlow backend computes the moments of every normalisation layer
(``BatchNormalization``, ``LayerNormalization``, ``GroupNormalization``: all go through
``keras.ops.moments``) with ``tf.nn.moments``, which evaluates the variance as
``mean((x - stop_gradient(mean))**2)``. Values and first derivatives are exact (the
variance's derivative with respect to the mean is zero), but a *second* derivative
loses the term through the mean: on ``LayerNormalization(epsilon=1e-3)`` applied to
``[a, 0.5, -1]`` with ``f = 0.3*y0 - 1.2*y1 + 0.7*y2`` at ``a = 0.2``, Keras gives
``f'' = 0.9404`` where the exact value is ``0.4278768``. MAML's meta-gradient, or any
Hessian-vector product a user takes with nested tapes, would be silently wrong.

:func:`exact_moments_scope` makes Keras' TensorFlow backend compute moments with
:func:`exact_moments` instead (same values, same first derivatives, exact second
derivatives) wherever a second derivative can be taken. Keras' own moments (exact first
derivatives, a cheaper backward pass) are kept only where the active tapes can
differentiate the input just once *and* all of them are visible: eagerly, or inside the
train loop's own step, which takes its gradients in its trace and says so
(:func:`all_tapes_visible`). Inside any other ``tf.function`` trace a tape outside the
function could still differentiate it twice, so the moments stay exact there. :func:`hypernet.core.functional.functional_call` runs every call under it, so
second order is exact wherever a target runs through the functional call: inside the
project's inner loops and under a user's own nested ``tf.GradientTape``s. The switch is
per thread (``tf.distribute`` replicas run in threads) and re-entrant; outside a
functional call Keras behaves as shipped.

Layers whose *defined* gradient deliberately treats part of the computation as a
constant cannot be made exact: :func:`inexact_second_order_layers` names them, and
second-order learners refuse such targets (:func:`check_second_order`).
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Tuple

import keras
import numpy as np
import tensorflow as tf

from hypernet.numerics import compat

_exact = compat.Switch("hypernet.numerics.second_order.exact_moments_scope()",
                       eager_reaches_traces=True)
_tapes_visible = compat.Switch("hypernet.numerics.second_order.all_tapes_visible()")
_original_compute_moments = None
_moments_module = None


def _first_order_only(x) -> bool:
  """True when the active tapes/accumulators can differentiate ``x`` at most once.

  TensorFlow's ``TFE_Py_TapeSetPossibleGradientTypes`` (:func:`.compat.possible_gradient_types`):
  0 no gradient, 1 first order only (one tape), 2 higher order possible (nested tapes, a
  forward accumulator). Only 1 lets Keras' cheaper moments be used; 0 (no tape here, e.g.
  a trace whose tapes are outside) keeps the exact ones, whose forward pass costs the
  same. Where the query is unavailable (or its canary failed): never.
  """
  query = compat.possible_gradient_types()
  if query is None:
    return False
  try:
    return query([x]) == 1
  except Exception:  # pylint: disable=broad-except
    return False


def exact_moments(x: tf.Tensor, axes, keepdims: bool = False) -> Tuple[tf.Tensor, tf.Tensor]:
  """Mean and biased variance of ``x`` over ``axes``, twice differentiable exactly.

  ``variance = mean((x - mean(x))**2)`` with the gradient through ``mean(x)`` kept (unlike
  ``tf.nn.moments``). Same values as ``tf.nn.moments``; float16/bfloat16 inputs are
  reduced in float32 and the results cast back (Keras casts before calling it anyway).

  Args:
    x: a float tensor of any shape.
    axes: the axes to reduce (int or list of ints).
    keepdims: keep the reduced axes with size 1.

  Returns:
    ``(mean, variance)``, each of ``x``'s dtype, ``axes`` reduced.
  """
  x = tf.convert_to_tensor(x)
  low = x.dtype in (tf.float16, tf.bfloat16)
  y = tf.cast(x, tf.float32) if low else x
  mean = tf.reduce_mean(y, axes, keepdims=True)
  variance = tf.reduce_mean(tf.math.squared_difference(y, mean), axes, keepdims=True)
  if not keepdims:
    mean, variance = tf.squeeze(mean, axes), tf.squeeze(variance, axes)
  if low:
    mean, variance = tf.cast(mean, x.dtype), tf.cast(variance, x.dtype)
  return mean, variance


def _dispatching_compute_moments(x, axes, keepdims):
  if _exact.on():
    # Inside a trace, tapes outside it (a user's outer tape around a tf.function holding
    # the inner one) are invisible: stay exact unless the caller vouches for them.
    visible = not tf.inside_function() or _tapes_visible.on()
    if not (visible and _first_order_only(x)):
      return exact_moments(x, axes, keepdims=keepdims)
  return _original_compute_moments(x, axes, keepdims)


def add_moment_gradients(dx: tf.Tensor, x: tf.Tensor, dmean, dvariance, n) -> tf.Tensor:
  """``dx`` plus the gradient through the batch moments of ``x`` ``[N, H, W, C]``:
  ``dmean / n`` and ``dvariance 2 (x - mean) / n`` (biased variance, ``n = N H W``),
  each only where it is not known to be zero (an output nothing depends on). The fused
  BatchNorm kernels give their moment outputs no gradient of their own
  (:mod:`hypernet.numerics.fused_norm`, :mod:`hypernet.numerics.norm_relu_pool`)."""
  if not is_known_zero(dmean):
    dx += dmean / n
  if not is_known_zero(dvariance):
    dx += dvariance * (2.0 / n) * (x - tf.reduce_mean(x, [0, 1, 2]))
  return dx


def is_known_zero(t) -> bool:
  """Whether ``t`` is known, without running anything, to be all zeros (``None``, or the
  constant upstream gradient TensorFlow passes for an output nothing depends on)."""
  if t is None:
    return True
  value = tf.get_static_value(t)
  return value is not None and not np.any(value)


def all_tapes_visible():
  """The caller's promise that no tape outside the current ``tf.function`` trace will
  differentiate what runs in the block (this thread), so that the tapes visible in the
  trace tell whether a second derivative can be taken. The train loop's step takes its
  gradients inside its own trace and says so; elsewhere, inside a trace, moments stay
  exact. A context manager; it counts where it is entered (enter it inside the traced
  function: :class:`hypernet.numerics.compat.Switch`)."""
  return _tapes_visible()


# The docstring example: LayerNormalization(epsilon=1e-3) of [a, 0.5, -1] at a = 0.2,
# f = 0.3 y0 - 1.2 y1 + 0.7 y2: f'' exact (Keras' own moments give 0.9404).
_CANARY_FPP = 0.4278768


def _second_derivative(layer_fn, a, c):
  a = tf.constant(a, tf.float64)
  with tf.GradientTape() as t2:
    t2.watch(a)
    with tf.GradientTape() as t1:
      t1.watch(a)
      x = tf.stack([a, tf.constant(0.5, tf.float64), tf.constant(-1.0, tf.float64)])
      f = tf.reduce_sum(layer_fn(x) * c)
    g = t1.gradient(f, a)
  return float(t2.gradient(g, a))


def _moments_canary():
  """LayerNormalization's, GroupNormalization's and ``keras.ops.moments``' (BatchNorm's
  route) second derivatives through Keras' layers with the hook on, against the same
  computed from :func:`exact_moments` in float64, and the LN one against its value."""
  c = tf.constant([0.3, -1.2, 0.7], tf.float64)
  def reference(x, eps=1e-3):
    mean, var = exact_moments(x, [-1], keepdims=True)
    return (x - mean) / tf.sqrt(var + eps)
  want = _second_derivative(lambda x: reference(x[None])[0], 0.2, c)
  if abs(want - _CANARY_FPP) > 1e-6:
    return f"exact_moments gives f'' {want:.7f}, not {_CANARY_FPP}"
  ln = keras.layers.LayerNormalization(epsilon=1e-3, center=False, scale=False,
                                       dtype="float64")
  gn = keras.layers.GroupNormalization(groups=1, epsilon=1e-3, center=False, scale=False,
                                       dtype="float64")
  def by_ops(x):
    mean, var = keras.ops.moments(x, axes=[-1], keepdims=True)
    return (x - mean) / tf.sqrt(var + 1e-3)
  with _exact():
    got = {"LayerNormalization": _second_derivative(lambda x: ln(x[None])[0], 0.2, c),
           "GroupNormalization": _second_derivative(lambda x: gn(x[None])[0], 0.2, c),
           "keras.ops.moments": _second_derivative(lambda x: by_ops(x[None])[0], 0.2, c)}
  wrong = {k: v for k, v in got.items() if abs(v - want) > 1e-9 * max(1.0, abs(want))}
  if wrong:
    return "; ".join(f"{k} f'' {v:.7f}" for k, v in wrong.items()) + f" (exact {want:.7f})"
  return None


def _install() -> None:
  """Puts the per-thread dispatcher in place of Keras' TF-backend moments (once) and
  checks it at first use (:func:`_moments_canary`).

  Raises:
    UnsupportedVersionError: the hook is missing, or Keras' normalisation layers no
      longer reach it (second derivatives through them would be silently wrong).
  """
  global _original_compute_moments, _moments_module
  if _moments_module is None:
    nn = compat.keras_backend("nn", "moments")
    _moments_module = compat.defining_module(nn.moments)  # moments calls it by name
  original = compat.install_dispatcher(
      _moments_module, "_compute_moments", _dispatching_compute_moments,
      ["x", "axes", "keepdims"])
  if _original_compute_moments is None:
    _original_compute_moments = original
  compat.possible_gradient_types()  # its canary first: the moments canary relies on it
  reason = compat.run_canary("moments", _moments_canary)
  if reason is not None:
    raise compat.UnsupportedVersionError(
        f"Keras {keras.__version__}'s normalisation layers no longer compute their moments "
        f"where hypernet makes second derivatives exact ({reason}); install a Keras "
        "version hypernet supports (README, 'Supported versions').")


def is_exact() -> bool:
  """Whether Keras moments are exact in this thread right now (here: eagerly, or in the
  trace being built)."""
  return _exact.on()


@contextlib.contextmanager
def exact_moments_scope() -> Iterator[None]:
  """Within the block (this thread), Keras normalisation layers use :func:`exact_moments`.

  Affects every layer whose moments go through ``keras.ops.moments`` on the TensorFlow
  backend (BatchNormalization, LayerNormalization, GroupNormalization and
  user layers calling ``keras.ops.moments``); synchronised BatchNorm already computes
  ``E[x^2] - E[x]^2`` without a stop-gradient and is left as it is. Re-entrant; it
  counts where it is entered (eagerly, or in the ``tf.function`` being traced).

  Raises:
    UnsupportedVersionError: the installed Keras lacks the backend function this relies
      on, or its layers no longer reach it (checked once, at first use).
  """
  _install()
  with _exact():
    yield


# Layer classes whose gradient is defined with stop-gradients by their method, with why.
def _inexact_reason(layer) -> str:
  if isinstance(layer, keras.layers.SpectralNormalization):
    return ("its power-iteration vectors u, v are constants of the gradient (Miyato et al. "
            "2018, Alg. 1), so derivatives of the normalised kernel are not those of W / "
            "sigma(W)")
  if isinstance(layer, keras.layers.BatchNormalization) and getattr(layer, "renorm", False):
    return ("batch renormalisation treats its corrections r and d as constants of the "
            "gradient (Ioffe 2017, Alg. 1)")
  if isinstance(layer, keras.layers.Resizing) or (
      isinstance(layer, keras.layers.UpSampling2D)
      and getattr(layer, "interpolation", "nearest") != "nearest"):
    return ("TensorFlow's image-resize gradients have no gradient of their own (bilinear: "
            "registered as not differentiable, so the second derivative is silently 0; "
            "the other modes fail), and tf.image.resize computes in float32")
  return ""


def inexact_second_order_layers(model: keras.layers.Layer) -> List[Tuple[str, str]]:
  """``[(layer path, reason)]`` for the layers of ``model`` whose second order is not exact.

  These layers' first derivatives are the ones their method defines (not those of the
  function they compute), so no higher derivative through them is the derivative of
  the training objective.
  """
  found = []
  for layer in compat.flatten_layers(model):
    reason = _inexact_reason(layer)
    if reason:
      found.append((getattr(layer, "path", layer.name), reason))
  return found


def check_second_order(model: keras.layers.Layer, who: str = "second-order meta-learning") -> None:
  """Raises if ``model`` contains a layer whose second derivatives cannot be exact.

  Args:
    model: the target network.
    who: what needs the second order, for the message.

  Raises:
    ValueError: naming each such layer, why, and the fix (first order, or another layer).
  """
  found = inexact_second_order_layers(model)
  if found:
    listed = "; ".join(f"{name!r} ({type_reason})" for name, type_reason in found)
    raise ValueError(
        f"{who} needs exact second derivatives through model {model.name!r}, but these "
        f"layers cannot give them: {listed}. Use first_order=True (first-order MAML), "
        "leave these layers out of the target, or replace them (e.g. renorm=False).")
