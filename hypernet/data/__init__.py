"""Data: in-memory loaders (digits, IDX) and step-indexed ``tf.data`` pipelines."""
from __future__ import annotations

from hypernet.data.base import DATASETS, ImageClassificationData
from hypernet.data.digits import digits_arrays, load_digits

__all__ = ["DATASETS", "ImageClassificationData", "digits_arrays", "load_classification",
           "load_digits"]


def load_classification(config) -> ImageClassificationData:
  """Loads the data set named by ``config.name`` (``config`` = ``config.data``).

  Names: the registered loaders (:data:`~hypernet.data.base.DATASETS`: ``"digits"``
  embedded, no download; ``"fashion_mnist"`` and ``"mnist"`` from IDX files in
  ``config.data_dir``), each called with the fields of ``config`` its arguments name;
  ``"tfds:NAME"`` (TensorFlow Datasets) and ``"package.module:function"`` (user code),
  see :mod:`hypernet.data.plugins`.

  Raises:
    ValueError: an unknown name (lists the known ones), or a plug-in's error (one line
      naming the field).
    FileNotFoundError: IDX files missing (names the folder and how to get them).
  """
  name = str(config.name)
  if ":" in name:   # A plug-in: "tfds:NAME" or "package.module:function".
    from hypernet.data import plugins  # pylint: disable=g-import-not-at-top
    load = plugins.load_tfds if name.startswith(plugins.TFDS_PREFIX) else plugins.load_function
    return load(config)
  return DATASETS.build(name, config)
