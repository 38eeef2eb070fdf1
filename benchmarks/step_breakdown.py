"""Where the chunked hypernetwork's extra step time goes (the step of step_ratio.py).

Times, on the same batch and target (configs/fashion_mnist_hyper.py's CNN, batch 128),
in interleaved windows as ``step_ratio.py`` does:

* ``identity``: the target run by ``functional_call`` on its own variables, Adam on them;
* ``flat vector + split``: every weight cut from one trained vector of the generated size
  through the hypernetwork's own gain / mean / split path (no generator): what cutting a
  vector into weights costs;
* ``chunked hypernetwork``: the full step (generator forward and backward, Adam on the
  hypernetwork's parameters);

and the generator alone, without the target (its output dotted with fixed random
tensors): forward + backward, and forward + backward + Adam, each also with the
generator compiled by XLA (``jit_compile=True`` on the generator only). Prints ms per step
and ratios to ``identity``.

    python benchmarks/step_breakdown.py [--steps=50] [--repeats=7]
"""
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import app, flags  # noqa: E402
import step_ratio_flags  # noqa: E402  (--batch_size, --steps, --repeats, --jit, ...)

FLAGS = flags.FLAGS
# step_ratio's flags are this script's: list them under --help, not only under --helpfull.
flags.adopt_module_key_flags(step_ratio_flags)
# TensorFlow, the model and step_ratio (with PyTorch where installed) load in main(), after
# the flags are parsed: --help does not wait for them.
keras = tf = fashion_mnist_hyper = step_ratio = timing = classification = None


def _import_the_benchmark():
  # pylint: disable=global-statement,g-import-not-at-top,redefined-outer-name
  global keras, tf, fashion_mnist_hyper, step_ratio, timing, classification
  import keras
  import tensorflow as tf
  import fashion_mnist_hyper
  import step_ratio
  import timing
  from hypernet.tasks import classification


def _task(kind="chunked"):
  cfg = fashion_mnist_hyper.get_config()
  cfg.hypernet.kind = kind
  return classification.ClassificationTask(cfg, step_ratio._fake_data())


def _adam(variables):
  opt = keras.optimizers.Adam(1e-3)
  opt.build(variables)
  return opt


def _generator_only(hnet, jit: bool):
  """``(grad_step, adam_step)``: the generator's forward + backward (+ Adam) alone."""
  flat = tf.function(hnet.flat_weights, jit_compile=True, autograph=False) if jit \
      else hnet.flat_weights
  probes = {p: tf.random.stateless_normal(s.shape, seed=[1, i])
            for i, (p, s) in enumerate(hnet.target_spec.items())}
  variables = hnet.trainable_variables
  opt = _adam(variables)

  def loss():
    w = hnet.split(flat())
    return tf.add_n([tf.reduce_sum(w[p] * probes[p]) for p in probes])

  @tf.function
  def grad_step():
    with tf.GradientTape() as tape:
      value = loss()
    return tf.add_n([tf.reduce_sum(g) for g in tape.gradient(value, variables)])

  @tf.function
  def adam_step():
    with tf.GradientTape() as tape:
      value = loss()
    opt.apply(tape.gradient(value, variables), variables)
    return value

  return grad_step, adam_step


def _ms_per_call(fn, calls=200):
  fn()
  times = []
  for _ in range(FLAGS.repeats):
    t = time.perf_counter()
    for _ in range(calls):
      fn()
    times.append((time.perf_counter() - t) / calls)
  return 1e3 * statistics.median(times)


def main(_):
  _import_the_benchmark()
  data = step_ratio._fake_data()
  x = tf.constant(data.x_train[: FLAGS.batch_size], tf.float32) / 255.0
  batch = {"image": x, "label": tf.constant(data.y_train[: FLAGS.batch_size])}
  runs = {}
  identity = _task("none")
  runs["identity"] = step_ratio._loop(step_ratio._task_step(
      identity, identity.trainable_variables, _adam(identity.trainable_variables)), batch)
  flat_task = _task()
  hnet = flat_task.source.hypernetwork
  flat = tf.Variable(tf.random.stateless_normal([hnet.num_generated], seed=[0, 0]))
  flat_task.source.weights = lambda *a, **k: hnet.split(flat * hnet._gain + hnet._mean)
  runs["flat vector + split"] = step_ratio._loop(
      step_ratio._task_step(flat_task, [flat], _adam([flat])), batch)
  chunked = _task()
  runs["chunked hypernetwork"] = step_ratio._loop(step_ratio._task_step(
      chunked, chunked.trainable_variables, _adam(chunked.trainable_variables)), batch)
  results = {k: (1 / wall, 1 / cpu, warm) for k, (wall, cpu, warm) in
             timing.interleaved(runs, FLAGS.steps, FLAGS.repeats).items()}

  base = results["identity"][0]
  print(f"batch {FLAGS.batch_size}, {FLAGS.steps} steps/window, median of {FLAGS.repeats} "
        f"interleaved rounds, TF {tf.__version__}, {os.cpu_count()} CPUs")
  print(f"{'step':28s} {'ms/step':>8s} {'vs identity':>12s}")
  for name, (rate, _, _) in results.items():
    print(f"{name:28s} {1e3 / rate:8.2f} {base / rate:12.3f}")
  gen = chunked.source.hypernetwork
  print(f"generator alone ({gen.count_params():,} parameters -> {gen.num_generated:,} "
        f"weights, {gen.num_chunks} chunks of {gen.chunk_size}), ms per call:")
  for jit in (False, True):
    grad_step, adam_step = _generator_only(gen, jit)
    print(f"  jit_compile={jit!s:5s}  forward+backward {_ms_per_call(grad_step):6.2f}   "
          f"+ Adam {_ms_per_call(adam_step):6.2f}")
  noop = tf.function(lambda: tf.constant(0.0))
  print(f"  (an empty tf.function call: {_ms_per_call(noop):.2f} ms)")


if __name__ == "__main__":
  from hypernet.training import cli  # pylint: disable=g-import-not-at-top
  app.run(main, flags_parser=cli.parse_flags)
