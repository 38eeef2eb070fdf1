"""hn.keras models keep all their state through every Keras mechanism.

* A saved ``HyperModel`` / ``MetaModel`` loads in a new process after ``import hypernet``
  alone (either import order; ``import hypernet`` itself loads no TensorFlow) and predicts
  identically; a reloaded ``MetaModel`` continues ``fit()`` with its optimiser exactly as
  the saved one would have.
* Whatever a model learns (Meta-SGD's rates, MAML++'s per-step rates and BatchNorm, the
  support generator, a conditional hypernetwork's task embeddings) comes back from
  ``get_weights`` / ``set_weights``, ``save_weights``, ``ModelCheckpoint``,
  ``BackupAndRestore`` and ``EarlyStopping(restore_best_weights=True)``: each test
  compares the state after the restore with the state recorded at the restored epoch.
"""
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.data import episodes
from hypernet.data.digits import load_digits
from hypernet.keras import HyperModel, MetaModel
from hypernet.meta import conv4

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def digits():
  d = load_digits()
  return d.x_train.astype(np.float32) / 16, d.y_train


def _batch(digits, seed=0, tasks=2):
  x, y = digits
  fn = episodes.make_episode_fn(episodes.class_indexed(x, y), num_ways=5, num_shots=1,
                                num_queries=2, seed=seed)
  return next(iter(tf.data.Dataset.range(10 ** 6).map(fn).batch(tasks)))


def _meta_model(kind):
  """A small MetaModel whose learner (or target) has state of its own."""
  keras.utils.set_random_seed(11)
  if kind == "metasgd":  # Learned per-weight inner rates.
    return MetaModel(conv4.make_conv4(5, (8, 8, 1), filters=4, num_blocks=2), "metasgd",
                     learner_args=dict(inner_lr=0.3))
  if kind == "mamlpp":  # Per-step rates (LSLR) and per-step BatchNorm.
    target = conv4.make_conv4(5, (8, 8, 1), filters=4, num_blocks=2, per_step_rows=2,
                              per_step_statistics=True, per_step_weights=True)
    return MetaModel(target, "maml", learner_args=dict(inner_lr=0.3, inner_steps=2,
                                                      lslr=True))
  target = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(name="flat"),
                             keras.layers.Dense(8, activation="relu", name="body"),
                             keras.layers.Dropout(0.2, name="drop"),
                             keras.layers.Dense(5, name="head")])
  return MetaModel(target, "support_hypernet", learner_args=dict(
      head="head/*", inner_steps=1, inner_lr=0.1, generator_widths=(8,)))


def _hyper_model():
  """A conditional chunked hypernetwork (task embeddings) over a target with BatchNorm
  and dropout."""
  keras.utils.set_random_seed(12)
  target = keras.Sequential([
      keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, name="conv"),
      keras.layers.BatchNormalization(name="bn"), keras.layers.ReLU(),
      keras.layers.Flatten(), keras.layers.Dropout(0.2, name="drop"),
      keras.layers.Dense(10, name="head")])
  return HyperModel(target, "chunked", targets="*", train_rest=True, hypernetwork_args=dict(
      chunk_size=64, chunk_emb_dim=4, hidden=(8,), num_conditions=3, condition_dim=4))


def _hyper_data(digits, batches=3):
  x, y = digits
  n = 32 * batches
  return tf.data.Dataset.from_tensor_slices(
      ((x[:n, ..., None], (y[:n] % 3).astype(np.int32)), y[:n])).batch(32)


def _model_and_data(kind, digits):
  if kind == "hyper":
    model = _hyper_model()
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, _hyper_data(digits)
  model = _meta_model(kind)
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  return model, tf.data.Dataset.from_tensor_slices(
      {k: tf.stack([v, v]) for k, v in _batch(digits).items()})


