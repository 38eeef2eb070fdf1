"""Device facts and the choices they decide, as functions of the device kind.

Every device-dependent choice is a function here of ``"cpu"``, ``"gpu"`` or ``"tpu"``
(passed in, or :func:`accelerator`, what TensorFlow sees now): :func:`cpu_kernels`
(:mod:`.accel`'s CPU-only accelerations), :func:`xla_auto`, :func:`loss_scaling`,
:func:`precision_warning`, :func:`precision_error`. The table and its reasons:
``docs/numerics.md`` ("Device facts")."""
from typing import Dict, Optional, Tuple

import tensorflow as tf

KINDS = ("cpu", "gpu", "tpu")


def _logical_devices(device_type: str) -> list:
  """TensorFlow's logical devices of one type (what the process may place ops on)."""
  return tf.config.list_logical_devices(device_type)


def accelerator() -> str:
  """The device kind TensorFlow sees now: ``"gpu"`` if any logical GPU is visible, else
  ``"tpu"`` if a TPU system is initialised (``TPUStrategy``), else ``"cpu"``.

  Reads TensorFlow's device list on every call (a few microseconds), so a TPU system
  initialised after import is seen. ``CUDA_VISIBLE_DEVICES=""`` makes a GPU machine
  ``"cpu"``.
  """
  if _logical_devices("GPU"):
    return "gpu"
  if _logical_devices("TPU"):
    return "tpu"
  return "cpu"


def _kind(kind: Optional[str]) -> str:
  if kind is None:
    return accelerator()
  if kind not in KINDS:
    raise ValueError(f"device kind {kind!r} is unknown; use one of {list(KINDS)}.")
  return kind


def cpu_only(kind: Optional[str] = None) -> bool:
  """Whether ``kind`` (default: :func:`accelerator`) is a CPU-only machine.

  Raises:
    ValueError: ``kind`` is not one of :data:`KINDS`.
  """
  return _kind(kind) == "cpu"


def cpu_kernels(kind: Optional[str] = None) -> bool:
  """Whether hypernet's CPU numerics may run: the fused BatchNorm -> ReLU -> max-pool
  kernel (:mod:`hypernet.numerics.norm_relu_pool`) and the plain bias adds
  (:mod:`hypernet.numerics.plain_bias`), as :mod:`hypernet.numerics.accel` chooses them.
  Only on a CPU-only machine: the C++ kernel has no GPU/TPU kernel, and the bias adds
  only matter to oneDNN.

  Raises:
    ValueError: ``kind`` is not one of :data:`KINDS`.
  """
  return cpu_only(kind)


def xla_auto(kind: Optional[str] = None) -> bool:
  """What ``config.jit_compile="auto"`` means on ``kind``: XLA on GPU and TPU, off on CPU
  (on CPU the plain graph with oneDNN and the fused kernel was faster, and XLA's CPU
  second-order results differ by up to 6e-3 relative, ``hypernet/meta/meta_batch.py``).

  Raises:
    ValueError: ``kind`` is not one of :data:`KINDS`.
  """
  return _kind(kind) in ("gpu", "tpu")


def loss_scaling(policy: str) -> bool:
  """Whether a Keras dtype policy needs dynamic loss scaling
  (``keras.optimizers.LossScaleOptimizer``): ``mixed_float16`` does (float16 gradients
  underflow below 6e-8; Micikevicius et al. 2018, "Mixed precision training", Sec. 3.2),
  ``mixed_bfloat16`` and ``float32`` do not (bfloat16 has float32's exponent range).
  The same on every device kind."""
  return policy == "mixed_float16"


def gpu_compute_capability() -> Optional[Tuple[int, int]]:
  """The first visible GPU's CUDA compute capability ``(major, minor)``, or ``None`` (no
  GPU, or TensorFlow does not report it)."""
  gpus = tf.config.list_physical_devices("GPU")
  if not gpus:
    return None
  details = tf.config.experimental.get_device_details(gpus[0])
  cc = details.get("compute_capability")
  return tuple(cc) if cc else None


_BF16_CONV_PROBE: Dict[str, Optional[str]] = {}


