"""Target networks: plain Keras 3 models whose weights a weight source may replace.

Every constructor returns a *built* model (made with ``keras.Input``), so its weight
shapes are known before any data is seen and a hypernetwork can be shaped from them.
Layers get stable names (``conv1``, ``conv2``, ``dense1``, ``head``) so that weight
paths such as ``"conv1/kernel"`` are predictable and can be chosen by patterns.
"""
from __future__ import annotations

from typing import Sequence, Tuple

import keras


def make_cnn(input_shape: Tuple[int, int, int], num_classes: int, *,
             conv_widths: Sequence[int] = (32, 64), kernel_size: int = 3,
             pool: str = "max", dense_widths: Sequence[int] = (128,),
             batch_norm: bool = False, dropout: float = 0.0, kernel_l2: float = 0.0,
             dtype=None, name: str = "cnn") -> keras.Model:
  """A configurable base CNN: ``[conv -> (BN) -> ReLU -> pool] * L -> dense* -> head``.

  Args:
    input_shape: ``(H, W, C)`` of one image, e.g. ``(28, 28, 1)``.
    num_classes: width of the output layer; outputs are logits, float32 ``[B, classes]``.
    conv_widths: output channels of each conv layer (``conv1``, ``conv2``, ...), 3x3
      "same" convolutions by default.
    kernel_size: square kernel size of every conv layer.
    pool: ``"max"``, ``"avg"`` (2x2, stride 2, after each conv) or ``"none"``.
    dense_widths: widths of the hidden dense layers (``dense1``, ...) before the head.
    batch_norm: add a BatchNormalization layer (``bn1``, ...) after each conv.
    dropout: dropout rate before the head (0 disables it).
    kernel_l2: coefficient ``c`` of a ``keras.regularizers.L2(c)`` penalty
      ``c * sum(w**2)`` on every conv and dense kernel (0: none). The train loop adds it
      to the objective, computed on the weights actually used (generated ones included),
      and logs it as ``regularization_loss``.
    dtype: Keras dtype policy of every layer (``None``: the global policy; ``"float64"``
      for finite-difference checks).
    name: model name.

  Returns:
    A built ``keras.Sequential``.

  Raises:
    ValueError: for an unknown ``pool``, a non-positive width, or a spatial size that
      pooling would shrink below 1 (the message says how many pools fit).
  """
  if pool not in ("max", "avg", "none"):
    raise ValueError(f"pool must be 'max', 'avg' or 'none', got {pool!r}.")
  if any(int(w) <= 0 for w in list(conv_widths) + list(dense_widths)) or num_classes <= 0:
    raise ValueError(f"conv_widths {tuple(conv_widths)}, dense_widths {tuple(dense_widths)} "
                     f"and num_classes {num_classes} must all be positive.")
  h, w = input_shape[0], input_shape[1]
  if pool != "none" and min(h, w) // (2 ** len(conv_widths)) < 1:
    raise ValueError(
        f"{len(conv_widths)} conv+pool stages shrink a {h}x{w} input below 1 pixel; use at "
        f"most {max(min(h, w).bit_length() - 1, 0)} conv layers or pool='none'.")
  if kernel_l2 < 0:
    raise ValueError(f"config.model.kernel_l2={kernel_l2} must be >= 0 (0: no penalty).")
  kw = {"dtype": dtype} if dtype is not None else {}
  reg = {"kernel_regularizer": keras.regularizers.L2(float(kernel_l2))} if kernel_l2 else {}
  layers = [keras.Input(tuple(input_shape), dtype=dtype)]
  for i, width in enumerate(conv_widths, start=1):
    layers.append(keras.layers.Conv2D(int(width), kernel_size, padding="same",
                                      use_bias=not batch_norm, name=f"conv{i}", **kw, **reg))
    if batch_norm:
      layers.append(keras.layers.BatchNormalization(name=f"bn{i}", **kw))
    layers.append(keras.layers.ReLU(name=f"relu{i}", **kw))
    if pool == "max":
      layers.append(keras.layers.MaxPooling2D(2, name=f"pool{i}", **kw))
    elif pool == "avg":
      layers.append(keras.layers.AveragePooling2D(2, name=f"pool{i}", **kw))
  layers.append(keras.layers.Flatten(name="flatten", **kw))
  for i, width in enumerate(dense_widths, start=1):
    layers.append(keras.layers.Dense(int(width), activation="relu", name=f"dense{i}", **kw,
                                     **reg))
  if dropout:
    layers.append(keras.layers.Dropout(dropout, name="dropout", **kw))
  layers.append(keras.layers.Dense(num_classes, name="head", **kw, **reg))
  return keras.Sequential(layers, name=name)


