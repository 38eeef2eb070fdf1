"""hn.keras: HyperModel and MetaModel trained by Keras' own compile() / fit().

Same numbers both ways: HyperModel.fit() on the Trainer's step-indexed batches follows
the Trainer's trajectory, and a MetaModel step is the meta-gradient of hn.meta; callbacks,
save / load and MirroredStrategy on the two logical CPUs of tests/conftest.py.
"""
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import hypernet as hn
from hypernet.core import functional
from hypernet.data import episodes
from hypernet.data.digits import load_digits
from hypernet.keras import HyperModel, MetaModel
from hypernet.meta import conv4, inner_loop, meta_batch
from hypernet.training import distribute, loop

from hypernet.tasks import targets
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "configs"))
import digits_hyper  # noqa: E402  pylint: disable=g-import-not-at-top

CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@pytest.fixture(scope="module")
def digits():
  d = load_digits()
  return (d.x_train.astype(np.float32) / 16, d.y_train,
          d.x_test.astype(np.float32) / 16, d.y_test)


def _cnn(**kwargs):
  return targets.make_cnn((8, 8, 1), 10, conv_widths=(8, 16), dense_widths=(32,), **kwargs)


def _chunked(target, **kwargs):
  return HyperModel(target, "chunked", targets="*", hypernetwork_args=dict(
      chunk_size=256, chunk_emb_dim=8, hidden=(8,)), **kwargs)


def _mirrored():
  """MirroredStrategy over the two logical CPUs: the one the Trainer caches (separate
  instances in one process collide in their collective-op keys)."""
  strategy = distribute.get_strategy("mirrored")
  assert strategy.num_replicas_in_sync == 2
  return strategy


def _values(variables):
  return [np.array(v.numpy()) for v in variables]


def test_public_names():
  assert hn.keras.HyperModel is HyperModel is hn.HyperModel
  assert hn.MetaModel is MetaModel


def test_fit_follows_the_trainer_step_for_step(tmp_path):
  """The digits main job (chunked hypernetwork generating every weight, dropout, +-1 px
  shifts, Adam on a cosine schedule): 25 steps of the Trainer and of fit() on the same
  step-indexed batches from the same initial values (dropout RNG state included) end at
  the same weights."""
  config = digits_hyper.get_config()
  config.num_steps = 25
  trainer = loop.Trainer(config, str(tmp_path))
  task = trainer.task
  variables = list(task.target.variables) + list(task.source.hypernetwork.variables)
  init = _values(variables)
  trainer.train_chunk(trainer.train_iterator(0), config.num_steps)
  reference = _values(variables)
  for v, value in zip(variables, init):
    v.assign(value)

  model = HyperModel(task.target, task.source.hypernetwork)
  assert {id(v) for v in model.trainable_weights} == {id(v) for v in trainer.variables}
  model.compile(optimizer=loop.make_optimizer(config.optim, config.num_steps), loss=CE)
  data = task.train_dataset(config.batch_size, config.seed).map(
      lambda b: (b["image"], b["label"]))
  model.fit(data, steps_per_epoch=config.num_steps, epochs=1, verbose=0)
  moved = 0.0
  for v, before, want, got in zip(variables, init, reference, _values(variables)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=v.path)
    if v.dtype != "int64" and np.issubdtype(want.dtype, np.floating):
      moved = max(moved, float(np.abs(want - before).max()))
  assert moved > 1e-2  # The hypernetwork did train.


class _StopAtEpoch(keras.callbacks.Callback):
  def __init__(self, epoch):
    super().__init__()
    self.stop_epoch = epoch

  def on_epoch_begin(self, epoch, logs=None):
    if epoch == self.stop_epoch:
      raise RuntimeError("interrupted")


