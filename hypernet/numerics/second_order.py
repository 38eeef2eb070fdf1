"""Exact second derivatives through Keras 3 layers run by a functional call.

Keras' TensorFlow backend computes normalisation moments with ``tf.nn.moments``, whose
variance stops the gradient through the mean: second derivatives lose a term.
:func:`exact_moments_scope` (entered by every functional call) computes them exactly
wherever a second derivative can be taken; :func:`check_second_order` names the layers
that cannot be exact. Why and where: ``docs/numerics.md`` ("Exact second-order moments")."""
from __future__ import annotations

import contextlib
import re
import threading
from typing import Iterator, List, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from hypernet.numerics import compat

_exact = compat.Switch("hypernet.numerics.second_order.exact_moments_scope()",
                       eager_reaches_traces=True)
_tapes_visible = compat.Switch("hypernet.numerics.second_order.all_tapes_visible()")
_original_compute_moments = None
_original_normalize = None
_moments_module = None
_thread = threading.local()  # reason: why moments are not exact, at this thread's last _install


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


def _install() -> Optional[str]:
  """Puts the per-thread dispatcher in place of Keras' TF-backend moments (once) and
  checks it at first use (:func:`_moments_canary`).

  Returns:
    ``None`` when second derivatives through Keras' normalisation layers are exact in
    functional calls, else why not (one line). Then one warning says so: first-order
    calls run on (the values are the same either way), and what needs exact second
    order refuses (:func:`require_exact_moments`).
  """
  global _original_compute_moments, _original_normalize, _moments_module
  try:
    module = _moments_module
    if module is None:
      nn = compat.keras_backend("nn", "moments")
      module = compat.defining_module(nn.moments)  # moments calls it by name
    original = compat.install_dispatcher(
        module, "_compute_moments", _dispatching_compute_moments, ["x", "axes", "keepdims"])
    _moments_module = module  # (kept once installed: a simulation's module is not)
    if _original_compute_moments is None:
      _original_compute_moments = original
  except compat.UnsupportedVersionError as e:
    if keras.backend.backend() != "tensorflow":
      raise
    reason = e.detail
  else:
    compat.possible_gradient_types()  # its canary first: the moments canary relies on it
    failed = compat.run_canary("moments", _moments_canary)
    reason = None if failed is None else (
        f"Keras {keras.__version__}'s normalisation layers no longer compute their moments "
        f"where hypernet makes second derivatives exact ({failed})")
  _install_normalize()
  _thread.reason = reason
  if reason is not None:
    compat.warn_once("moments", "%s. First-order training is unaffected (same values); "
                     "second-order learners, and second derivatives through normalisation "
                     "layers in functional calls, are refused.", reason)
  return reason


def require_exact_moments(who: str = "second-order meta-learning") -> None:
  """Raises unless second derivatives through Keras' normalisation layers are exact in
  functional calls (the hook and its canary, :func:`exact_moments_scope`).

  Args:
    who: what needs the second order, for the message.

  Raises:
    UnsupportedVersionError: one line: why not, and the way out (first order, or a
      supported Keras).
  """
  reason = _install()
  if reason is not None:
    raise compat.UnsupportedVersionError(
        f"{who} needs exact second derivatives, but {reason}: use first_order=True, or "
        f"{compat.ADVICE}", reason)


# Keras layers whose call computes moments (subclasses too).
_MOMENTS_LAYERS = (keras.layers.BatchNormalization, keras.layers.LayerNormalization,
                   keras.layers.GroupNormalization)


def check_outputs_differentiable_once(model: keras.layers.Layer, outputs) -> None:
  """Raises when exact moments are unavailable (found by :func:`_install` as the call
  entered :func:`exact_moments_scope`), ``model`` has a
  normalisation layer, and the active tapes can differentiate ``outputs`` twice (nested
  tapes, a forward accumulator): the second derivative would silently lose a term.

  Raises:
    UnsupportedVersionError: as :func:`require_exact_moments`.
  """
  if getattr(_thread, "reason", None) is None:  # (what this thread's _install found)
    return
  query = compat.possible_gradient_types()
  tensors = [t for t in tf.nest.flatten(outputs) if isinstance(t, tf.Tensor)]
  if query is None or not tensors or query(tensors) < 2:
    return
  if any(isinstance(layer, _MOMENTS_LAYERS) for layer in compat.flatten_layers(model)):
    require_exact_moments("A second derivative through a functional call of "
                          f"{model.name!r} (nested tapes)")


