"""Speed of HyperModel.fit() (Keras' own loop) beside the Trainer, on the digits main job.

The model of configs/digits_hyper.py (a chunked hypernetwork generating every weight of
the CNN, dropout, +-1 pixel shifts, Adam on a cosine schedule) trained on the same
step-indexed batches three ways, from the same objects (the Trainer's target and
hypernetwork):

* Trainer: ``Trainer.train_chunk`` -- ``--steps`` steps in one ``tf.function`` (a
  ``tf.range`` loop over the distributed iterator);
* fit(): ``hn.keras.HyperModel.fit(steps_per_epoch=--steps)`` compiled with Keras'
  defaults (one ``tf.function`` call per step, ``steps_per_execution=1``);
* fit(spe): the same with ``compile(steps_per_execution=--steps)`` (Keras runs the steps
  of one execution in one call).

Timed in interleaved windows (round r runs each variant once, the first variant
rotating), after one warm-up window each (tracing); steps/s are medians over
``--repeats`` rounds, and each fit() variant's rate is printed relative to the Trainer's.

    python benchmarks/keras_fit_bench.py [--steps=100] [--repeats=5]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs"))

import digits_hyper  # noqa: E402
import keras  # noqa: E402

from hypernet.keras import HyperModel  # noqa: E402
from hypernet.training import loop  # noqa: E402


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=100)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()
  config = digits_hyper.get_config()
  trainer = loop.Trainer(config, tempfile.mkdtemp())
  task = trainer.task
  data = lambda: task.train_dataset(config.batch_size, config.seed).map(  # noqa: E731
      lambda b: (b["image"], b["label"]))
  ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  models = {}
  for name, spe in (("fit()", 1), ("fit(spe)", args.steps)):
    model = HyperModel(task.target, task.source.hypernetwork, name=name.replace("(", "_")
                       .replace(")", ""))
    model.compile(optimizer=loop.make_optimizer(config.optim, config.num_steps), loss=ce,
                  steps_per_execution=spe)
    models[name] = (model, data())
  iterator = trainer.train_iterator(0)

  def run(name):
    if name == "Trainer":
      trainer.train_chunk(iterator, args.steps)
    else:
      model, ds = models[name]
      model.fit(ds, steps_per_epoch=args.steps, epochs=1, verbose=0)

  names = ["Trainer", "fit()", "fit(spe)"]
  for name in names:  # Warm-up: tracing.
    run(name)
  rates = {name: [] for name in names}
  for r in range(args.repeats):
    for name in names[r % 3:] + names[:r % 3]:
      t0 = time.perf_counter()
      run(name)
      rates[name].append(args.steps / (time.perf_counter() - t0))
  base = statistics.median(rates["Trainer"])
  print(f"digits main job, batch {config.batch_size}, {args.steps} steps per window, "
        f"median of {args.repeats} rounds:")
  for name in names:
    rate = statistics.median(rates[name])
    print(f"  {name:9s} {rate:8.1f} steps/s   {rate / base:5.2f}x the Trainer's rate")


if __name__ == "__main__":
  main()
