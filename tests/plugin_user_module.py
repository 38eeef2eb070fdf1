"""A user's own module for tests/test_plugins.py: models, data and a task that the
config names as "plugin_user_module:<name>" (no edit to the package)."""
import keras
import numpy as np
import tensorflow as tf

from hypernet.tasks import protocol


def make_mlp(input_shape, num_classes):
  return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(name="flat"),
                           keras.layers.Dense(32, activation="relu", name="hidden"),
                           keras.layers.Dense(num_classes, name="head")], name="user_mlp")


def returns_a_string(input_shape, num_classes):
  del input_shape, num_classes
  return "cnn"


def unbuilt(input_shape, num_classes):
  del input_shape
  return keras.Sequential([keras.layers.Dense(num_classes)])


def wrong_outputs(input_shape, num_classes):
  return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                           keras.layers.Dense(num_classes + 1, name="head")])


def no_arguments():  # A factory written without hypernet's two arguments.
  return make_mlp((8, 8, 1), 10)


def _stripes(n, seed):
  """Three classes of 6x6 images: a bright row 0-1, 2-3 or 4-5, plus noise (uint8)."""
  rng = np.random.default_rng(seed)
  y = rng.integers(0, 3, n).astype(np.int64)
  x = rng.integers(0, 60, (n, 6, 6)).astype(np.uint8)
  for i, c in enumerate(y):
    x[i, 2 * c:2 * c + 2, :] = 255
  return x, y


def stripes_arrays():
  x, y = _stripes(300, 0)
  xt, yt = _stripes(101, 1)
  return x, y, xt, yt


def standardised_stripes():
  """The stripes as float images standardised to mean 0, std 1 (values about -1..3)."""
  x, y, xt, yt = stripes_arrays()
  mean, std = x.mean(), x.std()
  return ((x - mean) / std).astype(np.float32), y, ((xt - mean) / std).astype(np.float32), yt


def stripes_datasets():
  x, y, xt, yt = stripes_arrays()
  return (tf.data.Dataset.from_tensor_slices((x, y)),
          tf.data.Dataset.from_tensor_slices({"image": xt, "label": yt}))


def three_things():
  return 1, 2, 3


def needs_a_path(path):  # A data function that wants an argument.
  return stripes_arrays()


def flat_images():
  x, y, xt, yt = stripes_arrays()
  return x.reshape(len(x), -1), y, xt.reshape(len(xt), -1), yt


def float_labels():
  x, y, xt, yt = stripes_arrays()
  return x, y.astype(np.float32), xt, yt


class LinearRegressionTask:
  """A user objective in the one loop: least squares ``y = X w* + 0.01 noise`` with its
  own variable ``w`` (the task interface of hypernet/tasks/protocol.py)."""

  def __init__(self, config):
    rng = np.random.default_rng(config.seed)
    self.w_true = rng.standard_normal((5, 1)).astype(np.float32)
    self.x = rng.standard_normal((512, 5)).astype(np.float32)
    self.y = self.x @ self.w_true + 0.01 * rng.standard_normal((512, 1)).astype(np.float32)
    self.w = tf.Variable(tf.zeros((5, 1)), name="w")
    self.metric_names = ["loss"]

  @property
  def trainable_variables(self):
    return [self.w]

  def trackables(self):
    return {"w": self.w}

  def train_dataset(self, global_batch_size, seed, start_step=0, input_context=None):
    del input_context
    ds = tf.data.Dataset.from_tensor_slices({"x": self.x, "y": self.y}).repeat()
    return ds.shuffle(512, seed=seed).batch(global_batch_size).skip(start_step)

  def eval_dataset(self, global_batch_size, input_context=None):
    del input_context
    return tf.data.Dataset.from_tensor_slices({"x": self.x, "y": self.y}).batch(
        global_batch_size)

  def _sq(self, batch):
    return tf.reduce_sum(tf.square(batch["x"] @ self.w - batch["y"]), axis=-1)

  def train_loss(self, batch, global_batch_size):
    per_example = self._sq(batch)
    loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
    return loss, {"loss": (tf.reduce_sum(per_example), tf.cast(tf.size(per_example),
                                                               tf.float32))}, {}

  def eval_sums(self, batch):
    per_example = self._sq(batch)
    return {"loss": (tf.reduce_sum(per_example), tf.cast(tf.size(per_example), tf.float32))}

  def apply_state(self, state):
    del state


class Incomplete:
  def __init__(self, config):
    self.config = config


class SubclassedRegressionTask(protocol.Task):
  """:class:`LinearRegressionTask` written as a subclass of the Task protocol: the
  optional members (describe, final_metrics, ...) come from the base."""

  def __init__(self, config):
    self._inner = LinearRegressionTask(config)
    self.metric_names = ["loss"]

  @property
  def trainable_variables(self):
    return self._inner.trainable_variables

  def trackables(self):
    return self._inner.trackables()

  def train_dataset(self, global_batch_size, seed, start_step=0, input_context=None):
    return self._inner.train_dataset(global_batch_size, seed, start_step, input_context)

  def eval_dataset(self, global_batch_size, input_context=None):
    return self._inner.eval_dataset(global_batch_size, input_context)

  def train_loss(self, batch, global_batch_size):
    return self._inner.train_loss(batch, global_batch_size)

  def eval_sums(self, batch):
    return self._inner.eval_sums(batch)

  def apply_state(self, state):
    del state

  def final_metrics(self):
    return {"w_error": float(tf.norm(self._inner.w - self._inner.w_true))}


class IncompleteSubclass(protocol.Task):
  """A Task subclass without eval_sums and without a loss."""

  def __init__(self, config):
    self.config = config


class TakesNothing:  # A task class whose constructor does not take the config.

  def __init__(self):
    pass
