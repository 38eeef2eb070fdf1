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
import re
import shutil
import subprocess
import tempfile
import threading
from typing import Callable, Iterator, Optional, Sequence, Tuple

import keras
import tensorflow as tf

from hypernet.numerics import compat, devices, pool_first, second_order

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
# the `#pragma omp simd` loops -fopenmp-simd; the target options (default -march=native)
# come from $HYPERNET_KERNEL_ARCH (arch_flags). Part of the cache key.
_BASE_FLAGS = ["-std=c++17", "-shared", "-fPIC", "-O3", "-fno-trapping-math",
               "-fopenmp-simd", "-w"]
ARCH_ENV = "HYPERNET_KERNEL_ARCH"


def arch_flags() -> list:
  """The kernel's target options: ``$HYPERNET_KERNEL_ARCH`` split on spaces, default
  ``-march=native`` (the instruction sets of this CPU).

  Set it to build another variant, e.g. ``-march=x86-64-v3`` (AVX2 + FMA, any CPU since
  2013-2015), ``-march=x86-64-v2`` (SSE4.2: the portable code) or ``-march=x86-64-v4``
  (AVX-512): ``benchmarks/kernel_variants.py`` builds, checks and times them. A variant
  using instruction sets this CPU lacks is built but not loaded (:func:`load_error`
  says which), so nothing stops on an illegal instruction.

  Raises:
    ValueError: a word of it is not a ``-m`` target option (one line naming the
      variable).
  """
  value = os.environ.get(ARCH_ENV, "").strip() or "-march=native"
  words = value.split()
  bad = [w for w in words if not re.fullmatch(r"-m[A-Za-z0-9_.,=+-]+", w)]
  if bad:
    raise ValueError(f"{ARCH_ENV}={value!r}: {bad[0]!r} is not a compiler target option "
                     "(-march=..., -mtune=..., -mavx2, -mno-...); unset it for "
                     "-march=native")
  return words


def _flags() -> list:
  """Our compiler flags for the kernel build: :data:`_BASE_FLAGS` with the target options
  where ``-march=native`` stood (so the default build's cache key is unchanged)."""
  return _BASE_FLAGS[:4] + arch_flags() + _BASE_FLAGS[4:]


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


def _compiler() -> Optional[str]:
  return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def compile_command(output: str, arch: Optional[Sequence[str]] = None,
                    vectorizer_report: bool = False) -> list:
  """The compiler command line that builds the kernel into ``output`` for the target
  options ``arch`` (default :func:`arch_flags`), without the fallbacks: for
  ``benchmarks/kernel_variants.py``, which compiles variants this CPU may not run.
  ``vectorizer_report``: an object file (no link) whose compiler writes each loop it
  vectorised to stderr (``-fopt-info-vec-optimized``: ``norm_relu_pool.cc:LINE:COL:
  optimized: loop vectorized using N byte vectors``).

  Raises:
    RuntimeError: no C++ compiler (install g++, or set ``CXX``).
  """
  compiler = _compiler()
  if not compiler:
    raise RuntimeError("no C++ compiler found (install g++, or set CXX)")
  flags = _BASE_FLAGS[:4] + list(arch if arch is not None else arch_flags()) + _BASE_FLAGS[4:]
  if vectorizer_report:
    return ([compiler] + [f for f in flags if f != "-shared"] + tf.sysconfig.get_compile_flags()
            + [_SOURCE, "-o", output, "-c", "-fopt-info-vec-optimized"])
  return ([compiler] + flags + tf.sysconfig.get_compile_flags() + [_SOURCE, "-o", output]
          + tf.sysconfig.get_link_flags())


def _compile(target: str) -> None:
  """Compiles the kernel into ``target``, trying :data:`_FALLBACKS` in turn.

  Raises:
    RuntimeError: no compiler, or every attempt failed (the first attempt's error line,
      the commands and the last attempt's output).
  """
  compiler = _compiler()
  if not compiler:
    raise RuntimeError("no C++ compiler found (install g++, or set CXX)")
  os.makedirs(os.path.dirname(target), exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(target))
  os.close(fd)
  first_reason, commands = None, []
  try:
    for extra in _FALLBACKS:
      arch = [f for f in arch_flags() if not (extra and extra[0].startswith("-march=")
                                              and f.startswith("-march="))] + extra
      flags = _BASE_FLAGS[:4] + arch + _BASE_FLAGS[4:]
      cmd = compile_command(tmp, arch)
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
    try:
      key = hashlib.sha256(b"flags-file" + source + tf.__version__.encode() + repr(
          _flags() + tf.sysconfig.get_compile_flags()).encode()
                           + _cpu_key().encode()).hexdigest()[:16]
      target = os.path.join(cache_dir(), f"norm_relu_pool-{key}.so")
      missing = _missing_isa(_flags())
      if missing:
        raise RuntimeError(
            f"{ARCH_ENV}={os.environ.get(ARCH_ENV)!r} builds code for {', '.join(missing)}, "
            "which this CPU lacks: the kernel is not built or loaded (it would stop on an "
            "illegal instruction; benchmarks/kernel_variants.py only compiles such a "
            "variant); unset it for -march=native")
      if not os.path.exists(target):
        logging.info("Compiling the BatchNorm-ReLU-max-pool kernel into %s (once).", target)
        _compile(target)
      _library = tf.load_op_library(target)
      _library_path = target
    except (OSError, RuntimeError, ValueError, tf.errors.NotFoundError) as e:
      _load_error = str(e)
      logging.warning(
          "hypernet: the fused BatchNorm-ReLU-max-pool kernel is unavailable, so "
          "meta-learning steps use TensorFlow's separate ops (slower; values equal up to "
          "rounding): %s (hypernet.numerics.norm_relu_pool.load_error() has the whole message)",
          _load_error.splitlines()[0] if _load_error else e)
    return _library


