"""Cost of a hypernetwork training step relative to a plain Keras step of the same CNN.

Times, on the same batch and the same target CNN (configs/fashion_mnist_hyper.py's),
training steps each compiled once in a ``tf.function`` that runs ``--steps`` steps in a
``tf.range`` loop:

* plain Keras: ``model(x, training=True)`` under a tape, Adam on the model's variables;
* identity through hypernet: the target run by ``functional_call`` on its own variables
  (the overhead of the functional call alone);
* hypernetwork: the chunked hypernetwork generates every weight, the target runs on them;
* PyTorch (when installed, ``pip install -e .[bench]``): the same CNN as a plain
  ``nn.Module`` step with Adam (``benchmarks/torch_reference.py``), ``--steps`` steps
  per window in a Python loop, OpenMP threads waiting passively (``OMP_WAIT_POLICY``).
  With glibc's malloc as it comes PyTorch's tensors page-fault on fresh memory;
  ``--malloc_keep`` keeps freed memory for reuse, for the whole process (its rate rose
  ~1.5x in one run here), as jemalloc / tcmalloc would.

The variants are timed in interleaved windows (round r runs every variant once, the
starting variant rotating), so load from other jobs hits all of them; rates are medians
over ``--repeats`` rounds. Prints steps/s and each variant's step time relative to
plain Keras (wall and process CPU time); the hypernetwork's is the main figure.

With BatchNorm in the target (the config's default) the plain
Keras step runs Keras' element-wise BatchNorm and the functional call the fused kernel
(``hypernet/numerics/fused_norm.py``); ``--nobatch_norm`` times the target without it.

    python benchmarks/step_ratio.py [--batch_size=128] [--steps=50] [--repeats=5] [--nobatch_norm]
        [--malloc_keep] [--accelerate_meta]
"""
import contextlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# PyTorch's OpenMP threads spin while waiting; on a shared machine that collapses its
# rate (meta_bench.py measured a sixth), so they wait passively (before torch's import).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import app, flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import fashion_mnist_hyper  # noqa: E402
import step_ratio_flags  # noqa: E402
import timing  # noqa: E402
import torch_reference  # noqa: E402
from hypernet.numerics import accel, norm_relu_pool  # noqa: E402
from hypernet.numerics.fused_adam import FusedAdam  # noqa: E402
from hypernet.tasks import classification  # noqa: E402
from hypernet.data.base import ImageClassificationData  # noqa: E402

# The flags (--batch_size, --steps, --repeats, --jit, ...): step_ratio_flags.py, listed under
# this script's --help.
flags.adopt_module_key_flags(step_ratio_flags)
FLAGS = flags.FLAGS


def _fake_data(n=256):
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)
  y = rng.integers(0, 10, n).astype(np.int32)
  return ImageClassificationData("bench", x, y, x[:10], y[:10], 10, 1 / 255)


def _loop(step_fn, batch):
  """A window of ``n`` compiled steps on ``batch``; returns a callable ``run(n)``."""
  return timing.compiled_window(lambda: step_fn(batch))


def _task_step(task, variables, optimizer, accelerations=None):
  """``accelerations``: a context manager factory entered inside the traced step (where
  hypernet's switches count), e.g. ``lambda: accel.scope("meta")``."""
  @tf.function(jit_compile=FLAGS.jit)
  def step(b):
    with tf.GradientTape() as tape, (accelerations or contextlib.nullcontext)():
      loss, _, state = task.train_loss(b, FLAGS.batch_size)
    optimizer.apply(tape.gradient(loss, variables), variables)
    task.apply_state(state)
    return loss
  return step


def _config(kind):
  cfg = fashion_mnist_hyper.get_config()
  cfg.hypernet.kind = kind
  if FLAGS.batch_norm is not None:
    cfg.model.batch_norm = FLAGS.batch_norm
  return cfg


def main(_):
  if FLAGS.malloc_keep and not torch_reference.keep_freed_memory():
    raise app.UsageError("--malloc_keep needs glibc (mallopt); drop it here.")
  data = _fake_data()
  x = tf.constant(data.x_train[: FLAGS.batch_size], tf.float32) / 255.0
  y = tf.constant(data.y_train[: FLAGS.batch_size])
  batch = {"image": x, "label": y}

  cfg = _config("none")
  plain = classification.ClassificationTask(cfg, data).target
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
  runs = {"plain Keras": _loop(keras_step, batch)}

  adam = keras.optimizers.Adam
  variants = [("identity via functional_call", "none", None, adam),
              ("chunked hypernetwork", "chunked", None, adam)]
  if FLAGS.accelerate_meta:
    meta = lambda: accel.scope("meta")
    variants += [("hypernetwork, fused blocks", "chunked", norm_relu_pool.scope, adam),
                 ("hypernetwork, accelerate='meta'", "chunked", meta, adam),
                 ("hypernetwork, accelerate='meta', FusedAdam", "chunked", meta, FusedAdam)]
  for name, kind, accelerations, optimizer in variants:
    cfg = _config(kind)
    task = classification.ClassificationTask(cfg, data)
    variables = task.trainable_variables
    opt_h = optimizer(1e-3)
    opt_h.build(variables)
    runs[name] = _loop(_task_step(task, variables, opt_h, accelerations), batch)
    if kind == "chunked":
      counts = task.describe()

  if torch_reference.available():
    torch_step = torch_reference.cnn_step(
        data.image_shape, data.num_classes, cfg.model.conv_widths, cfg.model.dense_widths,
        batch_norm=cfg.model.batch_norm)
    xs, ys = x.numpy(), y.numpy()

    def torch_run(n):
      for _ in range(n):
        torch_step(xs, ys)
    runs["PyTorch (nn.Module, Adam)"] = torch_run
  else:
    print(torch_reference.MISSING)
  results = {k: (1 / wall, 1 / cpu, warm) for k, (wall, cpu, warm) in
             timing.interleaved(runs, FLAGS.steps, FLAGS.repeats).items()}

  base, base_cpu = results["plain Keras"][:2]
  print(f"batch {FLAGS.batch_size}, {FLAGS.steps} steps/window, median of {FLAGS.repeats} "
        f"interleaved rounds, BatchNorm={cfg.model.batch_norm}, malloc_keep="
        f"{FLAGS.malloc_keep}, "
        f"jit={FLAGS.jit}, TF {tf.__version__}, {os.cpu_count()} CPUs")
  print("steps/s of wall time, and of process CPU time (fairer on a shared machine)")
  print(f"{'variant':44s} {'steps/s':>9s} {'ratio':>7s} {'CPU steps/s':>12s} {'CPU ratio':>10s} "
        f"{'warm-up s':>9s}")
  for name, (rate, cpu_rate, trace) in results.items():
    print(f"{name:44s} {rate:9.1f} {base / rate:7.3f} {cpu_rate:12.1f} "
          f"{base_cpu / cpu_rate:10.3f} {trace:9.2f}")
  print(f"hypernetwork: {counts['source']:,} trainable parameters generate "
        f"{counts['generated']:,} target weights (compression {counts['compression_ratio']:.2f}x)")
  hyper = results["chunked hypernetwork"]
  print(f"RATIO hypernetwork/plain step time = {base / hyper[0]:.3f} wall, "
        f"{base_cpu / hyper[1]:.3f} CPU (target <= 1.3)")


if __name__ == "__main__":
  from hypernet.training import cli  # pylint: disable=g-import-not-at-top
  app.run(main, flags_parser=cli.parse_flags)
