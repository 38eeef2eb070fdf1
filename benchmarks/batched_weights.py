"""Speed of a batch of weight sets in one forward pass against a Python loop over them.

A target CNN (the Fashion-MNIST target of configs/fmnist_plain.py by default) runs on
``S`` weight sets, each on its own batch of ``B`` images, as one compiled step
(``tf.function``) of forward + backward (gradient of a loss with respect to all weight
sets):

* ``loop``: a Python loop over the sets unrolled in the graph (``S`` functional calls);
* ``map_fn``: ``tf.map_fn`` over the sets (a while loop);
* ``grouped`` / ``im2col``: :func:`hypernet.hypernetworks.batched.batched_functional_call`
  (``tf.vectorized_map``; convolutions with per-set kernels as one grouped convolution,
  or as im2col + batched matmul).

It first checks that every method gives the loop's outputs to 1e-5, then prints
milliseconds per step (median of ``--repeats`` after a warm-up) and the speed-up over the
loop, for each ``S`` in ``--num_sets``.

    python benchmarks/batched_weights.py --num_sets=1,4,16 --batch=32
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags
import numpy as np
import tensorflow as tf

from hypernet.core import functional  # pylint: disable=wrong-import-position
from hypernet.tasks import targets
from hypernet.hypernetworks import batched  # pylint: disable=wrong-import-position

_NUM_SETS = flags.DEFINE_list("num_sets", ["1", "4", "16", "64"], "Weight-set counts S.")
_BATCH = flags.DEFINE_integer("batch", 32, "Images per weight set B.")
_REPEATS = flags.DEFINE_integer("repeats", 10, "Timed steps per method (after a warm-up).")
_CONV = flags.DEFINE_list("conv_widths", ["16", "32"], "Target CNN conv widths.")
_DENSE = flags.DEFINE_list("dense_widths", ["64"], "Target CNN dense widths.")
_METHODS = flags.DEFINE_list("methods", ["loop", "map_fn", "grouped", "im2col"],
                             "Methods to time.")
_JIT = flags.DEFINE_bool("jit", False, "Compile the steps with XLA.")


def step_fn(model, method):
  """A compiled step: outputs and the gradient of sum(sin(outputs)) w.r.t. the weights."""

  def forward(weights, x):
    if method == "loop":
      n = next(iter(weights.values())).shape[0]
      return tf.stack([functional.functional_call(
          model, {p: w[s] for p, w in weights.items()}, x[s], training=True) for s in range(n)])
    if method == "map_fn":
      return batched.batched_functional_call(model, weights, x, training=True,
                                             parallel="map_fn")
    return batched.batched_functional_call(model, weights, x, training=True, conv=method)

  def step(weights, x):
    with tf.GradientTape() as tape:
      tape.watch(weights)
      y = forward(weights, x)
      loss = tf.reduce_sum(tf.sin(y))
    grads = tape.gradient(loss, weights)
    return y, {p: tf.convert_to_tensor(g) for p, g in grads.items()}

  return tf.function(step, jit_compile=_JIT.value)


def main(argv):
  del argv
  model = targets.make_cnn((28, 28, 1), 10, conv_widths=[int(c) for c in _CONV.value],
                          dense_widths=[int(d) for d in _DENSE.value])
  spec = functional.weight_spec(model)
  device = "GPU" if tf.config.list_logical_devices("GPU") else "CPU"
  print(f"target: {model.name}, {functional.num_elements(spec)} weights per set; "
        f"B={_BATCH.value} images per set; device {device}; jit={_JIT.value}; "
        "forward + backward, ms per step (median)")
  header = f"{'S':>4} " + " ".join(f"{m:>16}" for m in _METHODS.value)
  print(header)
  rng = np.random.default_rng(0)
  for s in [int(n) for n in _NUM_SETS.value]:
    weights = {p: tf.constant(0.1 * rng.standard_normal((s,) + tuple(v.shape)), tf.float32)
               for p, v in spec.items()}
    x = tf.constant(rng.random((s, _BATCH.value, 28, 28, 1)), tf.float32)
    times, reference = {}, None
    for method in _METHODS.value:
      fn = step_fn(model, method)
      y, _ = fn(weights, x)                      # trace + warm-up
      if reference is None:
        reference = y.numpy()
      else:
        np.testing.assert_allclose(y.numpy(), reference, rtol=1e-5, atol=1e-5)
      laps = []
      for _ in range(_REPEATS.value):
        t0 = time.perf_counter()
        out = fn(weights, x)
        tf.nest.map_structure(lambda t: t.numpy(), out)
        laps.append(time.perf_counter() - t0)
      times[method] = 1e3 * float(np.median(laps))
    base = times.get("loop")
    cells = []
    for m in _METHODS.value:
      ratio = f" ({base / times[m]:.1f}x)" if base else ""
      cells.append(f"{times[m]:9.2f}{ratio:>7}")
    print(f"{s:>4} " + " ".join(f"{c:>16}" for c in cells))


if __name__ == "__main__":
  from hypernet.training import cli  # pylint: disable=g-import-not-at-top
  app.run(main, flags_parser=cli.parse_flags)
