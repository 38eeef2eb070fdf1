"""Which accelerations a functional call uses: the one policy, decided here.

:func:`hypernet.core.functional.functional_call` runs its model inside :func:`scope`,
which enters the switches of the accelerations that :func:`choose` picks for the call's
``accelerate=`` argument and the device kind (:mod:`.devices`); :func:`disabled` turns
any of them off for a block. Why each is on where it is: ``docs/performance.md``
("What the functional call accelerates").
"""
from __future__ import annotations

import contextlib
from typing import Dict, Iterator, Optional, Union

from hypernet.numerics import devices, fused_norm, norm_relu_pool, plain_bias

#: Every acceleration, by the name :func:`choose` and :func:`disabled` use.
ACCELERATIONS = ("fused_batch_norm", "plain_bias", "fused_blocks")

#: The values of ``functional_call(..., accelerate=)``.
PROFILES = (True, "meta", False)

Accelerate = Union[bool, str]

#: ``config.accelerate`` (the classification step's call) -> ``accelerate=``.
CONFIG_VALUES = {"default": True, "meta": "meta", "off": False}


def choose(accelerate: Accelerate = True, kind: Optional[str] = None) -> Dict[str, bool]:
  """The policy: ``{acceleration: on}`` for a functional call.

  ==================== ================ ================ ==================================
  acceleration         ``True``         ``"meta"``       where
  ==================== ================ ================ ==================================
  ``fused_batch_norm`` on               on               every device kind
  ``plain_bias``       off              on               CPU (:func:`devices.cpu_kernels`)
  ``fused_blocks``     off              on               CPU, while tracing, not under XLA
  ==================== ================ ================ ==================================

  ``fused_blocks``: BatchNorm -> ReLU -> 2x2 max-pool on one kernel
  (:mod:`.norm_relu_pool`) and conv -> bias -> ReLU -> 2x2 max-pool pooled first
  (:mod:`.pool_first`). ``False`` turns all three off. ``"meta"`` is what the meta-learners pass: there plain
  bias adds and fused blocks were measured faster; in the hypernetwork step plain bias
  adds were not faster and moved its results by seed noise, so ``True`` (the default)
  keeps Keras' own bias adds and blocks. Each one still falls back to Keras' own code
  where it does not apply (its module says where) or inside :func:`disabled`.

  Args:
    accelerate: one of :data:`PROFILES`.
    kind: ``"cpu"``, ``"gpu"`` or ``"tpu"``; default :func:`devices.accelerator`.

  Returns:
    ``{name: bool}`` over :data:`ACCELERATIONS`.

  Raises:
    ValueError: ``accelerate`` is not one of :data:`PROFILES`, or ``kind`` is unknown.
  """
  if not (accelerate is True or accelerate is False or accelerate == "meta"):
    raise ValueError(f"accelerate={accelerate!r} is unknown; use True (default), 'meta' "
                     "(the meta-learners' calls) or False (Keras' own code).")
  meta = accelerate == "meta" and devices.cpu_kernels(kind)
  return {"fused_batch_norm": accelerate is not False, "plain_bias": meta,
          "fused_blocks": meta}


_SCOPES = {"fused_batch_norm": fused_norm.fused_batch_norm_scope,
           "plain_bias": plain_bias.plain_bias_scope, "fused_blocks": norm_relu_pool.scope}
_OFF = {"fused_batch_norm": fused_norm.disabled, "plain_bias": plain_bias.disabled,
        "fused_blocks": norm_relu_pool.disabled}


@contextlib.contextmanager
def scope(accelerate: Accelerate = True) -> Iterator[None]:
  """Within the block (this thread), the accelerations :func:`choose` picks are on;
  with ``accelerate=False`` all are off (:func:`disabled`), else the others keep the
  state around the block (a call nested in a ``"meta"`` call keeps its plain bias adds).
  Entered by every functional call around its model; it counts where it is entered
  (eagerly, or in the ``tf.function`` being traced: :class:`hypernet.numerics.compat.Switch`).

  Raises:
    ValueError: ``accelerate`` is not one of :data:`PROFILES`.
  """
  chosen = choose(accelerate)
  with contextlib.ExitStack() as stack:
    if accelerate is False:
      stack.enter_context(disabled())
    for name in ACCELERATIONS:
      if chosen[name]:
        stack.enter_context(_SCOPES[name]())
    yield


@contextlib.contextmanager
def disabled(*names: str) -> Iterator[None]:
  """Within the block (this thread), the named accelerations (default: all of
  :data:`ACCELERATIONS`) are off in every functional call, whatever its ``accelerate=``:
  e.g. ``disabled("fused_blocks")`` for a ``jit_compile=True`` step (XLA cannot compile
  that kernel), or ``disabled()`` for Keras' own code everywhere.

  A re-entrant context manager that counts where it is entered: eagerly, or in the
  ``tf.function`` being traced. Enter it inside the traced function (entered around the
  call of a ``tf.function`` it does not reach the trace, and tracing warns once), and
  inside the replica function under a ``tf.distribute`` strategy (replicas run in threads).

  Raises:
    ValueError: a name is not one of :data:`ACCELERATIONS`.
  """
  unknown = [n for n in names if n not in ACCELERATIONS]
  if unknown:
    raise ValueError(f"accel.disabled: unknown acceleration(s) {unknown}; use names from "
                     f"{list(ACCELERATIONS)}.")
  with contextlib.ExitStack() as stack:
    for name in names or ACCELERATIONS:
      stack.enter_context(_OFF[name]())
    yield
