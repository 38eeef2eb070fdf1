"""The conv4 few-shot target network (Vinyals et al. 2016; Finn et al. 2017, Sec. 5.2).

Four blocks of [3x3 conv with ``filters`` channels, BatchNorm, ReLU, 2x2 max-pool]
followed by a dense head. On 28x28 inputs the features are 1x1x64 (28 -> 14 -> 7 -> 3 ->
1). Meant to move to ``hypernet/tasks/targets.py``; nothing here depends on the meta-learners.
"""
from __future__ import annotations

from typing import Optional, Sequence

import keras

from hypernet.meta import per_step_bn


def make_conv4(num_classes: int = 5, input_shape: Sequence[int] = (28, 28, 1), *,
               filters: int = 64, num_blocks: int = 4, dtype: Optional[str] = None,
               name: str = "conv4", per_step_rows: int = 0,
               per_step_statistics: bool = False,
               per_step_weights: bool = False) -> keras.Sequential:
  """Builds the conv4 target network as a built ``keras.Sequential``.

  Layer (and so weight path) names: ``conv{i}/kernel``, ``conv{i}/bias``,
  ``bn{i}/gamma``, ``bn{i}/beta``, ``bn{i}/moving_mean``, ``bn{i}/moving_variance`` for
  ``i = 1..num_blocks``, then ``head/kernel``, ``head/bias`` (so ANIL's default
  ``head="head/*"`` selects the classifier).

  Args:
    num_classes: N of N-way classification: the head's output size (logits).
    input_shape: ``(H, W, C)`` of one image; inputs are ``[B, H, W, C]`` in ``dtype``.
    filters: channels of every conv layer.
    num_blocks: number of conv blocks.
    dtype: the layers' dtype (e.g. ``"float64"`` for finite-difference tests); ``None``
      for Keras' default (float32).
    name: model name.
    per_step_rows: with ``per_step_statistics`` or ``per_step_weights``, the BatchNorm
      layers are :class:`hypernet.meta.per_step_bn.PerStepBatchNormalization` with this
      many rows (inner steps + 1; MAML++), same weight paths with a leading row axis.
    per_step_statistics: per-step moving statistics (MAML++).
    per_step_weights: per-step ``gamma`` / ``beta`` (MAML++).

  Returns:
    The model; outputs are ``[B, num_classes]`` logits.

  Raises:
    ValueError: the input is too small for ``num_blocks`` 2x2 poolings.
  """
  h, w = int(input_shape[0]), int(input_shape[1])
  if (per_step_statistics or per_step_weights) and per_step_rows < 1:
    raise ValueError(f"per_step_rows={per_step_rows}: per-step BatchNorm needs one row per "
                     "inner step plus one for the query pass (inner_steps + 1).")
  if min(h, w) < 2 ** num_blocks:
    raise ValueError(f"input_shape={tuple(input_shape)} is too small for num_blocks="
                     f"{num_blocks} 2x2 max-pools; use at least {2 ** num_blocks} pixels.")
  layers = [keras.Input(tuple(input_shape), dtype=dtype)]
  for i in range(1, num_blocks + 1):
    layers += [
        keras.layers.Conv2D(filters, 3, padding="same", name=f"conv{i}", dtype=dtype),
        (per_step_bn.PerStepBatchNormalization(
            per_step_rows, per_step_statistics=per_step_statistics,
            per_step_weights=per_step_weights, name=f"bn{i}", dtype=dtype)
         if per_step_statistics or per_step_weights else
         keras.layers.BatchNormalization(name=f"bn{i}", dtype=dtype)),
        keras.layers.ReLU(name=f"relu{i}", dtype=dtype),
        keras.layers.MaxPooling2D(2, name=f"pool{i}", dtype=dtype),
    ]
  layers += [keras.layers.Flatten(name="flatten", dtype=dtype),
             keras.layers.Dense(num_classes, name="head", dtype=dtype)]
  return keras.Sequential(layers, name=name)
