"""A hypernetwork generating only part of your model (its dense head), in a custom loop,
while the rest of the model (the convolutions) trains as ordinary variables.

Run: python examples/hypernetwork_head_only.py [--steps=300]
On the 8x8 digits hypernet ships (1,797 real images, no download). The two things a
partial hypernetwork needs: the spec of the generated weights (``hn.weight_spec`` with
patterns) and the model's other trainable variables, which the optimiser trains beside
the hypernetwork's (``functional_call`` reads every weight you do not give it from the
model's own variables).
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
  model = keras.Sequential([
      keras.Input((8, 8, 1)),
      keras.layers.Conv2D(12, 3, padding="same", activation="relu", name="c1"),
      keras.layers.MaxPooling2D(),
      keras.layers.Conv2D(24, 3, padding="same", activation="relu", name="c2"),
      keras.layers.GlobalAveragePooling2D(),
      keras.layers.Dense(32, activation="relu", name="fc"),
      keras.layers.Dense(10, name="logits"),
  ])
  spec = hn.weight_spec(model, ["fc/*", "logits/*"])        # only the head: 4 tensors
  # An MLP hypernetwork's output layer alone is hidden x generated: it compresses
  # nothing; hn.ChunkedHypernetwork does (README). Here the point is what is generated.
  hnet = hn.MLPHypernetwork(spec, hidden=(8,), seed=seed)    # 8-d code -> 1,130 weights
  rest = [v for p, v in hn.variable_paths(model, trainable=True).items() if p not in spec]
  trained = hnet.trainable_variables + rest                 # hypernetwork + the convolutions
  opt = keras.optimizers.Adam(3e-3)

  @tf.function
  def train_step(images, labels):
    with tf.GradientTape() as tape:
      logits = hn.functional_call(model, hnet(), images, training=True)  # head generated
      loss = tf.reduce_mean(
          tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    grads = tape.gradient(loss, trained)
    opt.apply_gradients(zip(grads, trained))
    return loss

  rng = np.random.default_rng(seed)
  losses = []
  for _ in range(steps):
    idx = rng.integers(0, len(x_train), 64)
    losses.append(float(train_step(x_train[idx], y_train[idx])))
  logits = hn.functional_call(model, hnet(), x_test)
  accuracy = float(np.mean(np.argmax(logits, -1) == y_test))
  print(f"{hnet.num_generated} head weights generated from {hnet.parameter_count()} "
        f"parameters, {sum(int(np.prod(v.shape)) for v in rest)} convolution weights "
        f"trained directly; loss {np.mean(losses[:20]):.3f} -> "
        f"{np.mean(losses[-20:]):.3f}, test accuracy {accuracy:.3f}")
  return {"first_loss": np.mean(losses[:20]), "last_loss": np.mean(losses[-20:]),
          "accuracy": accuracy, "generated": hnet.num_generated,
          "hypernetwork": hnet.parameter_count(), "rest": len(rest)}


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=300)
  result = main(parser.parse_args().steps)
  assert result["last_loss"] < 0.5 * result["first_loss"], result
