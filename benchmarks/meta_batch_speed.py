"""Trace time and steps/s of a conv4 meta-step (MAML, second and first order).

5-way 1-shot, 15 queries per class, meta-batch of 16 tasks, 28x28x1 synthetic images,
one inner step, no pre-adaptation metrics; the tasks are mapped with tf.map_fn and with tf.vectorized_map (and,
for comparison, "unrolled": a Python loop over tasks, what the library avoids).

  python benchmarks/meta_batch_speed.py [--steps 5] [--parallel map_fn,vectorized_map]
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # pylint: disable=g-import-not-at-top
import tensorflow as tf

from hypernet import functional
from hypernet.meta import conv4, inner_loop, meta_batch


def make_step(learner, parallel, optimizer, variables, tasks, parallel_iterations=None):
  """A tf.function meta-step: meta-batch loss, gradient, Adam update."""

  def meta_loss(b):
    if parallel != "unrolled":
      return meta_batch.meta_batch_loss(
          learner, b, parallel=parallel, before_metrics=False,
          parallel_iterations=parallel_iterations).loss
    task_losses = []
    for t in range(tasks):  # What the library avoids: one traced copy per task.
      fast, state = learner.adapt(b["support_x"][t], b["support_y"][t])
      out = functional.functional_call(learner.model, fast, b["query_x"][t],
                                       training=True, state=state)
      task_losses.append(learner.loss_fn(b["query_y"][t], out))
    return tf.reduce_mean(task_losses)

  @tf.function
  def step(b):
    with tf.GradientTape() as tape:
      loss = meta_loss(b)
    grads = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(grads, variables))
    return loss
  return step


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--steps", type=int, default=5, help="timed meta-steps")
  parser.add_argument("--parallel", default="map_fn,vectorized_map")
  parser.add_argument("--order", default="second,first")
  parser.add_argument("--tasks", type=int, default=16)
  parser.add_argument("--inner_steps", type=int, default=1)
  parser.add_argument("--parallel_iterations", type=int, default=None,
                      help="tf.map_fn parallel iterations (default: TF's, 10)")
  args = parser.parse_args()
  ways, shots, queries = 5, 1, 15
  rng = tf.random.Generator.from_seed(0)
  batch = {
      "support_x": rng.normal([args.tasks, ways * shots, 28, 28, 1]),
      "support_y": tf.tile(tf.range(ways)[None], [args.tasks, shots]),
      "query_x": rng.normal([args.tasks, ways * queries, 28, 28, 1]),
      "query_y": tf.tile(tf.range(ways)[None], [args.tasks, queries]),
  }
  print(f"conv4 {ways}-way {shots}-shot, {queries} queries/class, meta-batch "
        f"{args.tasks}, inner steps {args.inner_steps}, CPU threads "
        f"{os.cpu_count()}")
  for order in args.order.split(","):
    for parallel in args.parallel.split(","):
      keras.utils.clear_session()
      keras.utils.set_random_seed(0)  # same initial weights for every option
      model = conv4.make_conv4(ways)
      learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.4,
                                inner_steps=args.inner_steps,
                                first_order=(order == "first"))
      optimizer = keras.optimizers.Adam(1e-3)
      variables = model.trainable_variables
      optimizer.build(variables)

      step = make_step(learner, parallel, optimizer, variables, args.tasks,
                       args.parallel_iterations)
      t0 = time.perf_counter()
      step.get_concrete_function(batch)
      trace = time.perf_counter() - t0
      t0 = time.perf_counter()
      first_loss = float(step(batch))  # first run: graph optimisation, allocation
      first = time.perf_counter() - t0
      t0 = time.perf_counter()
      for _ in range(args.steps):
        loss = step(batch)
      loss.numpy()
      dt = (time.perf_counter() - t0) / args.steps
      print(f"{order:6s} order {parallel:15s} trace {trace:6.2f} s  first step "
            f"{first:6.2f} s  {1 / dt:6.3f} steps/s ({dt:.2f} s/step)  first loss "
            f"{first_loss:.4f}", flush=True)


if __name__ == "__main__":
  main()
