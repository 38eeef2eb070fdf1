"""MAML meta-steps/s, set-up time and memory: this project's Trainer vs PyTorch.

For each order (second: ``maml``, first: ``fomaml``) and meta-batch size, one run starts
a worker process per implementation and times them in *interleaved* windows (round r:
A, B, C, then B, C, A, ...), so load from other jobs on the machine hits every side;
rates are medians over the rounds and ratios are taken within the run:

* ``tf:<strategy>``: the real :class:`hypernet.training.loop.Trainer` of the config (default
  configs/omniglot_maml.py: conv4 + BatchNorm with batch statistics, exact second order,
  5-way 1-shot, one inner SGD step of 0.4, Adam) running its compiled chunk of steps,
  with ``config.meta.parallel`` = each of ``--strategies`` (``accumulate``: per-task
  meta-gradients summed in a while loop; ``map_fn`` / ``vectorized_map``: one tape over
  the meta-batch); ``bare`` is the public-API step without the Trainer
  (``meta_batch_gradients`` + Adam in a ``tf.function``); ``accumulate@N`` sets
  ``config.meta.parallel_iterations=N`` (N tasks in flight; without ``@N`` the config's
  default, 2, second-order tasks staggered: ``--set meta.staggered=False`` turns that
  off); ``<strategy>:unfused`` (e.g. ``accumulate:unfused``) runs each BatchNorm -> ReLU
  -> max-pool block on TensorFlow's separate ops instead of the fused kernel
  (``config.meta.fused_blocks=False``, :mod:`hypernet.numerics.norm_relu_pool`);
  ``--kernel_archs`` times builds of that kernel for other instruction sets side by
  side (``tf:accumulate[x86-64-v3]``: ``HYPERNET_KERNEL_ARCH=-march=x86-64-v3``);
* ``torch``: the same meta-step in PyTorch (``benchmarks/torch_reference.py``:
  ``functional_call`` + ``autograd.grad(create_graph=True)``, one ``backward()`` per
  task), started from the TF target's initial weights on the same first meta-batches
  (dumped by a TF process of their own, so that no timed worker holds them). Workers
  per ``--omp_wait_policy`` (default: PyTorch's own spinning OpenMP threads, ``torch``,
  and ``OMP_WAIT_POLICY=PASSIVE``, ``torch:passive``): spinning is faster on quiet cores,
  passive under load. And per ``--torch_malloc``: glibc's ``malloc`` as it comes
  (``default``), and keeping freed memory for reuse (``keep``, ``torch:keep``:
  :func:`torch_reference.keep_freed_memory`, glibc's counterpart of the jemalloc /
  tcmalloc that PyTorch's CPU tuning guide preloads). As it comes, PyTorch's tensors
  page-fault on fresh ``mmap``'d memory (35,000-395,000 faults per meta-step in the runs
  of experiments/RESULTS_meta.md, against 2 with ``keep``), and
  a rate that changes from process to process (first order at meta-batch 32: 1.430 and
  0.929 steps/s in the two processes of one run, experiments/RESULTS_meta.md) with the
  order of its first large frees. Skipped with a message when PyTorch is not installed
  (``pip install -e .[bench]``).

Every implementation runs in ``--processes`` worker processes (default 2; ``#2`` is the
second). Every ratio is to the fastest PyTorch worker.

Printed per implementation: meta-steps/s (median) and its ratio to PyTorch; where the
time to the first step goes: the framework's imports (TF: TensorFlow and hypernet;
PyTorch: torch), build time (TF: Trainer and data; PyTorch: the dumped meta-batches and
the module), the fused kernel's load (compiled on a first run into the cache, ~15 s;
loaded after), set-up (trace, graph optimisation and the first step) and *start*, the
process's whole age at the end of its first step (interpreter start-up included); and
the time of the step after it; peak resident memory (``ru_maxrss``), the
RSS after the framework's imports (baseline), after building (TF: data set loaded,
Trainer built; PyTorch: the dumped meta-batches loaded, module built) and the peak above
the baseline; the first step's loss (the same on
both sides: same weights and tasks); minor page faults per step in the timed windows
(median). On a GPU the TF workers also report device peak
memory.

  python benchmarks/meta_bench.py --data_dir=../shared/data/omniglot \\
      [--meta_batches 16,32] [--orders second,first] [--strategies accumulate,map_fn] \\
      [--steps 3] [--repeats 5] [--queries 15] [--omp_wait_policy default,PASSIVE]
      [--torch_malloc default,keep] [--processes 2]
      [--kernel_archs 'native;-march=x86-64-v3;-march=x86-64-v2'] [--tf_malloc default,keep]
      [--set key=value ...]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
SUBSET = "images_background_small1.zip,images_background_small2.zip"
LEARNER = {"second": "maml", "first": "fomaml"}


def _rss_mb() -> float:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024
  return float("nan")


def _process_age() -> float:
  """Seconds since this process started (the kernel's clock: interpreter start-up and
  every import included)."""
  with open("/proc/self/stat") as f:
    start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
  with open("/proc/uptime") as f:
    uptime = float(f.read().split()[0])
  return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def _peak_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _load_config(path):
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  return config_lib.load_config_file(path)


def _set(config, assignment):
  key, value = assignment.split("=", 1)
  *parents, leaf = key.split(".")
  node = config
  for p in parents:
    node = node[p]
  old = node[leaf]
  node[leaf] = type(old)(value) if not isinstance(old, (tuple, bool)) else eval(value)  # pylint: disable=eval-used


def _config(args):
  config = _load_config(args.config)
  config.data.data_dir = args.data_dir
  config.data.omniglot_zips = args.zips
  config.data.num_test_characters = args.num_test_characters
  config.meta.learner = LEARNER[args.order]
  config.meta.num_queries = args.queries
  config.batch_size = args.meta_batch
  for assignment in args.set:
    _set(config, assignment)
  return config


def _serve(run_steps, ready: dict) -> None:
  """Worker protocol: print ``ready``; then per stdin line ``run N`` time N steps."""
  print(json.dumps(ready), flush=True)
  for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "run":
      faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
      t = time.perf_counter()
      run_steps(int(cmd[1]))
      print(json.dumps({"seconds": time.perf_counter() - t, "faults": resource.getrusage(
          resource.RUSAGE_SELF).ru_minflt - faults}), flush=True)
    else:
      print(json.dumps({"peak_mb": _peak_mb()}), flush=True)
      return


def tf_worker(args) -> None:
  t_import = time.perf_counter()
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet.core import functional  # pylint: disable=g-import-not-at-top
  from hypernet.numerics import norm_relu_pool  # pylint: disable=g-import-not-at-top
  from hypernet.training import loop
  import_s = time.perf_counter() - t_import
  baseline = _rss_mb()
  config = _config(args)
  strategy, _, tasks_in_flight = args.strategy.partition("@")
  strategy, unfused = (strategy[:-len(":unfused")], True) if strategy.endswith(
      ":unfused") else (strategy, False)
  if unfused:
    config.meta.fused_blocks = False
  bare = strategy == "bare"
  config.meta.parallel = "accumulate" if bare else strategy
  if tasks_in_flight:
    config.meta.parallel_iterations = int(tasks_in_flight)
  gpu = bool(tf.config.list_logical_devices("GPU"))
  with tempfile.TemporaryDirectory() as workdir:
    t0 = time.perf_counter()
    trainer = loop.Trainer(config, workdir)
    iterator = trainer.train_iterator(0)
    if bare:
      run = _bare_steps(trainer)
      trainer.train_chunk = lambda it, n: ({"loss": float(run(it, tf.constant(n)))}, -1)
    build = time.perf_counter() - t0
    built = _rss_mb()
    if args.dump:  # Initial weights and the first meta-batches for the PyTorch side.
      # A worker given --dump only dumps, in a process of its own: holding the dumped
      # meta-batches would raise a timed worker's peak memory with the meta-batch size.
      task = trainer.task
      np.savez(os.path.join(args.dump, "weights.npz"), **{
          p.replace("/", "|"): v.numpy()
          for p, v in functional.variable_paths(task.target, trainable=True).items()})
      batches = list(task.train_dataset(config.batch_size, config.seed).take(args.dump_batches))
      np.savez(os.path.join(args.dump, "batches.npz"), **{
          f"{i}|{k}": v.numpy() for i, b in enumerate(batches) for k, v in b.items()})
      with open(os.path.join(args.dump, "hparams.json"), "w") as f:
        json.dump({"num_blocks": len(config.model.conv_widths),
                   "inner_lr": config.meta.inner_lr, "inner_steps": config.meta.inner_steps,
                   "lr": config.optim.lr}, f)
      return
    if gpu:
      tf.config.experimental.reset_memory_stats("GPU:0")
    t0 = time.perf_counter()
    if config.meta.fused_blocks:  # Compiled on the first run here, loaded from the cache after.
      norm_relu_pool.library()
    kernel_s = time.perf_counter() - t0
    metrics, _ = trainer.train_chunk(iterator, 1)
    first = time.perf_counter() - t0 - kernel_s
    ready = {"import_s": import_s, "build_s": build, "kernel_s": kernel_s,
             "setup_s": first, "start_s": _process_age(), "first_step_s": first,
             "baseline_mb": baseline, "built_mb": built, "first_loss": metrics["loss"],
             "jit": trainer.jit}
    # The first call traces and optimises the graph; time a second step alone.
    t0 = time.perf_counter()
    trainer.train_chunk(iterator, 1)
    ready["first_step_s"] = time.perf_counter() - t0
    ready["setup_s"] = first
    if gpu:
      ready["gpu_peak_mb"] = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    _serve(lambda n: trainer.train_chunk(iterator, n), ready)


def _bare_steps(trainer):
  """The public-API meta-step without the Trainer: ``meta_batch_gradients`` and Adam in
  a ``tf.range`` loop (what the Trainer adds over it is the difference)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet.core import functional  # pylint: disable=g-import-not-at-top
  from hypernet.meta import meta_batch  # pylint: disable=g-import-not-at-top
  task, variables, optimizer = trainer.task, trainer.variables, trainer.optimizer

  kernels = trainer._kernels  # pylint: disable=protected-access

  @tf.function
  def run(iterator, n):
    with kernels():
      return steps(iterator, n)

  def steps(iterator, n):
    loss = tf.constant(0.0)
    for _ in tf.range(n):
      batch = next(iterator)
      result = meta_batch.meta_batch_gradients(
          task.learner, {k: batch[k] for k in meta_batch.BATCH_KEYS}, variables,
          parallel_iterations=trainer.task.tasks_in_flight,
          staggered=trainer.task.staggered)
      optimizer.apply(result.variable_grads, variables)
      functional.assign_state(task.target, result.state)
      loss += result.loss
    return loss / tf.cast(n, tf.float32)
  return run


