"""Straight-through value overrides, and the weight quantisers built on them.

:func:`override_value` is a tensor that *is* ``value`` in the forward pass, bit for bit,
and *is* ``x`` in the backward pass (the straight-through estimator).
:func:`override_layer_outputs` (``functional_call(..., overrides=...)``) replaces a named
layer's output inside a model call with it; :func:`binary`, :func:`ternary` and
:func:`int8` quantise weights with it, and :func:`quantize_weights` applies one, chosen by
name, to a weight dict (e.g. a hypernetwork's output). Each function gives its worked
example and its paper.

References:
  Y. Bengio, N. Leonard, A. Courville. Estimating or propagating gradients through
    stochastic neurons for conditional computation. arXiv:1308.3432, 2013.
  M. Courbariaux, Y. Bengio, J.-P. David. BinaryConnect: training deep neural networks
    with binary weights during propagations. NeurIPS 2015, arXiv:1511.00363;
    M. Courbariaux, I. Hubara et al. Binarized neural networks. arXiv:1602.02830, 2016.
  M. Rastegari, V. Ordonez, J. Redmon, A. Farhadi. XNOR-Net. ECCV 2016, arXiv:1603.05279.
  F. Li, B. Zhang, B. Liu. Ternary weight networks. arXiv:1605.04711, 2016.
  B. Jacob et al. Quantization and training of neural networks for efficient
    integer-arithmetic-only inference. CVPR 2018, arXiv:1712.05877; R. Krishnamoorthi.
    Quantizing deep convolutional networks for efficient inference: a whitepaper.
    arXiv:1806.08342, 2018."""
from __future__ import annotations

import contextlib
import fnmatch
import functools
import re
import threading
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from hypernet.numerics import compat

Axis = Union[int, Sequence[int], None]
OverrideFn = Callable[[Any], Any]

__all__ = [
    "override_value", "set_slice", "set_mean", "override_layer_outputs", "layer_paths",
    "binary", "ternary", "int8", "QUANTIZERS", "quantize_weights", "to_dtype",
]


# ----------------------------------------------------------------------------------------
# The primitive.
# ----------------------------------------------------------------------------------------

def to_dtype(value, dtype) -> tf.Tensor:
  """``value`` as a tensor of ``dtype``, exactly for Python numbers.

  ``tf.cast(0.1, tf.float64)`` first makes a float32 tensor, so it gives
  ``0.10000000149011612``; this gives float64's ``0.1``. Tensors (and NumPy arrays)
  are cast as by ``tf.cast``. Use it for every hyperparameter (learning rate, gain,
  scale) that meets a tensor of a possibly wider dtype.

  Args:
    value: a Python int/float, NumPy scalar/array, or tensor.
    dtype: the target ``tf.DType`` (or its name).

  Returns:
    A tensor of ``dtype``.
  """
  dtype = tf.as_dtype(dtype)
  if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
    return tf.constant(value, dtype)
  if isinstance(value, np.ndarray):
    return tf.constant(value.astype(dtype.as_numpy_dtype) if dtype.is_floating else value, dtype)
  return tf.cast(value, dtype)


@tf.custom_gradient
def _straight_through(x, value):
  y = tf.identity(value)

  def grad(dy):
    # The upstream gradient goes to ``x`` unchanged; ``value`` gets none. Returning
    # ``dy`` itself (a differentiable function of the forward pass) keeps the gradient
    # path differentiable, so a tape of a tape sees d2/dx2 through the override.
    return tf.identity(dy), None

  return y, grad


def _shape_str(shape) -> str:
  return str(tuple(shape.as_list()) if shape.rank is not None else "<unknown rank>")


