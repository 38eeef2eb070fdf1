"""Device facts and the choices they decide, as functions of the device kind.

Every device-dependent choice is a function here of ``"cpu"``, ``"gpu"`` or ``"tpu"``
(passed in, or :func:`accelerator`, what TensorFlow sees now): :func:`cpu_kernels`
(:mod:`.accel`'s CPU-only accelerations), :func:`xla_auto`, :func:`loss_scaling`,
:func:`precision_warning`. The table and its reasons: ``docs/numerics.md`` ("Device facts")."""
from typing import Optional, Tuple

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
    return ("config.dtype_policy='mixed_float16' on a CPU: float16 has few fast CPU "
            "kernels and can run slower than float32; use 'float32' or 'mixed_bfloat16'.")
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