def _state(model, optimizer=True):
  """Every variable of the model (weights, RNG seed states, the learner's own) and of
  its optimiser, by position and shape (names carry per-process counters)."""
  out = {f"model/{i}{list(v.shape)}": np.array(v.numpy())
         for i, v in enumerate(_all_variables(model))}
  if optimizer:
    out.update({f"optimizer/{i}{list(v.shape)}": np.array(v.numpy())
                for i, v in enumerate(model.optimizer.variables)})
  return out


def _unique(variables):
  seen, out = set(), []
  for v in variables:
    if id(v) not in seen:
      seen.add(id(v))
      out.append(v)
  return out


def _all_variables(model):
  """``model.variables`` and anything trained that they might leave out."""
  return _unique(list(model.variables) + list(model.trainable_weights))


def _restorable(model):
  """What get_weights / set_weights must cover: the weights and everything trained."""
  return _unique(list(model.weights) + list(model.trainable_weights))


def _assert_same_state(got, want):
  assert list(got) == list(want)
  for k in want:
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)


class _Record(keras.callbacks.Callback):
  """The state at each epoch's end; ``score`` logs a chosen value per epoch (what
  EarlyStopping monitors)."""

  def __init__(self, scores=None, stop_at=None):
    super().__init__()
    self.states, self.scores, self.stop_at = [], scores, stop_at

  def on_epoch_begin(self, epoch, logs=None):
    if epoch == self.stop_at:
      raise KeyboardInterrupt(f"interrupted at epoch {epoch}")

  def on_epoch_end(self, epoch, logs=None):
    self.states.append(_state(self.model))
    if self.scores is not None:
      logs["score"] = self.scores[epoch]


KINDS = ["metasgd", "mamlpp", "support_hypernet", "hyper"]


def test_learned_state_is_in_the_keras_weights(digits):
  for kind in KINDS:
    model, _ = _model_and_data(kind, digits)
    weights = {id(v) for v in model.weights}
    assert {id(v) for v in model.trainable_weights} <= weights, kind
    if isinstance(model, MetaModel):
      learned = model.learner.trainable_variables
      assert learned and {id(v) for v in learned} <= weights, kind
      assert {id(v) for v in learned} <= {id(v) for v in model.variables}, kind


@pytest.fixture(scope="module")
def uninterrupted(digits, tmp_path_factory):
  """``fit(kind)``: the uninterrupted 3-epoch fit of a kind, run once for the tests below
  (ModelCheckpoint and EarlyStopping only read the model: the same steps as a bare fit).
  Returns ``(model, states, folder)``: the model after fit() (EarlyStopping restored its
  best epoch; test_every_keras_restore_brings_back_the_state_of_its_epoch then sets
  weights of its own, test_saved_models_load_in_a_new_process_after_import_hypernet_alone
  saves the hyper one), the state at each epoch's end, and the folder of ModelCheckpoint's
  files."""
  fits = {}

  def fit(kind):
    if kind not in fits:
      folder = tmp_path_factory.mktemp(f"fit_{kind}")
      model, data = _model_and_data(kind, digits)
      record = _Record(scores=[3.0, 1.0, 2.0])
      model.fit(data, epochs=3, verbose=0, callbacks=[
          record, keras.callbacks.ModelCheckpoint(str(folder / "e{epoch}.weights.h5"),
                                                  save_weights_only=True),
          keras.callbacks.EarlyStopping(monitor="score", mode="min", patience=5,
                                        restore_best_weights=True)])
      fits[kind] = model, record.states, folder
    return fits[kind]

  return fit


