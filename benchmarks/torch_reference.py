"""PyTorch reference steps for the benchmarks (optional: ``pip install -e .[bench]``).

* :func:`conv4_maml` -- MAML on the conv4 target as PyTorch users write it
  (``torch.func.functional_call`` + ``torch.autograd.grad(create_graph=True)``, one
  ``backward()`` per task so each task's graph is freed after it, Adam outer step),
  initialised from the TF target's weights so both sides compute the same numbers;
* :func:`cnn_step` -- a plain training step of the ``make_cnn`` target (conv-ReLU-pool
  blocks, dense layers, Adam), the reference for ``step_ratio.py``.

Weights come as ``{keras path: numpy array}`` in Keras layouts (conv kernels ``[kh, kw,
in, out]``, dense kernels ``[in, out]``) and are transposed to PyTorch's. Inputs are NHWC
numpy arrays (as the TF pipelines produce), transposed to NCHW once per batch.
"""
from __future__ import annotations

from typing import Callable, Dict, Sequence

import numpy as np

try:
  import torch
  from torch import nn
  import torch.nn.functional as F
except ImportError:  # pragma: no cover - optional
  torch = None

MISSING = ("PyTorch is not installed: skipping the PyTorch reference (install it with "
           "`pip install -e .[bench]` or `pip install torch`).")


def available() -> bool:
  """Whether PyTorch can be imported."""
  return torch is not None


# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> bool:
  """Make glibc's ``malloc`` keep freed memory for reuse (process-wide), as PyTorch's CPU
  tuning guide does by preloading jemalloc or tcmalloc (``torch.backends.xeon.run_cpu``).

  PyTorch's CPU tensors come from plain ``malloc``. With glibc's defaults an allocation
  above the mmap threshold (128 KiB until a large free raises it) gets fresh pages from
  ``mmap``, and every page faults when first written; freed heap memory is trimmed back to
  the OS. In ``meta_bench.py``'s runs (conv4 MAML meta-steps, experiments/RESULTS_meta.md)
  that made 35,000-395,000 minor page faults per step, against 2 with this setting, which
  ran 1.1-1.9x faster. Whether a process starts fast depends on the order of its first
  large frees, which is why PyTorch's rate changed from process to process.

  Sets ``M_MMAP_THRESHOLD`` to 32 MiB (glibc's largest) and ``M_TRIM_THRESHOLD`` to
  1 GiB with ``mallopt``; the same as starting the process with
  ``MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824``. Affects every
  later allocation of the process, TensorFlow's too.

  Returns:
    True if both settings took; False where the C library is not glibc.
  """
  import ctypes  # pylint: disable=g-import-not-at-top
  try:
    mallopt = ctypes.CDLL("libc.so.6").mallopt
  except (OSError, AttributeError):
    return False
  return bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(
      mallopt(_M_TRIM_THRESHOLD, 1 << 30))


def _conv(kernel):  # [kh, kw, in, out] -> [out, in, kh, kw]
  return torch.tensor(np.transpose(kernel, (3, 2, 0, 1)).copy())


def _dense(kernel):  # [in, out] -> [out, in]
  return torch.tensor(np.transpose(kernel).copy())


def _nchw(x):
  return torch.from_numpy(np.ascontiguousarray(np.transpose(x, (0, 1, 4, 2, 3))
                                               if x.ndim == 5 else
                                               np.transpose(x, (0, 3, 1, 2))))


class Conv4(nn.Module if torch is not None else object):
  """Finn et al.'s conv4 (conv 3x3 pad 1, BatchNorm, ReLU, 2x2 max-pool) x blocks + head,
  named like :func:`hypernet.meta.make_conv4`."""

  def __init__(self, weights: Dict[str, np.ndarray], num_blocks: int, eps: float = 1e-3):
    super().__init__()
    self.num_blocks = num_blocks
    for i in range(1, num_blocks + 1):
      kernel = weights[f"conv{i}/kernel"]
      conv = nn.Conv2d(kernel.shape[2], kernel.shape[3], 3, padding=1)
      conv.weight.data, conv.bias.data = _conv(kernel), torch.tensor(weights[f"conv{i}/bias"])
      bn = nn.BatchNorm2d(kernel.shape[3], eps=eps)  # Keras' epsilon
      bn.weight.data = torch.tensor(weights[f"bn{i}/gamma"])
      bn.bias.data = torch.tensor(weights[f"bn{i}/beta"])
      setattr(self, f"conv{i}", conv)
      setattr(self, f"bn{i}", bn)
    head = weights["head/kernel"]
    self.head = nn.Linear(head.shape[0], head.shape[1])
    self.head.weight.data, self.head.bias.data = _dense(head), torch.tensor(weights["head/bias"])

  def forward(self, x):
    for i in range(1, self.num_blocks + 1):
      x = getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(x))
      x = F.max_pool2d(F.relu(x), 2)
    # NHWC flatten order (as Keras) so the head's weights mean the same.
    return self.head(torch.flatten(x.permute(0, 2, 3, 1), 1))


