"""Second-order MAML: peak memory and meta-steps/s against the number of inner steps,
with the inner steps kept for the backward pass (``stored``, the default) or recomputed
in it (``recompute``, ``config.meta.recompute``,
:func:`hypernet.meta.inner_loop.inner_sgd_recompute`); and implicit MAML (``imaml``,
:class:`hypernet.meta.implicit.ImplicitMAML`, 5 CG steps) for scale.

Each (mode, inner steps) runs in a process of its own: conv4 (``--filters``), N-way
K-shot on 28x28 random images (memory and time do not depend on the pixels), Q queries
per class, a meta-batch of ``--tasks`` tasks accumulated one at a time
(:func:`hypernet.meta.meta_batch_gradients`, ``parallel_iterations=1``: memory of one
task) in a ``tf.function``. After a warm-up step (tracing) the process's peak-RSS mark
is reset (``/proc/self/clear_refs``, and TensorFlow's CPU allocator, a BFC allocator here
so that it keeps statistics) and ``--steps`` meta-steps are timed; printed: steps/s, the
peak RSS during the timed steps above the RSS after importing TensorFlow and hypernet
(the import baseline; it includes the traced graph and, as glibc keeps freed memory, the
first step's high-water mark), the peak of the tensors alive at once (the allocator's),
and the ratios of ``recompute`` to ``stored`` (time per step, tensors' peak). Modes alternate in order per step count so that load from
other jobs hits both.

  python benchmarks/inner_steps_memory.py [--steps_list 1,2,5,10] [--ways 5] [--shots 5]
      [--queries 5] [--filters 64] [--tasks 2] [--steps 3] [--modes stored,recompute,imaml]
"""
import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))


def _status(field: str) -> float:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) / 1024
  return float("nan")


