"""Hyperfan initialisation targets (Chang, Flokas & Lipson 2020, "Principled Weight
Initialization for Hypernetworks", ICLR): the mean and standard deviation each generated
tensor starts with. The rules per role: docs/hypernetworks.md.
"""
from __future__ import annotations

import math
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

MODES = ("hyperfan_in", "hyperfan_out", "glorot")
PYTORCH = "pytorch"
"""The chunked hypernetwork's other init: PyTorch's default layer init, with the raw
chunks as the weights (no target statistics); docs/hypernetworks.md, "PyTorch's init"."""
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
  """Standard deviation a kernel should have at init under ``mode`` (docs/hypernetworks.md).

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
      leaf name (docs/hypernetworks.md).

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
