"""BatchNorm -> ReLU -> 2x2 max-pool as one CPU kernel: one of the accelerations of :mod:`.accel`.

The op wrapper of ``kernels/norm_relu_pool.cc`` (compiled on first use into
:func:`cache_dir`) with its registered first and exact second derivatives, and the
dispatch: within :func:`scope`, the ``MaxPooling2D(2)`` of a ReLU of a BatchNorm that
:mod:`.fused_norm` ran computes the whole block. The derivation, where it applies and
the build: ``docs/numerics.md`` ("The fused BatchNorm -> ReLU -> max-pool block")."""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from typing import Callable, Iterator, Optional, Tuple

import keras
import tensorflow as tf

from hypernet.numerics import compat, devices, second_order

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels",
                       "norm_relu_pool.cc")
_state = threading.local()  # .registry: fused BatchNorm outputs of this thread
_on = compat.Switch("hypernet.numerics.norm_relu_pool.scope()")
_off = compat.Switch("hypernet.numerics.norm_relu_pool.disabled()")
_unavailable = None  # why the pool dispatcher could not be installed
_load_lock = threading.Lock()
_library = None
_library_path: Optional[str] = None
_load_error: Optional[str] = None
_original_pool_call = None
# Our compiler flags (beside TensorFlow's): vectorised selects need -fno-trapping-math,
# the `#pragma omp simd` loops -fopenmp-simd. Part of the cache key.
_FLAGS = ["-std=c++17", "-shared", "-fPIC", "-O3", "-march=native", "-fno-trapping-math",
          "-fopenmp-simd", "-w"]


def _cpu_key() -> str:
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      lines = [l for l in f if l.startswith(("model name", "flags"))][:2]
  except OSError:
    lines = []
  return platform.machine() + "".join(lines)


def cache_dir() -> str:
  """Where compiled kernels are kept: ``$HYPERNET_KERNEL_CACHE`` or
  ``~/.cache/hypernet/kernels``."""
  return os.environ.get("HYPERNET_KERNEL_CACHE") or os.path.join(
      os.path.expanduser("~"), ".cache", "hypernet", "kernels")


# Extra flags tried in turn when the compile fails: g++ 12 with -march=native on a CPU
# with AVX512-FP16 (Sapphire Rapids and later) defines __AVX512FP16__, and the Eigen of
# TensorFlow's headers (PacketMathFP16.h) then fails to compile ("expected initializer
# before '<'"); the kernel uses no FP16, so that instruction set is turned off. A compiler
# that does not know -mno-avx512fp16 fails the second try, and the third drops
# -march=native (portable code, slower).
_FALLBACKS = ([], ["-mno-avx512fp16"], ["-march=x86-64-v2"])


def _compile(target: str) -> None:
  """Compiles the kernel into ``target``, trying :data:`_FALLBACKS` in turn.

  Raises:
    RuntimeError: no compiler, or every attempt failed (the first attempt's error line,
      the commands and the last attempt's output).
  """
  compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
  if not compiler:
    raise RuntimeError("no C++ compiler found (install g++, or set CXX)")
  os.makedirs(os.path.dirname(target), exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(target))
  os.close(fd)
  first_reason, commands = None, []
  try:
    for extra in _FALLBACKS:
      flags = [f for f in _FLAGS if not (extra and extra[0].startswith("-march=")
                                          and f.startswith("-march="))] + extra
      cmd = ([compiler] + flags + tf.sysconfig.get_compile_flags() + [_SOURCE, "-o", tmp]
             + tf.sysconfig.get_link_flags())
      commands.append(" ".join(cmd))
      done = subprocess.run(cmd, capture_output=True, text=True, check=False)
      if done.returncode == 0:
        if extra:
          logging.info("hypernet: the BatchNorm-ReLU-max-pool kernel compiled with %s "
                       "added (the plain flags failed: %s)", " ".join(extra), first_reason)
        with open(target + ".flags", "w", encoding="utf-8") as f:  # build_report()
          f.write(" ".join(flags))
        os.replace(tmp, target)  # atomic: a concurrent process loads a whole file or none
        return
      errors = [l for l in done.stderr.splitlines() if "error" in l.lower()]
      reason = (errors or done.stderr.strip().splitlines() or
                [f"exit status {done.returncode}, no message"])[0]
      first_reason = first_reason or reason
    raise RuntimeError(f"{compiler} could not compile {_SOURCE}: {first_reason}\n"
                       "commands tried:\n" + "\n".join(commands) + "\n"
                       + done.stderr[-2000:])
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def library():
  """The loaded kernel library (compiling it on first use), or ``None`` when it cannot be
  built here: the reason is logged once as a warning and kept in :func:`load_error`."""
  global _library, _library_path, _load_error
  with _load_lock:
    if _library is not None or _load_error is not None:
      return _library
    with open(_SOURCE, "rb") as f:
      source = f.read()
    # "flags-file": cached kernels carry the flags they were built with (build_report).
    key = hashlib.sha256(b"flags-file" + source + tf.__version__.encode() + repr(
        _FLAGS + tf.sysconfig.get_compile_flags()).encode()
                         + _cpu_key().encode()).hexdigest()[:16]
    target = os.path.join(cache_dir(), f"norm_relu_pool-{key}.so")
    try:
      if not os.path.exists(target):
        logging.info("Compiling the BatchNorm-ReLU-max-pool kernel into %s (once).", target)
        _compile(target)
      _library = tf.load_op_library(target)
      _library_path = target
    except (OSError, RuntimeError, tf.errors.NotFoundError) as e:
      _load_error = str(e)
      logging.warning(
          "hypernet: the fused BatchNorm-ReLU-max-pool kernel is unavailable, so "
          "meta-learning steps use TensorFlow's separate ops (slower; values equal up to "
          "rounding): %s (hypernet.numerics.norm_relu_pool.load_error() has the whole message)",
          _load_error.splitlines()[0] if _load_error else e)
    return _library


