"""One Keras ``fit()`` job with ``BackupAndRestore`` for tests/test_keras_restart.py.

    python tests/keras_backup_job.py STRATEGY KIND SAVE_FREQ BACKUP_DIR OUT.npz [EPOCH,BATCH]

STRATEGY ``mirrored`` (two logical CPUs of this process) or ``multi_worker``
(``TF_CONFIG``); KIND ``hyper`` (a chunked hypernetwork over a CNN with BatchNorm and
dropout, some target weights not generated) or ``meta`` (Meta-SGD); SAVE_FREQ ``epoch``
or a number of batches. With ``EPOCH,BATCH`` the job stops after that batch (0-based),
prints ``BLOCKED`` and sleeps, for the test to kill it there; otherwise it runs to the
end and writes every variable of the model and of its optimiser, by position, to OUT.
"""
import os
import sys
import time

import numpy as np

EPOCHS, STEPS = 3, 4          # 3 epochs of 4 steps of a global batch of 32 digits.
GLOBAL_BATCH = 32


def make_strategy(kind):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if kind == "multi_worker":
    return tf.distribute.MultiWorkerMirroredStrategy()
  from hypernet.training import distribute  # pylint: disable=g-import-not-at-top
  return distribute.get_strategy("mirrored")  # The logical CPUs.


def _data(kind):
  """A finite dataset, the same batches in every epoch and every process (a resumed
  epoch sees the batches it would have seen)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet.data import digits_arrays, episodes  # pylint: disable=g-import-not-at-top
  images, y = digits_arrays()
  x = (images / 16.0).astype("float32")[..., None]
  if kind == "hyper":
    n = GLOBAL_BATCH * STEPS
    data = tf.data.Dataset.from_tensor_slices((x[:n], y[:n])).batch(GLOBAL_BATCH)
  else:  # Meta-batches of 2 tasks (one per replica), fixed in advance.
    fn = episodes.make_episode_fn(episodes.class_indexed(x[:600], y[:600]), num_ways=3,
                                  num_shots=1, num_queries=2, seed=0)
    batches = [b for b in tf.data.Dataset.range(2 * STEPS).map(fn).batch(2)]
    data = tf.data.Dataset.from_tensor_slices(
        {k: tf.stack([b[k] for b in batches]) for k in batches[0]})
  options = tf.data.Options()
  options.experimental_distribute.auto_shard_policy = (
      tf.data.experimental.AutoShardPolicy.DATA)
  return data.with_options(options)


def make_model(kind):
  import keras  # pylint: disable=g-import-not-at-top
  import hypernet as hn  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(5)
  if kind == "hyper":
    target = keras.Sequential([
        keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, name="conv"),
        keras.layers.BatchNormalization(name="bn"), keras.layers.ReLU(),
        keras.layers.Flatten(), keras.layers.Dropout(0.3, name="drop"),
        keras.layers.Dense(10, name="head")])
    model = hn.keras.HyperModel(target, "chunked", targets="conv/*,head/kernel",
                                hypernetwork_args=dict(chunk_size=64, hidden=(8,)))
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  else:
    model = hn.keras.MetaModel(hn.meta.make_conv4(3, (8, 8, 1), filters=4, num_blocks=2),
                               "metasgd", learner_args=dict(inner_lr=0.3))
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
  return model


def state(model):
  """Every variable of the model (weights, BatchNorm statistics, RNG seed states, the
  learner's own) and of its optimiser, by position."""
  seen, variables = set(), []
  for v in list(model.variables) + list(model.trainable_weights) + list(
      model.optimizer.variables):
    if id(v) not in seen:
      seen.add(id(v))
      variables.append(v)
  return {f"{i:03d}{list(v.shape)}": np.array(v.numpy()) for i, v in enumerate(variables)}


def run(strategy, kind, save_freq, backup_dir, block_at=None, raise_at=None):
  """Builds, compiles and fits the model in ``strategy``'s scope (with
  ``BackupAndRestore`` into ``backup_dir`` unless it is ``None``); returns it.
  ``block_at`` / ``raise_at`` ``(epoch, batch)``: after that batch, print ``BLOCKED`` and
  sleep (for a test to kill the process) / raise ``KeyboardInterrupt`` (in-process)."""
  import keras  # pylint: disable=g-import-not-at-top

  class Block(keras.callbacks.Callback):
    def __init__(self):
      super().__init__()
      self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
      self.epoch = epoch
      print(f"EPOCH {epoch}", flush=True)

    def on_train_batch_end(self, batch, logs=None):
      if raise_at == (self.epoch, batch):
        raise KeyboardInterrupt(f"after batch {batch} of epoch {self.epoch}")
      if block_at == (self.epoch, batch):
        print("BLOCKED", flush=True)
        while True:
          time.sleep(1)

  with strategy.scope():
    model = make_model(kind)
  callbacks = [Block()]
  if backup_dir:
    callbacks.insert(0, keras.callbacks.BackupAndRestore(
        backup_dir, save_freq=save_freq if save_freq == "epoch" else int(save_freq)))
  model.fit(_data(kind), epochs=EPOCHS, verbose=0, shuffle=False, callbacks=callbacks)
  return model


def main(argv):
  strategy_kind, kind, save_freq, backup_dir, out = argv[1:6]
  block_at = tuple(int(s) for s in argv[6].split(",")) if len(argv) > 6 else None
  if strategy_kind == "mirrored":
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  strategy = make_strategy(strategy_kind)
  model = run(strategy, kind, save_freq, backup_dir, block_at)
  np.savez(out, **state(model))
  print("DONE", os.path.exists(backup_dir), flush=True)


if __name__ == "__main__":
  main(sys.argv)
