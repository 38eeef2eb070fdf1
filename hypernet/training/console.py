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


def format_rate(steps_per_sec: float) -> str:
  """``"12 steps/s"``, ``"3.4 steps/s"``, ``"0.29 steps/s"``: two significant digits below
  10 steps/s (a meta-learning run at 0.3 steps/s does not read as ``0 steps/s``)."""
  if steps_per_sec >= 10:
    return f"{steps_per_sec:.0f} steps/s"
  return f"{steps_per_sec:.2g} steps/s"


def format_duration(seconds: float) -> str:
  """``"45s"``, ``"12m 05s"``, ``"2h 03m"``: an ETA as a person reads it."""
  seconds = max(0, int(round(seconds)))
  if seconds < 60:
    return f"{seconds}s"
  if seconds < 3600:
    return f"{seconds // 60}m {seconds % 60:02d}s"
  return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
