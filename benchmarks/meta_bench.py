"""Meta-steps per second, trace time and peak memory of a meta-learning config.

Builds the real :class:`hypernet.train_lib.Trainer` for a config (default
configs/omniglot_maml.py, with first order by ``--learners=maml,fomaml``) and times
its compiled train chunk (the ``tf.range`` loop of meta-steps the train loop runs):

* trace time: ``get_concrete_function`` of the chunk (Python tracing of one meta-step,
  the inner loop included);
* first call: the first chunk of one step (graph optimisation and allocation);
* meta-steps/s: over ``--steps`` further steps run as one chunk;
* peak memory: on a GPU ``tf.config.experimental.get_memory_info("GPU:0")["peak"]``
  (device memory, reset after building); on CPU the process' peak resident set size
  (``resource.getrusage(RUSAGE_SELF).ru_maxrss``: everything the process touched,
  data included). Each learner runs in its own subprocess so the peaks are separate.

The meta-batch is mapped over tasks with ``config.meta.parallel`` (``--parallel
map_fn,vectorized_map`` compares the two; an unrolled Python loop over tasks took over
40 s to trace for 16 conv4 tasks and is not offered).

  python benchmarks/meta_bench.py --data_dir=../shared/data/omniglot [--steps 20]
      [--learners maml,fomaml] [--parallel map_fn] [--set batch_size=16 ...]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SUBSET = "images_background_small1.zip,images_background_small2.zip"


def _load_config(path):
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("bench_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def _set(config, assignment):
  key, value = assignment.split("=", 1)
  *parents, leaf = key.split(".")
  node = config
  for p in parents:
    node = node[p]
  old = node[leaf]
  node[leaf] = type(old)(value) if not isinstance(old, (tuple, bool)) else eval(value)  # pylint: disable=eval-used


def measure(args) -> dict:
  """Builds the trainer for one learner and times it; returns a dict of numbers."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet import train_lib  # pylint: disable=g-import-not-at-top
  config = _load_config(args.config)
  config.data.data_dir = args.data_dir
  config.data.omniglot_zips = args.zips
  config.data.num_test_characters = args.num_test_characters
  config.meta.learner = args.learner
  config.meta.parallel = args.parallel
  config.jit_compile = "auto" if args.learner == "fomaml" else config.jit_compile
  for assignment in args.set:
    _set(config, assignment)
  gpu = bool(tf.config.list_logical_devices("GPU"))
  with tempfile.TemporaryDirectory() as workdir:
    trainer = train_lib.Trainer(config, workdir)
    if gpu:
      tf.config.experimental.reset_memory_stats("GPU:0")
    iterator = trainer.train_iterator(0)
    t0 = time.perf_counter()
    trainer._train_steps.get_concrete_function(iterator, tf.constant(1, tf.int64))  # pylint: disable=protected-access
    trace = time.perf_counter() - t0
    t0 = time.perf_counter()
    trainer.train_chunk(iterator, 1)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    metrics, _ = trainer.train_chunk(iterator, args.steps)
    dt = time.perf_counter() - t0
    if gpu:
      peak, kind = tf.config.experimental.get_memory_info("GPU:0")["peak"], "GPU peak"
    else:
      peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
      kind = "CPU max RSS"
  return {"learner": args.learner, "parallel": args.parallel, "jit": trainer.jit,
          "meta_batch": config.batch_size, "ways": config.meta.num_ways,
          "queries": config.meta.num_queries, "filters": config.model.conv_widths[0],
          "trace_s": trace, "first_step_s": first, "steps_per_s": args.steps / dt,
          "peak_mib": peak / 2**20, "memory": kind, "loss": metrics["loss"]}


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--config", default=os.path.join(os.path.dirname(__file__), "..",
                                                       "configs", "omniglot_maml.py"))
  parser.add_argument("--data_dir", required=True, help="folder of the Omniglot zips")
  parser.add_argument("--zips", default=SUBSET)
  parser.add_argument("--num_test_characters", type=int, default=50)
  parser.add_argument("--steps", type=int, default=10, help="timed meta-steps")
  parser.add_argument("--learners", default="maml,fomaml")
  parser.add_argument("--parallel", default="map_fn")
  parser.add_argument("--set", action="append", default=[],
                      help="config override key=value, e.g. batch_size=8")
  parser.add_argument("--learner", help=argparse.SUPPRESS)  # one measurement (child)
  args = parser.parse_args()
  if args.learner:
    print(json.dumps(measure(args)), flush=True)
    return
  for parallel in args.parallel.split(","):
    for learner in args.learners.split(","):
      cmd = [sys.executable, __file__, "--learner", learner, "--parallel", parallel,
             "--config", args.config, "--data_dir", args.data_dir, "--zips", args.zips,
             "--num_test_characters", str(args.num_test_characters),
             "--steps", str(args.steps)] + [f"--set={s}" for s in args.set]
      out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.join(
                               os.path.dirname(os.path.abspath(__file__)), "..")))
      r = json.loads(out.stdout.strip().splitlines()[-1])
      print(f"{r['learner']:7s} {r['parallel']:14s} jit={str(r['jit']):5s} "
            f"{r['ways']}-way meta-batch {r['meta_batch']} queries/class {r['queries']} "
            f"filters {r['filters']}: trace {r['trace_s']:.2f} s, first step "
            f"{r['first_step_s']:.2f} s, {r['steps_per_s']:.3f} meta-steps/s, "
            f"{r['memory']} {r['peak_mib']:.0f} MiB", flush=True)


if __name__ == "__main__":
  main()