def torch_worker(args) -> None:
  t_import = time.perf_counter()
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch_reference  # pylint: disable=g-import-not-at-top
  import_s = time.perf_counter() - t_import
  if args.malloc_keep and not torch_reference.keep_freed_memory():
    raise SystemExit("--torch_malloc=keep needs glibc (mallopt); drop it here.")
  baseline = _rss_mb()  # (The config is not loaded here: that would import TF.)
  with open(os.path.join(args.dump, "hparams.json")) as f:
    hp = json.load(f)
  t0 = time.perf_counter()
  with np.load(os.path.join(args.dump, "weights.npz")) as f:
    weights = {k.replace("|", "/"): f[k] for k in f.files}
  with np.load(os.path.join(args.dump, "batches.npz")) as f:
    batches = [{k: f[f"{i}|{k}"] for k in ("support_x", "support_y", "query_x", "query_y")}
               for i in range(args.dump_batches)]
  step = torch_reference.conv4_maml(
      weights, hp["num_blocks"], inner_lr=hp["inner_lr"], inner_steps=hp["inner_steps"],
      first_order=args.order == "first", lr=hp["lr"])
  build = time.perf_counter() - t0
  built = _rss_mb()
  t0 = time.perf_counter()
  loss = step(batches[0])
  setup = time.perf_counter() - t0
  start = _process_age()
  t0 = time.perf_counter()
  step(batches[1 % len(batches)])
  ready = {"import_s": import_s, "build_s": build, "kernel_s": 0.0, "setup_s": setup,
           "start_s": start, "first_step_s": time.perf_counter() - t0,
           "baseline_mb": baseline, "built_mb": built, "first_loss": loss}
  count = [2]

  def run(n):
    for _ in range(n):
      step(batches[count[0] % len(batches)])
      count[0] += 1
  _serve(run, ready)


