"""IDX files (LeCun's MNIST format), as shipped for MNIST and Fashion-MNIST.

Format: a big-endian header, magic ``0x00000803`` for images / ``0x00000801`` for
labels, then one uint32 per dimension, then the raw uint8 values. Files may be gzipped
(``.gz``) or plain. Both data sets use the names ``train-images-idx3-ubyte``,
``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``.
"""
from __future__ import annotations

import gzip
import os
import struct
from typing import Optional, Sequence

import numpy as np

from hypernet.data.base import DATASETS, ImageClassificationData

DEFAULT_DIRS = {
    "fashion_mnist": ("/usr/share/datasets/fashion-mnist",),
    "mnist": ("/usr/share/datasets/mnist",),
}
HOW_TO_GET = {
    "fashion_mnist": ("on Debian/Ubuntu `apt-get install dataset-fashion-mnist` (files land in "
                      "/usr/share/datasets/fashion-mnist), or download the four *-ubyte.gz "
                      "files from https://github.com/zalandoresearch/fashion-mnist"),
    "mnist": "download the four *-ubyte.gz files of MNIST (http://yann.lecun.com/exdb/mnist/)",
}
_FILES = {
    "x_train": "train-images-idx3-ubyte", "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte", "y_test": "t10k-labels-idx1-ubyte",
}


def read_idx(path: str) -> np.ndarray:
  """Reads one IDX file (gzipped or not) into a uint8 array.

  Returns:
    ``[N, rows, cols]`` for image files (magic 0x803), ``[N]`` for label files (0x801).

  Raises:
    ValueError: a bad magic number, or a file shorter than its header says (truncated
      download); the message names the file.
  """
  opener = gzip.open if path.endswith(".gz") else open
  try:
    with opener(path, "rb") as f:
      raw = f.read()
  except (OSError, EOFError) as e:
    raise ValueError(f"Cannot read IDX file {path}: {e}. The file is damaged or truncated; "
                     "fetch it again.") from e
  if len(raw) < 8:
    raise ValueError(f"IDX file {path} is truncated ({len(raw)} bytes); fetch it again.")
  zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
  if zero != 0 or dtype_code != 0x08 or ndim not in (1, 3):
    raise ValueError(f"{path} is not a uint8 IDX image/label file (magic "
                     f"{raw[:4].hex()}, expected 00000803 or 00000801).")
  dims = struct.unpack(">" + "I" * ndim, raw[4: 4 + 4 * ndim])
  body = raw[4 + 4 * ndim:]
  expected = int(np.prod(dims))
  if len(body) < expected:
    raise ValueError(f"IDX file {path} is truncated: its header promises {expected} values "
                     f"{dims}, it holds {len(body)}. Fetch it again.")
  return np.frombuffer(body, np.uint8, count=expected).reshape(dims)


def _find(directory: str, stem: str) -> Optional[str]:
  for name in (stem + ".gz", stem, stem.replace("-idx", ".idx")):
    path = os.path.join(directory, name)
    if os.path.exists(path):
      return path
  return None


def find_idx_dir(name: str, directory: Optional[str] = None,
                 search: Sequence[str] = ()) -> str:
  """Returns the first directory holding the four IDX files of ``name``.

  Raises:
    FileNotFoundError: naming the directories searched, the missing file and how to get it.
  """
  candidates = [directory] if directory else list(search) + list(DEFAULT_DIRS.get(name, ()))
  for d in candidates:
    if d and all(_find(d, stem) for stem in _FILES.values()):
      return d
  missing = []
  for d in candidates:
    missing += [os.path.join(d, s + ".gz") for s in _FILES.values() if d and not _find(d, s)]
  raise FileNotFoundError(
      f"{name}: IDX files not found in {candidates} (missing e.g. {missing[:1]}). "
      f"Set config.data.data_dir to the folder holding them; to get them: "
      f"{HOW_TO_GET.get(name, 'see the data set homepage')}.")


def load_idx_dataset(name: str = "fashion_mnist", directory: Optional[str] = None
                     ) -> ImageClassificationData:
  """Loads MNIST or Fashion-MNIST from its four IDX files as ``[N, 28, 28, 1]`` uint8.

  Args:
    name: ``"fashion_mnist"`` or ``"mnist"`` (sets the default search folders).
    directory: the folder holding the files; ``None`` searches ``DEFAULT_DIRS[name]``.

  Raises:
    FileNotFoundError: files missing (names the folder and how to get them).
    ValueError: a truncated or malformed file, or image/label counts that differ.
  """
  d = find_idx_dir(name, directory)
  arrays = {k: read_idx(_find(d, stem)) for k, stem in _FILES.items()}
  for split in ("train", "test"):
    x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
    if len(x) != len(y):
      raise ValueError(f"{d}: {len(x)} {split} images but {len(y)} labels; a file is "
                       "from another data set or truncated.")
  return ImageClassificationData(
      name=name, x_train=arrays["x_train"][..., None], y_train=arrays["y_train"].astype(np.int32),
      x_test=arrays["x_test"][..., None], y_test=arrays["y_test"].astype(np.int32),
      num_classes=int(arrays["y_train"].max()) + 1, pixel_scale=1.0 / 255.0)


@DATASETS.register("fashion_mnist")
def load_fashion_mnist(data_dir: str = "") -> ImageClassificationData:
  """Fashion-MNIST (Xiao et al. 2017) from the IDX files in ``data_dir`` (``""``: search
  ``DEFAULT_DIRS``); see :func:`load_idx_dataset`."""
  return load_idx_dataset("fashion_mnist", data_dir or None)


@DATASETS.register("mnist")
def load_mnist(data_dir: str = "") -> ImageClassificationData:
  """MNIST (LeCun et al. 1998) from the IDX files in ``data_dir`` (``""``: search
  ``DEFAULT_DIRS``); see :func:`load_idx_dataset`."""
  return load_idx_dataset("mnist", data_dir or None)