def override_value(x, value, name: Optional[str] = None) -> tf.Tensor:
  """Returns ``value`` in the forward pass, with the gradient of ``x`` (straight-through).

  Forward: the result equals ``value`` (broadcast to ``x``'s shape) bit for bit.
  Backward: the upstream gradient is passed to ``x`` unchanged (identity Jacobian) and
  ``value`` receives no gradient (``tape.gradient(..., value)`` is ``None``). The gradient
  function is itself ordinary TensorFlow, so nested tapes see second-order terms: for
  ``z = override_value(x, v)`` and ``y = h(z)``, ``dy/dx = h'(v)`` and
  ``d2y/dx2 = h''(v)``.

  Worked example: ``a = 1`` overridden to ``2`` and ``y = a**2`` gives ``y = 4`` and
  ``dy/da = 4``. This is the straight-through estimator of Bengio et al. 2013
  (arXiv:1308.3432), written so that the forward value is exact: the common
  ``x + tf.stop_gradient(value - x)`` rounds twice (in float32 with ``x = 1000`` and
  ``value = 1.27`` it gives ``1.2700195``).

  Works eagerly, in ``tf.function`` (also with ``jit_compile=True``), and under nested
  tapes.

  Args:
    x: a floating-point tensor (float16, bfloat16, float32 or float64) of any shape: the
      tensor whose gradient is kept.
    value: the forward value: a tensor of ``x``'s dtype, or a Python/NumPy value
      (converted to ``x``'s dtype), with ``x``'s shape or a shape that broadcasts to it
      (e.g. a scalar).
    name: optional name used in error messages and (sanitised) as the op's name scope.

  Returns:
    A tensor with ``x``'s shape and dtype whose value is ``value``.

  Raises:
    TypeError: ``x`` is not floating point, or ``value``'s dtype differs from ``x``'s.
    ValueError: ``value``'s shape does not broadcast to ``x``'s shape (the message names
      both shapes).
  """
  what = f"override_value{f' ({name})' if name else ''}"
  x = tf.convert_to_tensor(x)
  if not x.dtype.is_floating:
    raise TypeError(f"{what}: x must be a floating-point tensor (float16, bfloat16, "
                    f"float32, float64) to carry a gradient; got dtype {x.dtype.name}.")
  if tf.is_tensor(value):
    value = tf.convert_to_tensor(value)
  else:
    try:
      value = tf.convert_to_tensor(value, dtype=x.dtype)
    except (TypeError, ValueError) as e:
      raise TypeError(f"{what}: cannot convert value to x's dtype {x.dtype.name}: {e}. "
                      "Cast it first (tf.cast).") from e
  if value.dtype != x.dtype:
    raise TypeError(f"{what}: value has dtype {value.dtype.name} but x has dtype "
                    f"{x.dtype.name}; cast value to {x.dtype.name} (tf.cast).")
  mismatch = ValueError(
      f"{what}: value of shape {_shape_str(value.shape)} must have x's shape "
      f"{_shape_str(x.shape)} or broadcast to it (the result takes x's shape, since the "
      "gradient is passed to x unchanged).")
  try:
    broadcast = tf.broadcast_static_shape(value.shape, x.shape)
  except ValueError:
    raise mismatch from None
  if not broadcast.is_compatible_with(x.shape) or (
      x.shape.rank is not None and broadcast.rank != x.shape.rank):
    raise mismatch
  with tf.name_scope(re.sub(r"[^A-Za-z0-9_.\-]+", "_", name or "").strip("_")
                     or "override_value"):
    if not (value.shape.is_fully_defined() and value.shape == x.shape):
      value = tf.broadcast_to(value, tf.shape(x))
    return _straight_through(x, tf.stop_gradient(value))


# ----------------------------------------------------------------------------------------
# New values for a slice or a reduction of a tensor (to be passed to override_value).
# ----------------------------------------------------------------------------------------

def set_slice(x, index: int, value, axis: int = -1) -> tf.Tensor:
  """Returns ``x`` with the slice ``index`` along ``axis`` replaced by ``value``.

  A plain function of values, no gradient trick: use it to build the new value for an
  override, e.g. ``overrides={"conv1": lambda h: set_slice(h, 24, 0.0)}`` ablates channel
  24 of ``conv1``'s output (NHWC: channels on the last axis). Every other element keeps
  its value bit for bit.

  Args:
    x: a tensor, e.g. a conv pre-activation of shape ``[B, H, W, C]``.
    index: which slice (e.g. channel), ``-x.shape[axis] <= index < x.shape[axis]``.
    value: the slice's new value: a number, or a tensor of the slice's shape (``x`` with
      ``axis`` removed, e.g. ``[B, H, W]``) or one that broadcasts to it.
    axis: the axis that ``index`` indexes (default: last, the channels of NHWC).

  Returns:
    A tensor with ``x``'s shape and dtype.

  Raises:
    ValueError: ``index`` is out of range for ``axis`` (known static size only), or
      ``axis`` is out of range.
  """
  x = tf.convert_to_tensor(x)
  rank = x.shape.rank
  if rank is None:
    raise ValueError("set_slice: x must have a known rank.")
  if not -rank <= axis < rank:
    raise ValueError(f"set_slice: axis={axis} is out of range for x of rank {rank}.")
  axis %= rank
  size = x.shape[axis]
  if size is not None:
    if not -size <= index < size:
      raise ValueError(f"set_slice: index={index} is out of range for axis {axis} of x "
                       f"with shape {_shape_str(x.shape)}.")
    index %= size
  else:
    index = tf.math.floormod(index, tf.shape(x)[axis])
  shape = tf.shape(x)
  value = tf.cast(tf.convert_to_tensor(value, dtype_hint=x.dtype), x.dtype)
  value = tf.expand_dims(
      tf.broadcast_to(value, tf.concat([shape[:axis], shape[axis + 1:]], 0)), axis)
  mask_shape = [1] * rank
  mask_shape[axis] = -1
  mask = tf.reshape(tf.equal(tf.range(shape[axis]), index), mask_shape)
  return tf.where(mask, value, x)


