"""In-memory image classification data: the container every loader returns, and the
registry of the loaders (``config.data.name``)."""
from __future__ import annotations

import dataclasses
from typing import Tuple

import numpy as np

from hypernet.core.registry import Registry

# The built-in data sets by name: each loader registers itself in its module
# (``@DATASETS.register("digits")``), so a new data set is one file in hypernet/data. Its
# keyword arguments are config.data fields by their own names (``test_fraction``,
# ``data_dir``); ``load_classification`` builds it from config.data. "tfds:NAME" and
# "package.module:function" are plug-ins (hypernet/data/plugins.py).
DATASETS = Registry("data set", "config.data.name", "hypernet.data",
                    own="'tfds:NAME' or your own loader as 'package.module:function'")
"""The classification data sets by ``config.data.name`` (``@DATASETS.register("name")`` on
a loader in ``hypernet/data/``): ``digits``, ``mnist``, ``fashion_mnist``."""


@dataclasses.dataclass(frozen=True)
class ImageClassificationData:
  """A train/test split of labelled images held in memory.

  Attributes:
    name: dataset name, e.g. ``"digits"``.
    x_train: ``[N, H, W, C]`` images, uint8 (raw pixel values) or float32.
    y_train: ``[N]`` int32 class labels in ``[0, num_classes)``.
    x_test: ``[M, H, W, C]``, same dtype as ``x_train``.
    y_test: ``[M]`` int32.
    num_classes: number of classes.
    pixel_scale: multiply pixels by this to get float32 values in ``[0, 1]``
      (e.g. 1/255 for uint8 IDX images, 1/16 for the digits).
  """
  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int
  pixel_scale: float = 1.0

  @property
  def image_shape(self) -> Tuple[int, int, int]:
    return tuple(int(d) for d in self.x_train.shape[1:])

  def __post_init__(self):
    for split in ("train", "test"):
      x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
      if x.ndim != 4 or len(x) != len(y):
        raise ValueError(f"{self.name}: x_{split} must be [N, H, W, C] with one label per "
                         f"image; got {x.shape} images and {y.shape} labels.")
      if len(y) and (y.min() < 0 or y.max() >= self.num_classes):
        raise ValueError(f"{self.name}: y_{split} has labels outside [0, {self.num_classes}).")
