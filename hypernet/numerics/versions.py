"""The TensorFlow / Keras versions hypernet is tested on, and one notice outside them.

The package declares lower bounds only (``pyproject.toml``): a TensorFlow or Keras released
after hypernet is allowed, because the private hooks it relies on check themselves at first
use (:mod:`.compat`) and either fall back to public code or stop with one line. Outside
:data:`TESTED` the first use of the numerics logs one warning saying so, and how to check
that version (``bash tools/forward_check.sh``).

:data:`TESTED` is what ``tools/version_matrix.sh`` ran (README, "Supported versions"): the
lower ends are CI's oldest pair (``.ci/oldest.txt``), the upper ends the newest pre-release
pair measured; ``tests/test_versions.py`` keeps the three in step.
"""
from __future__ import annotations

import logging
import re
from typing import Optional, Tuple

# Library -> (oldest, newest) (major, minor) tested, both ends included; pre-releases
# and nightlies of a minor version count as that version (2.22.0rc0 -> (2, 22)).
TESTED = {"TensorFlow": ((2, 19), (2, 22)), "Keras": ((3, 11), (3, 16))}

_noticed = set()


def major_minor(version: str) -> Optional[Tuple[int, int]]:
  """``"2.22.0rc0"`` -> ``(2, 22)``; ``None`` when ``version`` does not start with two
  dot-separated integers."""
  match = re.match(r"(\d+)\.(\d+)", version)
  return (int(match.group(1)), int(match.group(2))) if match else None


def outside_tested(library: str, version: str) -> Optional[str]:
  """Why ``version`` of ``library`` (a key of :data:`TESTED`) is outside the tested
  range, in a phrase (``"newer than ..."``, ``"older than ..."``); ``None`` inside it or
  when the version cannot be read."""
  got = major_minor(version)
  oldest, newest = TESTED[library]
  if got is None or oldest <= got <= newest:
    return None
  side, end = ("newer", newest) if got > newest else ("older", oldest)
  return f"{library} {version} is {side} than the {'%d.%d' % end} hypernet is tested on"


def notice_once(tf_version: str, keras_version: str) -> Optional[str]:
  """Logs one warning per process when TensorFlow or Keras is outside :data:`TESTED`.

  Returns:
    The warning's text, or ``None`` when both versions are inside the tested range (or
    the notice for this pair was already given).
  """
  reasons = [r for r in (outside_tested("TensorFlow", tf_version),
                         outside_tested("Keras", keras_version)) if r]
  key = (tf_version, keras_version)
  if not reasons or key in _noticed:
    return None
  _noticed.add(key)
  (tf_lo, tf_hi), (k_lo, k_hi) = TESTED["TensorFlow"], TESTED["Keras"]
  message = (
      f"hypernet: {'; '.join(reasons)} (tested: TensorFlow {tf_lo[0]}.{tf_lo[1]}-"
      f"{tf_hi[0]}.{tf_hi[1]}, Keras {k_lo[0]}.{k_lo[1]}-{k_hi[0]}.{k_hi[1]}; README, "
      "'Supported versions'). ")
  if any(" older " in r for r in reasons):
    message += (f"Upgrade: pip install -U 'tensorflow>={tf_lo[0]}.{tf_lo[1]}' "
                f"'keras>={k_lo[0]}.{k_lo[1]}'.")
  else:
    message += ("It is expected to work: each private hook hypernet uses checks itself at "
                "first use and falls back to public code or stops with one line; `bash "
                "tools/forward_check.sh` runs the compatibility tests on the newest releases.")
  logging.getLogger("hypernet").warning(message)
  return message