def set_mean(x, value, axis: Axis = None) -> tf.Tensor:
  """Returns ``x`` shifted so that its mean over ``axis`` equals ``value``.

  ``x - mean(x, axis) + value``: the new value for overriding a reduction, e.g. the
  per-channel mean of a conv output, ``lambda h: set_mean(h, 0.0, axis=(0, 1, 2))``.
  Under :func:`override_value` the gradient stays the identity. The new mean equals
  ``value`` up to float rounding of the shift (not bit for bit).

  Args:
    x: a floating-point tensor.
    value: the new mean: a number or a tensor broadcastable to
      ``reduce_mean(x, axis, keepdims=True)``.
    axis: the axes averaged over (``None``: all).

  Returns:
    A tensor with ``x``'s shape and dtype.
  """
  x = tf.convert_to_tensor(x)
  value = tf.cast(tf.convert_to_tensor(value, dtype_hint=x.dtype), x.dtype)
  return x - tf.reduce_mean(x, axis=axis, keepdims=True) + value


# ----------------------------------------------------------------------------------------
# Overriding a named layer's output inside a model call.
# ----------------------------------------------------------------------------------------

_LOCK = threading.Lock()
# id(layer) -> [layer, had_instance_call, previous_instance_call, install_count]
_INSTALLED: Dict[int, list] = {}
_ACTIVE = threading.local()  # .fns: {id(layer): [fn, ...]} for this thread


def _active_fns(layer_id: int) -> List[OverrideFn]:
  return getattr(_ACTIVE, "fns", {}).get(layer_id, [])


def layer_paths(model) -> Dict[str, Any]:
  """Returns ``{path: layer}`` for every layer nested in ``model`` (not ``model`` itself).

  The path of a top-level layer is its name (``"conv1"``); a layer inside a nested model
  or layer is addressed as ``"backbone/conv1"``. Layers are found by Keras' own layer
  tracking, so this covers Sequential, Functional and subclassed models. Input layers
  are left out: a model feeds them, it never calls them.
  """
  paths: Dict[str, Any] = {}
  seen = set()

  def visit(parent, prefix):
    for layer in compat.sublayers(parent):
      if id(layer) in seen:
        continue
      seen.add(id(layer))
      path = f"{prefix}{layer.name}"
      if type(layer).__name__ != "InputLayer":  # fed, never called: nothing to override
        paths.setdefault(path, layer)
      visit(layer, path + "/")

  visit(model, "")
  return paths


def _resolve(model, key: str, paths: Dict[str, Any]):
  if key in paths:
    return paths[key]
  by_name = [p for p, layer in paths.items() if layer.name == key]
  if len(by_name) == 1:
    return paths[by_name[0]]
  if len(by_name) > 1:
    raise ValueError(f"Layer name {key!r} is ambiguous in model {model.name!r}; use one "
                     f"of the paths {by_name}.")
  raise ValueError(f"Unknown layer {key!r} in overrides for model {model.name!r}. Layer "
                   f"names (paths): {list(paths)}")


def _apply_override(layer, fn: OverrideFn, outputs):
  new = fn(outputs)
  try:
    tf.nest.assert_same_structure(outputs, new)
  except (ValueError, TypeError) as e:
    raise ValueError(f"Override for layer {layer.name!r} returned a different structure "
                     f"from the layer's output: {e}") from None
  return tf.nest.map_structure(
      lambda o, v: override_value(o, v, name=f"layer {layer.name!r}"), outputs, new)


