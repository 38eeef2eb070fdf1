"""What a user's own ``tf.function`` step costs to trace, with hypernet's code traced as
written (as shipped: ``hypernet.numerics.compat.exempt_from_autograph``) and converted by
AutoGraph (the rule taken out before the first trace, as without the exemption).

Two steps a user writes (README's and ``examples/meta_learning_own_tasks.py``'s shapes):

* ``hypernetwork``: README's "Your model, your loop" step: a chunked hypernetwork
  generating every weight of a small CNN, ``hn.functional_call`` under a tape, Adam,
  batch 64 of 8x8x1;
* ``maml``: a second-order MAML meta-step on conv4 (64 filters, 28x28x1, 5-way 1-shot,
  15 queries per class, one inner step, meta-batch 4): ``hn.meta.meta_batch_loss`` under a
  tape, Adam.

Each (step, mode) runs in a fresh process (nothing cached from the other mode), the
modes interleaved over ``--repeats`` rounds; reported: the first call (trace, graph
optimisation and one step) and the steady step time, medians, and the first call's
ratio converted / as shipped.

    python benchmarks/user_trace.py [--repeats=3] [--steps=hypernetwork,maml]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(step: str, mode: str) -> dict:
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import hypernet as hn  # pylint: disable=g-import-not-at-top
  from hypernet.meta import conv4  # pylint: disable=g-import-not-at-top
  if mode == "converted":  # The exemption's rule taken out (benchmark only).
    # Importing compat installs the rule; it is then taken out.
    from hypernet.numerics import compat  # pylint: disable=g-import-not-at-top,unused-import
    from tensorflow.python.autograph.core import config  # pylint: disable=g-import-not-at-top
    config.CONVERSION_RULES = tuple(r for r in config.CONVERSION_RULES
                                    if not r.matches("hypernet"))
  keras.utils.set_random_seed(0)
  rng = np.random.default_rng(0)
  opt = keras.optimizers.Adam(1e-3)
  if step == "hypernetwork":
    model = keras.Sequential([keras.Input((8, 8, 1)),
                              keras.layers.Conv2D(16, 3, activation="relu", name="conv"),
                              keras.layers.Flatten(), keras.layers.Dense(10, name="head")])
    hnet = hn.ChunkedHypernetwork(hn.weight_spec(model), chunk_size=512)
    args = (tf.constant(rng.random((64, 8, 8, 1)), tf.float32),
            tf.constant(rng.integers(0, 10, 64), tf.int32))

    @tf.function
    def train_step(images, labels):
      with tf.GradientTape() as tape:
        logits = hn.functional_call(model, hnet(), images, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
      grads = tape.gradient(loss, hnet.trainable_variables)
      opt.apply_gradients(zip(grads, hnet.trainable_variables))
      return loss
  else:
    ways, queries, tasks = 5, 15, 4
    model = conv4.make_conv4(ways, (28, 28, 1))
    learner = hn.meta.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.4)
    variables = model.trainable_variables
    labels = lambda k: np.tile(np.arange(ways), [tasks, k]).astype(np.int32)
    args = ({"support_x": tf.constant(rng.random((tasks, ways, 28, 28, 1)), tf.float32),
             "support_y": tf.constant(labels(1)),
             "query_x": tf.constant(rng.random((tasks, ways * queries, 28, 28, 1)),
                                    tf.float32),
             "query_y": tf.constant(labels(queries))},)

    @tf.function
    def train_step(batch):
      with tf.GradientTape() as tape:
        loss = hn.meta.meta_batch_loss(learner, batch, before_metrics=False).loss
      grads = tape.gradient(loss, variables)
      opt.apply_gradients(zip(grads, variables))
      return loss

  t0 = time.perf_counter()
  train_step(*args).numpy()
  first = time.perf_counter() - t0
  times = []
  for _ in range(5):
    t0 = time.perf_counter()
    train_step(*args).numpy()
    times.append(time.perf_counter() - t0)
  return {"first": first, "step": statistics.median(times)}


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
  parser.add_argument("--steps", default="hypernetwork,maml",
                      help="comma-separated: hypernetwork, maml")
  parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    print(json.dumps(_child(*args.child)))
    return
  steps = [s for s in args.steps.split(",") if s]
  unknown = sorted(set(steps) - {"hypernetwork", "maml"})
  if unknown:
    parser.error(f"--steps: unknown {unknown}; use hypernetwork, maml.")
  modes = ("as_shipped", "converted")
  results = {(s, m): [] for s in steps for m in modes}
  for r in range(args.repeats):
    for s in steps:
      for m in (modes if r % 2 == 0 else modes[::-1]):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", s, m],
                             capture_output=True, text=True, check=True, cwd=REPO)
        results[(s, m)].append(json.loads(out.stdout.strip().splitlines()[-1]))
  print(f"{'step':<14}{'mode':<12}{'first call (s)':>16}{'step (ms)':>12}")
  for s in steps:
    med = {m: {k: statistics.median(x[k] for x in results[(s, m)]) for k in ("first", "step")}
           for m in modes}
    for m in modes:
      print(f"{s:<14}{m:<12}{med[m]['first']:>16.2f}{1000 * med[m]['step']:>12.1f}")
    print(f"{s:<14}first call converted / as shipped: "
          f"{med['converted']['first'] / med['as_shipped']['first']:.2f}x "
          f"(medians of {args.repeats})")


if __name__ == "__main__":
  main()