def _worker_env(extra=None):
  return dict(os.environ, **(extra or {}), PYTHONPATH=os.pathsep.join(
      [os.path.join(HERE, ".."), HERE, os.environ.get("PYTHONPATH", "")]))


class Worker:
  """A worker subprocess speaking the line protocol of :func:`_serve`."""

  def __init__(self, name, argv, env=None):
    self.name = name
    env = _worker_env(env)
    self.proc = subprocess.Popen([sys.executable, __file__] + argv, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=env)
    self.ready = self._read()
    self.seconds = []
    self.faults = []  # Minor page faults per step, per window.

  def _read(self):
    line = self.proc.stdout.readline()
    if not line:
      raise RuntimeError(f"worker {self.name} died (exit {self.proc.wait()})")
    return json.loads(line)

  def run(self, steps):
    self.proc.stdin.write(f"run {steps}\n")
    self.proc.stdin.flush()
    result = self._read()
    self.seconds.append(result["seconds"] / steps)
    self.faults.append(result["faults"] / steps)

  def close(self):
    self.proc.stdin.write("quit\n")
    self.proc.stdin.flush()
    self.peak_mb = self._read()["peak_mb"]
    self.proc.wait()


def _policies(spec: str):
  """``--omp_wait_policy`` as a list; '' (the old spelling of PyTorch's own) is 'default'."""
  policies = [p.strip() or "default" for p in spec.split(",")] or ["default"]
  bad = [p for p in policies if p.upper() not in ("DEFAULT", "PASSIVE", "ACTIVE")]
  if bad:
    raise SystemExit(f"--omp_wait_policy: unknown value(s) {bad}; use default, PASSIVE "
                     "or ACTIVE, comma-separated.")
  return ["default" if p.upper() == "DEFAULT" else p.upper() for p in policies]


