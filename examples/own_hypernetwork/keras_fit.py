"""The same user-written kind trained by Keras' own fit(), given as the class itself:

    python examples/own_hypernetwork/keras_fit.py --epochs=10

prints the test accuracy after fit() and after a save / load_model round trip (the
reloaded model rebuilds the same class from its saved config).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import hypernet as hn  # noqa: E402
from lowrank_hypernet import LowRankHypernetwork  # noqa: E402


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--epochs", type=int, default=10)
  parser.add_argument("--out", default="/tmp/own_hypernetwork")
  args = parser.parse_args()
  x, y = hn.data.digits_arrays()                              # [1797, 8, 8] uint8, [1797]
  x = (x.reshape(-1, 8, 8, 1) / 16.0).astype("float32")      # pixels 0..16 -> [0, 1]
  perm = np.random.default_rng(0).permutation(len(x))        # 1,400 train, 397 test
  x_train, y_train = x[perm[:1400]], y[perm[:1400]]
  x_test, y_test = x[perm[1400:]], y[perm[1400:]]
  keras.utils.set_random_seed(0)
  target = keras.Sequential([                                # any built Keras 3 model
      keras.Input((8, 8, 1)),
      keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="c1"),
      keras.layers.MaxPooling2D(),
      keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="c2"),
      keras.layers.Flatten(),
      keras.layers.Dense(10, name="logits")])
  model = hn.keras.HyperModel(target, LowRankHypernetwork, hypernetwork_args=dict(rank=8))
  model.compile(optimizer=keras.optimizers.Adam(1e-2),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])
  model.fit(x_train, y_train, batch_size=64, epochs=args.epochs, verbose=2)
  _, accuracy = model.evaluate(x_test, y_test, verbose=0)
  os.makedirs(args.out, exist_ok=True)
  path = os.path.join(args.out, "lowrank.keras")
  model.save(path)
  reloaded = keras.models.load_model(path)
  assert type(reloaded.hypernetwork).__name__ == "LowRankHypernetwork"
  np.testing.assert_allclose(reloaded.predict(x_test[:32], verbose=0),
                             model.predict(x_test[:32], verbose=0), rtol=1e-5, atol=1e-5)
  print(f"test accuracy: {accuracy:.4f}")


if __name__ == "__main__":
  main()
