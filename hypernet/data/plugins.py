"""Image classification data from outside the package: TensorFlow Datasets or user code.

``config.data.name``:

* ``"tfds:NAME"`` -- a TensorFlow Datasets builder (``tfds.load(NAME, split=...,
  data_dir=config.data.data_dir, as_supervised=True)``), splits
  ``config.data.tfds_train_split`` / ``config.data.tfds_test_split`` (default ``"train"``
  / ``"test"``); needs ``pip install tensorflow-datasets`` (the ``tfds`` extra) and, for a
  real data set, one download into ``data_dir`` (``tfds build NAME --data_dir=...`` or a
  first ``tfds.load`` with network access);
* ``"package.module:function"`` -- ``function()`` returns the train and test data as
  arrays ``(x_train, y_train, x_test, y_test)`` (or a dict with those keys, optionally
  ``num_classes``) or as two ``tf.data.Dataset`` s ``(train, test)`` of unbatched
  ``(image, label)`` examples.

Either way the examples are held in memory as an
:class:`~hypernet.data.base.ImageClassificationData`, so the step-indexed training
stream, the padded evaluation pass and distribution work as for the built-in sets.
Images are ``[N, H, W, C]`` (``[N, H, W]`` gets a channel axis); uint8 images are scaled
by 1/255, float images are used as they are.
"""
from __future__ import annotations

import difflib

from typing import Optional

import numpy as np

from hypernet.core import plugins
from hypernet.data.base import ImageClassificationData

TFDS_PREFIX = "tfds:"