def test_callbacks_save_and_load_round_trip(tmp_path, digits):
  x, y, xt, yt = digits
  keras.utils.set_random_seed(1)
  model = _chunked(_cnn(dropout=0.2, kernel_l2=1e-4))
  model.compile(optimizer=keras.optimizers.Adam(5e-3), loss=CE, metrics=["accuracy"])
  # The target's L2 penalty, computed on the generated kernels, is part of the loss.
  logits = model(xt, training=False)
  weights = model.generate()
  penalty = sum(1e-4 * float(tf.reduce_sum(tf.square(w))) for p, w in weights.items()
                if p.endswith("kernel"))
  assert penalty > 0
  loss, _ = model.evaluate(xt, yt, batch_size=len(xt), verbose=0)
  assert loss == pytest.approx(float(CE(yt, logits)) + penalty, rel=1e-5)

  backup = str(tmp_path / "backup")
  with pytest.raises(RuntimeError, match="interrupted"):
    model.fit(x, y, batch_size=64, epochs=4, verbose=0, callbacks=[
        keras.callbacks.BackupAndRestore(backup), _StopAtEpoch(2)])
  history = model.fit(
      x, y, batch_size=64, epochs=4, verbose=0, validation_data=(xt, yt), callbacks=[
          keras.callbacks.BackupAndRestore(backup),
          keras.callbacks.TensorBoard(str(tmp_path / "tb")),
          keras.callbacks.ModelCheckpoint(str(tmp_path / "best.keras"), monitor="val_accuracy",
                                          mode="max", save_best_only=True),
          keras.callbacks.EarlyStopping(monitor="loss", min_delta=100.0, patience=5)])
  assert history.epoch == [2, 3]  # Resumed after the two finished epochs.
  assert history.history["val_accuracy"][-1] > 0.5
  assert tf.io.gfile.glob(str(tmp_path / "tb" / "train" / "events.out.tfevents.*"))
  best = keras.models.load_model(str(tmp_path / "best.keras"))
  assert best.evaluate(xt, yt, verbose=0)[1] == pytest.approx(
      max(history.history["val_accuracy"]), abs=1e-6)

  early = _chunked(_cnn(dropout=0.2), name="early")
  early.compile(optimizer="adam", loss=CE)
  stopped = early.fit(x, y, batch_size=256, epochs=10, verbose=0, callbacks=[
      keras.callbacks.EarlyStopping(monitor="loss", min_delta=100.0, patience=1)])
  assert len(stopped.epoch) == 2  # No epoch improves the loss by 100.

  for trained in (model, early):
    path = str(tmp_path / f"{trained.name}.keras")
    trained.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded) is HyperModel
    np.testing.assert_array_equal(loaded.predict(xt, verbose=0),
                                  trained.predict(xt, verbose=0))
    # Weights, dropout RNG state and optimiser state all come back.
    for a, b in zip(loaded.variables + loaded.optimizer.variables,
                    trained.variables + trained.optimizer.variables):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # So one more epoch of both (dropout on) keeps them equal. (Not for `model`: after a fit
  # interrupted and resumed by BackupAndRestore, a reloaded copy of even a plain
  # keras.Sequential continues differently from the original in Keras 3.15, with equal
  # variables and optimiser variables.)
  for m in (early, loaded):
    m.fit(x[:256], y[:256], batch_size=64, epochs=1, shuffle=False, verbose=0)
  for a, b in zip(loaded.trainable_weights, early.trainable_weights):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


