"""A hypernetwork generating every weight of your own Keras model, in a custom loop.

Run: python examples/hypernetwork_own_model.py [--steps=300]
Trains a chunked hypernetwork whose output is every weight of a small Keras CNN on
the 8x8 digits hypernet ships (1,797 real images, no download), then checks the result.
"""
import argparse

import keras
import numpy as np
import tensorflow as tf
import hypernet as hn


def main(steps: int = 300, seed: int = 0) -> dict:
  x, y = hn.data.digits_arrays()                              # [1797, 8, 8] uint8, [1797]
  x = (x.reshape(-1, 8, 8, 1) / 16.0).astype("float32")      # pixels 0..16 -> [0, 1]
  perm = np.random.default_rng(seed).permutation(len(x))     # 1,400 train, 397 test
  x_train, y_train = x[perm[:1400]], y[perm[:1400]]
  x_test, y_test = x[perm[1400:]], y[perm[1400:]]

  keras.utils.set_random_seed(seed)
  model = keras.Sequential([                                 # your model: any built Keras 3 model
      keras.Input((8, 8, 1)),
      keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="c1"),
      keras.layers.MaxPooling2D(),
      keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="c2"),
      keras.layers.Flatten(),
      keras.layers.Dense(10, name="out"),
  ])
  spec = hn.weight_spec(model)                               # {path: TensorSpec}, every weight
  hnet = hn.ChunkedHypernetwork(spec, chunk_size=256, hidden=(32,), seed=seed)
  opt = keras.optimizers.Adam(3e-3)

  @tf.function
  def train_step(images, labels):
    with tf.GradientTape() as tape:
      logits = hn.functional_call(model, hnet(), images, training=True)
      loss = tf.reduce_mean(
          tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    grads = tape.gradient(loss, hnet.trainable_variables)     # through the model into hnet
    opt.apply_gradients(zip(grads, hnet.trainable_variables))
    return loss

  rng = np.random.default_rng(seed)
  losses = []
  for _ in range(steps):
    idx = rng.integers(0, len(x_train), 64)
    losses.append(float(train_step(x_train[idx], y_train[idx])))
  logits = hn.functional_call(model, hnet(), x_test)
  accuracy = float(np.mean(np.argmax(logits, -1) == y_test))
  print(f"{hnet.num_generated} weights generated from {hnet.parameter_count()} parameters; "
        f"loss {np.mean(losses[:20]):.3f} -> {np.mean(losses[-20:]):.3f}, "
        f"test accuracy {accuracy:.3f}")
  return {"first_loss": np.mean(losses[:20]), "last_loss": np.mean(losses[-20:]),
          "accuracy": accuracy}


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=300)
  result = main(parser.parse_args().steps)
  assert result["last_loss"] < 0.5 * result["first_loss"], result
