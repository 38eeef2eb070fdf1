"""Generated low-rank adapters on a small Keras transformer.

A transformer reads each 8x8 digit (``hn.data.digits_arrays()``, the digits hypernet ships) as a sequence of 8
row tokens and is trained on the digits as they are. Three new tasks show the digits
mirrored left-right, upside down and transposed. The base stays frozen; a hypernetwork
generates rank-4 LoRA adapters (``W_0 + A @ B``) for every kernel from each task's
learned embedding, and the adapted model for one task is merged into a plain Keras model.

    python examples/generated_adapters.py
"""
import keras
import numpy as np
import hypernet as hn

TRANSFORMS = (lambda x: x, lambda x: x[:, :, ::-1], lambda x: x[:, ::-1, :],
              lambda x: np.transpose(x, (0, 2, 1)))   # as is, mirrored, upside down, transposed


def transformer(dim: int = 32) -> keras.Model:
  rows = keras.Input((8, 8))                                     # 8 tokens of 8 pixels
  h = keras.layers.Dense(dim, name="embed")(rows)
  h = h + keras.layers.Embedding(8, dim, name="position")(keras.ops.arange(8))
  a = keras.layers.MultiHeadAttention(4, dim // 4, name="mha")(h, h)
  h = keras.layers.LayerNormalization(name="ln1")(h + a)
  f = keras.layers.Dense(2 * dim, activation="gelu", name="ff1")(h)
  h = keras.layers.LayerNormalization(name="ln2")(h + keras.layers.Dense(dim, name="ff2")(f))
  return keras.Model(rows, keras.layers.Dense(10, name="head")(
      keras.layers.GlobalAveragePooling1D()(h)))


def main(epochs: int = 30, seed: int = 0) -> dict:
  keras.utils.set_random_seed(seed)
  images, y = hn.data.digits_arrays()
  x = (images / 16.0).astype("float32")
  train, test = np.arange(len(x)) % 5 != 0, np.arange(len(x)) % 5 == 0
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

  base = transformer()                                           # trained on task 0 only
  base.compile(keras.optimizers.Adam(3e-3), loss, metrics=["accuracy"])
  base.fit(x[train], y[train], epochs=epochs, batch_size=64, verbose=0)
  before = [base.evaluate(t(x[test]), y[test], verbose=0)[1] for t in TRANSFORMS]

  # The adapters: every kernel, rank 4, one learned embedding per task; the base frozen.
  model = hn.HyperModel(base, "lora", targets="*kernel", train_rest=False,
                        hypernetwork_args=dict(rank=4, num_conditions=len(TRANSFORMS),
                                               condition_dim=4, hidden=(8,)))
  model.compile(keras.optimizers.Adam(3e-3), loss, metrics=["accuracy"])
  tasks = np.repeat(np.arange(len(TRANSFORMS), dtype="int32"), train.sum())
  inputs = np.concatenate([t(x[train]) for t in TRANSFORMS])
  model.fit((inputs, tasks), np.tile(y[train], len(TRANSFORMS)), epochs=epochs,
            batch_size=64, verbose=0)
  after = [model.evaluate((t(x[test]), np.full(test.sum(), k, "int32")), y[test],
                          verbose=0)[1] for k, t in enumerate(TRANSFORMS)]

  merged = hn.merged_model(base, model.generate(2))              # task 2, plain Keras
  merged.compile(metrics=["accuracy"], loss=loss)
  merged_accuracy = merged.evaluate(TRANSFORMS[2](x[test]), y[test], verbose=0)[1]
  counts = model.parameter_counts()
  print(f"test accuracy per task (as is, mirrored, upside down, transposed): base "
        f"{np.round(before, 3).tolist()}, with generated adapters "
        f"{np.round(after, 3).tolist()}; merged task-2 model {merged_accuracy:.3f}; "
        f"{counts['trainable']:,} adapter-generator parameters for a "
        f"{counts['target']:,}-weight base")
  return {"before": before, "after": after, "merged": merged_accuracy, **counts}


if __name__ == "__main__":
  main()
