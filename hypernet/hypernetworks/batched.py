"""A batch of weight sets in one forward pass: the target network with a leading
weight-set axis on every generated weight (``tf.vectorized_map`` with batched-conv
converters). How it works: docs/hypernetworks.md.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Dict, Iterator, List, Mapping, Optional

import keras
import tensorflow as tf

from hypernet.core import control_flow, functional, ops
from hypernet.numerics import compat

_LOCK = threading.RLock()
_INSTALLED: Dict[int, list] = {}  # id(layer) -> [layer, count]


def _out_size(size: int, k: int, stride: int, dilation: int, padding: str):
  eff = (k - 1) * dilation + 1
  if padding == "same":
    out = -(-size // stride)
    total = max((out - 1) * stride + eff - size, 0)
    return out, total // 2, total - total // 2
  if padding == "valid":
    return (size - eff) // stride + 1, 0, 0
  raise NotImplementedError(f"padding {padding!r} has no batched form (use 'same'/'valid').")


def conv2d_im2col(x: tf.Tensor, kernel: tf.Tensor, strides=(1, 1), padding: str = "valid",
                  dilation_rate=(1, 1)) -> tf.Tensor:
  """2-D convolution as im2col + matmul, equal to ``tf.nn.convolution`` (channels last).

  Args:
    x: ``[B, H, W, C_in]`` float, static ``H``, ``W``.
    kernel: ``[kh, kw, C_in, C_out]``.
    strides, dilation_rate: pairs of ints.
    padding: ``"same"`` (TensorFlow's SAME: the extra pixel goes after) or ``"valid"``.

  Returns:
    ``[B, H', W', C_out]``, the same values as ``tf.nn.convolution`` up to summation
    order.
  """
  kh, kw, cin, cout = (int(d) for d in kernel.shape)
  (sh, sw), (dh, dw) = strides, dilation_rate
  oh, top, bottom = _out_size(int(x.shape[1]), kh, sh, dh, padding)
  ow, left, right = _out_size(int(x.shape[2]), kw, sw, dw, padding)
  if top or bottom or left or right:
    x = tf.pad(x, [[0, 0], [top, bottom], [left, right], [0, 0]])
  cols = [x[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
          for i in range(kh) for j in range(kw)]
  patches = cols[0] if len(cols) == 1 else tf.concat(cols, axis=-1)  # [B, oh, ow, kh kw cin]
  return tf.einsum("bhwp,po->bhwo", patches, tf.reshape(kernel, [kh * kw * cin, cout]))


# -- grouped convolution: a pfor converter for Conv2D with a loop-variant filter -----------

def _grouped_conv2d_converter(original):
  """Wraps pfor's Conv2D converter: a filter that varies across the loop (``S`` kernels
  ``[S, kh, kw, cin, cout]``) becomes one grouped convolution with ``S`` groups (input
  ``[B, H, W, S cin]``, filter ``[kh, kw, cin, S cout]``); loop-invariant filters go to
  the original converter. Extends ``pfor`` through its documented converter registry."""
  def convert(pfor_input):
    x_in, k_in = pfor_input.input(0), pfor_input.input(1)
    if not k_in.is_stacked or pfor_input.get_attr("data_format") != b"NHWC":
      return original(pfor_input)
    k = k_in.t                                                     # [S, kh, kw, cin, cout]
    kh, kw, cin, cout = (int(d) for d in k.shape[1:])  # cin: per group when grouped
    k = tf.reshape(tf.transpose(k, [1, 2, 3, 0, 4]), [kh, kw, cin, -1])
    if x_in.is_stacked:                                            # [S, B, H, W, cin]
      x = x_in.t
      shape = tf.shape(x)
      x = tf.reshape(tf.transpose(x, [1, 2, 3, 0, 4]),
                     tf.stack([shape[1], shape[2], shape[3], shape[0] * shape[4]]))
    else:                                                          # [B, H, W, cin]
      x = tf.tile(x_in.t, tf.stack([1, 1, 1, pfor_input.pfor.loop_len_vector[0]]))
    y = compat.pfor_create_op(
        "Conv2D", [x, k], [t.dtype for t in pfor_input.outputs],
        pfor_input.op.node_def.attr).outputs[0]                   # [B, H', W', S cout]
    ys = tf.shape(y)
    y = tf.reshape(y, tf.stack([ys[0], ys[1], ys[2], -1, cout]))
    return [compat.pfor_module().wrap(tf.transpose(y, [3, 0, 1, 2, 4]), True)]

  return convert


def _stacking_converter(original):
  """Wraps pfor's DepthwiseConv2dNative converter, which needs both the input and the
  filter to vary across the loop: a loop-invariant one (a shared depthwise kernel, or
  inputs shared by every weight set) is tiled first."""

  def convert(pfor_input):
    if not all(t.is_stacked for t in pfor_input.inputs):
      pfor_input.stack_inputs()
    return original(pfor_input)

  return convert


def _shared_matmul_converter(original):
  """Wraps pfor's BatchMatMulV2 converter for a loop-variant input ``[S, ..., M, K]`` times a
  loop-invariant 2-D matrix ``[K, N]`` (a Dense / EinsumDense kernel shared by every
  weight set, on a rank-3 per-example input): one 2-D ``MatMul`` on the input reshaped to
  ``[-1, K]``, the same products. pfor's own converter emits a broadcasting BatchMatMulV2
  ``[S, 1, M, K] x [K, N]``, which TensorFlow 2.21's oneDNN CPU kernel corrupts memory on
  for some shapes (``[16, 1, 5, 8] x [8, 8]`` aborts the process)."""

  def convert(pfor_input):
    x_in, y_in = pfor_input.input(0), pfor_input.input(1)
    if (not x_in.is_stacked or y_in.is_stacked or x_in.t.shape.rank is None
        or y_in.t.shape.rank != 2 or pfor_input.get_attr("adj_x")):
      return original(pfor_input)
    x, y = x_in.t, y_in.t
    out = tf.matmul(tf.reshape(x, tf.stack([-1, tf.shape(x)[-1]])), y,
                    transpose_b=bool(pfor_input.get_attr("adj_y")))
    shape = tf.concat([tf.shape(x)[:-1], tf.shape(out)[-1:]], 0)
    return [compat.pfor_module().wrap(tf.reshape(out, shape), True)]

  return convert


_PATCHED: Dict[str, list] = {}  # op type -> [active contexts, original converter]


@contextlib.contextmanager
def _patched_converters(factories) -> Iterator[None]:
  """Installs ``{op_type: factory(original) -> converter}`` in pfor's converter registry
  for the duration of the context (reference counted, thread safe)."""
  registry = compat.pfor_converter_registry()
  with _LOCK:
    for op_type, factory in factories.items():
      entry = _PATCHED.setdefault(op_type, [0, None])
      if not entry[0]:
        entry[1] = registry[op_type]
        registry[op_type] = factory(entry[1])
      entry[0] += 1
  try:
    yield
  finally:
    with _LOCK:
      for op_type in factories:
        entry = _PATCHED[op_type]
        entry[0] -= 1
        if not entry[0]:
          registry[op_type] = entry[1]


_PROBED: Dict[str, bool] = {}


def _pfor_canary():
  """Two 2x2 kernels ``[2, 2, 2, 1, 2]`` on one ``[1, 3, 3, 1]`` input through
  ``tf.vectorized_map`` with the patched converters (a grouped convolution), against a
  loop of ``tf.nn.conv2d``; and a shared depthwise kernel through the stacking one."""
  x = tf.reshape(tf.range(9, dtype=tf.float32), [1, 3, 3, 1])
  k = tf.reshape(tf.range(16, dtype=tf.float32) - 7.0, [2, 2, 2, 1, 2])
  dk = tf.ones([2, 2, 1, 1])
  want = tf.stack([tf.nn.conv2d(x, k[i], 1, "VALID") for i in range(2)])
  want_d = tf.stack([tf.nn.depthwise_conv2d(x * (i + 1.0), dk, [1, 1, 1, 1], "VALID")
                     for i in range(2)])
  with _patched_converters({"Conv2D": _grouped_conv2d_converter,
                            "DepthwiseConv2dNative": _stacking_converter,
                            "BatchMatMulV2": _shared_matmul_converter}):
    got = tf.vectorized_map(lambda kk: tf.nn.conv2d(x, kk, 1, "VALID"), k,
                            fallback_to_while_loop=False)
    got_d = tf.vectorized_map(
        lambda s: tf.nn.depthwise_conv2d(x * s, dk, [1, 1, 1, 1], "VALID"),
        tf.constant([1.0, 2.0]), fallback_to_while_loop=False)
    m = tf.reshape(tf.range(6, dtype=tf.float32), [3, 2])
    got_m = tf.vectorized_map(lambda s: tf.matmul(x[0, :, :, :1] * s, m[:1]),
                              tf.constant([1.0, 2.0]), fallback_to_while_loop=False)
  want_m = tf.stack([tf.matmul(x[0, :, :, :1] * s, m[:1]) for s in (1.0, 2.0)])
  for name, a, b in (("Conv2D", got, want), ("DepthwiseConv2dNative", got_d, want_d),
                     ("BatchMatMulV2", got_m, want_m)):
    if tuple(a.shape) != tuple(b.shape) or float(tf.reduce_max(tf.abs(a - b))) > 1e-4:
      return f"{name} batched over kernels differs from a loop"
  return None


def _has_registry() -> bool:
  """Whether pfor's converter registry can be extended here (private:
  :func:`hypernet.numerics.compat.pfor_converter_registry`) and the extension computes
  what a loop does (canary :func:`_pfor_canary`); if not, one warning, and kernels batch
  by im2col."""
  if compat.pfor_converter_registry() is None:
    reason = f"TensorFlow {tf.__version__} has no pfor converter registry of the known form"
  else:
    reason = compat.run_canary("pfor_converters", _pfor_canary)
  if reason is not None:
    compat.warn_once("pfor_converters", "%s; convolution kernels batch by im2col (only "
                     "speed is affected).", reason)
  return reason is None


def grouped_conv_available(dtype=tf.float32) -> bool:
  """Whether grouped convolutions *and their gradients* run here in ``dtype``.

  TensorFlow's CPU kernels differentiate grouped convolutions only through oneDNN
  (float32, bfloat16; "Gradients for grouped convolutions are not supported on CPU"
  otherwise, e.g. float64, with ``TF_ENABLE_ONEDNN_OPTS=0``, or on CPUs where TensorFlow
  leaves oneDNN off by default: those without AVX512_VNNI / AVX_VNNI / AMX, such as AMD
  Zen 3; see :func:`hypernet.numerics.onednn.prefer_onednn`); GPUs support them. This
  runs a tiny grouped convolution and its two gradient kernels (``Conv2DBackpropInput``,
  ``Conv2DBackpropFilter``, called directly: no tape, which ``tf.init_scope`` would
  pause) once per dtype, eagerly also when called inside a ``tf.function``, and caches
  the answer. Also False when this
  TensorFlow lacks pfor's converter registry.
  """
  dtype = tf.as_dtype(dtype)
  if dtype.name in _PROBED:
    return _PROBED[dtype.name]
  ok = _has_registry()
  if ok:
    # The gradient kernels are called directly (what a tape would call): tf.init_scope
    # (eager, even inside a trace) also pauses every tape of the thread, so a tape
    # opened in it would record nothing.
    with tf.init_scope():
      try:
        x = tf.ones([1, 3, 3, 4], dtype)      # 4 input channels,
        k = tf.ones([2, 2, 2, 2], dtype)      # 2 per group: 2 groups
        dy = tf.ones([1, 2, 2, 2], dtype)
        strides = [1, 1, 1, 1]
        y = tf.raw_ops.Conv2D(input=x, filter=k, strides=strides, padding="VALID")
        gx = tf.raw_ops.Conv2DBackpropInput(input_sizes=tf.shape(x), filter=k,
                                            out_backprop=dy, strides=strides,
                                            padding="VALID")
        gk = tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=tf.shape(k),
                                             out_backprop=dy, strides=strides,
                                             padding="VALID")
        ok = (tuple(y.shape) == (1, 2, 2, 2) and tuple(gx.shape) == tuple(x.shape)
              and tuple(gk.shape) == tuple(k.shape))
      except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError,
              tf.errors.NotFoundError):
        ok = False
  _PROBED[dtype.name] = ok
  return ok


# -- im2col: Conv layers computed as strided slices + one matmul --------------------------

def _vectorizable_conv_op(layer):

  def convolution_op(inputs, kernel):
    return conv2d_im2col(inputs, kernel, tuple(layer.strides), layer.padding,
                         tuple(layer.dilation_rate))

  return convolution_op


def _conv_kind(layer) -> str:
  """"conv", "transpose", "depthwise", "separable" or "" (not a convolution), from Keras'
  public layer classes."""
  layers = keras.layers
  for kind, classes in (
      ("transpose", (layers.Conv1DTranspose, layers.Conv2DTranspose, layers.Conv3DTranspose)),
      ("depthwise", (layers.DepthwiseConv1D, layers.DepthwiseConv2D)),
      ("separable", (layers.SeparableConv1D, layers.SeparableConv2D)),
      ("conv", (layers.Conv1D, layers.Conv2D, layers.Conv3D))):
    if isinstance(layer, classes):
      return kind
  return ""


def _batched_form(layer, kind: str, conv: str) -> bool:
  """Whether ``tf.vectorized_map`` has a batched form of ``layer`` with per-set kernels
  (tested per class against a loop of plain calls: tests/test_edges.py)."""
  if getattr(layer, "data_format", "channels_last") != "channels_last":
    return False
  if kind == "conv":
    if conv == "im2col":  # Conv1D calls ops.conv itself, not convolution_op.
      return layer.rank == 2 and layer.groups == 1 and layer.padding in ("same", "valid")
    return layer.rank in (1, 2)
  if kind == "depthwise":   # DepthwiseConv2dNative, both inputs stacked by the converter.
    return layer.rank in (1, 2)
  if kind == "separable":   # depthwise + a 1x1 Conv2D: the Conv2D needs the grouped form.
    return conv == "grouped" and layer.rank in (1, 2)
  return False              # transposed convolutions: pfor has no batched form.


def _conv_layers(model, batched_paths, conv: str) -> List[keras.layers.Layer]:
  """Conv1D/Conv2D layers of ``model`` (those im2col replaces); raises for a layer of
  any convolution class with a batched kernel and no batched form."""
  found = []
  for path, layer in ops.layer_paths(model).items():
    kind = _conv_kind(layer)
    if not kind:
      continue
    kernels = [functional._relative_path(model, v) for v in layer.trainable_weights  # pylint: disable=protected-access
               if v.path.rsplit("/", 1)[-1].endswith("kernel")]
    supported = _batched_form(layer, kind, conv)
    if supported and kind == "conv" and conv == "im2col":
      found.append(layer)
    if not supported and any(k in batched_paths for k in kernels):
      raise NotImplementedError(
          f"Layer {path!r} ({type(layer).__name__}, rank {layer.rank}, groups "
          f"{getattr(layer, 'groups', 1)}, padding {layer.padding!r}) has no vectorised "
          f"form for a batch of kernels with conv={conv!r}; use parallel='map_fn' or do "
          "not generate its kernel"
          + (" (conv='grouped' covers it: float32 on CPU, or a GPU)."
             if _batched_form(layer, kind, "grouped") else "."))
  return found


@contextlib.contextmanager
def vectorizable_convs(model, batched_paths=(), conv: str = "grouped") -> Iterator[None]:
  """Context manager: inside it, ``tf.vectorized_map`` can batch ``model``'s convolutions
  over kernels.

  ``conv="grouped"``: pfor turns a Conv2D (and Conv1D, which TensorFlow runs as Conv2D)
  whose filter varies across the loop into one grouped convolution. ``conv="im2col"``:
  the model's Conv1D/Conv2D layers compute :func:`conv2d_im2col` instead (one instance
  attribute per layer, removed on exit). Either way nothing changes outside the context.

  Raises:
    NotImplementedError: a layer whose kernel is in ``batched_paths`` has no batched
      form (transposed or 3-D convolutions; for im2col also Conv1D, grouped ones,
      causal padding and separable convolutions); the message names the layer.
    ValueError: an unknown ``conv``.
    hypernet.numerics.compat.UnsupportedVersionError: ``conv="im2col"`` on a Keras whose
      convolution layers ignore an instance-level ``convolution_op``
      (:func:`hypernet.numerics.compat.check_instance_convolution_op`).
  """
  if conv not in ("grouped", "im2col"):
    raise ValueError(f"conv={conv!r}; use 'grouped' or 'im2col'.")
  layers = _conv_layers(model, set(batched_paths), conv)
  factories = ({"DepthwiseConv2dNative": _stacking_converter,
                "BatchMatMulV2": _shared_matmul_converter} if _has_registry() else {})
  if conv == "grouped":
    factories["Conv2D"] = _grouped_conv2d_converter
    layers = []
  with contextlib.ExitStack() as stack:
    if factories:
      stack.enter_context(_patched_converters(factories))
    if layers:
      compat.check_instance_convolution_op()
    with _LOCK:
      for layer in layers:
        entry = _INSTALLED.get(id(layer))
        if entry is None:
          compat.set_instance_attribute(layer, "convolution_op", _vectorizable_conv_op(layer))
          _INSTALLED[id(layer)] = [layer, 1]
        else:
          entry[1] += 1
    try:
      yield
    finally:
      with _LOCK:
        for layer in layers:
          entry = _INSTALLED[id(layer)]
          entry[1] -= 1
          if not entry[1]:
            del _INSTALLED[id(layer)]
            compat.delete_instance_attribute(layer, "convolution_op")


def num_weight_sets(weights: Mapping[str, tf.Tensor], model: Optional[keras.Model] = None):
  """The common leading size ``S`` of a batched weight dict (int, or a scalar tensor
  when only known at run time).

  Raises:
    ValueError: an empty dict; a weight whose rank is not its variable's rank + 1 (needs
      ``model``); two weights with different static leading sizes (names both).
  """
  if not weights:
    raise ValueError("A batched call needs at least one batched weight (got none).")
  variables = functional.variable_paths(model) if model is not None else {}
  first_path, first = None, None
  for path, w in weights.items():
    w = tf.convert_to_tensor(w)
    if path in variables and w.shape.rank != len(variables[path].shape) + 1:
      raise ValueError(
          f"Batched weight {path!r} must have shape [S, *{tuple(variables[path].shape)}] "
          f"(a leading weight-set axis); given shape {tuple(w.shape)}.")
    s = w.shape[0]
    if s is None:
      continue
    if first is None:
      first_path, first = path, s
    elif s != first:
      raise ValueError(
          f"Every batched weight needs the same number of weight sets: {path!r} has {s} "
          f"along its leading axis but {first_path!r} has {first}.")
  if first is not None:
    return first
  return tf.shape(tf.convert_to_tensor(next(iter(weights.values()))))[0]


def batched_functional_call(model: keras.Model, weights: Mapping[str, tf.Tensor], *inputs,
                            shared_inputs: bool = False, per_example: bool = False,
                            training: Optional[bool] = False, return_state: bool = False,
                            state: Optional[Mapping[str, tf.Tensor]] = None,
                            parallel: str = "vectorized_map", conv: str = "auto",
                            return_losses: bool = False):
  """Runs ``model`` on ``S`` weight sets at once.

  Equals ``tf.stack([functional_call(model, {p: w[s] for p, w in weights.items()},
  *inputs_s, ...) for s in range(S)])`` (tested to 1e-5), without the loop.

  Args:
    model: a built Keras 3 model (any kind, see :func:`hypernet.core.functional.functional_call`).
    weights: ``{path: [S, *variable shape]}``; paths not given come from the model's own
      variables and are shared by every set.
    *inputs: the model's inputs. By default each has a leading weight-set axis:
      ``[S, B, ...]`` (set ``s`` runs on its own batch ``inputs[s]``, e.g. one task's
      examples). With ``shared_inputs=True`` they are ``[B, ...]``, run under every set.
      With ``per_example=True`` they are ``[S, ...]``: one example per weight set
      (dynamic hypernetworks, per-example weights).
    shared_inputs: see ``inputs`` (not with ``per_example``).
    per_example: see ``inputs`` (not with ``shared_inputs``).
    training: passed to the model (BatchNorm uses each set's own batch statistics).
    return_state: also return the new non-trainable state, ``{path: [S, ...]}`` (one
      state per weight set; e.g. average BatchNorm statistics over sets to share them).
    state: non-trainable state ``{path: tensor}`` shared by every set.
    parallel: ``"vectorized_map"`` (one batched pass) or ``"map_fn"`` (a ``tf.map_fn``
      while loop, for layers with no vectorised form).
    conv: how convolutions with per-set kernels are vectorised: ``"grouped"`` (one
      grouped convolution), ``"im2col"`` (slices + batched matmul) or ``"auto"``
      (grouped where grouped convolutions can be differentiated in the weights' dtype,
      see :func:`grouped_conv_available`; else im2col); see :func:`vectorizable_convs`.

    return_losses: also return the model's losses (weight regularizer penalties on each
      set's weights, activity regularizers, ``add_loss`` terms) as a list of ``[S]``
      tensors, one entry per set (see :func:`hypernet.core.functional.functional_call`).

  Returns:
    The model's outputs with a leading ``S`` axis (``[S, B, ...]``; ``[S, ...]`` for
    ``per_example``); with ``return_state`` / ``return_losses`` a tuple
    ``(outputs[, new_state][, losses])`` as :func:`~hypernet.core.functional.functional_call`.

  Raises:
    ValueError: weights with different numbers of weight sets or missing the leading
      axis, inputs whose leading size differs from the number of weight sets (names
      them), both ``shared_inputs`` and ``per_example``, an unknown ``parallel``,
      ``conv="grouped"`` where :func:`grouped_conv_available` is False for the weights'
      dtype (e.g. CPUs with oneDNN off, float64); and
      everything :func:`~hypernet.core.functional.functional_call` raises.
    NotImplementedError: a generated conv kernel with no vectorised form (the message
      names the layer; docs/layers.md lists which conv classes batch with which ``conv``).
  """
  if shared_inputs and per_example:
    raise ValueError("Choose shared_inputs or per_example, not both.")
  if parallel not in ("vectorized_map", "map_fn"):
    raise ValueError(f"parallel={parallel!r}; use 'vectorized_map' or 'map_fn'.")
  functional.check_weight_values(model, weights, "batched_functional_call")
  weights = {p: tf.convert_to_tensor(w) for p, w in weights.items()}
  num_sets = num_weight_sets(weights, model)
  # Each input may be a nest (a dict of token ids and a padding mask): leaves as tensors.
  inputs = [tf.nest.map_structure(tf.convert_to_tensor, x) for x in inputs]
  if not shared_inputs:
    for i, x in enumerate(inputs):
      for leaf in tf.nest.flatten(x):
        if isinstance(num_sets, int) and leaf.shape.rank and leaf.shape[0] is not None \
            and leaf.shape[0] != num_sets:
          raise ValueError(
              f"inputs[{i}] has {leaf.shape[0]} entries along its leading (weight-set) axis "
              f"but there are {num_sets} weight sets; give inputs [S, B, ...] (or [S, ...] "
              "with per_example=True), or shared_inputs=True for inputs [B, ...].")

  def one(args):
    w, xs = args
    if per_example:
      xs = [tf.nest.map_structure(lambda t: t[None], x) for x in xs]
    result = functional.functional_call(model, w, *xs, training=training,
                                        return_state=return_state, state=state,
                                        return_losses=return_losses)
    parts = list(result) if (return_state or return_losses) else [result]
    if per_example:
      parts[0] = tf.nest.map_structure(lambda t: t[0], parts[0])
    result = tuple(parts) if len(parts) > 1 else parts[0]
    # Unchanged state comes back as the variable itself; pfor needs tensors.
    return tf.nest.map_structure(tf.convert_to_tensor, result)

  if shared_inputs:
    fn = lambda w: one((w, inputs))
    elems = weights
  else:
    fn = one
    elems = (weights, inputs)
  if parallel == "map_fn":
    return control_flow.map_fn(fn, elems, fn_output_signature=_signature(model, fn, elems))
  dtypes = {w.dtype for w in weights.values() if w.dtype.is_floating} or {tf.float32}
  if conv == "auto":
    conv = "grouped" if all(grouped_conv_available(d) for d in dtypes) else "im2col"
  elif conv == "grouped":
    missing = sorted(d.name for d in dtypes if not grouped_conv_available(d))
    if missing:
      raise ValueError(
          f"conv='grouped': TensorFlow {tf.__version__} cannot differentiate grouped "
          f"convolutions in {', '.join(missing)} here (its CPU kernels need oneDNN, "
          "float32 / bfloat16 only); use conv='auto' or 'im2col', or turn oneDNN on "
          "(TF_ENABLE_ONEDNN_OPTS=1 before TensorFlow loads).")
  with vectorizable_convs(model, list(weights), conv):
    return tf.vectorized_map(fn, elems, fallback_to_while_loop=False)


def _signature(model, fn, elems):
  """Output signature for tf.map_fn, from tracing ``fn`` on one element (not running it)."""
  del model
  spec = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape[1:], t.dtype), elems)
  out = tf.function(fn).get_concrete_function(spec).structured_outputs
  return tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), out)


def reduce_state(state: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """Turns a per-weight-set state ``{path: [S, ...]}`` into one shared state: the mean
  over sets for float entries (BatchNorm moving statistics), the first set's value for
  the others (RNG seed state, identical across sets)."""
  return {p: (tf.reduce_mean(v, 0) if v.dtype.is_floating else v[0]) for p, v in state.items()}