def _mallocs(spec: str, flag: str = "--torch_malloc"):
  """``--torch_malloc`` (or ``--tf_malloc``) as a list of 'default' / 'keep'."""
  mallocs = [m.strip().lower() or "default" for m in spec.split(",")]
  bad = [m for m in mallocs if m not in ("default", "keep")]
  if bad:
    raise SystemExit(f"{flag}: unknown value(s) {bad}; use default (glibc's own) "
                     "or keep (freed memory kept for reuse), comma-separated.")
  return mallocs


ARCH_ENV = "HYPERNET_KERNEL_ARCH"  # hypernet.numerics.norm_relu_pool.ARCH_ENV (no TF import here)
# glibc's malloc keeping freed memory, set before the process starts (mallopt's values
# in torch_reference.keep_freed_memory).
KEEP_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def _archs(spec: str):
  """``--kernel_archs`` as a list of target-option strings ('native': -march=native)."""
  archs = [a.strip() for a in spec.split(";") if a.strip()] or ["native"]
  return ["-march=native" if a == "native" else a for a in archs]


def _tf_envs(spec: str):
  """``--tf_envs`` as a list of environment dicts ('' : as it is)."""
  envs = []
  for variant in spec.split(";"):
    pairs = [w.split("=", 1) for w in variant.split()]
    bad = [w for w in pairs if len(w) != 2 or not w[0]]
    if bad:
      raise SystemExit(f"--tf_envs: {variant!r} is not KEY=VALUE words; e.g. "
                       "';TF_ENABLE_ONEDNN_OPTS=1'")
    envs.append(dict(pairs))
  return envs


def _common_argv(args, order, meta_batch):
  return (["--order", order, "--meta_batch", str(meta_batch), "--config", args.config,
           "--data_dir", args.data_dir, "--zips", args.zips, "--queries", str(args.queries),
           "--num_test_characters", str(args.num_test_characters),
           "--dump_batches", str(args.dump_batches)] + [f"--set={s}" for s in args.set])