def conv4_maml(weights: Dict[str, np.ndarray], num_blocks: int, *, inner_lr: float,
               inner_steps: int, first_order: bool, lr: float) -> Callable:
  """A MAML meta-step on conv4 in PyTorch: returns ``step(batch) -> mean query loss``.

  ``batch``: numpy ``support_x [T, N*K, H, W, C]``, ``support_y [T, N*K]``, ``query_x``,
  ``query_y`` (the TF task's batches). BatchNorm in training mode (batch statistics) on
  support and query sets, as :mod:`hypernet.tasks.meta_learning`; Adam on the initial weights.
  """
  model = Conv4(weights, num_blocks)
  model.train()
  params = dict(model.named_parameters())
  optimizer = torch.optim.Adam(params.values(), lr=lr)
  call = torch.func.functional_call

  def step(batch):
    sx, qx = _nchw(batch["support_x"]), _nchw(batch["query_x"])
    sy = torch.from_numpy(batch["support_y"].astype(np.int64))
    qy = torch.from_numpy(batch["query_y"].astype(np.int64))
    tasks = sx.shape[0]
    optimizer.zero_grad()
    total = 0.0
    for t in range(tasks):
      fast = params
      for _ in range(inner_steps):
        loss = F.cross_entropy(call(model, fast, (sx[t],)), sy[t])
        grads = torch.autograd.grad(loss, list(fast.values()), create_graph=not first_order)
        fast = {k: w - inner_lr * (g.detach() if first_order else g)
                for (k, w), g in zip(fast.items(), grads)}
      query = F.cross_entropy(call(model, fast, (qx[t],)), qy[t]) / tasks
      query.backward()  # frees this task's graph
      total += float(query.detach())
    optimizer.step()
    return total

  return step


class CNN(nn.Module if torch is not None else object):
  """``make_cnn``'s conv-(BatchNorm-)ReLU-maxpool blocks, flatten, dense-ReLU layers and
  head (``batch_norm``: BatchNorm after each bias-free conv, batch statistics in
  training, eps 1e-3 as Keras')."""

  def __init__(self, input_shape: Sequence[int], num_classes: int,
               conv_widths: Sequence[int], dense_widths: Sequence[int],
               batch_norm: bool = False):
    super().__init__()
    h, w, c = input_shape
    convs, norms = [], []
    for width in conv_widths:
      convs.append(nn.Conv2d(c, width, 3, padding=1, bias=not batch_norm))
      norms.append(nn.BatchNorm2d(width, eps=1e-3) if batch_norm else nn.Identity())
      c, h, w = width, h // 2, w // 2
    self.convs = nn.ModuleList(convs)
    self.norms = nn.ModuleList(norms)
    dense, d = [], c * h * w
    for width in dense_widths:
      dense.append(nn.Linear(d, width))
      d = width
    self.dense = nn.ModuleList(dense)
    self.head = nn.Linear(d, num_classes)

  def forward(self, x):
    for conv, norm in zip(self.convs, self.norms):
      x = F.max_pool2d(F.relu(norm(conv(x))), 2)
    x = torch.flatten(x, 1)
    for layer in self.dense:
      x = F.relu(layer(x))
    return self.head(x)


def cnn_step(input_shape, num_classes, conv_widths, dense_widths, lr=1e-3,
             batch_norm: bool = False) -> Callable:
  """A plain PyTorch training step (cross-entropy, Adam) of the ``make_cnn`` target:
  returns ``step(x NHWC numpy, y numpy) -> loss``."""
  torch.manual_seed(0)
  model = CNN(input_shape, num_classes, conv_widths, dense_widths, batch_norm)
  optimizer = torch.optim.Adam(model.parameters(), lr=lr)

  def step(x, y):
    x = torch.from_numpy(np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2))))
    y = torch.from_numpy(y.astype(np.int64))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return float(loss.detach())

  return step
