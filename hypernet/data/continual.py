"""Task sequences for continual learning, cut from one image classification data set.

* :func:`split_tasks` -- "split" benchmarks (Zenke et al. 2017; von Oswald et al. 2020):
  task ``t`` holds the classes ``{2t, 2t+1}``, relabelled ``{0, 1}``.
* :func:`permuted_tasks` -- "permuted" benchmarks (Goodfellow et al. 2013): task ``t``
  holds every class with the pixels permuted by a fixed permutation drawn from the seed;
  task 0 is unpermuted.
"""
from __future__ import annotations

from typing import List

import numpy as np

from hypernet.data.base import ImageClassificationData


def split_tasks(data: ImageClassificationData, num_tasks: int,
                classes_per_task: int = 2) -> List[ImageClassificationData]:
  """Task ``t``: classes ``[t*c, (t+1)*c)`` of ``data``, relabelled ``0..c-1``.

  Raises:
    ValueError: ``num_tasks * classes_per_task`` exceeds the classes of ``data``.
  """
  c = int(classes_per_task)
  if num_tasks < 1 or num_tasks * c > data.num_classes:
    raise ValueError(
        f"config.continual.num_tasks={num_tasks} tasks of {c} classes need "
        f"{num_tasks * c} classes; {data.name} has {data.num_classes}.")
  tasks = []
  for t in range(num_tasks):
    lo, hi = t * c, (t + 1) * c
    tr = (data.y_train >= lo) & (data.y_train < hi)
    te = (data.y_test >= lo) & (data.y_test < hi)
    tasks.append(ImageClassificationData(
        name=f"{data.name}_split{t}", x_train=data.x_train[tr],
        y_train=(data.y_train[tr] - lo).astype(np.int32), x_test=data.x_test[te],
        y_test=(data.y_test[te] - lo).astype(np.int32), num_classes=c,
        pixel_scale=data.pixel_scale))
  return tasks


def permutation(num_pixels: int, task: int, seed: int) -> np.ndarray:
  """The pixel permutation of task ``task`` (identity for task 0), from ``seed``."""
  if task == 0:
    return np.arange(num_pixels)
  return np.random.default_rng([int(seed), int(task)]).permutation(num_pixels)


def permuted_tasks(data: ImageClassificationData, num_tasks: int,
                   seed: int) -> List[ImageClassificationData]:
  """Task ``t``: all of ``data`` with pixels permuted by :func:`permutation` ``(t, seed)``.

  Raises:
    ValueError: ``num_tasks < 1``.
  """
  if num_tasks < 1:
    raise ValueError(f"config.continual.num_tasks={num_tasks} must be >= 1.")
  n = int(np.prod(data.image_shape))
  tasks = []
  for t in range(num_tasks):
    perm = permutation(n, t, seed)
    shuffle = lambda x: x.reshape(len(x), -1)[:, perm].reshape(x.shape)
    tasks.append(ImageClassificationData(
        name=f"{data.name}_perm{t}", x_train=shuffle(data.x_train), y_train=data.y_train,
        x_test=shuffle(data.x_test), y_test=data.y_test, num_classes=data.num_classes,
        pixel_scale=data.pixel_scale))
  return tasks
