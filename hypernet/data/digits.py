"""The embedded default data: 1,797 handwritten digits shipped inside hypernet (no download).

Real 8x8 grey-level images of the digits 0-9 (pixel values 0..16): the test part of the
UCI "Optical Recognition of Handwritten Digits" set (Alpaydin & Kaynak 1998, CC BY 4.0),
the same images in the same order as scikit-learn's ``load_digits`` (``digits.npz``, 45
KB, checked by tests/test_data.py). :func:`load_digits` splits them into train/test once
with a fixed, stratified permutation; :func:`digits_arrays` gives all of them.
"""
from __future__ import annotations

import functools
import os
from typing import Tuple

import numpy as np

from hypernet.data.base import DATASETS, ImageClassificationData


_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits.npz")


@functools.lru_cache(maxsize=1)
def _read() -> Tuple[np.ndarray, np.ndarray]:
  with np.load(_FILE) as f:
    images, labels = f["images"], f["labels"].astype(np.int32)
  images.flags.writeable = labels.flags.writeable = False   # Shared by every call.
  return images, labels


def digits_arrays() -> Tuple[np.ndarray, np.ndarray]:
  """All 1,797 digits, in scikit-learn's ``load_digits`` order (no download, no
  scikit-learn).

  Returns:
    ``(images, labels)``: ``images`` ``[1797, 8, 8]`` uint8 in 0..16 (``/ 16`` for [0, 1]),
    ``labels`` ``[1797]`` int32 in 0..9; fresh writable copies.
  """
  images, labels = _read()
  return images.copy(), labels.copy()


@DATASETS.register("digits", exclude=("split_seed",))   # Fixed: runs stay comparable.
def load_digits(test_fraction: float = 0.2, split_seed: int = 0) -> ImageClassificationData:
  """Loads the digits as ``[N, 8, 8, 1]`` uint8 images (0..16) with a stratified split.

  Args:
    test_fraction: fraction of each class held out for testing, in (0, 1).
    split_seed: seed of the split permutation (fixed so runs are comparable).

  Returns:
    :class:`ImageClassificationData` with ``pixel_scale = 1/16``; 1,438 train and 359
    test images for the default fraction.

  Raises:
    ValueError: if ``test_fraction`` is not in (0, 1).
  """
  if not 0.0 < test_fraction < 1.0:
    raise ValueError(f"data.test_fraction must be in (0, 1), got {test_fraction}.")
  images, labels = _read()
  images = images[..., None]
  rng = np.random.default_rng(split_seed)
  test_idx = []
  for c in range(10):
    idx = np.flatnonzero(labels == c)
    rng.shuffle(idx)
    test_idx.extend(idx[: int(round(len(idx) * test_fraction))])
  test_mask = np.zeros(len(labels), bool)
  test_mask[test_idx] = True
  return ImageClassificationData(
      name="digits", x_train=images[~test_mask], y_train=labels[~test_mask],
      x_test=images[test_mask], y_test=labels[test_mask], num_classes=10,
      pixel_scale=1.0 / 16.0)
