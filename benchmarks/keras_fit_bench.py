"""Speed of HyperModel.fit() (Keras' own loop) beside the Trainer, on the digits main job.

The model of configs/digits_hyper_relu.py (the main job's network with a ReLU generator,
as docs/keras.md's table was measured: a chunked hypernetwork generating every weight of
the CNN, dropout, +-1 pixel shifts, Adam on a cosine schedule) trained on the same
step-indexed batches, from the same objects (the Trainer's target and hypernetwork):

* Trainer: ``Trainer.train_chunk`` -- ``--steps`` steps in one ``tf.function`` (a
  ``tf.range`` loop over the distributed iterator);
* fit(): ``hn.keras.HyperModel.fit(steps_per_epoch=--steps)`` compiled with Keras'
  defaults (no ``steps_per_execution``: hypernet's ``"auto"``, several steps per call,
  :mod:`hypernet.keras.steps_per_execution`);
* fit(spe=1): the same compiled with ``steps_per_execution=1`` (one ``tf.function`` call
  per step, Keras' own default for a plain model);
* Keras fit(): a plain ``keras.Model`` -- the same CNN, its own weights, no hypernetwork
  -- compiled with the same optimiser and ``steps_per_execution`` equal to what fit()
  chose (Keras' fastest setting for it);
* Keras fit(spe=1): that plain model with Keras' defaults.

Timed in windows of ``--steps`` steps, after one warm-up window each (tracing): a
round runs each variant for ``--windows`` windows (the first variant rotating from round
to round); a fit() variant runs them as the epochs of one ``fit()`` call (timed by an
epoch callback; one more epoch first, untimed, starts its data iterator), the Trainer as
``train_chunk`` calls on one iterator. Steps/s are medians over all windows. Printed: each rate relative to the Trainer's, and fit()'s relative
to the plain Keras fit() at the same steps per call.

    python benchmarks/keras_fit_bench.py [--steps=100] [--repeats=5] [--windows=3]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs"))

import digits_hyper_relu  # noqa: E402
import keras  # noqa: E402

from hypernet.keras import HyperModel, steps_per_execution  # noqa: E402
from hypernet.training import loop  # noqa: E402


class _EpochTimer(keras.callbacks.Callback):
  """Steps/s of each epoch (epoch hooks only: fit() keeps its steps per call)."""

  def __init__(self, steps):
    super().__init__()
    self.steps, self.rates, self.start = steps, [], None

  def on_epoch_begin(self, epoch, logs=None):
    self.start = time.perf_counter()

  def on_epoch_end(self, epoch, logs=None):
    self.rates.append(self.steps / (time.perf_counter() - self.start))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=100)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--windows", type=int, default=3)
  args = parser.parse_args()
  config = digits_hyper_relu.get_config()
  trainer = loop.Trainer(config, tempfile.mkdtemp())
  task = trainer.task
  data = lambda: task.train_dataset(config.batch_size, config.seed).map(  # noqa: E731
      lambda b: (b["image"], b["label"]))
  ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  models = {}
  for name, spe in (("fit()", "auto"), ("fit(spe=1)", 1)):
    model = HyperModel(task.target, task.source.hypernetwork,
                       name=name.replace("(", "_").replace(")", "").replace("=", ""))
    model.compile(optimizer=loop.make_optimizer(config.optim, config.num_steps), loss=ce,
                  **({} if spe == "auto" else {"steps_per_execution": spe}))
    models[name] = (model, data())
  chosen = steps_per_execution.auto_steps_per_execution(args.steps)
  for name, spe in (("Keras fit()", chosen), ("Keras fit(spe=1)", 1)):
    plain = keras.models.clone_model(task.target)  # Same layers, weights of its own.
    plain.compile(optimizer=loop.make_optimizer(config.optim, config.num_steps), loss=ce,
                  steps_per_execution=spe)
    models[name] = (plain, data())
  iterator = trainer.train_iterator(0)

  timer = _EpochTimer(args.steps)

  def run(name, windows):
    """Rates (steps/s) of ``windows`` windows of ``--steps`` steps each."""
    if name == "Trainer":
      rates = []
      for _ in range(windows):
        t0 = time.perf_counter()
        trainer.train_chunk(iterator, args.steps)
        rates.append(args.steps / (time.perf_counter() - t0))
      return rates
    model, ds = models[name]
    timer.rates = []
    # One fit() of windows + 1 epochs: its first epoch starts the data iterator (not timed).
    model.fit(ds, steps_per_epoch=args.steps, epochs=windows + 1, verbose=0, callbacks=[timer])
    return timer.rates[1:]

  names = ["Trainer", "fit()", "fit(spe=1)", "Keras fit()", "Keras fit(spe=1)"]
  for name in names:  # Warm-up: tracing.
    run(name, 1)
  rates = {name: [] for name in names}
  for r in range(args.repeats):
    for name in names[r % len(names):] + names[:r % len(names)]:
      rates[name] += run(name, args.windows)
  median = {name: statistics.median(rates[name]) for name in names}
  print(f"digits main job, batch {config.batch_size}, {args.steps} steps per window, "
        f"median of {args.repeats} rounds x {args.windows} windows; fit() ran {chosen} steps "
        "per call:")
  for name in names:
    print(f"  {name:17s} {median[name]:8.1f} steps/s   {median[name] / median['Trainer']:5.2f}x "
          "the Trainer's rate")
  print(f"fit() with Keras' defaults: {median['fit()'] / median['Trainer']:.2f}x the Trainer, "
        f"{median['fit()'] / median['Keras fit()']:.2f}x plain Keras fit() of the same CNN "
        f"without a hypernetwork ({chosen} steps per call both)")


if __name__ == "__main__":
  main()
