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


APPLICATIONS_PREFIX = "keras.applications."


def make_application(name: str, input_shape: Tuple[int, int, int], num_classes: int, *,
                     image_size: int = 32) -> keras.Model:
  """A ``keras.applications`` model by name, untrained, as a target (logits out).

  ``input [H, W, C] -> Resizing(image_size) -> <Application>(include_top=True,
  weights=None, classes=num_classes, classifier_activation=None)``: a Functional model
  with the application nested inside it (weight paths are its layer names:
  ``"conv1_conv/kernel"``, ``"predictions/kernel"`` for ResNet50).

  Args:
    name: ``"keras.applications.ResNet50"`` (any application constructor taking
      ``input_shape``, ``weights``, ``classes``, ``classifier_activation``).
    input_shape: ``(H, W, C)`` of one image.
    num_classes: output width; outputs are float32 logits ``[B, num_classes]``.
    image_size: images are resized to this side (``config.model.image_size``; most
      applications need at least 32).

  Raises:
    ValueError: ``config.model.name`` names no application (one line, with the fix), or
      the application refuses the shape (its message, naming the field).
  """
  attr = name[len(APPLICATIONS_PREFIX):]
  constructor = getattr(keras.applications, attr, None)
  if not attr or not callable(constructor) or isinstance(constructor, type(keras)):
    raise ValueError(f"config.model.name={name!r}: keras.applications has no model "
                     f"{attr!r}; e.g. 'keras.applications.ResNet50', "
                     "'keras.applications.MobileNetV2'.")
  shape = (int(image_size), int(image_size), int(input_shape[2]))
  try:
    body = constructor(input_shape=shape, weights=None, classes=int(num_classes),
                       classifier_activation=None)
  except (TypeError, ValueError) as e:
    raise ValueError(f"config.model.name={name!r} with input {shape} (config.model."
                     f"image_size={image_size}): {str(e).splitlines()[0]}") from e
  inputs = keras.Input(tuple(input_shape))
  h = inputs
  if tuple(input_shape[:2]) != shape[:2]:
    h = keras.layers.Resizing(shape[0], shape[1], name="resize")(h)
  return keras.Model(inputs, body(h), name=f"{attr.lower()}_target")


def make_factory_model(name: str, input_shape: Tuple[int, int, int],
                       num_classes: int) -> keras.Model:
  """Calls the user factory ``"package.module:function"`` and checks what it returns.

  The factory is called as ``function(input_shape, num_classes)`` (``input_shape`` a
  tuple ``(H, W, C)``) and must return a *built* ``keras.Model`` mapping
  ``[B, H, W, C]`` to ``[B, num_classes]`` logits.

  Raises:
    ValueError (PluginError): an import that fails, a return value that is not a built
      Keras model, or one with another input / output shape: one line naming
      ``config.model.name`` and what was expected.
  """
  from hypernet.core import plugins  # pylint: disable=g-import-not-at-top
  factory = plugins.load_object(name, "config.model.name")
  model = plugins.call(factory, name, "config.model.name",
                       "factory(input_shape, num_classes)",
                       tuple(int(d) for d in input_shape), int(num_classes))
  field = f"config.model.name={name!r}"
  if not isinstance(model, keras.Model):
    raise plugins.PluginError(f"{field} returned a {type(model).__name__}; the factory must "
                              "return a built keras.Model (construct it with keras.Input).")
  if not model.built or not model.variables:
    raise plugins.PluginError(f"{field} returned an unbuilt model {model.name!r}; build it "
                              "(keras.Input(...) or call it once) so its weights have shapes.")
  try:
    out = model(keras.ops.zeros((2,) + tuple(input_shape)), training=False)
    out = tuple(out.shape) if hasattr(out, "shape") else type(out).__name__
  except Exception as e:  # pylint: disable=broad-except
    raise plugins.PluginError(f"{field}: the model does not take images of shape "
                              f"{tuple(input_shape)} ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}).") from e
  if not isinstance(out, tuple) or out[1:] != (int(num_classes),):
    raise plugins.PluginError(f"{field}: the model maps [2, *{tuple(input_shape)}] to {out}; "
                              f"expected one output [B, {num_classes}] (logits, one per "
                              "class).")
  return model


def make_target(config, input_shape: Tuple[int, int, int], num_classes: int) -> keras.Model:
  """Builds the target network named by ``config.name`` (``config`` = ``config.model``).

  Names: ``"cnn"``, ``"mobilenet_v2"``, ``"keras.applications.<Model>"`` (any
  application, :func:`make_application`) or a user factory ``"package.module:function"``
  (:func:`make_factory_model`).

  Raises:
    ValueError: for an unknown ``config.model.name``, listing the known names, or a
      plug-in's errors (one line naming the field).
  """
  if config.name == "cnn":
    return make_cnn(input_shape, num_classes, conv_widths=tuple(config.conv_widths),
                    kernel_size=config.kernel_size, pool=config.pool,
                    dense_widths=tuple(config.dense_widths), batch_norm=config.batch_norm,
                    dropout=config.dropout, kernel_l2=config.get("kernel_l2", 0.0))
  if config.name == "mobilenet_v2":
    return make_mobilenet_v2(input_shape, num_classes, alpha=config.alpha,
                             image_size=config.image_size, bn_momentum=config.bn_momentum)
  if str(config.name).startswith(APPLICATIONS_PREFIX):
    return make_application(config.name, input_shape, num_classes,
                            image_size=config.image_size)
  if ":" in str(config.name):
    return make_factory_model(config.name, input_shape, num_classes)
  raise ValueError(f"config.model.name={config.name!r} is not a known target network; "
                   "known: ['cnn', 'mobilenet_v2', 'keras.applications.<Model>', "
                   "'package.module:factory'].")