def test_mirrored_strategy_follows_one_device(digits):
  """Two replicas (two logical CPUs) and one device train to the same weights."""
  x, y, _, _ = digits
  data = tf.data.Dataset.from_tensor_slices((x[:512], y[:512])).batch(64)
  results = []
  for strategy in (tf.distribute.OneDeviceStrategy("/cpu:0"),
                   _mirrored()):
    with strategy.scope():
      keras.utils.set_random_seed(3)
      model = HyperModel(_cnn(), "mlp", targets="conv*/kernel,head/kernel",
                         hypernetwork_args=dict(hidden=(16,)), seed=3)
      model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=CE)
    history = model.fit(data, epochs=2, verbose=0)
    results.append((_values(model.trainable_weights), history.history["loss"]))
  (one, loss_one), (two, loss_two) = results
  np.testing.assert_allclose(loss_two, loss_one, rtol=1e-5)
  for a, b in zip(one, two):
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def test_conditional_hypermodel_takes_the_condition_as_input(digits):
  x, y, _, _ = digits
  keras.utils.set_random_seed(4)
  target = _cnn()
  model = HyperModel(target, "mlp", targets="head/*", hypernetwork_args=dict(
      hidden=(16,), num_conditions=3, condition_dim=4))
  cond = np.array([0, 2, 1, 2], np.int32)
  out = model((x[:4], cond))
  for b in range(4):
    weights = model.hypernetwork(int(cond[b]))
    want = functional.functional_call(target, weights, x[b:b + 1])
    np.testing.assert_allclose(out[b:b + 1], want, rtol=1e-5, atol=1e-6)
  model.compile(optimizer="adam", loss=CE)
  task = (np.arange(len(x)) % 3).astype(np.int32)
  model.fit((x, task), y, batch_size=64, epochs=1, verbose=0)
  with pytest.raises(ValueError, match="conditional hypernetwork takes"):
    model(x[:4])


def test_hypermodel_errors():
  target = _cnn()
  with pytest.raises(ValueError, match=r"HyperModel\(hypernetwork=.resnet.\) is not a known hypernetwork kind"):
    HyperModel(target, "resnet")
  with pytest.raises(ValueError, match="matches no"):
    HyperModel(target, "mlp", targets="nope/*")
  with pytest.raises(TypeError, match="built keras.Model"):
    HyperModel("cnn", "mlp")
  unbuilt = keras.Sequential([keras.layers.Dense(3)])
  with pytest.raises(ValueError, match="not built"):
    HyperModel(unbuilt, "mlp")
  other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="other")])
  with pytest.raises(ValueError, match="not trainable weights of the target"):
    HyperModel(target, hn.MLPHypernetwork(functional.weight_spec(other)))
  narrow = targets.make_cnn((8, 8, 1), 10, conv_widths=(4, 16), dense_widths=(32,))
  with pytest.raises(ValueError, match="shape"):
    HyperModel(target, hn.MLPHypernetwork(functional.weight_spec(narrow, "conv1/kernel")))
  with pytest.raises(NotImplementedError, match="kind name"):
    HyperModel(target, hn.MLPHypernetwork(functional.weight_spec(target, "head/*"))).get_config()


# -- MetaModel --------------------------------------------------------------------------
def _episodes(digits, tasks=4, seed=0):
  x, y, _, _ = digits
  data = episodes.class_indexed(x, y)
  fn = episodes.make_episode_fn(data, num_ways=5, num_shots=1, num_queries=2, seed=seed)
  return tf.data.Dataset.range(10 ** 6).map(fn).batch(tasks)


def _conv4():
  return conv4.make_conv4(5, (8, 8, 1), filters=8, num_blocks=2)


