"""oneDNN for TensorFlow's CPU kernels on every x86-64 CPU, chosen before TensorFlow loads.

TensorFlow's x86-64 Linux packages run their convolutions, matrix products and batch
normalisation on oneDNN by default only on CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI
or AMX (TensorFlow 2.9's release notes; RFC 400, "Enabling oneDNN operations for x86
CPUs"); on others, e.g. every AVX2-only CPU (AMD Zen 1-3, Intel before Cascade Lake /
Alder Lake), they run Eigen's kernels unless ``TF_ENABLE_ONEDNN_OPTS=1`` is set before
TensorFlow is imported. On a Zen 3 EPYC (AVX2) oneDNN made the MAML meta-step 1.19x
(second order) and 1.37x (first order) faster, with less memory
(``benchmarks/meta_bench.py --tf_envs``; docs/performance.md).

:func:`prefer_onednn` sets the variable where the user has not; call it before
TensorFlow is imported (or set ``TF_ENABLE_ONEDNN_OPTS=1`` in the environment). The
entry points do not call it by default: on that Zen 3, oneDNN's kernels broke the
bitwise equality of a multi-worker run resumed after a fault with the uninterrupted run
(last-bit differences, ``tests/test_multi_worker.py``), which TensorFlow's default
kernels keep. TensorFlow-free: importing this module loads nothing.
"""
from __future__ import annotations

import os
import platform
import sys
from typing import Mapping, MutableMapping, Optional

ENV = "TF_ENABLE_ONEDNN_OPTS"
_X86 = ("x86_64", "amd64", "i386", "i686")


def prefer_onednn(environ: Optional[MutableMapping[str, str]] = None,
                  modules: Optional[Mapping[str, object]] = None,
                  machine: Optional[str] = None) -> bool:
  """Sets ``TF_ENABLE_ONEDNN_OPTS=1`` unless the user set it (either way), TensorFlow is
  already imported (too late to matter), or the machine is not x86 (oneDNN's CPU kernels
  there are TensorFlow's x86 build).

  Args:
    environ: the environment to set it in (default ``os.environ``).
    modules: the imported modules (default ``sys.modules``).
    machine: the machine's architecture (default ``platform.machine()``).

  Returns:
    Whether it set the variable.
  """
  environ = os.environ if environ is None else environ
  modules = sys.modules if modules is None else modules
  machine = (platform.machine() if machine is None else machine).lower()
  if ENV in environ or "tensorflow" in modules or machine not in _X86:
    return False
  environ[ENV] = "1"
  return True