def _install(layer) -> None:
  compat.check_instance_call()
  with _LOCK:
    entry = _INSTALLED.get(id(layer))
    if entry is not None:
      entry[3] += 1
      return
    had_own, previous = compat.instance_attribute(layer, "call")

    @functools.wraps(layer.call)
    def call_with_overrides(*args, **kwargs):
      # The class's call is looked up at each call, not bound here: a dispatcher put on
      # the class later (hypernet.numerics) is honoured from the first call on.
      inner = previous if had_own else type(layer).call.__get__(layer)
      outputs = inner(*args, **kwargs)
      for fn in list(_active_fns(id(layer))):
        outputs = _apply_override(layer, fn, outputs)
      return outputs

    # Past Keras' attribute tracking: nothing about the layer but this one instance
    # attribute changes, and _uninstall removes it again.
    compat.set_instance_attribute(layer, "call", call_with_overrides)
    _INSTALLED[id(layer)] = [layer, had_own, previous, 1]


def _uninstall(layer) -> None:
  with _LOCK:
    entry = _INSTALLED[id(layer)]
    entry[3] -= 1
    if entry[3]:
      return
    del _INSTALLED[id(layer)]
    _, had_own, previous, _ = entry
    if had_own:
      compat.set_instance_attribute(layer, "call", previous)
    else:
      compat.delete_instance_attribute(layer, "call")


@contextlib.contextmanager
def override_layer_outputs(model, overrides: Mapping[str, OverrideFn]) -> Iterator[None]:
  """Context manager: inside it, calls of ``model`` see overridden layer outputs.

  For each ``{layer: fn}`` the layer's output ``h`` is replaced by
  ``override_value(h, fn(h))``: every layer downstream computes on ``fn(h)``, while the
  gradient arriving at the layer's output is passed unchanged to ``h`` and so reaches
  every weight and input upstream (straight-through, Bengio et al. 2013). ``fn`` may set
  the whole output or only a slice or reduction of it (build the new value with
  :func:`set_slice` / :func:`set_mean`); for a layer with several outputs, ``fn`` gets and
  returns the same nested structure.

  Worked example: a model ``y = a**2`` whose layer ``"a"`` outputs ``a = 1``, run with
  ``{"a": lambda a: 2.0 * tf.ones_like(a)}``, gives ``y = 4`` and ``dy/da = 4``.

  Works for Sequential, Functional and subclassed models (and layers nested in them),
  eagerly and inside ``tf.function`` (the override is traced into the graph). The model
  is left unmodified when the context exits, also on an exception: the layer's ``call``
  is wrapped by one instance attribute that is removed again. Overrides are
  thread-local: they apply to calls made by the thread that entered the context (enter
  it inside a ``tf.distribute`` replica function, or use
  ``functional_call(..., overrides=...)``, which does). Layers quantised by Keras
  itself (``layer.quantize(...)``) are not supported.

  Args:
    model: a Keras model.
    overrides: ``{layer name or path: fn}``; ``fn(output) -> new value`` with the
      output's shape (or one that broadcasts to it) and dtype. Paths as in
      :func:`layer_paths` (``"backbone/conv1"``); a bare name works when unique.

  Raises:
    ValueError: a name or path matches no layer (the message lists the layer paths), or
      is ambiguous; at call time, ``fn`` returns a value whose shape does not broadcast
      to the output's.
    TypeError: ``fn`` is not callable; at call time, ``fn`` returns the wrong dtype.
    NotImplementedError: the layer is quantised by Keras (``quantization_mode`` set).
  """
  paths = layer_paths(model)
  resolved = []
  for key, fn in overrides.items():
    if not callable(fn):
      raise TypeError(f"overrides[{key!r}] must be a callable fn(output) -> new value; "
                      f"got {type(fn).__name__}.")
    layer = _resolve(model, key, paths)
    if getattr(layer, "quantization_mode", None) is not None:
      raise NotImplementedError(f"Layer {key!r} is quantised by Keras "
                                f"({layer.quantization_mode}); overriding its output is "
                                "not supported. Use hypernet.core.ops.quantize_weights instead.")
    resolved.append((layer, fn))
  if not hasattr(_ACTIVE, "fns"):
    _ACTIVE.fns = {}
  active = _ACTIVE.fns
  installed = []
  try:
    for layer, fn in resolved:
      _install(layer)
      installed.append(layer)
      active.setdefault(id(layer), []).append(fn)
    yield
  finally:
    for layer, fn in reversed(resolved[:len(installed)]):
      fns = active[id(layer)]
      del fns[len(fns) - 1 - fns[::-1].index(fn)]  # the last one this context added
      if not fns:
        del active[id(layer)]
    for layer in reversed(installed):
      _uninstall(layer)


