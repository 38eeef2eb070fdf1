"""Data: in-memory loaders (digits, IDX) and step-indexed ``tf.data`` pipelines."""
from __future__ import annotations

from hypernet.data.base import ImageClassificationData
from hypernet.data.digits import load_digits

__all__ = ["ImageClassificationData", "load_classification", "load_digits"]


def load_classification(config) -> ImageClassificationData:
  """Loads the data set named by ``config.name`` (``config`` = ``config.data``).

  Names: ``"digits"`` (embedded, no download), ``"fashion_mnist"`` and ``"mnist"``
  (IDX files in ``config.data_dir``, default search ``/usr/share/datasets/<name>``),
  ``"tfds:NAME"`` (TensorFlow Datasets) and ``"package.module:function"`` (user code),
  see :mod:`hypernet.data.plugins`.

  Raises:
    ValueError: an unknown name (lists the known ones), or a plug-in's error (one line
      naming the field).
    FileNotFoundError: IDX files missing (names the folder and how to get them).
  """
  if config.name == "digits":
    return load_digits(test_fraction=config.test_fraction)
  if config.name in ("fashion_mnist", "mnist"):
    from hypernet.data.idx import load_idx_dataset
    return load_idx_dataset(config.name, config.data_dir or None)
  if str(config.name).startswith("tfds:"):
    from hypernet.data import plugins
    return plugins.load_tfds(config)
  if ":" in str(config.name):
    from hypernet.data import plugins
    return plugins.load_function(config)
  raise ValueError(f"config.data.name={config.name!r} is unknown; known: "
                   "['digits', 'fashion_mnist', 'mnist', 'tfds:NAME', "
                   "'package.module:function'].")