# Instruction-set extensions that decide the kernel's vector code: /proc/cpuinfo's name
# of each and the macro the compiler defines when its target options enable it.
_ISA = {"sse4_2": "__SSE4_2__", "avx": "__AVX__", "avx2": "__AVX2__", "fma": "__FMA__",
        "avx512f": "__AVX512F__", "avx512bw": "__AVX512BW__", "avx512vl": "__AVX512VL__",
        "avx512_vnni": "__AVX512VNNI__", "avx512_bf16": "__AVX512BF16__",
        "avx512_fp16": "__AVX512FP16__", "amx_tile": "__AMX_TILE__",
        "amx_bf16": "__AMX_BF16__"}


def cpu_extensions() -> set:
  """This CPU's instruction-set extensions as /proc/cpuinfo's ``flags`` names them
  (``{"avx2", "fma", ...}``; empty where there is no /proc/cpuinfo)."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("flags"):
          return set(line.split(":", 1)[1].split())
  except OSError:
    pass
  return set()


def target_isa(flags: Sequence[str]) -> Optional[list]:
  """The instruction-set extensions (of :data:`_ISA`, /proc/cpuinfo's names) that code
  compiled with ``flags`` may use, as the compiler's predefined macros say; ``None``
  where the compiler cannot be asked."""
  compiler = _compiler()
  target = [f for f in flags if f.startswith("-m")]
  if not compiler:
    return None
  done = subprocess.run([compiler, *target, "-dM", "-E", "-x", "c++", os.devnull],
                        capture_output=True, text=True, check=False)
  if done.returncode != 0:
    return None
  macros = set(line.split()[1] for line in done.stdout.splitlines()
               if line.startswith("#define "))
  return [name for name, macro in _ISA.items() if macro in macros]


def _built_flags(path: str) -> str:
  if os.path.exists(path + ".flags"):
    with open(path + ".flags", encoding="utf-8") as f:
      return f.read().strip()
  return ""


def _missing_isa(flags: Sequence[str]) -> list:
  """Instruction sets code built with ``flags`` may use that this CPU lacks (none asked
  about for ``-march=native`` alone, or without /proc/cpuinfo)."""
  if [f for f in flags if f.startswith("-m")] == ["-march=native"] or not os.path.exists(
      "/proc/cpuinfo"):
    return []
  cpu = cpu_extensions()
  return [x for x in (target_isa(flags) or []) if x not in cpu]


def build_report() -> dict:
  """How the loaded kernel was built, for benchmarks to print beside their ratios.

  Returns:
    ``{"cpu": model name, "flags": the compiler flags of ours it was built with (str;
    "" when not known, e.g. a kernel cached before the flags were recorded), "isa":
    the instruction-set extensions its code may use (list of /proc/cpuinfo names: the
    CPU's, less those the flags turn off or the -march level lacks), "loaded": bool}``.
  """
  lib = library()
  cpu = ""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
  except OSError:
    pass
  flags = _built_flags(_library_path) if lib is not None and _library_path else ""
  isa = (target_isa(flags.split()) or []) if flags else []
  return {"cpu": cpu, "flags": flags, "isa": isa, "loaded": lib is not None}


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

def _switched_on() -> bool:
  """Whether, in this thread right now, the fused blocks are on (a graph being traced on
  CPU inside :func:`scope`, not inside :func:`disabled`)."""
  return (_unavailable is None and _on.on() and not _off.on()
          and not tf.executing_eagerly() and _cpu_only())


def is_active() -> bool:
  """Whether, in this thread right now, eligible BatchNorm blocks are fused on the kernel
  (``docs/numerics.md``)."""
  return _switched_on() and library() is not None


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
  """The registered BatchNorm block ``layer`` pools, if any; called by the dispatcher
  once the fused blocks are switched on (:func:`_switched_on`)."""
  if library() is None:
    return None
  if (tuple(layer.pool_size) != (2, 2) or tuple(layer.strides) != (2, 2)
      or layer.padding != "valid" or layer.data_format != "channels_last"):
    return None
  op = getattr(inputs, "op", None)
  if op is None or op.type != "Relu" or inputs.dtype != tf.float32:
    return None
  return (getattr(_state, "registry", None) or {}).get(op.inputs[0].ref())


def _dispatching_pool_call(self, inputs):
  """``MaxPooling2D.call`` inside :func:`scope`: a fused BatchNorm's block on the kernel,
  else a bias -> ReLU block pooled first (:mod:`.pool_first`), else Keras' own pool."""
  if type(self).call is _dispatching_pool_call and _switched_on():
    fuse = _fusable_pool(self, inputs)
    if fuse is not None:
      return fuse()
    pooled = pool_first.pooled_block(self, inputs)
    if pooled is not None:
      return pooled
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