@pytest.mark.parametrize("kind", KINDS)
def test_every_keras_restore_brings_back_the_state_of_its_epoch(kind, digits, uninterrupted):
  model, states, folder = uninterrupted(kind)
  epoch1, epoch2 = states[1], states[2]
  assert any(not np.array_equal(epoch1[k], epoch2[k]) for k in epoch1
             if k.startswith("model/"))  # The last epoch moved it: each restore is seen.
  # EarlyStopping restored the best epoch's weights (get_weights / set_weights): every
  # weight, the learner's own included.
  for w, want in zip(_restorable(model), _weight_values(model, epoch1)):
    np.testing.assert_array_equal(w.numpy(), want, err_msg=f"EarlyStopping: {w.name}")
  # set_weights of the last epoch's values.
  model.set_weights(_weight_values(model, epoch2)[:len(model.weights)])
  for w, want in zip(_restorable(model), _weight_values(model, epoch2)):
    np.testing.assert_array_equal(w.numpy(), want, err_msg=f"set_weights: {w.name}")
  # ModelCheckpoint's file of the second epoch into a fresh model: everything, the
  # optimiser and the RNG seed states included.
  fresh, _ = _model_and_data(kind, digits)
  fresh.optimizer.build(fresh.trainable_variables)
  fresh.load_weights(str(folder / "e2.weights.h5"))
  _assert_same_state(_state(fresh), epoch1)


def _weight_values(model, state):
  """The values of :func:`_restorable` in a :func:`_state` of ``model``."""
  index = {id(v): i for i, v in enumerate(_all_variables(model))}
  values = [v for k, v in state.items() if k.startswith("model/")]
  return [values[index[id(w)]] for w in _restorable(model)]


# MAML++'s and the support generator's state restore through the same save_weights /
# load_weights as the ModelCheckpoint case above (three fresh models of MAML++ cost 30 s).
@pytest.mark.parametrize("kind", ["metasgd", "hyper"])
def test_backup_and_restore_resumes_to_the_uninterrupted_run(kind, digits, tmp_path,
                                                             uninterrupted):
  whole = uninterrupted(kind)[1]
  backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
  model, data = _model_and_data(kind, digits)
  with pytest.raises(KeyboardInterrupt):
    model.fit(data, epochs=3, verbose=0, callbacks=[backup, _Record(stop_at=2)])
  model, data = _model_and_data(kind, digits)  # The job rerun: a new model.
  resumed = _Record()
  model.fit(data, epochs=3, verbose=0, callbacks=[backup, resumed])
  assert len(resumed.states) == 1  # Only the third epoch ran again.
  _assert_same_state(resumed.states[0], whole[2])


class _StopAfterBatch(keras.callbacks.Callback):
  def __init__(self, epoch, batch):
    super().__init__()
    self.at, self.epoch = (epoch, batch), None

  def on_epoch_begin(self, epoch, logs=None):
    self.epoch = epoch

  def on_train_batch_end(self, batch, logs=None):
    if (self.epoch, batch) == self.at:
      raise KeyboardInterrupt(f"interrupted after batch {batch} of epoch {self.epoch}")


def test_backup_mid_epoch_resumes_after_its_batch(digits, tmp_path, uninterrupted):
  # BackupAndRestore(save_freq=2) over epochs of 3 batches saves after batch 0 of epoch 1
  # (Keras counts batches across epochs); the interrupted run stops after batch 1.
  # Keras 3 would rerun epoch 1 from its batch 0 on the weights saved after it (one step
  # too many); the model skips that batch.
  whole = uninterrupted("hyper")[1]
  backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=2)
  model, data = _model_and_data("hyper", digits)
  with pytest.raises(KeyboardInterrupt):
    model.fit(data, epochs=3, verbose=0, callbacks=[backup, _StopAfterBatch(1, 1)])
  assert json.loads((tmp_path / "backup" / "training_metadata.json").read_text()) == {
      "epoch": 1, "batch": 0}
  model, data = _model_and_data("hyper", digits)
  resumed = _Record()
  model.fit(data, epochs=3, verbose=0, callbacks=[backup, resumed])
  assert len(resumed.states) == 2  # Epochs 1 and 2.
  _assert_same_state(resumed.states[-1], whole[2])