# Instruction-set extensions that decide the kernel's vector code, as /proc/cpuinfo
# names them, and those each -march level enables (x86-64-v2: up to SSE4.2).
_ISA = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
        "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
_MARCH_ISA = {"-march=x86-64-v2": ("sse4_2",),
              "-march=x86-64-v3": ("sse4_2", "avx", "avx2", "fma")}


def build_report() -> dict:
  """How the loaded kernel was built, for benchmarks to print beside their ratios.

  Returns:
    ``{"cpu": model name, "flags": the compiler flags of ours it was built with (str;
    "" when not known, e.g. a kernel cached before the flags were recorded), "isa":
    the instruction-set extensions its code may use (list of /proc/cpuinfo names: the
    CPU's, less those the flags turn off or the -march level lacks), "loaded": bool}``.
  """
  lib = library()
  cpu, cpu_flags = "", set()
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name") and not cpu:
          cpu = line.split(":", 1)[1].strip()
        elif line.startswith("flags") and not cpu_flags:
          cpu_flags = set(line.split(":", 1)[1].split())
  except OSError:
    pass
  flags = ""
  if lib is not None and _library_path and os.path.exists(_library_path + ".flags"):
    with open(_library_path + ".flags", encoding="utf-8") as f:
      flags = f.read().strip()
  isa = [x for x in _ISA if x in cpu_flags]
  for march, allowed in _MARCH_ISA.items():
    if march in flags.split():
      isa = [x for x in isa if x in allowed]
  isa = [x for x in isa if f"-mno-{x.replace('_', '')}" not in flags.split()]
  return {"cpu": cpu, "flags": flags, "isa": isa if flags else [], "loaded": lib is not None}


def load_error() -> Optional[str]:
  """Why the kernel could not be built or loaded (``None`` if it was, or not tried)."""
  return _load_error


def _zero_if_none(t, like):
  return tf.zeros_like(like) if t is None else t