@pytest.mark.parametrize("learner", ["maml", "anil"])
def test_meta_step_is_the_meta_gradient(digits, learner):
  """One fit() step with SGD(lr=1) moves the weights by exactly minus the meta-gradient
  of hn.meta (second order), taken here under one tape over meta_batch_loss."""
  batch = next(iter(_episodes(digits)))
  keras.utils.set_random_seed(5)
  target = _conv4()
  model = MetaModel(target, learner, learner_args=dict(inner_lr=0.4, inner_steps=2))
  variables = model.trainable_weights
  reference = (inner_loop.MAML(target, "sparse_softmax_cross_entropy", inner_lr=0.4,
                               inner_steps=2) if learner == "maml" else
               hn.meta.ANIL(target, "sparse_softmax_cross_entropy", inner_lr=0.4,
                            inner_steps=2))
  with tf.GradientTape() as tape:
    result = meta_batch.meta_batch_loss(reference, batch, before_metrics=False)
  grads = tape.gradient(result.loss, variables)
  before = _values(variables)
  model.compile(optimizer=keras.optimizers.SGD(1.0))
  history = model.fit(tf.data.Dataset.from_tensors(batch), epochs=1, verbose=0)
  assert history.history["loss"][0] == pytest.approx(float(result.loss), rel=1e-6)
  assert history.history["accuracy"][0] == pytest.approx(
      float(result.metrics["accuracy"]), abs=1e-6)
  # The step taken against the gradient, to float32 rounding: the weights' (the step is
  # b - v) and the gradients' own, relative to the largest gradient entry (two
  # second-order computations in float32 summed in other orders: conv1's kernel 1.1e-6
  # off at a largest entry of 1.5; conv1's bias, exactly 0 before a BatchNorm, is 0 in
  # one and 5e-7 of noise in the other).
  scale = max(float(tf.reduce_max(tf.abs(g))) for g in grads)
  for v, b, g in zip(variables, before, grads):
    np.testing.assert_allclose(b - v.numpy(), g.numpy(), rtol=1e-5, atol=2e-6 * scale + 4 *
                               np.finfo(np.float32).eps * np.abs(b).max(), err_msg=v.path)
  assert max(float(tf.reduce_max(tf.abs(g))) for g in grads) > 1e-2


