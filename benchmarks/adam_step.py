"""Keras' Adam against hn.FusedAdam (one ResourceApplyAdam per variable): the optimiser
step alone, on two variable lists, side by side in one run.

* ``hypernetwork``: the trainable variables of ``configs/fashion_mnist_hyper.py``'s
  chunked hypernetwork and the target's BatchNorm (9 variables, 134,015 floats: the step
  of benchmarks/step_ratio.py);
* ``transformer``: 67 variables, 922,378 floats, laid out as a 4-block transformer
  encoder of width 128 (q / k / v / o kernels and biases, two LayerNorms, a 512-wide
  feed-forward per block, an embedding and a head).

Each variant applies fixed gradients ``--steps`` times in one ``tf.function``, in
interleaved windows (``timing.interleaved``); medians over ``--repeats`` rounds, wall
and process CPU time per step.

    python benchmarks/adam_step.py [--steps=300] [--repeats=7]
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import app, flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import fashion_mnist_hyper  # noqa: E402
import timing  # noqa: E402
from hypernet.data.base import ImageClassificationData  # noqa: E402
from hypernet.numerics.fused_adam import FusedAdam  # noqa: E402
from hypernet.tasks import classification  # noqa: E402

flags.DEFINE_integer("steps", 300, "Optimiser steps per timed window.")
flags.DEFINE_integer("repeats", 7, "Interleaved timed rounds (medians are reported).")
FLAGS = flags.FLAGS


def hypernetwork_shapes():
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (16, 28, 28, 1), dtype=np.uint8)
  y = rng.integers(0, 10, 16).astype(np.int32)
  data = ImageClassificationData("bench", x, y, x, y, 10, 1 / 255)
  task = classification.ClassificationTask(fashion_mnist_hyper.get_config(), data)
  return [tuple(v.shape) for v in task.trainable_variables]


def transformer_shapes(blocks=4, width=128, ffn=512, vocab=1000, classes=10):
  shapes = []
  for _ in range(blocks):
    shapes += [(width, width), (width,)] * 4 + [(width,)] * 4
    shapes += [(width, ffn), (ffn,), (ffn, width), (width,)]
  return shapes + [(vocab, width), (width, classes), (classes,)]


def window(optimizer_class, shapes):
  rng = np.random.default_rng(1)
  variables = [tf.Variable(rng.normal(size=s).astype(np.float32)) for s in shapes]
  grads = [tf.constant(1e-3 * rng.normal(size=s).astype(np.float32)) for s in shapes]
  optimizer = optimizer_class(1e-3)
  optimizer.build(variables)

  @tf.function(autograph=False)
  def loop(n):
    def body(i):
      optimizer.apply(grads, variables)
      return [i + 1]
    return tf.while_loop(lambda i: i < n, body, [tf.constant(0)])
  return lambda n: loop(tf.constant(n))


def main(_):
  lists = {"hypernetwork": hypernetwork_shapes(), "transformer": transformer_shapes()}
  runs = {}
  for name, shapes in lists.items():
    runs[f"{name}, Keras Adam"] = window(keras.optimizers.Adam, shapes)
    runs[f"{name}, FusedAdam"] = window(FusedAdam, shapes)
  results = timing.interleaved(runs, FLAGS.steps, FLAGS.repeats)
  print(f"{FLAGS.steps} steps/window, median of {FLAGS.repeats} interleaved rounds, "
        f"TF {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} CPUs")
  print(f"{'variant':28s} {'ms/step':>8s} {'CPU ms/step':>12s}")
  for name, (wall, cpu, _) in results.items():
    print(f"{name:28s} {1e3 * wall:8.3f} {1e3 * cpu:12.3f}")
  for name, shapes in lists.items():
    keras_wall, keras_cpu, _ = results[f"{name}, Keras Adam"]
    fused_wall, fused_cpu, _ = results[f"{name}, FusedAdam"]
    floats = sum(int(np.prod(s)) for s in shapes)
    print(f"RATIO {name} ({len(shapes)} variables, {floats:,} floats): FusedAdam step "
          f"{fused_wall / keras_wall:.2f}x Keras Adam's wall time, "
          f"{fused_cpu / keras_cpu:.2f}x its CPU time")


if __name__ == "__main__":
  from hypernet.training import cli  # pylint: disable=g-import-not-at-top
  app.run(main, flags_parser=cli.parse_flags)