def worker(args) -> None:
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet.meta import conv4, implicit, inner_loop, meta_batch  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  baseline = _status("VmRSS")
  keras.utils.set_random_seed(0)  # The same initial weights in every process.
  model = conv4.make_conv4(args.ways, (28, 28, 1), filters=args.filters)
  loss = "sparse_softmax_cross_entropy"
  if args.mode == "imaml":
    learner = implicit.ImplicitMAML(model, loss, inner_lr=0.1, inner_steps=args.inner_steps,
                                    proximal_lambda=1.0, cg_steps=5)
  else:
    learner = inner_loop.MAML(model, loss, inner_lr=0.4, inner_steps=args.inner_steps,
                              recompute=args.mode == "recompute")
  rng = np.random.default_rng(0)
  n_s, n_q = args.ways * args.shots, args.ways * args.queries
  batch = {
      "support_x": tf.constant(rng.random((args.tasks, n_s, 28, 28, 1), np.float32)),
      "support_y": tf.constant(np.tile(np.arange(n_s) % args.ways, (args.tasks, 1)),
                               tf.int32),
      "query_x": tf.constant(rng.random((args.tasks, n_q, 28, 28, 1), np.float32)),
      "query_y": tf.constant(np.tile(np.arange(n_q) % args.ways, (args.tasks, 1)),
                             tf.int32)}
  variables = model.trainable_variables

  @tf.function
  def step():
    return meta_batch.meta_batch_gradients(learner, batch, variables,
                                           parallel_iterations=1).loss

  t0 = time.perf_counter()
  first_loss = float(step())
  setup = time.perf_counter() - t0
  after_trace = _status("VmRSS")
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")  # Resets VmHWM (peak RSS) to the current RSS.
    reset = True
  except OSError:
    reset = False
  try:
    tf.config.experimental.reset_memory_stats("CPU:0")
  except (ValueError, RuntimeError):
    pass
  t0 = time.perf_counter()
  for _ in range(args.steps):
    step()
  seconds = (time.perf_counter() - t0) / args.steps
  try:  # TensorFlow's allocator (BFC on CPU, set by main): the tensors' peak.
    tensor_peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] / 2**20
  except (ValueError, RuntimeError):
    tensor_peak = float("nan")
  print(json.dumps({"mode": args.mode, "inner_steps": args.inner_steps,
                    "steps_per_s": 1.0 / seconds, "setup_s": setup,
                    "baseline_mb": baseline, "after_trace_mb": after_trace,
                    "peak_mb": _status("VmHWM"), "peak_reset": reset,
                    "tensor_peak_mb": tensor_peak,
                    "first_loss": first_loss}), flush=True)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--steps_list", default="1,2,5,10")
  parser.add_argument("--modes", default="stored,recompute")
  parser.add_argument("--ways", type=int, default=5)
  parser.add_argument("--shots", type=int, default=5)
  parser.add_argument("--queries", type=int, default=5)
  parser.add_argument("--filters", type=int, default=64)
  parser.add_argument("--tasks", type=int, default=2)
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--worker", action="store_true")
  parser.add_argument("--mode", default="stored")
  parser.add_argument("--inner_steps", type=int, default=1)
  args = parser.parse_args()
  if args.worker:
    worker(args)
    return
  modes = [m for m in args.modes.split(",") if m]
  bad = [m for m in modes if m not in ("stored", "recompute", "imaml")]
  if bad:
    raise SystemExit(f"--modes: unknown {bad}; use stored, recompute, imaml.")
  # TensorFlow's BFC allocator on CPU reports the tensors' peak (glibc keeps freed
  # memory, so the RSS hardly falls after the first step).
  env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true", PYTHONPATH=os.pathsep.join(
      [os.path.join(HERE, ".."), os.environ.get("PYTHONPATH", "")]))
  rows = {}
  for i, k in enumerate(int(s) for s in args.steps_list.split(",")):
    order = modes if i % 2 == 0 else modes[::-1]
    for mode in order:
      argv = [sys.executable, __file__, "--worker", "--mode", mode, "--inner_steps", str(k)]
      for name in ("ways", "shots", "queries", "filters", "tasks", "steps"):
        argv += [f"--{name}", str(getattr(args, name))]
      out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
      rows[(mode, k)] = json.loads(out.stdout.strip().splitlines()[-1])
      r = rows[(mode, k)]
      print(f"# {mode} K={k}: {r['steps_per_s']:.3f} steps/s, peak "
            f"{r['peak_mb'] - r['baseline_mb']:.0f} MB RSS above import baseline, "
            f"tensors' peak {r['tensor_peak_mb']:.0f} MB, set-up {r['setup_s']:.1f} s, loss "
            f"{r['first_loss']:.4f}", flush=True)
  print(f"\nconv4 {args.filters} filters, {args.ways}-way {args.shots}-shot, {args.queries} "
        f"queries/class, meta-batch {args.tasks} (one task at a time), {args.steps} timed "
        "steps\n")
  print("Peak MB: the peak RSS above the import baseline / the peak of TensorFlow's "
        "allocator (tensors alive at once) in the timed steps.\n")
  print("| inner steps | " + " | ".join(
      f"{m} steps/s | {m} peak MB" for m in modes) + " | recompute/stored time | "
        "recompute/stored memory |")
  print("|---" * (1 + 2 * len(modes) + 2) + "|")
  for k in sorted({k for _, k in rows}):
    cells = []
    for m in modes:
      r = rows[(m, k)]
      cells += [f"{r['steps_per_s']:.3f}", f"{r['peak_mb'] - r['baseline_mb']:.0f} / "
                f"{r['tensor_peak_mb']:.0f}"]
    ratio = mem = ""
    if ("stored", k) in rows and ("recompute", k) in rows:
      s, c = rows[("stored", k)], rows[("recompute", k)]
      ratio = f"{s['steps_per_s'] / c['steps_per_s']:.2f}x"
      mem = f"{c['tensor_peak_mb'] / s['tensor_peak_mb']:.2f}x"
    print(f"| {k} | " + " | ".join(cells) + f" | {ratio} | {mem} |")


if __name__ == "__main__":
  main()
