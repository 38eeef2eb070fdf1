"""fit() runs several steps per tf.function call by default (hypernet/keras/
steps_per_execution.py) and nothing a user sees changes: the same steps (bit-identical
weights), the step count asked for, every batch for a callback with batch hooks, "auto"
kept through save / load."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.keras import HyperModel, MetaModel
from hypernet.keras import steps_per_execution as spe
from hypernet.meta import conv4
from hypernet.tasks import targets

CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


class _EpochEnd(keras.callbacks.Callback):
  """Batch-blind: records the steps per execution fit() runs with, at each epoch's end."""

  def __init__(self):
    super().__init__()
    self.seen = []

  def on_epoch_end(self, epoch, logs=None):
    self.seen.append(self.model.steps_per_execution)


class _Batches(keras.callbacks.Callback):
  def __init__(self):
    super().__init__()
    self.batches = []

  def on_train_batch_end(self, batch, logs=None):
    self.batches.append(batch)


def _data():
  rng = np.random.default_rng(0)
  x = rng.uniform(size=(256, 8, 8, 1)).astype("float32")
  y = rng.integers(0, 10, 256)
  return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)


def _model(**compile_args):
  keras.utils.set_random_seed(0)
  target = targets.make_cnn((8, 8, 1), 10, conv_widths=(4,), dense_widths=(), dropout=0.2)
  model = HyperModel(target, "chunked", hypernetwork_args=dict(chunk_size=64,
                                                               chunk_emb_dim=4, hidden=(8,)))
  model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=CE, **compile_args)
  return model


def _weights(model):
  return [np.array(v.numpy()) for v in model.weights]


def test_auto_steps_divide_the_counts_asked_for_and_respect_batch_callbacks():
  assert spe.MAX_STEPS == 100
  assert spe.auto_steps_per_execution(25) == 25
  assert spe.auto_steps_per_execution(250) == 50          # not 100: 250 = 5 x 50
  assert spe.auto_steps_per_execution(100, 30) == 10      # divides both counts
  assert spe.auto_steps_per_execution(101) == 1           # a prime above the cap
  assert spe.auto_steps_per_execution() == spe.MAX_STEPS  # finite data ends executions
  assert spe.auto_steps_per_execution(64, callbacks=[_EpochEnd()]) == 64
  assert spe.auto_steps_per_execution(64, callbacks=[_Batches()]) == 1
  assert spe.auto_steps_per_execution(64, callbacks=[
      keras.callbacks.EarlyStopping(), keras.callbacks.TensorBoard("/tmp/x"),
      keras.callbacks.ModelCheckpoint("/tmp/x.keras")]) == 64
  assert spe.auto_steps_per_execution(64, callbacks=[
      keras.callbacks.ModelCheckpoint("/tmp/x.keras", save_freq=10)]) == 1
  assert spe.auto_steps_per_execution(64, num_replicas=2) == 1
  with pytest.raises(ValueError, match="cap must be a positive int"):
    spe.auto_steps_per_execution(10, cap=0)


def test_fit_with_keras_defaults_runs_many_steps_per_call_and_the_same_steps():
  """42 steps, 2 epochs: 42 steps per call (not Keras' 1), the optimizer at exactly 84
  steps (no rounding up to whole executions), weights bit-identical to one step per
  call, and evaluate() / predict() back at one step per call afterwards."""
  auto, one = _model(), _model(steps_per_execution=1)
  epochs = _EpochEnd()
  auto.fit(_data(), steps_per_epoch=42, epochs=2, verbose=0, callbacks=[epochs])
  one.fit(_data(), steps_per_epoch=42, epochs=2, verbose=0)
  assert epochs.seen == [42, 42]
  assert int(auto.optimizer.iterations) == int(one.optimizer.iterations) == 84
  for a, b in zip(_weights(auto), _weights(one)):
    np.testing.assert_array_equal(a, b)
  assert auto.steps_per_execution == 1
  x = next(iter(_data()))[0]
  np.testing.assert_array_equal(auto.predict(x, verbose=0), one.predict(x, verbose=0))


def test_a_callback_with_batch_hooks_sees_every_batch():
  model, batches = _model(), _Batches()
  model.fit(_data(), steps_per_epoch=12, epochs=1, verbose=0, callbacks=[batches])
  assert batches.batches == list(range(12))


def test_explicit_steps_per_execution_is_keras_own_and_auto_survives_save_load(tmp_path):
  explicit = _model(steps_per_execution=4)
  seen = _EpochEnd()
  explicit.fit(_data(), steps_per_epoch=8, epochs=1, verbose=0, callbacks=[seen])
  assert seen.seen == [4]
  model = _model()
  model.fit(_data(), steps_per_epoch=8, epochs=1, verbose=0)
  path = str(tmp_path / "m.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  assert loaded.get_compile_config()["steps_per_execution"] == "auto"
  seen = _EpochEnd()
  loaded.fit(_data(), steps_per_epoch=8, epochs=1, verbose=0, callbacks=[seen])
  assert seen.seen == [8]


def test_meta_model_fit_runs_many_meta_steps_per_call_and_the_same_ones():
  """6 first-order MAML meta-steps in one call equal 6 calls of one (float32 rounding)."""
  rng = np.random.default_rng(1)
  batch = {"support_x": rng.uniform(size=(2, 5, 8, 8, 1)).astype("float32"),
           "support_y": np.tile(np.arange(5), (2, 1)),
           "query_x": rng.uniform(size=(2, 10, 8, 8, 1)).astype("float32"),
           "query_y": np.tile(np.arange(5), (2, 2))}
  data = tf.data.Dataset.from_tensors(batch).repeat()
  models = []
  for args in ({}, {"steps_per_execution": 1}):
    keras.utils.set_random_seed(3)
    model = MetaModel(conv4.make_conv4(5, (8, 8, 1), filters=4, num_blocks=1), "fomaml",
                      learner_args=dict(inner_lr=0.4, inner_steps=1))
    model.compile(optimizer=keras.optimizers.SGD(0.1), **args)
    seen = _EpochEnd()
    model.fit(data, steps_per_epoch=6, epochs=1, verbose=0, callbacks=[seen])
    models.append((model, seen.seen))
  assert models[0][1] == [6] and models[1][1] == [1]
  for a, b, v in zip(_weights(models[0][0]), _weights(models[1][0]), models[1][0].weights):
    # The same meta-steps; the loop's graph rounds differently in the last bit.
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=v.path)
  assert int(models[0][0].optimizer.iterations) == 6
