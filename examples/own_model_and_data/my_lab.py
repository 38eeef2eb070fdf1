"""A user's own module: a model factory and a data function in plain Keras and tf.data
(hypernet only lends the example digits).

The config (config.py) names them as "my_lab:make_model" and "my_lab:load_data"; the
training command imports this module from the working directory (or PYTHONPATH).
"""
import keras
import numpy as np
import tensorflow as tf

import hypernet as hn


def make_model(input_shape, num_classes):
  """A small residual CNN. Called with the data's image shape (H, W, C) and number of
  classes; returns a built keras.Model from [B, H, W, C] images to [B, classes] logits."""
  inputs = keras.Input(input_shape)
  h = keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="stem")(inputs)
  r = keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="res_a")(h)
  r = keras.layers.Conv2D(16, 3, padding="same", name="res_b")(r)
  h = keras.layers.ReLU(name="res_relu")(keras.layers.Add(name="res_add")([h, r]))
  h = keras.layers.GlobalAveragePooling2D(name="pool")(h)
  outputs = keras.layers.Dense(num_classes, name="head")(h)
  return keras.Model(inputs, outputs, name="my_resnet")


def load_data():
  """The user's own pipeline: (train, test) tf.data.Datasets of (image, label) examples.

  Here the 8x8 digits hypernet ships (no download), every third
  image held out, images float32 in [0, 1].
  """
  images, y = hn.data.digits_arrays()          # [1797, 8, 8] uint8 in 0..16, [1797] int32
  x = (images / 16.0).astype(np.float32)[..., None]
  test = np.arange(len(x)) % 3 == 0
  return (tf.data.Dataset.from_tensor_slices((x[~test], y[~test])),
          tf.data.Dataset.from_tensor_slices((x[test], y[test])))
