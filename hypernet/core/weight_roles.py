"""What each weight of a Keras 3 model is, decided from its layer's class.

A hypernetwork's initialisation (:mod:`hypernet.hypernetworks.init`) needs, for every
generated tensor, whether it is a kernel (and then its fan-in and fan-out), a bias (the
fans of its layer's kernel) or something else: :func:`weight_roles` decides it from the
layer that owns each variable (its table of layer classes and fans)."""
from __future__ import annotations

from typing import Dict, Mapping, NamedTuple, Optional

import keras
import numpy as np

from hypernet.core import paths
from hypernet.numerics import compat


class WeightRole(NamedTuple):
  """What one weight is: ``kind`` ``"kernel"``, ``"bias"`` or ``"other"``.

  ``fan_in``/``fan_out``: the kernel's fans (a bias: its layer's kernel fans; 0 for
  ``"other"``). ``layer``: the owning layer's class name.
  """
  kind: str
  fan_in: int = 0
  fan_out: int = 0
  layer: str = ""


class WeightSpec(dict):
  """``{path: tf.TensorSpec}`` that also carries ``roles``: ``{path: WeightRole}``.

  Returned by :func:`hypernet.core.functional.weight_spec`; hypernetworks read ``roles`` for
  their initialisation. A plain dict of TensorSpecs works too (kernels are then
  recognised by the ``kernel`` leaf of their path and given Dense/Conv fans by shape).
  """

  def __init__(self, spec: Mapping = (), roles: Optional[Mapping[str, WeightRole]] = None):
    super().__init__(spec)
    if roles is None:
      roles = getattr(spec, "roles", None) or {}
    self.roles: Dict[str, WeightRole] = {p: r for p, r in roles.items() if p in self}


# Kernels and biases are found by identity with these public layer properties (Keras keeps
# some of them behind a property, e.g. Dense's "_kernel"); other variables are "other".
_ROLE_ATTRS = ("kernel", "bias", "embeddings", "recurrent_kernel", "depthwise_kernel",
               "pointwise_kernel")


def _conv_lstm_cells(layers) -> set:
  """``id``s of the cells of the public ``ConvLSTM1D/2D/3D`` layers among ``layers`` (the
  cell class is private; its kernels are gate-stacked convolutions)."""
  L = keras.layers
  kinds = tuple(getattr(L, n) for n in ("ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D")
                if hasattr(L, n))
  return {id(l.cell) for l in layers if isinstance(l, kinds) and getattr(l, "cell", None)}


def _prod(values) -> int:
  return int(np.prod([int(v) for v in values])) if len(values) else 1


def _einsum_fans(layer, shape):
  equation = getattr(layer, "equation", "")
  try:
    inputs, output = equation.split("->")
    x_spec, k_spec = inputs.split(",")
  except ValueError:
    return None
  k_spec = k_spec.strip()
  if len(k_spec) != len(shape):
    return None
  fan_in = _prod([d for c, d in zip(k_spec, shape) if c in x_spec and c not in output])
  fan_out = _prod([d for c, d in zip(k_spec, shape) if c in output])
  return fan_in, fan_out