_CHILD = r"""
import json, sys
import numpy as np
first = sys.argv[1]
if first == "keras":
  import keras
import hypernet
tf_loaded = "tensorflow" in sys.modules
if first == "hypernet":
  import keras
import tensorflow as tf
out = {"tf_after_import_hypernet": tf_loaded if first == "hypernet" else None}
for name in ("hyper", "meta"):
  model = keras.models.load_model(sys.argv[2] + f"/{name}.keras")
  data = np.load(sys.argv[2] + f"/{name}_input.npz", allow_pickle=True)
  if name == "hyper":
    pred = model.predict((data["x"], data["c"]), verbose=0)
  else:
    batch = {k: data[k] for k in ("support_x", "support_y", "query_x", "query_y")}
    pred = model.predict(tf.data.Dataset.from_tensors(batch), verbose=0)
    out["meta_iterations"] = int(model.optimizer.iterations.numpy())
    if first == "hypernet":  # Once is enough: the other order differs only in the import.
      model.fit(tf.data.Dataset.from_tensors(batch).repeat(3), epochs=1, verbose=0)
      np.savez(sys.argv[2] + "/continued.npz",
               *[np.asarray(v.numpy()) for v in model.variables + model.optimizer.variables])
  np.save(sys.argv[2] + f"/{first}_{name}_pred.npy", pred)
  out[name] = type(model).__name__
print(json.dumps(out))
"""


def test_saved_models_load_in_a_new_process_after_import_hypernet_alone(digits, tmp_path,
                                                                       uninterrupted):
  hyper = uninterrupted("hyper")[0]  # Trained (and only read here).
  hyper.save(str(tmp_path / "hyper.keras"))
  (x, c), _ = next(iter(_hyper_data(digits)))
  np.savez(tmp_path / "hyper_input.npz", x=x.numpy(), c=c.numpy())
  meta, _ = _model_and_data("metasgd", digits)
  batch = _batch(digits, seed=3)
  meta.fit(tf.data.Dataset.from_tensors(batch).repeat(3), epochs=1, verbose=0)
  meta.save(str(tmp_path / "meta.keras"))
  np.savez(tmp_path / "meta_input.npz", **{k: v.numpy() for k, v in batch.items()})
  want_hyper = hyper.predict((x, c), verbose=0)
  want_meta = meta.predict(tf.data.Dataset.from_tensors(batch), verbose=0)
  meta.fit(tf.data.Dataset.from_tensors(batch).repeat(3), epochs=1, verbose=0)
  continued = [np.asarray(v.numpy()) for v in meta.variables + meta.optimizer.variables]
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  for first in ("hypernet", "keras"):
    out = subprocess.run([sys.executable, "-c", _CHILD, first, str(tmp_path)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["hyper"] == "HyperModel" and got["meta"] == "MetaModel"
    assert got["tf_after_import_hypernet"] in (False, None)
    assert got["meta_iterations"] == 3
    np.testing.assert_array_equal(np.load(tmp_path / f"{first}_hyper_pred.npy"), want_hyper)
    np.testing.assert_array_equal(np.load(tmp_path / f"{first}_meta_pred.npy"), want_meta)
  reloaded = np.load(tmp_path / "continued.npz")
  assert len(reloaded.files) == len(continued)
  for i, want in enumerate(continued):
    np.testing.assert_allclose(reloaded[f"arr_{i}"], want, rtol=1e-6, atol=1e-7,
                               err_msg=f"variable {i} after fit() continued")


def test_hypermodel_summary_reports_what_is_generated_from_what():
  model = _hyper_model()
  counts = model.parameter_counts()
  target = sum(int(np.prod(v.shape)) for v in model.target.trainable_weights)
  hyper = sum(int(np.prod(v.shape)) for v in model.hypernetwork.trainable_weights)
  assert counts["target"] == target == counts["generated"]  # targets="*": every weight.
  assert counts["hypernetwork"] == hyper and counts["trainable"] == hyper  # none left.
  assert counts["compression_ratio"] == pytest.approx(target / hyper)
  lines = []
  model.summary(print_fn=lines.append)
  assert lines[-1] == (f"Generated: {target:,} of the target's {target:,} trainable weights, "
                       f"from {hyper:,} hypernetwork parameters (compression ratio "
                       f"{target / hyper:.2f}); trained here: {hyper:,}.")