def make_mobilenet_v2(input_shape: Tuple[int, int, int], num_classes: int, *,
                      alpha: float = 0.35, image_size: int = 32,
                      bn_momentum: float = 0.0,
                      name: str = "mobilenet_v2_target") -> keras.Model:
  """A ``keras.applications.MobileNetV2`` (Sandler et al. 2018) body, untrained, as a target.

  ``input [H, W, C] -> Resizing(image_size) -> MobileNetV2(include_top=False,
  weights=None, pooling="avg") -> Dense(num_classes, name="head")``: a Functional model
  with the application nested inside it. Its weight paths are the application's own
  layer names (``"Conv1/kernel"``, ``"block_1_expand/kernel"``,
  ``"block_1_depthwise/depthwise_kernel"``, ``"bn_Conv1/gamma"``, ...) plus
  ``"head/kernel"``, ``"head/bias"``; BatchNorm moving statistics are non-trainable state.

  Args:
    input_shape: ``(H, W, C)`` of one image (any number of channels).
    num_classes: output width; outputs are float32 logits ``[B, num_classes]``.
    alpha: MobileNetV2 width multiplier (0.35, 0.5, 0.75, 1.0, ...).
    image_size: the side images are resized to (bilinear); at least 32 (the
      application's minimum).
    bn_momentum: if in ``(0, 1)``, the momentum of every BatchNorm moving average
      (the application uses 0.999: on a run of a few thousand steps from scratch its
      moving statistics lag the weights, and inference-mode accuracy stays at chance);
      0 keeps the application's.
    name: model name.

  Raises:
    ValueError: ``image_size < 32`` or ``bn_momentum`` outside ``[0, 1)``.
  """
  if image_size < 32:
    raise ValueError(f"config.model.image_size={image_size}: MobileNetV2 needs at least 32.")
  if not 0.0 <= bn_momentum < 1.0:
    raise ValueError(f"config.model.bn_momentum={bn_momentum} must be in [0, 1) (0: keep "
                     "the application's 0.999).")
  body = keras.applications.MobileNetV2(
      input_shape=(image_size, image_size, int(input_shape[2])), alpha=alpha,
      include_top=False, weights=None, pooling="avg")
  inputs = keras.Input(tuple(input_shape))
  h = inputs
  if tuple(input_shape[:2]) != (image_size, image_size):
    h = keras.layers.Resizing(image_size, image_size, name="resize")(h)
  h = body(h)
  if bn_momentum:
    for layer in body.layers:
      if isinstance(layer, keras.layers.BatchNormalization):
        layer.momentum = bn_momentum
  outputs = keras.layers.Dense(num_classes, name="head")(h)
  return keras.Model(inputs, outputs, name=name)


def make_target(config, input_shape: Tuple[int, int, int], num_classes: int) -> keras.Model:
  """Builds the target network named by ``config.name`` (``config`` = ``config.model``).

  Raises:
    ValueError: for an unknown ``config.model.name``, listing the known names.
  """
  if config.name == "cnn":
    return make_cnn(input_shape, num_classes, conv_widths=tuple(config.conv_widths),
                    kernel_size=config.kernel_size, pool=config.pool,
                    dense_widths=tuple(config.dense_widths), batch_norm=config.batch_norm,
                    dropout=config.dropout, kernel_l2=config.get("kernel_l2", 0.0))
  if config.name == "mobilenet_v2":
    return make_mobilenet_v2(input_shape, num_classes, alpha=config.alpha,
                             image_size=config.image_size, bn_momentum=config.bn_momentum)
  raise ValueError(f"config.model.name={config.name!r} is not a known target network; "
                   "known: ['cnn', 'mobilenet_v2'].")