def safe_normalize(x, axis=-1, order=2, epsilon=None) -> tf.Tensor:
  """``keras.ops.normalize`` (``UnitNormalization``'s math) with finite derivatives of
  every order at a zero vector.

  Keras computes the L2 case as ``x * min(rsqrt(sum(x**2)), 1/eps)``: at an all-zero
  vector ``rsqrt`` is infinite and its derivative, though multiplied by the zero that
  ``min`` passes, makes ``0 * inf = NaN`` first and second derivatives. Here the same
  value is ``x * rsqrt(max(sum(x**2), eps**2))`` (``max`` keeps ``rsqrt`` finite; for a
  zero vector the derivative is Keras' own ``1/eps``, its second derivative 0). Other
  orders divide by ``max(norm, eps)`` with the norm ``(sum |x|**p)**(1/p)`` taken through
  a double ``tf.where`` so that a zero sum gets gradient 0, not NaN.

  Args:
    x: a float tensor; axis: the reduced axis (int or list); order: int >= 1;
    epsilon: the lower bound of the norm (Keras' ``backend.epsilon()`` when ``None``).

  Returns:
    ``x`` normalised along ``axis``, of ``x``'s shape and dtype.

  Raises:
    ValueError: ``order`` is not an int >= 1 (Keras' message).
  """
  if not isinstance(order, int) or not order >= 1:
    raise ValueError(f"Argument `order` must be an int >= 1. Received: order={order}")
  x = tf.convert_to_tensor(x)
  if x.shape.rank == 0:
    x = tf.expand_dims(x, 0)
  if epsilon is None:
    epsilon = keras.backend.epsilon()
  if order == 2:
    square_sum = tf.reduce_sum(tf.square(x), axis=axis, keepdims=True)
    floor = tf.constant(epsilon, x.dtype) ** 2
    return x * tf.math.rsqrt(tf.maximum(square_sum, floor))
  power_sum = tf.reduce_sum(tf.abs(x) ** order, axis=axis, keepdims=True)
  positive = power_sum > 0
  safe = tf.where(positive, power_sum, tf.ones_like(power_sum))
  norm = tf.where(positive, safe ** (1.0 / order), tf.zeros_like(power_sum))
  return x / tf.maximum(norm, tf.constant(epsilon, x.dtype))


def _normalize_canary() -> Optional[str]:
  """``keras.ops.normalize`` of ``[[3, 4], [0, 0]]`` (float64) inside the scope: Keras'
  values ``[[0.6, 0.8], [0, 0]]`` and a finite second derivative at the zero vector
  (Keras' own gives NaN there: then the dispatcher is not reached)."""
  x = tf.constant([[3.0, 4.0], [0.0, 0.0]], tf.float64)
  c = tf.constant([[0.3, -1.2], [0.7, 0.5]], tf.float64)
  with tf.GradientTape() as t2:
    t2.watch(x)
    with tf.GradientTape() as t1:
      t1.watch(x)
      with _exact():
        y = keras.ops.normalize(x)
      f = tf.reduce_sum(y * c)
    h = tf.reduce_sum(t1.gradient(f, x) * c)
  hv = t2.gradient(h, x).numpy()
  if not np.allclose(y.numpy(), [[0.6, 0.8], [0.0, 0.0]], atol=1e-12):
    return f"keras.ops.normalize gives {y.numpy().tolist()}, not [[0.6, 0.8], [0, 0]]"
  if not np.all(np.isfinite(hv)):
    return ("keras.ops.normalize no longer reaches its _normalize (NaN second derivative "
            "at 0)")
  return None


def _install_normalize() -> None:
  """The ``keras.ops.normalize`` hook (:func:`.compat.normalize_hook`) and its canary; on
  failure Keras' own normalize runs (one warning: NaN second derivatives at all-zero
  vectors)."""
  global _original_normalize
  try:
    original = compat.normalize_hook(_dispatching_normalize)
  except compat.UnsupportedVersionError as e:
    reason = e.detail
  else:
    if _original_normalize is None:
      _original_normalize = original
    reason = compat.run_canary("normalize", _normalize_canary)
  if reason is not None:
    compat.warn_once("normalize", "keras.ops.normalize keeps Keras %s's own code in "
                     "functional calls (%s): UnitNormalization's second derivatives are NaN "
                     "at an all-zero vector; elsewhere the same values.", keras.__version__, reason)


def _dispatching_normalize(x, axis=-1, order=2, epsilon=None):
  # Inside a functional call: finite derivatives at zero vectors (unless the canary failed).
  if _exact.on() and compat.run_canary("normalize", _normalize_canary) is None:
    return safe_normalize(x, axis=axis, order=order, epsilon=epsilon)
  return _original_normalize(x, axis=axis, order=order, epsilon=epsilon)


def is_exact() -> bool:
  """Whether Keras moments are exact in this thread right now (here: eagerly, or in the
  trace being built)."""
  return _exact.on()


@contextlib.contextmanager
def exact_moments_scope() -> Iterator[None]:
  """Within the block (this thread), Keras normalisation layers use :func:`exact_moments`,
  and ``keras.ops.normalize`` (``UnitNormalization``) uses :func:`safe_normalize`.

  Affects every layer whose moments go through ``keras.ops.moments`` on the TensorFlow
  backend (BatchNormalization, LayerNormalization, GroupNormalization and
  user layers calling ``keras.ops.moments``); synchronised BatchNorm already computes
  ``E[x^2] - E[x]^2`` without a stop-gradient and is left as it is. Re-entrant; it
  counts where it is entered (eagerly, or in the ``tf.function`` being traced).

  Where the installed Keras lacks the backend function this relies on, or its layers no
  longer reach it (checked once, at first use), one warning says so and the block runs
  Keras' own moments: first derivatives are the same; :func:`require_exact_moments`
  (second-order learners) and functional calls under nested tapes then refuse.
  """
  _install()
  with _exact():
    yield


