"""The same kind of model trained with Keras' own compile() / fit() and callbacks.

    python examples/own_model_and_data/keras_fit.py --epochs=30 --out=/tmp/keras_fit

A chunked hypernetwork generates every weight of my_lab.make_model's network
(hn.keras.HyperModel); fit() runs with TensorBoard, ModelCheckpoint and EarlyStopping,
and the saved model reloads with keras.models.load_model.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import hypernet as hn  # noqa: E402
import my_lab  # noqa: E402


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--epochs", type=int, default=30)
  parser.add_argument("--out", default="/tmp/keras_fit")
  args = parser.parse_args()
  train, test = my_lab.load_data()
  train = train.shuffle(2000, seed=0).batch(64)
  test = test.batch(256)

  keras.utils.set_random_seed(0)
  model = hn.keras.HyperModel(my_lab.make_model((8, 8, 1), 10), "chunked",
                              hypernetwork_args=dict(chunk_size=256, hidden=(16,)))
  model.compile(optimizer=keras.optimizers.Adam(5e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])
  model.fit(train, epochs=args.epochs, validation_data=test, verbose=2, callbacks=[
      keras.callbacks.TensorBoard(os.path.join(args.out, "tb")),
      keras.callbacks.ModelCheckpoint(os.path.join(args.out, "best.keras"),
                                      monitor="val_accuracy", mode="max",
                                      save_best_only=True),
      keras.callbacks.EarlyStopping(monitor="val_loss", patience=5,
                                    restore_best_weights=True)])
  best = keras.models.load_model(os.path.join(args.out, "best.keras"))
  _, accuracy = best.evaluate(test, verbose=0)
  print(f"test accuracy of the best checkpoint: {accuracy:.4f}")


if __name__ == "__main__":
  main()
