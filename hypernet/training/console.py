"""How metrics read on the console (TensorFlow-free: the entry points import it early)."""
from __future__ import annotations

from typing import Mapping


def metric_value(name: str, value) -> str:
  """A metric's value as the console shows it: accuracies and error rates (fractions, and
  their ``_ci95`` half-widths) in percent (``98.61%``), other floats to 4 significant
  digits (``0.08103``)."""
  if isinstance(value, float) and ("accuracy" in name or name.endswith("error")):
    return f"{100 * value:.2f}%"
  if isinstance(value, float):
    return f"{value:.4g}"
  return f"{value}"


def _metric_text(name: str, value) -> str:
  return f"{name} {metric_value(name, value)}"


def format_metrics(metrics: Mapping) -> str:
  """``"accuracy 97.77%, loss 0.08019"``: accuracies first; accuracies, error rates and
  their ``_ci95`` half-widths in percent; other values to 4 significant digits."""
  order = sorted(metrics, key=lambda k: (not k.startswith("accuracy"), "accuracy" not in k))
  return ", ".join(_metric_text(k, metrics[k]) for k in order)