# ----------------------------------------------------------------------------------------
# Quantisers (straight-through estimators).
# ----------------------------------------------------------------------------------------

def _float_tensor(w, fn_name: str) -> tf.Tensor:
  w = tf.convert_to_tensor(w)
  if not w.dtype.is_floating:
    raise TypeError(f"{fn_name}: w must be a floating-point tensor; got dtype "
                    f"{w.dtype.name}.")
  return w


def binary(w, scaled: bool = True, axis: Axis = None) -> tf.Tensor:
  """Binarises weights with a straight-through gradient.

  Forward: ``b = +1 where w >= 0 else -1`` (BinaryConnect's deterministic binarisation,
  Courbariaux et al. 2015, arXiv:1511.00363; zero maps to +1), times
  ``alpha = mean(|w|)`` over ``axis`` when ``scaled`` (XNOR-Net's Binary-Weight-Networks,
  Rastegari et al. 2016, arXiv:1603.05279: ``alpha* = ||W||_1 / n`` minimises
  ``||W - alpha b||^2``). Backward: identity (the plain straight-through estimator of
  Bengio et al. 2013; BinaryNet's variant additionally zeroes the gradient where
  ``|w| > 1``, which is not done here).

  Args:
    w: float weights of any shape, e.g. a Dense kernel ``[in, out]``.
    scaled: multiply by ``mean|w|`` (default) or return plain ``+-1`` (``False``).
    axis: axes ``alpha`` averages over; ``None`` (default) is one scale per tensor, e.g.
      ``axis=0`` for one scale per output unit of a Dense kernel, ``(0, 1, 2)`` per output
      channel of a Conv2D kernel ``[kh, kw, in, out]``.

  Returns:
    A tensor of ``w``'s shape and dtype with values in ``{-alpha, +alpha}``.

  Raises:
    TypeError: ``w`` is not floating point.
  """
  w = _float_tensor(w, "binary")
  q = tf.where(w >= 0, tf.ones_like(w), -tf.ones_like(w))
  if scaled:
    q = q * tf.reduce_mean(tf.abs(w), axis=axis, keepdims=True)
  return override_value(w, q, name="binary")


def ternary(w, axis: Axis = None, threshold_factor: float = 0.7) -> tf.Tensor:
  """Ternarises weights as in Ternary Weight Networks, with a straight-through gradient.

  Forward (Li, Zhang & Liu 2016, arXiv:1605.04711): threshold
  ``Delta = 0.7 * mean(|w|)``; ``t = sign(w)`` where ``|w| > Delta``, else ``0``; scale
  ``alpha = mean(|w_i|)`` over the ``i`` with ``|w_i| > Delta`` (``0`` if there is none);
  result ``alpha * t``. Backward: identity (straight-through, Bengio et al. 2013).

  Args:
    w: float weights of any shape.
    axis: axes the mean, threshold and scale are taken over; ``None`` (default): one per
      tensor. See :func:`binary`.
    threshold_factor: the ``0.7`` of TWN (their approximation of the optimal threshold
      for Gaussian or uniform weights).

  Returns:
    A tensor of ``w``'s shape and dtype with values in ``{-alpha, 0, +alpha}``.

  Raises:
    TypeError: ``w`` is not floating point.
  """
  w = _float_tensor(w, "ternary")
  a = tf.abs(w)
  delta = to_dtype(threshold_factor, w.dtype) * tf.reduce_mean(a, axis=axis, keepdims=True)
  kept = tf.cast(a > delta, w.dtype)
  count = tf.reduce_sum(kept, axis=axis, keepdims=True)
  alpha = tf.math.divide_no_nan(tf.reduce_sum(a * kept, axis=axis, keepdims=True), count)
  return override_value(w, alpha * tf.sign(w) * kept, name="ternary")