def _kernel_fans(layer, attr: str, shape, conv_lstm: bool = False):
  """``(fan_in, fan_out)`` of ``layer.<attr>`` (shape ``shape``), or None if not a kernel."""
  L = keras.layers
  shape = [int(d) for d in shape]
  conv_transpose = tuple(getattr(L, n) for n in ("Conv1DTranspose", "Conv2DTranspose",
                                                 "Conv3DTranspose") if hasattr(L, n))
  depthwise = tuple(getattr(L, n) for n in ("DepthwiseConv1D", "DepthwiseConv2D")
                    if hasattr(L, n))
  separable = tuple(getattr(L, n) for n in ("SeparableConv1D", "SeparableConv2D")
                    if hasattr(L, n))
  conv = tuple(getattr(L, n) for n in ("Conv1D", "Conv2D", "Conv3D") if hasattr(L, n))
  rnn_cells = {L.SimpleRNNCell: 1, L.LSTMCell: 4, L.GRUCell: 3}
  if isinstance(layer, separable):
    k = _prod(shape[:-2])
    if attr == "depthwise_kernel":
      return k, k * shape[-1]
    if attr == "pointwise_kernel":
      return k * shape[-2], k * shape[-1]
    return None
  if attr != "kernel" and not (attr == "embeddings" and isinstance(layer, L.Embedding)) \
      and attr != "recurrent_kernel":
    return None
  if isinstance(layer, L.Embedding):
    return 1, shape[-1]
  if isinstance(layer, depthwise):
    k = _prod(shape[:-2])
    return k, k * shape[-1]
  if isinstance(layer, conv_transpose):
    k = _prod(shape[:-2])
    strides = _prod(getattr(layer, "strides", ()) or ())
    return max(1, (k * shape[-1]) // max(strides, 1)), k * shape[-2]
  if isinstance(layer, conv):
    groups = int(getattr(layer, "groups", 1) or 1)
    k = _prod(shape[:-2])
    return k * shape[-2], k * shape[-1] // groups
  for cell, gates in rnn_cells.items():
    if isinstance(layer, cell) and len(shape) == 2:
      return shape[0], shape[1] // gates
  if conv_lstm:
    k = _prod(shape[:-2])   # kernel [*k, in, 4 f], recurrent_kernel [*k, f, 4 f]
    return k * shape[-2], k * shape[-1] // 4
  if isinstance(layer, L.EinsumDense):
    return _einsum_fans(layer, shape)
  if isinstance(layer, L.Dense) and len(shape) == 2:
    return shape[0], shape[1]
  return None


def _owners(layers):
  """``{id(variable): (layer, attribute)}`` for the variables the ``layers`` hold: by
  identity with their public kernel / bias properties (:data:`_ROLE_ATTRS`), else under
  the attribute name they are kept in (role "other"). A variable that a wrapper also
  holds (SpectralNormalization) goes to the innermost layer (children come after their
  parents)."""
  owners = {}
  for layer in layers:
    for attr, value in compat.instance_attributes(layer).items():
      if isinstance(value, keras.Variable):
        owners[id(value)] = (layer, attr)
    for attr in _ROLE_ATTRS:
      try:
        value = getattr(layer, attr, None)
      except Exception:  # pylint: disable=broad-except  (e.g. a property of an unbuilt layer)
        continue
      if isinstance(value, keras.Variable):
        owners[id(value)] = (layer, attr)
  return owners


def weight_roles(model: keras.layers.Layer) -> Dict[str, WeightRole]:
  """``{path: WeightRole}`` for every variable of a built model (paths as in
  :func:`hypernet.core.functional.variable_paths`), decided from the owning layer's class
  and the attribute holding the variable (names cannot tell: a ``DepthwiseConv2D``
  kernel ``[3, 3, 64, 1]`` has fans ``(9, 9)``, not a Conv2D kernel's ``(576, 9)``):

  | layer class (and subclasses) | weight ``[shape]`` | (fan_in, fan_out) |
  |---|---|---|
  | Dense | kernel ``[in, out]`` | ``(in, out)`` |
  | EinsumDense | kernel, any rank | products of the axes contracted, kept (1) |
  | Conv1D/2D/3D (``groups`` g) | kernel ``[*k, in/g, out]`` | ``(K*in/g, K*out/g)`` (2) |
  | Conv1D/2D/3DTranspose | kernel ``[*k, out, in]`` | ``(K*in/S, K*out)`` (3) |
  | DepthwiseConv1D/2D | kernel ``[*k, in, m]`` | ``(K, K*m)`` |
  | SeparableConv1D/2D | depthwise_kernel | ``(K, K*m)`` |
  | | pointwise_kernel ``[1.., c, out]`` | ``(c, out)`` |
  | Embedding | embeddings ``[vocab, d]`` | ``(1, d)`` (4) |
  | SimpleRNN/LSTM/GRU cells | kernel ``[in, G*u]`` | ``(in, u)`` per gate |
  | | recurrent_kernel ``[u, G*u]`` | ``(u, u)`` per gate |
  | ConvLSTM1D/2D/3D cells | kernel ``[*k, in, 4f]`` | ``(K*in, K*f)`` per gate |
  | | recurrent_kernel | ``(K*f, K*f)`` per gate |

  (1) the kernel axes contracted with the input, and those kept in the output; (2)
  ``K = prod(k)``; (3) ``S = prod(strides)``: the mean number of inputs reaching one
  output; (4) one row is read per output (a Dense layer on a one-hot input).

  Biases of these layers get the role ``"bias"`` with their layer's kernel fans. Every
  other variable is ``"other"``, also a kernel of a user's own layer class: its initial
  values (from the layer's own initializer) give its statistics. Sources: He et al. 2015
  (fan-in), Glorot & Bengio 2010 (fan-in / fan-out), Chang et al. 2020 (hyperfan init).

  Raises:
    ValueError: the model is not built (see :func:`hypernet.core.functional.variable_paths`).
  """
  layers = compat.flatten_layers(model)
  owners = _owners(layers)
  cells = _conv_lstm_cells(layers)
  roles: Dict[str, WeightRole] = {}
  for path, variable in paths.variable_paths(model).items():
    layer, attr = owners.get(id(variable), (None, ""))
    if layer is None:
      roles[path] = WeightRole("other")
      continue
    cls = type(layer).__name__
    fans = _kernel_fans(layer, attr, variable.shape, id(layer) in cells)
    if fans is not None:
      roles[path] = WeightRole("kernel", int(fans[0]), int(fans[1]), cls)
    elif attr == "bias":
      kernel_attr = "pointwise_kernel" if hasattr(layer, "pointwise_kernel") else "kernel"
      kernel = getattr(layer, kernel_attr, None)
      kfans = (_kernel_fans(layer, kernel_attr, kernel.shape, id(layer) in cells)
               if isinstance(kernel, keras.Variable) else None)
      roles[path] = (WeightRole("bias", int(kfans[0]), int(kfans[1]), cls) if kfans
                     else WeightRole("other", layer=cls))
    else:
      roles[path] = WeightRole("other", layer=cls)
  return roles
