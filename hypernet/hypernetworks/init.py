"""Hyperfan initialisation targets (Chang, Flokas & Lipson 2020, "Principled Weight
Initialization for Hypernetworks", ICLR).

A hypernetwork's generated weights should start with the variance a standard
initialiser would give the target layer, or the target's activations explode or vanish
at step 0. This module computes, for each generated tensor, the *target statistics*
(mean, standard deviation) that the hypernetwork's output must have at initialisation:

* ``"hyperfan_in"``: Var(W) = 2 / fan_in (He et al. 2015; keeps the forward signal
  variance through ReLU layers, Chang et al. Sec. 4.1 "hyperfan-in");
* ``"hyperfan_out"``: Var(W) = 2 / fan_out (keeps the backward signal variance, "hyperfan-out");
* ``"glorot"``: Var(W) = 2 / (fan_in + fan_out) (Glorot & Bengio 2010).

Kernels follow the mode, with the fans their *layer class* defines
(:mod:`hypernet.core.weight_roles`: a DepthwiseConv2D kernel ``[3, 3, 64, 1]`` has fans
``(9, 9)``, a transposed convolution's are read the other way round, an Embedding's are
``(1, dim)``). Biases get the standard deviation of their layer's kernel (so they learn
at a comparable rate) and mean 0. Every other tensor (BatchNorm gamma/beta, ...) gets
the mean and standard deviation of the target variable's own initial value (gamma:
mean 1), with a floor of 0.05 on the standard deviation so that zero-initialised
tensors can still be learned.

Roles come with the spec (:func:`hypernet.core.functional.weight_spec` returns a
:class:`hypernet.core.weight_roles.WeightSpec`). A hand-written spec without roles falls back
to its paths: a ``kernel`` leaf of rank >= 2 is a Dense/Conv kernel (fans by shape), a
``bias`` leaf takes the standard deviation of its sibling kernel.
"""
from __future__ import annotations

import math
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

MODES = ("hyperfan_in", "hyperfan_out", "glorot")
_MIN_STD = 0.05


def fans(path: str, shape) -> Tuple[int, int]:
  """``(fan_in, fan_out)`` of a Dense / ConvND kernel of the given shape, by shape alone.

  Dense ``[in, out]``; ConvND ``[*spatial, in, out]``. Only for kernels whose layer is
  unknown (a hand-written spec): other layer classes' fans come from
  :func:`hypernet.core.weight_roles.weight_roles`.

  Raises:
    ValueError: ``shape`` has rank < 2 (names ``path``).
  """
  shape = [int(d) for d in shape]
  if len(shape) < 2:
    raise ValueError(f"{path!r} with shape {shape} is not a kernel (rank < 2).")
  receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
  return receptive * shape[-2], receptive * shape[-1]


def kernel_std(path: str, shape, mode: str,
               kernel_fans: Optional[Tuple[int, int]] = None) -> float:
  """Standard deviation a kernel should have at init under ``mode`` (see module doc).

  ``kernel_fans``: the kernel's ``(fan_in, fan_out)`` from its layer class; ``None``:
  by shape (:func:`fans`).
  """
  fan_in, fan_out = kernel_fans if kernel_fans else fans(path, shape)
  if mode == "hyperfan_in":
    return math.sqrt(2.0 / fan_in)
  if mode == "hyperfan_out":
    return math.sqrt(2.0 / fan_out)
  if mode == "glorot":
    return math.sqrt(2.0 / (fan_in + fan_out))
  raise ValueError(f"init mode {mode!r} is unknown; choose one of {MODES}.")


def target_statistics(initial_values: Mapping[str, np.ndarray],
                      mode: str = "hyperfan_in",
                      roles: Optional[Mapping[str, object]] = None,
                      ) -> Dict[str, Tuple[float, float]]:
  """Returns ``{path: (mean, std)}`` that each generated tensor should start with.

  Args:
    initial_values: ``{path: array}``, the target network's initial values of the
      generated tensors (only their shapes are used for kernels).
    mode: one of :data:`MODES`.
    roles: ``{path: hypernet.core.weight_roles.WeightRole}`` (kind ``kernel`` / ``bias`` /
      ``other`` and fans, from the layer class); paths without one fall back to their
      leaf name (see module doc).

  Raises:
    ValueError: for an unknown ``mode``.
  """
  if mode not in MODES:
    raise ValueError(f"init mode {mode!r} is unknown; choose one of {MODES}.")
  roles = roles or {}
  stats: Dict[str, Tuple[float, float]] = {}
  for path, value in initial_values.items():
    role = roles.get(path)
    if role is not None:
      if role.kind in ("kernel", "bias"):
        stats[path] = (0.0, kernel_std(path, np.shape(value), mode,
                                       (role.fan_in, role.fan_out)))
      continue
    leaf = path.rsplit("/", 1)[-1]
    if leaf.endswith("kernel") and np.ndim(value) >= 2:
      stats[path] = (0.0, kernel_std(path, np.shape(value), mode))
  for path, value in initial_values.items():
    if path in stats:
      continue
    if path in roles:  # "other": statistics of the initial value (below).
      value = np.asarray(value, dtype=np.float64)
      stats[path] = (float(value.mean()), max(float(value.std()), _MIN_STD))
      continue
    leaf = path.rsplit("/", 1)[-1]
    sibling = path[: -len(leaf)] + "kernel"
    if leaf == "bias" and sibling in stats:
      stats[path] = (0.0, stats[sibling][1])
    else:
      value = np.asarray(value, dtype=np.float64)
      stats[path] = (float(value.mean()), max(float(value.std()), _MIN_STD))
  return stats
