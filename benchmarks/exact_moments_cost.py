"""What exact second-order normalisation moments cost: the train loop's step with them
(as hypernet runs it) against the same step with Keras' own ``tf.nn.moments``.

Every ``functional_call`` computes normalisation moments as ``mean((x - mean)**2)`` so
that second derivatives are exact (``hypernet/numerics/second_order.py``); Keras' backend uses
``tf.nn.moments``, whose stop-gradient saves a little work in the backward pass. For each
config, two :class:`hypernet.training.loop.Trainer` s are built in this process, one traced
with the exact moments and one with Keras' (the switch patched off while it traces),
and their compiled chunks of ``--steps`` steps are timed in interleaved windows, so load
on this shared machine hits both alike. Prints the median steps/s of each and the ratio
(exact / Keras; 1.00 = no cost) and the number of ops in each traced step (equal where
only first derivatives are taken: there the exact moments are not used at all). The Keras-moments variant of a second-order config is
*wrong* (it loses a second-order term): it is only a lower bound on the time.

    python benchmarks/exact_moments_cost.py --data_dir=../shared/data/omniglot \
        [--configs=omniglot_maml,omniglot_fomaml,digits_bn] [--steps=5] [--repeats=5]
"""
import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO)

SUBSET = "images_background_small1.zip,images_background_small2.zip"


def _config(name, data_dir, overrides):
  base = "digits_hyper" if name == "digits_bn" else name
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  config = config_lib.load_config_file(os.path.join(REPO, "configs", base + ".py"))
  if name == "digits_bn":                 # the main job's target with BatchNorm layers
    config.model.batch_norm = True
    config.hypernet.targets = "conv*/*,bn*/*,dense*/*,head/*"
  else:
    config.data.data_dir = data_dir
    config.data.omniglot_zips = SUBSET
    config.data.num_test_characters = 50
  config.update_from_flattened_dict(overrides)
  return config


def _trainer(config, workdir, exact):
  from hypernet.numerics import second_order  # pylint: disable=g-import-not-at-top
  from hypernet.training import loop
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  trainer = loop.Trainer(config, workdir)
  iterator = trainer.train_iterator(0)
  original = second_order.exact_moments_scope
  if not exact:
    second_order.exact_moments_scope = contextlib.nullcontext
  try:
    fn = trainer._train_steps.get_concrete_function(iterator, tf.constant(1, tf.int64))  # pylint: disable=protected-access
    trainer.train_chunk(iterator, 1)
  finally:
    second_order.exact_moments_scope = original
  graph = fn.graph.as_graph_def()
  ops = len(graph.node) + sum(len(f.node_def) for f in graph.library.function)
  return trainer, iterator, ops


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--data_dir", default=os.path.join(REPO, "..", "shared", "data", "omniglot"))
  parser.add_argument("--configs", default="omniglot_maml,omniglot_fomaml,digits_bn")
  parser.add_argument("--steps", type=int, default=5,
                      help="least steps per timed window (more for fast configs: --window)")
  parser.add_argument("--window", type=float, default=2.0,
                      help="least seconds per timed window (steps are set from a trial)")
  parser.add_argument("--repeats", type=int, default=5, help="windows per variant")
  parser.add_argument("--set", action="append", default=[],
                      help="config override key=value (numbers), e.g. batch_size=8")
  args = parser.parse_args()
  overrides = {}
  for kv in args.set:
    key, value = kv.split("=", 1)
    overrides[key] = type(eval(value))(eval(value))  # pylint: disable=eval-used
  for name in args.configs.split(","):
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
      config = _config(name, args.data_dir, overrides)
      runs = {"exact": _trainer(config, d1, True), "keras": _trainer(config, d2, False)}
      trainer, iterator, _ = runs["keras"]
      t0 = time.perf_counter()
      trainer.train_chunk(iterator, args.steps)
      per_step = (time.perf_counter() - t0) / args.steps
      steps = max(args.steps, int(args.window / per_step) + 1)
      rates = {k: [] for k in runs}
      for _ in range(args.repeats):
        for key, (trainer, iterator, _) in runs.items():
          t0 = time.perf_counter()
          trainer.train_chunk(iterator, steps)
          rates[key].append(steps / (time.perf_counter() - t0))
      exact, keras_ = statistics.median(rates["exact"]), statistics.median(rates["keras"])
      print(f"{name:16s} batch {config.batch_size:4d}, {steps} steps a window: exact moments {exact:7.3f} steps/s, "
            f"Keras moments {keras_:7.3f} steps/s, ratio exact/Keras {exact / keras_:.3f} "
            f"(windows: {[round(r, 3) for r in rates['exact']]} vs "
            f"{[round(r, 3) for r in rates['keras']]}); graph ops {runs['exact'][2]} vs "
            f"{runs['keras'][2]}", flush=True)


if __name__ == "__main__":
  main()
