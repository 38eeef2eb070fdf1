"""The embedded default data: scikit-learn's bundled handwritten digits (no download).

1,797 real 8x8 grey-level images of the digits 0-9 (pixel values 0..16), from the UCI
"Optical Recognition of Handwritten Digits" set (Alpaydin & Kaynak 1998), shipped inside
scikit-learn. Split into train/test once with a fixed, stratified permutation.
"""
from __future__ import annotations

import numpy as np

from hypernet.data.base import DATASETS, ImageClassificationData


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
  from sklearn import datasets  # Imported here: only this loader needs scikit-learn.
  digits = datasets.load_digits()
  images = digits.images.astype(np.uint8)[..., None]
  labels = digits.target.astype(np.int32)
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