def int8(w, scale=None, axis: Axis = None) -> tf.Tensor:
  """Symmetric int8 fake quantisation with a straight-through gradient.

  Forward: ``q = clip(round(w / scale), -128, 127) * scale``, with ``round`` half to even
  (``tf.round``), computed in ``w``'s dtype; with ``scale=None``, the symmetric per-tensor
  (or per-``axis``) scale ``max(|w|) / 127`` (Jacob et al. 2018, arXiv:1712.05877;
  Krishnamoorthi 2018, arXiv:1806.08342), and ``1`` where ``max|w| = 0``. Backward:
  identity, also outside the clipping range (``tf.quantization.fake_quant_*`` instead
  zeroes the gradient there and nudges the range, so it is not used here).

  Example: ``int8(1000., scale=0.01)`` is ``127 * 0.01 = 1.27`` exactly.

  Args:
    w: float weights of any shape.
    scale: the step, a positive number or a tensor broadcastable to ``w`` (e.g.
      per-channel steps); ``None`` computes it from ``w``.
    axis: with ``scale=None``, the axes ``max|w|`` is taken over (``None``: per tensor).

  Returns:
    A tensor of ``w``'s shape and dtype whose values are integer multiples of ``scale``
    in ``[-128 scale, 127 scale]``.

  Raises:
    TypeError: ``w`` is not floating point.
    ValueError: a Python/NumPy ``scale`` is not positive.
  """
  w = _float_tensor(w, "int8")
  if scale is None:
    m = tf.reduce_max(tf.abs(w), axis=axis, keepdims=True)
    scale = tf.where(m > 0, m / tf.cast(127, w.dtype), tf.ones_like(m))
  else:
    if not tf.is_tensor(scale) and not np.all(np.asarray(scale) > 0):
      raise ValueError(f"int8: scale must be positive; got {scale}.")
    scale = tf.cast(scale, w.dtype)
  q = tf.clip_by_value(tf.round(w / scale), -128, 127) * scale
  return override_value(w, q, name="int8")


def _none(w) -> tf.Tensor:
  return tf.convert_to_tensor(w)


QUANTIZERS: Dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    "none": _none,
    "binary": binary,
    "ternary": ternary,
    "int8": int8,
}
"""Weight quantisers by config name: ``"none"`` (identity), ``"binary"`` (scaled,
:func:`binary`), ``"ternary"`` (:func:`ternary`), ``"int8"`` (per-tensor symmetric,
:func:`int8`)."""


def quantize_weights(weights: Mapping[str, tf.Tensor], kind: str,
                     patterns: Union[str, Sequence[str], None] = None) -> Dict[str, tf.Tensor]:
  """Quantises a target network's weight dict with the quantiser named ``kind``.

  Meant for the weights a hypernetwork (or inner loop) generates, before they go to
  :func:`hypernet.core.functional.functional_call`: the target runs on quantised weights while
  the gradient reaches the generator straight through (Bengio et al. 2013). Each tensor
  is quantised on its own (per-tensor scales).

  Args:
    weights: ``{path: float tensor}``, e.g. ``{"dense/kernel": ..., "dense/bias": ...}``.
    kind: one of ``QUANTIZERS``: ``"none"``, ``"binary"``, ``"ternary"``, ``"int8"``.
    patterns: glob pattern(s) (``"*/kernel"``, or a comma-separated string / list of
      them) selecting which paths to quantise; the others pass through unchanged.
      ``None`` (default) quantises every entry.

  Returns:
    A new dict with the same keys, in the same order.

  Raises:
    ValueError: ``kind`` is unknown (the message lists the kinds), or a pattern matches
      no path.
    TypeError: a selected tensor is not floating point.
  """
  if kind not in QUANTIZERS:
    raise ValueError(f"Unknown quantiser kind {kind!r}; choose one of {sorted(QUANTIZERS)}.")
  if patterns is None:
    pats = ["*"]
  elif isinstance(patterns, str):
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
  else:
    pats = list(patterns)
  for pat in pats:
    if not any(fnmatch.fnmatchcase(p, pat) for p in weights):
      raise ValueError(f"quantize_weights: pattern {pat!r} matches no path; paths: "
                       f"{list(weights)}")
  quantizer = QUANTIZERS[kind]
  out = {}
  for path, w in weights.items():
    if any(fnmatch.fnmatchcase(path, pat) for pat in pats):
      w = tf.convert_to_tensor(w)
      if not w.dtype.is_floating:
        raise TypeError(f"quantize_weights: weight {path!r} has dtype {w.dtype.name}; "
                        "only floating-point weights can be quantised (exclude it with "
                        "patterns).")
      out[path] = quantizer(w)
    else:
      out[path] = w
  return out
