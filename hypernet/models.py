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
             batch_norm: bool = False, dropout: float = 0.0,
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
  kw = {"dtype": dtype} if dtype is not None else {}
  layers = [keras.Input(tuple(input_shape), dtype=dtype)]
  for i, width in enumerate(conv_widths, start=1):
    layers.append(keras.layers.Conv2D(int(width), kernel_size, padding="same",
                                      use_bias=not batch_norm, name=f"conv{i}", **kw))
    if batch_norm:
      layers.append(keras.layers.BatchNormalization(name=f"bn{i}", **kw))
    layers.append(keras.layers.ReLU(name=f"relu{i}", **kw))
    if pool == "max":
      layers.append(keras.layers.MaxPooling2D(2, name=f"pool{i}", **kw))
    elif pool == "avg":
      layers.append(keras.layers.AveragePooling2D(2, name=f"pool{i}", **kw))
  layers.append(keras.layers.Flatten(name="flatten", **kw))
  for i, width in enumerate(dense_widths, start=1):
    layers.append(keras.layers.Dense(int(width), activation="relu", name=f"dense{i}", **kw))
  if dropout:
    layers.append(keras.layers.Dropout(dropout, name="dropout", **kw))
  layers.append(keras.layers.Dense(num_classes, name="head", **kw))
  return keras.Sequential(layers, name=name)


def make_target(config, input_shape: Tuple[int, int, int], num_classes: int) -> keras.Model:
  """Builds the target network named by ``config.name`` (``config`` = ``config.model``).

  Raises:
    ValueError: for an unknown ``config.model.name``, listing the known names.
  """
  if config.name == "cnn":
    return make_cnn(input_shape, num_classes, conv_widths=tuple(config.conv_widths),
                    kernel_size=config.kernel_size, pool=config.pool,
                    dense_widths=tuple(config.dense_widths), batch_norm=config.batch_norm,
                    dropout=config.dropout)
  raise ValueError(f"config.model.name={config.name!r} is not a known target network; "
                   "known: ['cnn'].")