def compare(args, order, meta_batch, have_torch) -> None:
  """One interleaved comparison; prints its table."""
  with tempfile.TemporaryDirectory() as dump:
    workers = []
    try:
      # The TF target's initial weights and first meta-batches, for PyTorch (the same
      # seed gives the timed TF workers the same weights: the first losses agree).
      subprocess.run([sys.executable, __file__] + _common_argv(args, order, meta_batch)
                     + ["--worker", "tf", "--dump", dump], check=True,
                     stdout=subprocess.DEVNULL, env=_worker_env())
      # A process's rate can differ from the next process's (PyTorch's first order by
      # up to 1.7x between processes here, steady within one), so every implementation
      # runs in --processes processes and is judged by its fastest.
      suffixes = [""] + [f"#{k}" for k in range(2, args.processes + 1)]
      for strategy in args.strategies.split(","):
        argv = _common_argv(args, order, meta_batch) + ["--worker", "tf", "--strategy",
                                                        strategy]
        # Without the fused kernel (:unfused) its build does not matter: one worker set.
        for arch in _archs(args.kernel_archs)[:1 if strategy.endswith(":unfused") else None]:
          # The fused kernel's build per HYPERNET_KERNEL_ARCH (named by its -march).
          tag = "" if arch == "-march=native" else "[" + " ".join(
              w.replace("-march=", "") for w in arch.split()) + "]"
          for malloc in _mallocs(args.tf_malloc):
            for extra in _tf_envs(args.tf_envs):
              # glibc keeping freed memory for TensorFlow's CPU tensors too (plain malloc
              # unless TF_CPU_ALLOCATOR_USE_BFC is set): the environment form of
              # torch_reference.keep_freed_memory.
              env = dict({ARCH_ENV: arch}, **(KEEP_ENV if malloc == "keep" else {}), **extra)
              name = f"tf:{strategy}{tag}" + (":keep" if malloc == "keep" else "") + "".join(
                  f"[{k}={v}]" for k, v in extra.items())
              workers += [Worker(name + x, argv, env) for x in suffixes]
      if have_torch:
        # PyTorch's OpenMP threads spin while they wait by default: fastest on quiet
        # cores, but under other jobs' load they collapse (1/10 of the idle rate on the
        # shared 2 cores), where passive waiting is fastest. Workers for each policy;
        # the ratios are taken against the fastest PyTorch worker.
        # With glibc's default malloc PyTorch's tensors page-fault on fresh mmap'd memory
        # (torch_reference.keep_freed_memory): workers per --torch_malloc too.
        for policy in _policies(args.omp_wait_policy):
          for malloc in _mallocs(args.torch_malloc):
            env = {"OMP_WAIT_POLICY": policy} if policy != "default" else {}
            name = "torch" + ("" if policy == "default" else f":{policy.lower()}") + (
                ":keep" if malloc == "keep" else "")
            argv = _common_argv(args, order, meta_batch) + [
                "--worker", "torch", "--dump", dump] + (
                    ["--malloc_keep"] if malloc == "keep" else [])
            workers += [Worker(name + x, argv, env) for x in suffixes]
      for r in range(args.repeats):
        for k in range(len(workers)):
          workers[(r + k) % len(workers)].run(args.steps)
    finally:
      for w in workers:
        w.close()
  rate = {w.name: 1.0 / statistics.median(w.seconds) for w in workers}
  ref = max((r for n, r in rate.items() if n.startswith("torch")), default=None)
  print(f"\n{order} order, meta-batch {meta_batch}: median of {args.repeats} interleaved "
        f"windows of {args.steps} steps per worker ({args.processes} process(es) per "
        "implementation, #k: the k-th); 'vs torch' is the ratio to the fastest PyTorch "
        "worker")
  print(f"{'implementation':30s} {'steps/s':>8s} {'vs torch':>8s} {'import s':>8s} "
        f"{'build s':>8s} {'kernel s':>8s} {'set-up s':>8s} {'start s':>8s} "
        f"{'step s':>7s} {'peak MB':>8s} {'base MB':>8s} "
        f"{'built MB':>8s} {'above MB':>8s} {'first loss':>10s} {'faults/step':>11s}")
  for w in workers:
    r = w.ready
    ratio = f"{rate[w.name] / ref:8.2f}" if ref else f"{'-':>8s}"
    gpu = f"  GPU peak {r['gpu_peak_mb']:.0f} MB" if "gpu_peak_mb" in r else ""
    print(f"{w.name:30s} {rate[w.name]:8.3f} {ratio} {r['import_s']:8.1f} "
          f"{r['build_s']:8.1f} {r['kernel_s']:8.1f} {r['setup_s']:8.1f} "
          f"{r['start_s']:8.1f} {r['first_step_s']:7.2f} {w.peak_mb:8.0f} "
          f"{r['baseline_mb']:8.0f} {r['built_mb']:8.0f} {w.peak_mb - r['baseline_mb']:8.0f} "
          f"{r['first_loss']:10.5f} {statistics.median(w.faults):11.0f}{gpu}", flush=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--config", default=os.path.join(HERE, "..", "configs",
                                                       "omniglot_maml.py"))
  parser.add_argument("--data_dir", required=True, help="folder of the Omniglot zips")
  parser.add_argument("--zips", default=SUBSET)
  parser.add_argument("--num_test_characters", type=int, default=50)
  parser.add_argument("--meta_batches", default="16,32")
  parser.add_argument("--orders", default="second,first")
  parser.add_argument("--strategies", default="accumulate,map_fn",
                      help="config.meta.parallel values to time (TF workers)")
  parser.add_argument("--queries", type=int, default=15, help="query examples per class")
  parser.add_argument("--steps", type=int, default=3, help="meta-steps per timed window")
  parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
  parser.add_argument("--no_torch", action="store_true", help="skip the PyTorch reference")
  parser.add_argument("--processes", type=int, default=2,
                      help="worker processes per implementation (each timed; the "
                      "fastest PyTorch one is the reference)")
  parser.add_argument("--omp_wait_policy", default="default,PASSIVE",
                      help="comma-separated OMP_WAIT_POLICY values, --processes PyTorch "
                      "workers each ('default': PyTorch's own, spinning threads); ratios "
                      "are to the fastest")
  parser.add_argument("--torch_malloc", default="default,keep",
                      help="comma-separated: 'default' (glibc's malloc as it comes) and "
                      "'keep' (freed memory kept for reuse, torch_reference."
                      "keep_freed_memory; worker names ':keep'), --processes PyTorch "
                      "workers each per --omp_wait_policy value")
  parser.add_argument("--set", action="append", default=[],
                      help="config override key=value, e.g. meta.inner_steps=2")
  parser.add_argument("--tf_malloc", default="default",
                      help="comma-separated, as --torch_malloc, for the TF workers "
                      "(names ':keep')")
  parser.add_argument("--tf_envs", default="",
                      help="';'-separated environment variants of the TF workers, each "
                      "space-separated KEY=VALUE words ('': as it is), e.g. "
                      "';TF_ENABLE_ONEDNN_OPTS=1' (names [KEY=VALUE])")
  parser.add_argument("--kernel_archs", default="native",
                      help="';'-separated builds of the fused kernel to time, each "
                      "HYPERNET_KERNEL_ARCH of its TF workers, e.g. "
                      "'native;-march=x86-64-v3;-march=x86-64-v2' (workers named "
                      "tf:STRATEGY[x86-64-v3])")
  # Worker processes (internal).
  parser.add_argument("--worker", choices=("tf", "torch"), help=argparse.SUPPRESS)
  parser.add_argument("--order", default="second", help=argparse.SUPPRESS)
  parser.add_argument("--meta_batch", type=int, default=16, help=argparse.SUPPRESS)
  parser.add_argument("--strategy", default="accumulate", help=argparse.SUPPRESS)
  parser.add_argument("--dump", default="", help=argparse.SUPPRESS)
  parser.add_argument("--dump_batches", type=int, default=4, help=argparse.SUPPRESS)
  parser.add_argument("--malloc_keep", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.processes < 1:
    parser.error(f"--processes={args.processes}: give 1 or more worker processes per "
                 "implementation.")
  if args.worker == "tf":
    return tf_worker(args)
  if args.worker == "torch":
    return torch_worker(args)
  have_torch = False
  if not args.no_torch:
    sys.path.insert(0, HERE)
    import torch_reference  # pylint: disable=g-import-not-at-top
    have_torch = torch_reference.available()
    if not have_torch:
      print(torch_reference.MISSING)
  _mallocs(args.torch_malloc), _mallocs(args.tf_malloc, "--tf_malloc")  # Bad values fail here.
  _tf_envs(args.tf_envs)
  _policies(args.omp_wait_policy)
  print(f"{os.cpu_count()} CPUs; load average before: {os.getloadavg()}")
  print(describe_machine(have_torch))
  for order in args.orders.split(","):
    for meta_batch in (int(b) for b in args.meta_batches.split(",")):
      compare(args, order, meta_batch, have_torch)
  print(f"load average after: {os.getloadavg()}")


def describe_machine(have_torch: bool) -> str:
  """The CPU, the fused kernel's build (flags, the instruction sets its code may use)
  and each side's thread settings, printed beside the ratios: the lead depends on them."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet.numerics import norm_relu_pool  # pylint: disable=g-import-not-at-top
  report = norm_relu_pool.build_report()
  threads = (f"TensorFlow intra-op {tf.config.threading.get_intra_op_parallelism_threads()}"
             f" / inter-op {tf.config.threading.get_inter_op_parallelism_threads()} "
             "(0: one per core)")
  if have_torch:
    import torch  # pylint: disable=g-import-not-at-top
    threads += f"; PyTorch {torch.get_num_threads()} intra-op threads"
  kernel = (f"built with {report['flags'] or '(flags not recorded)'}; instruction sets "
            f"{', '.join(report['isa']) or '?'}" if report["loaded"]
            else f"not loaded ({norm_relu_pool.load_error()})")
  return f"CPU: {report['cpu'] or '?'}\nfused kernel: {kernel}\nthreads: {threads}"


if __name__ == "__main__":
  main()
