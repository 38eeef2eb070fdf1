"""How metrics read on the console (TensorFlow-free: the entry points import it early)."""
from __future__ import annotations

from typing import Mapping


def _metric_text(name: str, value) -> str:
  if isinstance(value, float) and ("accuracy" in name or name.endswith("error")):
    return f"{name} {100 * value:.2f}%"  # Fractions (and their CI95 half-widths) in %.
  if isinstance(value, float):
    return f"{name} {value:.4g}"
  return f"{name} {value}"


def format_metrics(metrics: Mapping) -> str:
  """``"accuracy 97.77%, loss 0.08019"``: accuracies first; accuracies, error rates and
  their ``_ci95`` half-widths in percent; other values to 4 significant digits."""
  order = sorted(metrics, key=lambda k: (not k.startswith("accuracy"), "accuracy" not in k))
  return ", ".join(_metric_text(k, metrics[k]) for k in order)