def norm_relu_pool(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: float,
                   shift: Optional[tf.Tensor] = None
                   ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """``max_pool2x2(relu(batch_norm(x + shift)))`` in training mode, as one kernel.

  Args:
    x: ``[N, H, W, C]`` float32 or float64 (NHWC), ``H, W >= 2``.
    gamma, beta: ``[C]``, ``x``'s dtype: BatchNorm's scale and offset.
    epsilon: BatchNorm's epsilon (added to the variance).
    shift: optional ``[C]`` added to ``x`` first: the bias of the convolution before the
      BatchNorm. The batch mean subtracts it again, so it changes only the returned
      ``mean``; its gradient is exactly the gradient of ``mean`` (zero through ``y``,
      where TensorFlow's separate ops would sum the gradient of ``x + shift`` into
      rounding noise).

  Returns:
    ``(y, mean, variance)``: ``y`` ``[N, H // 2, W // 2, C]`` (``valid`` pooling, stride
    2), and the batch moments of ``x + shift`` over ``N, H, W`` (``variance`` biased, as
    Keras tracks it). Differentiable twice with respect to ``x``, ``gamma`` and ``beta``
    (``docs/numerics.md``); the moments as ``1 / M`` and ``2 (x - mean) / M``.

  Raises:
    RuntimeError: the kernel could not be built (:func:`load_error` says why).
  """
  lib = library()
  if lib is None:
    raise RuntimeError(f"The BatchNorm-ReLU-max-pool kernel is unavailable: {_load_error}")
  if shift is None:
    shift = tf.zeros_like(gamma)
  y, mean, variance, _, _, _ = lib.hypernet_norm_relu_pool(
      x=x, gamma=gamma, beta=beta, shift=shift, epsilon=epsilon)
  return y, mean + shift, variance


@tf.RegisterGradient("HypernetNormReluPool")
def _grad(op, dy, dmean, dvariance, *unused):
  """First derivative (``docs/numerics.md``): the kernel's analytic gradient, plus the moments'
  ``1 / M`` and ``2 (x - mean) / M`` where something depends on them. A registered
  gradient (not ``tf.custom_gradient``), so it also holds inside ``tf.vectorized_map``.
  ``inv_std``, ``selection`` and ``selected`` are the backward pass's saved values and get
  no gradient."""
  del unused
  x, gamma, _, shift = op.inputs
  y, mean, _, inv_std, selection, selected = op.outputs
  dx, dgamma, dbeta = _library.hypernet_norm_relu_pool_grad(
      dy=_zero_if_none(dy, y), x=x, gamma=gamma, y=y, mean=mean, inv_std=inv_std,
      selection=selection, selected=selected)
  n = tf.cast(tf.size(x) // tf.shape(x)[-1], x.dtype)
  dx = second_order.add_moment_gradients(dx, x, dmean, dvariance, n)
  # Exactly zero through the outputs; written as 0 * shift so that an outer tape records
  # it (a second-order inner loop checks that every inner gradient is recorded).
  return dx, dgamma, dbeta, 0.0 * shift


@tf.RegisterGradient("HypernetNormReluPoolGrad")
def _grad_grad(op, ddx, ddgamma, ddbeta):
  """Exact second derivative: d(dx, dgamma, dbeta) / d(dy, x, gamma) (``docs/numerics.md``)."""
  dy, x, gamma, y, mean, inv_std, selection, selected = op.inputs
  d_dy, d_x, d_gamma = _library.hypernet_norm_relu_pool_grad_grad(
      ddx=_zero_if_none(ddx, x), ddgamma=_zero_if_none(ddgamma, gamma),
      ddbeta=_zero_if_none(ddbeta, gamma), dy=dy, x=x, gamma=gamma, y=y, mean=mean,
      inv_std=inv_std, selection=selection, selected=selected)
  # y, mean, inv_std and selected are functions of x and gamma whose dependence d_x
  # already holds (the selection is piecewise constant).
  return d_dy, d_x, d_gamma, None, None, None, None, None


# --- Dispatch: the pool of a fused BatchNorm's ReLU computes the whole block. ----------

def is_active() -> bool:
  """Whether, in this thread right now, eligible blocks are fused (``docs/numerics.md``)."""
  return (_unavailable is None and _on.on() and not _off.on()
          and not tf.executing_eagerly() and _cpu_only() and library() is not None)


def _cpu_only() -> bool:
  return devices.cpu_kernels()  # Off on GPU/TPU (devices' table).


def register_batch_norm(y: tf.Tensor, fuse: Callable[[], tf.Tensor]) -> None:
  """Notes that ``y`` is a fused BatchNorm's output; ``fuse()`` computes the pooled block
  from the BatchNorm's input (and reassigns the moving statistics). Called by
  :func:`hypernet.numerics.fused_norm.fused_batch_norm_call` while :func:`is_active`."""
  registry = getattr(_state, "registry", None)
  if registry is not None:
    registry[y.ref()] = fuse


def _fusable_pool(layer, inputs) -> Optional[Callable[[], tf.Tensor]]:
  if type(layer).call is not _dispatching_pool_call or not is_active():
    return None
  if (tuple(layer.pool_size) != (2, 2) or tuple(layer.strides) != (2, 2)
      or layer.padding != "valid" or layer.data_format != "channels_last"):
    return None
  op = getattr(inputs, "op", None)
  if op is None or op.type != "Relu" or inputs.dtype != tf.float32:
    return None
  return (getattr(_state, "registry", None) or {}).get(op.inputs[0].ref())


def _dispatching_pool_call(self, inputs):
  fuse = _fusable_pool(self, inputs)
  if fuse is not None:
    return fuse()
  return _original_pool_call(self, inputs)


def _install() -> None:
  """Puts the per-thread dispatcher in place of ``MaxPooling2D.call`` (once). Canary: the
  method's parameters are ``(self, inputs)``; if not, nothing is fused (one warning)."""
  global _original_pool_call, _unavailable
  if _unavailable is not None:
    return
  try:
    original = compat.install_dispatcher(
        keras.layers.MaxPooling2D, "call", _dispatching_pool_call, ["self", "inputs"])
    if _original_pool_call is None:
      _original_pool_call = original
  except compat.UnsupportedVersionError as e:
    _unavailable = e.detail
    compat.warn_once("norm_relu_pool", "%s; BatchNorm -> ReLU -> max-pool blocks run on "
                     "TensorFlow's separate ops: only speed is affected (same values).",
                     _unavailable)


@contextlib.contextmanager
def scope() -> Iterator[None]:
  """Within the block (this thread), eligible BatchNorm -> ReLU -> max-pool blocks run
  on the fused kernel (``docs/numerics.md``). Re-entrant; it counts where it is entered (eagerly,
  or in the ``tf.function`` being traced: :class:`hypernet.numerics.compat.Switch`)."""
  _install()
  if getattr(_state, "registry", None) is None:
    _state.registry = {}
  try:
    with _on():
      yield
  finally:
    if not _on.count_all():
      _state.registry = None


def disabled():
  """Within the block (this thread), nothing is fused even inside :func:`scope`: for
  ``jit_compile=True`` functions (XLA cannot compile the kernel) and for comparisons. A
  re-entrant context manager; it counts where it is entered (enter it inside the traced
  function: entered around the call of a ``tf.function`` it does not reach the trace)."""
  return _off()