# -- Gradients that TensorFlow declares not differentiable ---------------------------------

# Ops whose outputs do not change with their float inputs (a zero derivative is the exact
# one), so a missing gradient function is not a lost term.
_ZERO_DERIVATIVE_OPS = frozenset({"ZerosLike", "OnesLike", "Shape", "ShapeN", "Size", "Rank",
                                  "BroadcastGradientArgs"})


def _gradient_function_missing(op) -> bool:
  """Whether TensorFlow has no gradient function for the graph op ``op``
  (:func:`hypernet.numerics.compat.gradient_function_missing`: the private registry
  lookup and its canary); False where the lookup is unavailable (compat warns once)."""
  return bool(compat.gradient_function_missing(op))


def nondifferentiable_gradient_ops(loss: tf.Tensor, sources, grads) -> List["tf.Operation"]:
  """The ops of a first derivative that a second derivative cannot go through.

  ``grads = tape.gradient(loss, sources)`` taken inside a ``tf.function`` trace (symbolic
  tensors of one graph). The backward part of the graph is the ancestors of ``grads``
  that are not ancestors of ``loss``; an op there that depends on ``sources`` and has a
  float output but no gradient function of its own (see :func:`_gradient_function_missing`)
  makes every derivative of ``grads`` treat it as a constant: a second derivative through
  it is silently 0 (not differentiable, e.g. ``tf.image.resize``'s bilinear gradient) or
  fails. Ops inside the bodies of control flow (an RNN's backward ``While``) are not
  inspected; their gradient functions exist.

  Args:
    loss: the scalar that was differentiated (symbolic).
    sources: the tensors it was differentiated with respect to.
    grads: ``tape.gradient(loss, sources)`` (entries may be ``None`` or ``IndexedSlices``).

  Returns:
    The offending ``tf.Operation``s sorted by name; ``[]`` when none, or when the tensors
    are eager (no graph to inspect: trace the computation, see
    :func:`hypernet.meta.inner_loop.inner_sgd`).
  """
  flat = []
  for g in grads:
    if isinstance(g, tf.IndexedSlices):
      flat += [g.values, g.indices]
    elif g is not None:
      flat.append(g)
  if not flat or not all(tf.is_symbolic_tensor(t) for t in flat + [loss]):
    return []
  forward, stack = set(), [loss.op]
  while stack:
    op = stack.pop()
    if op not in forward:
      forward.add(op)
      stack.extend(t.op for t in op.inputs)
  backward, stack = set(), [t.op for t in flat]
  while stack:
    op = stack.pop()
    if op not in backward and op not in forward:
      backward.add(op)
      stack.extend(t.op for t in op.inputs)
  region, depends = forward | backward, set()
  stack = [c for s in sources if tf.is_symbolic_tensor(s) for c in s.consumers()]
  while stack:
    op = stack.pop()
    if op not in depends and op in region:
      depends.add(op)
      stack.extend(c for t in op.outputs for c in t.consumers())
  found = [op for op in backward & depends
           if op.type not in _ZERO_DERIVATIVE_OPS
           and any(t.dtype.is_floating for t in op.outputs)
           and _gradient_function_missing(op)]
  return sorted(found, key=lambda op: op.name)


def layer_of_op(model: keras.layers.Layer, op_name: str) -> str:
  """The path of the innermost layer of ``model`` whose name scope holds the op named
  ``op_name`` (Keras opens one name scope per layer call; TensorFlow may add ``_1``...),
  or ``""``."""
  segments = op_name.split("/")
  best = None
  for layer in compat.flatten_layers(model)[1:]:
    pattern = re.compile(re.escape(layer.name) + r"(_\d+)?")
    for i, segment in enumerate(segments[:-1]):
      if pattern.fullmatch(segment) and (best is None or i >= best[0]):
        best = (i, getattr(layer, "path", layer.name))
  return best[1] if best else ""


def describe_nondifferentiable(model: keras.layers.Layer, found) -> str:
  """One phrase per op of :func:`nondifferentiable_gradient_ops`: type, layer, op name."""
  parts = []
  for op in found:
    layer = layer_of_op(model, op.name)
    parts.append(f"{op.type} (in layer {layer!r}, op {op.name!r})" if layer
                 else f"{op.type} (op {op.name!r})")
  return "; ".join(dict.fromkeys(parts))


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
    UnsupportedVersionError: this Keras' normalisation moments cannot be made exact
      (:func:`require_exact_moments`).
  """
  require_exact_moments(who)
  found = inexact_second_order_layers(model)
  if found:
    listed = "; ".join(f"{name!r} ({type_reason})" for name, type_reason in found)
    raise ValueError(
        f"{who} needs exact second derivatives through model {model.name!r}, but these "
        f"layers cannot give them: {listed}. Use first_order=True (first-order MAML), "
        "leave these layers out of the target, or replace them (e.g. renorm=False).")