def bfloat16_conv_gradient_error(kind: Optional[str] = None) -> Optional[str]:
  """Why TensorFlow's bfloat16 convolution kernel gradient is wrong on this device, or
  ``None`` where it is right.

  TensorFlow 2.21's CPU kernel for ``Conv2DBackpropFilter`` in bfloat16 without oneDNN's
  bfloat16 path (which needs AVX-512; e.g. AMD Zen 3, Intel before Cooper Lake)
  accumulates in bfloat16: a sum of 1,024 ones comes back as 512, so every convolution's
  kernel gradient under ``mixed_bfloat16`` loses up to half its size (Conv1D/2D, their
  transposes and separable forms run through it). Measured, not assumed: a 3x3 kernel
  on a batch of sixteen 10x10 images of ones, whose gradient is exactly 1,024 in
  bfloat16, once per process and device kind.

  Args:
    kind: the device kind (default: :func:`accelerator`).

  Returns:
    A one-line reason, or ``None``.

  Raises:
    ValueError: ``kind`` is not one of :data:`KINDS`.
  """
  kind = _kind(kind)
  if kind not in _BF16_CONV_PROBE:
    with tf.init_scope():
      x = tf.ones([16, 10, 10, 1], tf.bfloat16)
      dy = tf.ones([16, 8, 8, 1], tf.bfloat16)
      try:
        g = tf.raw_ops.Conv2DBackpropFilter(
            input=x, filter_sizes=[3, 3, 1, 1], out_backprop=dy, strides=[1, 1, 1, 1],
            padding="VALID")
        got = float(tf.cast(g[0, 0, 0, 0], tf.float32))
        reason = (None if got == 1024.0 else
                  f"TensorFlow {tf.__version__}'s bfloat16 convolution kernel gradient "
                  f"sums 1,024 ones to {got:g} here (Eigen's kernel accumulates in "
                  "bfloat16; oneDNN's bfloat16 path needs AVX-512)")
      except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError,
              tf.errors.NotFoundError) as e:
        reason = f"TensorFlow has no bfloat16 convolution gradient here ({e.message})"
    _BF16_CONV_PROBE[kind] = reason
  return _BF16_CONV_PROBE[kind]


def precision_error(policy: str, kind: Optional[str] = None) -> Optional[str]:
  """A one-line refusal when ``policy`` computes wrong gradients on ``kind``, else
  ``None``: ``mixed_bfloat16`` where :func:`bfloat16_conv_gradient_error` finds the
  convolution gradient wrong.

  Raises:
    ValueError: ``kind`` is not one of :data:`KINDS`.
  """
  if policy != "mixed_bfloat16":
    return None
  reason = bfloat16_conv_gradient_error(kind)
  if reason is None:
    return None
  return (f"config.dtype_policy='mixed_bfloat16' would train on wrong gradients: "
          f"{reason}; use 'float32' on this machine.")


def precision_warning(policy: str, kind: Optional[str] = None,
                      compute_capability: Optional[Tuple[int, int]] = None) -> Optional[str]:
  """A one-line warning when ``policy`` is slow on ``kind``, else ``None``.

  Args:
    policy: a Keras dtype policy name (``config.dtype_policy``).
    kind: the device kind (default: :func:`accelerator`).
    compute_capability: the GPU's ``(major, minor)``; default: read with
      :func:`gpu_compute_capability` when ``kind`` is ``"gpu"`` (unknown: no warning).

  float16 on a CPU has few fast kernels (TensorFlow's oneDNN takes float16 only on some
  AVX-512 CPUs, else Eigen's slow path); bfloat16 runs at full speed on GPUs from
  compute capability 8.0 (Ampere) and float16 on tensor cores from 7.0 (Volta)
  (NVIDIA's mixed-precision training guide).

  Raises:
    ValueError: ``kind`` is not one of :data:`KINDS`.
  """
  kind = _kind(kind)
  if policy == "float32":
    return None
  if kind == "cpu" and policy == "mixed_float16":
    alternatives = ("'float32'" if bfloat16_conv_gradient_error(kind)
                    else "'float32' or 'mixed_bfloat16'")
    return ("config.dtype_policy='mixed_float16' on a CPU: float16 has few fast CPU "
            f"kernels and can run slower than float32; use {alternatives}.")
  if kind == "gpu":
    if compute_capability is None:
      compute_capability = gpu_compute_capability()
    if compute_capability is None:
      return None
    need = (8, 0) if policy == "mixed_bfloat16" else (7, 0)
    if tuple(compute_capability) < need:
      cc = ".".join(map(str, compute_capability))
      better = ("mixed_float16" if policy == "mixed_bfloat16"
                and tuple(compute_capability) >= (7, 0) else "float32")
      return (f"config.dtype_policy={policy!r} on a GPU of compute capability {cc}: it "
              f"runs at full speed from {need[0]}.{need[1]} on; use {better!r}.")
  return None