def _as_arrays(dataset, field: str, split: str):
  """Unbatched ``(image, label)`` examples (or dicts with ``image``/``label``) -> arrays."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not isinstance(dataset, tf.data.Dataset):
    raise plugins.PluginError(f"{field}: the {split} data is a {type(dataset).__name__}; "
                              "give arrays or a tf.data.Dataset of (image, label).")
  spec = dataset.element_spec
  if isinstance(spec, dict):
    if "image" not in spec or "label" not in spec:
      raise plugins.PluginError(f"{field}: {split} examples are dicts with keys "
                                f"{sorted(spec)}; expected (image, label) or "
                                "{'image', 'label'}.")
    dataset = dataset.map(
        tf.autograph.experimental.do_not_convert(lambda e: (e["image"], e["label"])))
  elif not (isinstance(spec, tuple) and len(spec) == 2):
    raise plugins.PluginError(f"{field}: {split} examples must be (image, label) pairs, "
                              f"got {spec}.")
  images, labels = [], []
  for x, y in dataset.batch(4096).as_numpy_iterator():
    images.append(x)
    labels.append(y)
  if not images:
    raise plugins.PluginError(f"{field}: the {split} data set is empty.")
  return np.concatenate(images), np.concatenate(labels)


def _make(name: str, field: str, x_train, y_train, x_test, y_test,
          num_classes: Optional[int] = None) -> ImageClassificationData:
  """Checks shapes and labels (one line naming ``field``) and builds the container."""
  out = {}
  for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim == 3:
      x = x[..., None]
    if x.ndim != 4:
      raise plugins.PluginError(f"{field}: x_{split} has shape {x.shape}; expected images "
                                "[N, H, W, C] (or [N, H, W]).")
    if y.ndim == 2 and y.shape[1] == 1:
      y = y[:, 0]
    if y.ndim != 1 or len(y) != len(x):
      raise plugins.PluginError(f"{field}: y_{split} has shape {y.shape} for {len(x)} "
                                f"images; expected one integer label per image [{len(x)}].")
    if not np.issubdtype(y.dtype, np.integer):
      raise plugins.PluginError(f"{field}: y_{split} has dtype {y.dtype}; expected integer "
                                "class ids.")
    if not (x.dtype == np.uint8 or np.issubdtype(x.dtype, np.floating)):
      raise plugins.PluginError(f"{field}: x_{split} has dtype {x.dtype}; expected uint8 or "
                                "float images.")
    out[split] = (x, y.astype(np.int32))
  if out["train"][0].shape[1:] != out["test"][0].shape[1:]:
    raise plugins.PluginError(f"{field}: train images {out['train'][0].shape[1:]} and test "
                              f"images {out['test'][0].shape[1:]} differ in shape.")
  if out["train"][0].dtype != out["test"][0].dtype:
    raise plugins.PluginError(f"{field}: train and test images differ in dtype "
                              f"({out['train'][0].dtype}, {out['test'][0].dtype}).")
  labels = np.concatenate([out["train"][1], out["test"][1]])
  if labels.min() < 0:
    raise plugins.PluginError(f"{field}: labels must be >= 0, got {labels.min()}.")
  if num_classes is None:
    num_classes = int(labels.max()) + 1
  elif labels.max() >= num_classes:
    raise plugins.PluginError(f"{field}: labels reach {labels.max()} but num_classes is "
                              f"{num_classes}.")
  scale = 1.0 / 255.0 if out["train"][0].dtype == np.uint8 else 1.0
  x_train = out["train"][0]
  if x_train.dtype != np.uint8:
    x_train = x_train.astype(np.float32)
  x_test = out["test"][0].astype(x_train.dtype)
  return ImageClassificationData(
      name=name, x_train=x_train, y_train=out["train"][1], x_test=x_test,
      y_test=out["test"][1], num_classes=int(num_classes), pixel_scale=scale)


def load_function(config) -> ImageClassificationData:
  """``config.name = "package.module:function"``: the user's data (module doc).

  Raises:
    PluginError (a ValueError): the import fails, the function returns something else
      than two data sets, or arrays of the wrong shape / dtype (one line naming
      ``config.data.name``).
  """
  field = f"config.data.name={config.name!r}"
  fn = plugins.load_object(config.name, "config.data.name")
  value = plugins.call(fn, config.name, "config.data.name", "load()")
  num_classes = None
  if isinstance(value, dict):
    missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in value]
    if missing:
      raise plugins.PluginError(f"{field} returned a dict without {missing}; expected keys "
                                "x_train, y_train, x_test, y_test (and num_classes).")
    num_classes = value.get("num_classes")
    value = tuple(value[k] for k in ("x_train", "y_train", "x_test", "y_test"))
  if isinstance(value, (tuple, list)) and len(value) == 2:
    (x_train, y_train), (x_test, y_test) = (_as_arrays(v, field, s)
                                            for v, s in zip(value, ("train", "test")))
  elif isinstance(value, (tuple, list)) and len(value) == 4:
    x_train, y_train, x_test, y_test = value
  else:
    raise plugins.PluginError(
        f"{field} returned a {type(value).__name__}"
        + (f" of {len(value)}" if isinstance(value, (tuple, list)) else "")
        + "; expected (x_train, y_train, x_test, y_test) arrays or (train, test) "
        "tf.data.Datasets of (image, label).")
  return _make(config.name.rpartition(":")[2], field, x_train, y_train, x_test, y_test,
               num_classes)


def load_tfds(config) -> ImageClassificationData:
  """``config.name = "tfds:NAME"``: a TensorFlow Datasets image classification set.

  Reads ``config.tfds_train_split`` / ``config.tfds_test_split`` of ``NAME`` from
  ``config.data_dir`` (``""``: TFDS' default, ``~/tensorflow_datasets``) as
  ``(image, label)``; the number of classes from the builder's ``label`` feature.

  Raises:
    PluginError (a ValueError): tensorflow-datasets missing (with the install command),
      an unknown builder or split, data that is not prepared in ``data_dir`` (how to
      download it), or examples that are not images with integer labels.
  """
  field = f"config.data.name={config.name!r}"
  name = config.name[len(TFDS_PREFIX):]
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise plugins.PluginError(f"{field} needs TensorFlow Datasets: pip install "
                              "'hypernet[tfds]' (or tensorflow-datasets).") from e
  splits = (str(config.get("tfds_train_split", "train")),
            str(config.get("tfds_test_split", "test")))
  data_dir = str(config.data_dir or "") or None
  try:
    (train, test), info = tfds.load(name, split=list(splits), data_dir=data_dir,
                                    as_supervised=True, with_info=True)
  except Exception as e:  # pylint: disable=broad-except
    builder = name.split("/")[0].split(":")[0]
    known = list(tfds.list_builders())
    if builder not in known:  # A typo: nothing to prepare.
      near = difflib.get_close_matches(builder, known, n=3)
      raise plugins.PluginError(
          f"{field}: TensorFlow Datasets has no data set {builder!r}"
          + (f"; did you mean {', '.join(repr(n) for n in near)}?" if near else
             " (tfds.list_builders() lists them).")) from e
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise plugins.PluginError(
        f"{field} (splits {splits}, config.data.data_dir={config.data_dir!r}) could not be "
        f"loaded: {first.rstrip('.')}. Prepare it once with network access: tfds build "
        f"{name} --data_dir=<dir>.") from e
  label = info.features["label"] if "label" in info.features else None
  num_classes = getattr(label, "num_classes", None)
  x_train, y_train = _as_arrays(train, field, "train")
  x_test, y_test = _as_arrays(test, field, "test")
  return _make(name, field, x_train, y_train, x_test, y_test, num_classes)