def test_meta_model_fit_evaluate_predict_save_load(tmp_path, digits):
  keras.utils.set_random_seed(6)
  model = MetaModel(_conv4(), "metasgd", learner_args=dict(inner_lr=0.4))
  assert len(model.trainable_weights) == 2 * len(model.target.trainable_weights)  # + rates
  with pytest.raises(ValueError, match="the loss is the learner's"):
    model.compile(optimizer="adam", loss="mse")
  model.compile(optimizer=keras.optimizers.Adam(3e-3))
  assert model.jit_compile is False  # Not Keras' "auto" (XLA on a GPU).
  train, test = _episodes(digits, seed=0), _episodes(digits, seed=1).take(4).cache()
  history = model.fit(train, steps_per_epoch=15, epochs=2, validation_data=test, verbose=0,
                      callbacks=[keras.callbacks.ModelCheckpoint(str(tmp_path / "m.keras")),
                                 keras.callbacks.EarlyStopping(monitor="val_loss")])
  assert set(history.history) >= {"loss", "accuracy", "val_accuracy", "val_accuracy_before"}
  scores = model.evaluate(test, return_dict=True, verbose=0)
  assert scores["accuracy"] > scores["accuracy_before"]  # Adaptation helps.
  loaded = keras.models.load_model(str(tmp_path / "m.keras"))
  model.save(str(tmp_path / "last.keras"))
  loaded = keras.models.load_model(str(tmp_path / "last.keras"))
  for a, b in zip(loaded.trainable_weights, model.trainable_weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  batch = next(iter(test))
  out = model.predict(tf.data.Dataset.from_tensors(batch), verbose=0)
  assert out.shape == (4, 10, 5)
  np.testing.assert_array_equal(loaded.predict(tf.data.Dataset.from_tensors(batch), verbose=0),
                                out)
  accuracy = np.mean(np.argmax(out, -1) == batch["query_y"].numpy())
  assert accuracy == pytest.approx(
      loaded.evaluate(tf.data.Dataset.from_tensors(batch), return_dict=True,
                      verbose=0)["accuracy"], abs=1e-6)
  with pytest.raises(ValueError, match="meta-batches"):
    model.fit(tf.data.Dataset.from_tensors((batch["query_x"], batch["query_y"])), verbose=0)
  with pytest.raises(ValueError, match="unknown"):
    MetaModel(_conv4(), "reptile")


@pytest.mark.parametrize("learner", ["protonet", "support_adapter", "support_hypernet",
                                     "maml"])
def test_fit_history_is_the_query_loss_of_every_learner(digits, learner):
  """fit()'s history, its validation scores and evaluate() are the meta-batch's query
  loss and accuracy after adaptation, also for the learners whose head is written per
  task (no ``*_before`` metrics): there the training and evaluation trackers had the
  same names, and Keras' epoch-end logs (``get_metrics_result``, read when its names
  match the step's logs) took the untouched evaluation trackers' 0.0 for the history."""
  batch = next(iter(_episodes(digits)))
  keras.utils.set_random_seed(5)
  args = {"protonet": {}, "support_adapter": dict(rank=2, generator_widths=(4,)),
          "support_hypernet": dict(head="head/*", inner_steps=1, inner_lr=0.1,
                                   generator_widths=(8,)),
          "maml": dict(inner_lr=0.4, inner_steps=1)}[learner]
  model = MetaModel(_conv4(), learner, learner_args=args)
  want = meta_batch.meta_batch_loss(model.learner, batch, before_metrics=False)
  model.compile(optimizer=keras.optimizers.SGD(0.0))   # The weights stay where they are.
  data = tf.data.Dataset.from_tensors(batch)
  history = model.fit(data.repeat(), steps_per_epoch=2, epochs=2, validation_data=data,
                      verbose=0).history
  for key in ("loss", "val_loss"):
    assert history[key] == pytest.approx([float(want.loss)] * 2, rel=1e-5), key
  for key in ("accuracy", "val_accuracy"):
    assert history[key] == pytest.approx([float(want.metrics["accuracy"])] * 2,
                                         abs=1e-6), key
  assert float(want.loss) > 0.1
  scores = model.evaluate(data, return_dict=True, verbose=0)
  assert scores["loss"] == pytest.approx(float(want.loss), rel=1e-5)


def test_meta_model_mirrored_step_equals_one_device(digits):
  batch = next(iter(_episodes(digits)))
  results = []
  for strategy in (tf.distribute.OneDeviceStrategy("/cpu:0"),
                   _mirrored()):
    with strategy.scope():
      keras.utils.set_random_seed(7)
      model = MetaModel(_conv4(), "maml", learner_args=dict(inner_lr=0.4))
      model.compile(optimizer=keras.optimizers.SGD(0.5))
    history = model.fit(tf.data.Dataset.from_tensors(batch).repeat(2), epochs=1, verbose=0)
    results.append((_values(model.trainable_weights), history.history["loss"][0]))
  (one, loss_one), (two, loss_two) = results
  assert loss_two == pytest.approx(loss_one, rel=1e-5)
  for a, b in zip(one, two):
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def test_support_hypernetwork_meta_model_saves_its_generator(tmp_path, digits):
  """The support-conditioned hypernetwork's generator (tf.Variables of the learner, not
  Keras weights) is trained by fit() and comes back from the saved file."""
  keras.utils.set_random_seed(8)
  target = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(name="flat"),
                             keras.layers.Dense(16, activation="relu", name="body"),
                             keras.layers.Dense(5, name="head")])
  model = MetaModel(target, "support_hypernet", learner_args=dict(
      head="head/*", inner_steps=1, inner_lr=0.1, generator_widths=(8,)))
  generator = [v.numpy() for v in model._learner_variables]  # pylint: disable=protected-access
  assert generator and len(model.trainable_weights) == 2 + len(generator)  # body + generator
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  model.fit(_episodes(digits), steps_per_epoch=3, epochs=1, verbose=0)
  trained = [v.numpy() for v in model._learner_variables]  # pylint: disable=protected-access
  assert max(np.abs(a - b).max() for a, b in zip(trained, generator)) > 0
  model.save(str(tmp_path / "s.keras"))
  loaded = keras.models.load_model(str(tmp_path / "s.keras"))
  for a, b in zip(loaded._learner_variables, trained):  # pylint: disable=protected-access
    np.testing.assert_array_equal(a.numpy(), b)
  batch = tf.data.Dataset.from_tensors(next(iter(_episodes(digits, seed=2))))
  np.testing.assert_array_equal(loaded.predict(batch, verbose=0), model.predict(batch, verbose=0))
  # Its head is generated per task: no "before adaptation" scores of the unused one.
  assert sorted(model.evaluate(batch, verbose=0, return_dict=True)) == ["accuracy", "loss"]
