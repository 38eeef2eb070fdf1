"""Cost of a hypernetwork training step relative to a plain Keras step of the same CNN.

Times, on the same batch and the same target CNN (configs/fashion_mnist_hyper.py's),
three training steps each compiled once in a ``tf.function`` that runs ``--steps`` steps
in a ``tf.range`` loop:

* plain Keras: ``model(x, training=True)`` under a tape, Adam on the model's variables;
* identity through hypernet: the target run by ``functional_call`` on its own variables
  (the overhead of the functional call alone);
* hypernetwork: the chunked hypernetwork generates every weight, the target runs on them.

Prints steps/s and the ratio (hypernetwork step time / plain Keras step time); the
main-job target is <= 1.3.

    python benchmarks/step_ratio.py [--batch_size=128] [--steps=50] [--repeats=5]
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs"))

from absl import app, flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import fashion_mnist_hyper  # noqa: E402
from hypernet import tasks  # noqa: E402
from hypernet.data.base import ImageClassificationData  # noqa: E402

flags.DEFINE_integer("batch_size", 128, "Examples per step.")
flags.DEFINE_integer("steps", 50, "Steps per timed call.")
flags.DEFINE_integer("repeats", 5, "Timed calls per variant (best is reported).")
flags.DEFINE_bool("jit", False, "jit_compile the steps (XLA).")
FLAGS = flags.FLAGS


def _fake_data(n=256):
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)
  y = rng.integers(0, 10, n).astype(np.int32)
  return ImageClassificationData("bench", x, y, x[:10], y[:10], 10, 1 / 255)


def _timed(step_fn, batch):
  loop = tf.function(lambda n: tf.foldl(lambda a, _: a + step_fn(batch), tf.range(n),
                                        initializer=tf.constant(0.0)))
  t = time.perf_counter()
  loop(tf.constant(2)).numpy()  # trace + warm-up
  trace = time.perf_counter() - t
  best, best_cpu = float("inf"), float("inf")
  for _ in range(FLAGS.repeats):
    t, c = time.perf_counter(), time.process_time()
    loop(tf.constant(FLAGS.steps)).numpy()
    best = min(best, time.perf_counter() - t)
    best_cpu = min(best_cpu, time.process_time() - c)
  return FLAGS.steps / best, FLAGS.steps / best_cpu, trace


def _task_step(task, variables, optimizer):
  @tf.function(jit_compile=FLAGS.jit)
  def step(b):
    with tf.GradientTape() as tape:
      loss, _, state = task.train_loss(b, FLAGS.batch_size)
    optimizer.apply(tape.gradient(loss, variables), variables)
    task.apply_state(state)
    return loss
  return step


def main(_):
  data = _fake_data()
  x = tf.constant(data.x_train[: FLAGS.batch_size], tf.float32) / 255.0
  y = tf.constant(data.y_train[: FLAGS.batch_size])
  batch = {"image": x, "label": y}
  results = {}

  cfg = fashion_mnist_hyper.get_config()
  cfg.hypernet.kind = "none"
  plain = tasks.ClassificationTask(cfg, data).target
  opt = keras.optimizers.Adam(1e-3)
  opt.build(plain.trainable_variables)

  @tf.function(jit_compile=FLAGS.jit)
  def keras_step(b):
    with tf.GradientTape() as tape:
      logits = plain(b["image"], training=True)
      loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
          b["label"], logits, from_logits=True))
    opt.apply(tape.gradient(loss, plain.trainable_variables), plain.trainable_variables)
    return loss
  results["plain Keras"] = _timed(keras_step, batch)

  for name, kind in (("identity via functional_call", "none"), ("chunked hypernetwork", "chunked")):
    cfg = fashion_mnist_hyper.get_config()
    cfg.hypernet.kind = kind
    task = tasks.ClassificationTask(cfg, data)
    variables = task.trainable_variables
    opt_h = keras.optimizers.Adam(1e-3)
    opt_h.build(variables)

    results[name] = _timed(_task_step(task, variables, opt_h), batch)
    if kind == "chunked":
      counts = task.describe()

  base, base_cpu = results["plain Keras"][:2]
  print(f"batch {FLAGS.batch_size}, {FLAGS.steps} steps/call, best of {FLAGS.repeats}, "
        f"jit={FLAGS.jit}, TF {tf.__version__}, {os.cpu_count()} CPUs")
  print("steps/s of wall time, and of process CPU time (fairer on a shared machine)")
  print(f"{'variant':32s} {'steps/s':>9s} {'ratio':>7s} {'CPU steps/s':>12s} {'CPU ratio':>10s} "
        f"{'trace s':>8s}")
  for name, (rate, cpu_rate, trace) in results.items():
    print(f"{name:32s} {rate:9.1f} {base / rate:7.3f} {cpu_rate:12.1f} "
          f"{base_cpu / cpu_rate:10.3f} {trace:8.2f}")
  print(f"hypernetwork: {counts['source']:,} trainable parameters generate "
        f"{counts['generated']:,} target weights (compression {counts['compression_ratio']:.2f}x)")
  hyper = results["chunked hypernetwork"]
  print(f"RATIO hypernetwork/plain step time = {base / hyper[0]:.3f} wall, "
        f"{base_cpu / hyper[1]:.3f} CPU (target <= 1.3)")


if __name__ == "__main__":
  app.run(main)
