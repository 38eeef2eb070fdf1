"""What hypernet does on a GPU machine, in two tables, in at most ~5 minutes on one GPU.

**Correctness** (first, seconds):

* ``hypernet.numerics.compat.canary_report()`` after the check's functional calls ran:
  which private-hook canaries passed, and why the others did not.
* **Second order on the device**: two small float targets through ``hn.functional_call``:
  the MAML meta-gradient (one inner SGD step, :class:`hypernet.meta.MAML`) of a conv4
  block (``hypernet.meta.make_conv4``: conv, BatchNorm, ReLU, max-pool, as
  ``configs/omniglot_maml.py``'s target) and a Hessian-vector product through conv +
  LayerNormalization. Each is computed on the GPU in float32 (TF32 off), under XLA
  (``tf.function(jit_compile=True)``), in float64, and in float32 with TensorFloat-32 on
  (TensorFlow's default on Ampere and later, what training gets), and compared with the
  same computed on the CPU in float64 (the reference). Error: ``max |got - ref| / max
  |ref|`` over all weights. Tolerances (:data:`TOLERANCE`): 1e-4 for float32, about 60
  times the largest CPU float32 error measured on these targets (1.6e-6, TF 2.21), scaled
  by unit roundoff for float64; the TF32 rows are reported, not judged. The CPU float32
  graph row is the calibration: its error is this run's float32 noise.
* **README job accuracy** against the CPU's 98.33 % (seed 0; seeds 0-2 gave 98.33-99.16),
  when the README job runs in full (a GPU): more than 1 point away is flagged. cuDNN
  picks non-deterministic kernels unless ``--deterministic``
  (``tf.config.experimental.enable_op_determinism``).

Without a GPU (or with ``--cpu_only``) the same check compares CPU float32 and CPU XLA
with CPU float64 (the MAML case under XLA only with ``--full_check``: its XLA compile
takes ~8 s on 2 CPU cores).

**Rows** (each one a real :class:`hypernet.training.loop.Trainer` of a committed config):

* **README job**: ``configs/digits_hyper.py`` trained and evaluated in full
  (``loop.train_and_evaluate``): final test accuracy and wall time, with the Trainer's
  own device choices (``loop.device_choices``: XLA ``auto``).
* **hypernetwork step**: the same config's training step, steps/s, for XLA off / on and
  ``float32`` / ``mixed_bfloat16`` / ``mixed_float16`` (``LossScaleOptimizer``).
* **MAML meta-step**: ``configs/omniglot_maml.py`` (second order, conv4 + BatchNorm, 5-way
  1-shot, meta-batch 16) on the Omniglot subset zips of ``--omniglot_dir`` (the images
  are only timed; without the folder: 5-way 1-shot on 8x8 digits, said in the row),
  meta-steps/s for the same six settings (the config's ``jit_compile="false"`` is
  overridden per row; the XLA column is what the Trainer chose).
* **MirroredStrategy**: the hypernetwork step and the MAML meta-step over all visible
  GPUs (``config.distribution="mirrored"``) against one (``"one_device"``), same global
  batch / meta-batch; skipped, saying why, with fewer than 2 GPUs.
* **peak GPU memory** of every row (``tf.config.experimental.get_memory_info``, reset
  before each row; the largest over the row's GPUs).

Each step rate times one compiled chunk of ``--steps`` steps after a warm-up chunk
(trace, XLA compile) and reports the warm-up time as set-up. Rows run float32 first and
are skipped, saying so, once ``--budget_s`` would be passed.

Without a GPU (or with ``--cpu_only``) the GPU rows (mixed precision, MirroredStrategy,
memory) are printed as skipped, with the reason, and the rest runs tiny: the README job
for ``--cpu_steps`` steps, and one XLA setting per step row on 2 steps (the hypernetwork
step with XLA on, the MAML meta-step with XLA off), so the script itself is tested on
CPU (``tests/test_gpu_check.py``). Nothing is faked: every number printed was measured
in this run.

    python benchmarks/gpu_check.py [--cpu_only] [--budget_s=270] [--steps=50]
        [--deterministic] [--full_check] [--omniglot_dir=../shared/data/omniglot] [--json=PATH]

docs/gpu.md says how to read the tables.
"""
import argparse
import contextlib
import gc
import json
import os
import shutil
import sys
import tempfile
import time

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as _np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
OMNIGLOT_SUBSET = "images_background_small1.zip,images_background_small2.zip"


def _config(name):
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "configs", f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def _gpus():
  return [d.name for d in tf.config.list_logical_devices("GPU")]


def _reset_memory(gpus):
  for g in gpus:
    tf.config.experimental.reset_memory_stats(g)


def _peak_mb(gpus):
  if not gpus:
    return None
  return max(tf.config.experimental.get_memory_info(g)["peak"] for g in gpus) / 2**20


def _maml_config(omniglot_dir, tiny):
  """Second-order MAML as configs/omniglot_maml.py; digits when no Omniglot folder."""
  c = _config("omniglot_maml")
  if omniglot_dir and os.path.isdir(omniglot_dir) and not tiny:
    c.data.data_dir = omniglot_dir
    c.data.omniglot_zips, c.data.num_test_characters = OMNIGLOT_SUBSET, 50
    return c, "Omniglot subset, 28x28"
  c.data.name, c.data.data_dir = "digits", ""
  c.model.conv_widths = (64, 64) if not tiny else (8, 8)  # 8x8 images: two 2x2 pools
  if tiny:
    c.batch_size, c.meta.num_queries = 4, 2
  return c, "digits 8x8 (no Omniglot folder)" if not tiny else "digits 8x8, tiny"


def _hyper_config(tiny):
  c = _config("digits_hyper")
  if tiny:
    c.batch_size = 16
  return c


def time_steps(config, steps, workdir):
  """Builds a Trainer for ``config``; returns (steps/s, set-up s, Trainer's choices)."""
  from hypernet.training import loop  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  trainer = loop.Trainer(config, workdir)
  iterator = trainer.train_iterator(0)
  _, bad = trainer.train_chunk(iterator, 1)  # Trace (and XLA compile) + one step.
  setup = time.perf_counter() - start
  start = time.perf_counter()
  _, bad2 = trainer.train_chunk(iterator, steps)
  elapsed = time.perf_counter() - start
  if bad != -1 or bad2 != -1:
    raise FloatingPointError(f"non-finite step while timing ({config.dtype_policy})")
  choices = dict(trainer.devices)
  trainer.close()
  del trainer, iterator
  gc.collect()
  return steps / elapsed, setup, choices


# --- Correctness: second order on the device against the CPU in float64 ----------------

# Unit roundoff of the arithmetic each mode runs in.
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float64": 2.0 ** -53, "tf32": 2.0 ** -11}
# float32: on the CPU (TF 2.21, 2 cores) the float32 graph differed from float64 by
# 0.3e-6 to 1.6e-6 on conv / BatchNorm / max-pool / LayerNorm targets like these; 1e-4 is
# about 60 times the largest. float64: the same, scaled by the unit roundoffs. TF32 (10
# mantissa bits: unit roundoff 8192 times float32's) is reported, not judged (None).
TOLERANCE = {"float32": 1e-4,
             "float64": 1e-4 * UNIT_ROUNDOFF["float64"] / UNIT_ROUNDOFF["float32"],
             "tf32": None}
README_CPU_ACCURACY = 0.9833  # configs/digits_hyper.py, seed 0, CPU (RESULTS_benchmarks.md)
README_CPU_SEEDS = "seeds 0-2 on CPU: 98.33 / 99.16 / 98.61"


def _second_order_targets(dtype):
  """``{case: (model, derivative_fn)}`` in ``dtype``; ``derivative_fn(weights, *inputs,
  xla)`` returns ``{path: derivative}`` for every trainable weight."""
  import keras  # pylint: disable=g-import-not-at-top
  import hypernet as hn  # pylint: disable=g-import-not-at-top
  from hypernet.meta import inner_loop, losses, make_conv4  # pylint: disable=g-import-not-at-top
  from hypernet.numerics import accel  # pylint: disable=g-import-not-at-top
  L = keras.layers
  cases = {}

  # Two conv4 blocks (configs/omniglot_maml.py's target, narrower): MAML's second-order
  # meta-gradient through one inner step, BatchNorm on batch statistics. (Under XLA on
  # the CPU this differed from float64 by 2.7e-2; without the max-pools, or with average
  # pooling, or with one block, by 1e-6 at most.)
  block = make_conv4(3, (8, 8, 1), filters=4, num_blocks=2, dtype=dtype)
  learner = inner_loop.MAML(block, losses.sparse_softmax_cross_entropy, inner_lr=0.4)
  xent = losses.sparse_softmax_cross_entropy

  def meta_gradient(weights, sx, sy, qx, qy, xla):
    # As the Trainer: no fused CPU block kernel under XLA (it does not compile).
    with (accel.disabled("fused_blocks") if xla else contextlib.nullcontext()), \
        tf.GradientTape() as tape:
      tape.watch(weights)
      fast, _ = learner.adapt(sx, sy, weights)
      loss = xent(qy, hn.functional_call(block, fast, qx, training=True))
    return tape.gradient(loss, weights, unconnected_gradients="zero")

  cases["MAML meta-gradient, conv-BN-ReLU-max-pool"] = (block, meta_gradient)

  # conv + LayerNormalization: a Hessian-vector product through nested tapes.
  inputs = keras.Input((5, 5, 2), dtype=dtype)
  h = L.Activation("tanh", dtype=dtype)(L.Conv2D(3, 3, padding="same", name="conv",
                                                 dtype=dtype)(inputs))
  h = L.Activation("tanh", dtype=dtype)(L.LayerNormalization(name="ln", dtype=dtype)(h))
  ln = keras.Model(inputs, L.Dense(1, name="out", dtype=dtype)(L.Flatten(dtype=dtype)(h)))

  def hessian_vector(weights, x, c, v, xla):
    del xla
    with tf.GradientTape() as outer:
      outer.watch(weights)
      with tf.GradientTape() as inner:
        inner.watch(weights)
        loss = tf.reduce_sum(c * hn.functional_call(ln, weights, x))
      g = inner.gradient(loss, weights)
      gv = tf.add_n([tf.reduce_sum(g[p] * v[p]) for p in sorted(weights)])
    return outer.gradient(gv, weights, unconnected_gradients="zero")  # out/bias: none

  cases["Hessian-vector product, conv-LayerNorm"] = (ln, hessian_vector)
  return cases


def _case_inputs(name, model, rng):
  """The case's weights and inputs as float64 NumPy arrays (one draw for every mode)."""
  import hypernet as hn  # pylint: disable=g-import-not-at-top
  weights = {p: v.numpy().astype("float64")
             for p, v in hn.variable_paths(model, trainable=True).items()}
  if name.startswith("MAML"):
    labels = [0, 1, 2, 0, 1, 2]
    return weights, [rng.normal(size=(6, 8, 8, 1)), labels,
                     rng.normal(size=(6, 8, 8, 1)), labels[::-1]]
  v = {p: rng.normal(size=w.shape) for p, w in weights.items()}
  return weights, [rng.normal(size=(3, 5, 5, 2)), rng.normal(size=(3, 1)), v]


def _compute(fn, weights, args, device, dtype, xla, tf32):
  """``fn``'s derivatives, flattened in path order, as float64 NumPy."""
  tf32_before = tf.config.experimental.tensor_float_32_execution_enabled()
  tf.config.experimental.enable_tensor_float_32_execution(tf32)
  try:
    def cast(a):
      if isinstance(a, list):  # class labels
        return tf.constant(a, tf.int32)
      if isinstance(a, dict):
        return {k: tf.constant(x, dtype) for k, x in a.items()}
      return tf.constant(a, dtype)

    def traced(w, *a):
      with tf.device(device):  # inside the trace: every op of the step is placed there
        return fn(w, *a, xla=xla)

    with tf.device(device):
      out = tf.function(traced, jit_compile=xla)(cast(weights), *[cast(a) for a in args])
    return _np.concatenate([_np.asarray(out[p], "float64").ravel() for p in sorted(out)])
  finally:
    tf.config.experimental.enable_tensor_float_32_execution(tf32_before)


def second_order_check(gpus, reference_error=0.0, full=False, cases=None):
  """Runs the second-order check; returns its rows (dicts, also printed).

  Args:
    gpus: the visible GPUs' names (``[]``: the CPU modes only).
    reference_error: multiplies the float64 reference by ``1 + reference_error``, so a
      test can see a wrong reference reported as FAIL (0 in a real run).
    full: without a GPU, also the MAML case under XLA (its XLA compile took 8.5 s on 2
      CPU cores; the conv-LayerNorm case covers the XLA path in 2 s). Always with a GPU.
    cases: the names of the cases to run (default: all).
  """
  import keras  # pylint: disable=g-import-not-at-top
  modes = [("CPU float32 (calibration)", "/CPU:0", "float32", False, False),
           ("CPU float32, XLA", "/CPU:0", "float32", True, False)]
  if gpus:
    modes += [("GPU float32", gpus[0], "float32", False, False),
              ("GPU float32, XLA", gpus[0], "float32", True, False),
              ("GPU float64", gpus[0], "float64", False, False),
              ("GPU float32, TF32", gpus[0], "tf32", False, True),
              ("GPU float32, TF32, XLA", gpus[0], "tf32", True, True)]
  keras.utils.set_random_seed(0)  # the weights: one draw, then cast for every dtype
  logger, level = tf.get_logger(), tf.get_logger().level
  logger.setLevel("ERROR")  # each mode traces its own tf.function: retracing warnings
  try:
    reference_targets = _second_order_targets("float64")
    targets = _second_order_targets("float32")
    rows = []
    for case, (model, fn64) in reference_targets.items():
      if cases is None or case in cases:
        rows += _check_case(case, model, fn64, targets[case][1], modes, reference_error,
                            skip_cpu_xla=case.startswith("MAML") and not (gpus or full))
  finally:
    logger.setLevel(level)
  return rows


def _check_case(case, model, fn64, fn32, modes, reference_error, skip_cpu_xla):
  """One case's rows: each mode against the CPU float64 reference."""
  weights, args = _case_inputs(case, model, _np.random.default_rng(0))
  ref = _compute(fn64, weights, args, "/CPU:0", "float64", False, False)
  ref = ref * (1.0 + reference_error)
  scale = float(_np.max(_np.abs(ref)))
  rows = []
  for label, device, arithmetic, xla, tf32 in modes:
    if xla and device == "/CPU:0" and skip_cpu_xla:
      rows.append(_check_row(case, label, None, None,
                             "skipped (CPU: XLA compile ~8 s; --full_check runs it)"))
      continue
    dtype = "float64" if arithmetic == "float64" else "float32"
    start = time.perf_counter()
    try:
      got = _compute(fn64 if dtype == "float64" else fn32, weights, args, device, dtype,
                     xla, tf32)
    except Exception as e:  # pylint: disable=broad-except
      text = (str(e).strip().splitlines() or [""])[0][:160]
      rows.append(_check_row(case, label, None, None, f"ERROR {type(e).__name__}: {text}"))
      continue
    error = float(_np.max(_np.abs(got - ref))) / scale
    tol = TOLERANCE[arithmetic]
    verdict = "info" if tol is None else ("PASS" if error <= tol else "FAIL")
    rows.append(_check_row(case, label, error, tol, verdict, time.perf_counter() - start))
  return rows


def _check_row(case, mode, error, tol, verdict, seconds=None):
  entry = {"check": case, "mode": mode,
           "rel_error": None if error is None else float(f"{error:.3g}"),
           "tolerance": tol, "result": verdict,
           "seconds": None if seconds is None else round(seconds, 1)}
  print(f"  {case} | {mode} | "
        + ("" if error is None else f"rel. error {error:.2e} | ")
        + ("" if tol is None else f"tol {tol:.0e} | ") + verdict, flush=True)
  return entry


def canaries():
  """``compat.canary_report()`` (after functional calls ran), printed in one line."""
  from hypernet.numerics import compat  # pylint: disable=g-import-not-at-top
  report = compat.canary_report()
  passed = sorted(k for k, v in report.items() if v is None)
  failed = {k: v for k, v in sorted(report.items()) if v is not None}
  print(f"  canaries: {len(passed)} passed ({', '.join(passed) or 'none'})"
        + "".join(f"; FAILED {k}: {v}" for k, v in failed.items()), flush=True)
  return report


def readme_accuracy_check(accuracy, full, deterministic):
  """The README job's accuracy against the CPU's (README_CPU_ACCURACY): a row (dict, also
  printed)."""
  if not full:
    verdict, note = "not compared", "tiny run (CPU): the full job runs on a GPU"
  else:
    diff = 100 * (accuracy - README_CPU_ACCURACY)
    verdict = "PASS" if abs(diff) <= 1.0 else "FLAG"
    note = (f"{100 * accuracy:.2f} % vs CPU {100 * README_CPU_ACCURACY:.2f} % ({diff:+.2f} points; "
            f"{README_CPU_SEEDS}; "
            + ("deterministic ops" if deterministic else
               "cuDNN kernels not deterministic: rerun with --deterministic") + ")")
  entry = {"check": "README job accuracy", "mode": note, "rel_error": None,
           "tolerance": "1 point", "result": verdict, "seconds": None}
  print(f"  README job accuracy | {note} | {verdict}", flush=True)
  return entry


def run(args):
  """Runs the correctness check, then every row; returns ``{"correctness": [...],
  "canaries": {...}, "rows": [...]}`` (also printed as tables)."""
  from hypernet.training import loop  # pylint: disable=g-import-not-at-top
  gpus = [] if args.cpu_only else _gpus()
  on_gpu = bool(gpus)
  tiny = not on_gpu
  steps = args.steps if on_gpu else 2
  gpu_row = ("--cpu_only" if args.cpu_only else "no GPU visible") + ": GPU row"
  deadline = time.perf_counter() + args.budget_s
  rows = []
  tmp = tempfile.mkdtemp(prefix="gpu_check_")

  # 0. Correctness first (seconds): second order on the device, the canaries.
  print("correctness (second order against the CPU in float64):", flush=True)
  checks = second_order_check(gpus, args.reference_error, args.full_check)
  report = canaries()

  print("rows:", flush=True)

  def row(name, xla="", dtype="", devices="", result="", setup="", peak=None, note=""):
    entry = {"row": name, "xla": xla, "dtype": dtype, "devices": devices,
             "result": result, "setup": setup,
             "peak_gpu_mb": None if peak is None else round(peak, 1), "note": note}
    rows.append(entry)
    print("  " + " | ".join(str(v) for v in entry.values() if v not in ("", None)),
          flush=True)
    return entry

  def budget_left(name, need_s, **kw):
    if time.perf_counter() + need_s > deadline:
      row(name, result="skipped", note=f"time budget (--budget_s={args.budget_s})", **kw)
      return False
    return True

  def rate_row(name, config, note, kw, label):
    _reset_memory(gpus)
    rate, setup, choices = time_steps(config, steps, os.path.join(tmp, label))
    kw["xla"] = "on" if choices["jit"] else "off"  # what the Trainer chose
    row(name, result=f"{rate:.2f} steps/s", setup=f"set-up {setup:.1f} s",
        peak=_peak_mb(gpus), note=note, **kw)

  device_text = f"{len(gpus)} GPU" if on_gpu else "CPU"

  # 1. The README job.
  c = _config("digits_hyper")
  if tiny:
    c.num_steps = args.cpu_steps
    c.log_every = c.eval_every = c.checkpoint_every = args.cpu_steps
  c.distribution = "one_device"
  _reset_memory(gpus)
  start = time.perf_counter()
  result = loop.train_and_evaluate(c, os.path.join(tmp, "readme_job"))
  wall = time.perf_counter() - start
  jit = loop.device_choices(c, "gpu" if on_gpu else "cpu")["jit"]
  row("README job (digits_hyper)", "on" if jit else "off", c.dtype_policy, device_text,
      f"accuracy {result['accuracy']:.4f}", f"wall {wall:.1f} s", _peak_mb(gpus),
      f"{c.num_steps} steps" + (" (tiny: CPU)" if tiny else "")
      + (", deterministic ops" if args.deterministic else ""))
  full = c.num_steps == _config("digits_hyper").num_steps and c.seed == 0
  checks.append(readme_accuracy_check(result["accuracy"], full and on_gpu,
                                      args.deterministic))

  # 2./3. Step rates: dtype policy x step x XLA off/on (float32 first: the budget cuts
  # the mixed-precision rows first). XLA is set per row, over the configs' own setting
  # (omniglot_maml.py says "false" for a CPU reason).
  maml, maml_note = _maml_config(args.omniglot_dir, tiny)
  steps_rows = (("hypernetwork step", _hyper_config(tiny), "digits_hyper", 20, "true"),
                ("MAML meta-step", maml, maml_note, 60, "false"))
  for policy in POLICIES:
    for name, base, note, need, cpu_xla in steps_rows:
      for xla in ("false", "true"):
        kw = {"xla": "on" if xla == "true" else "off", "dtype": policy, "devices": device_text}
        if not on_gpu and policy != "float32":
          row(name, result="skipped", note=gpu_row, **kw)
          continue
        if not on_gpu and xla != cpu_xla:
          # Tiny CPU run: one XLA setting per step; XLA on CPU is covered above too.
          row(name, result="skipped", note=CPU_ONE_XLA, **kw)
          continue
        if not budget_left(name, need, **kw):
          continue
        c = base.copy_and_resolve_references()
        c.jit_compile, c.dtype_policy, c.distribution = xla, policy, "one_device"
        rate_row(name, c, note, kw, f"{name}_{xla}_{policy}")

  # 4. MirroredStrategy over every GPU vs one, at the same global batch / meta-batch, at
  # each config's own XLA setting. On one GPU both would time the same thing.
  for name, base, note, need in (("hypernetwork step", _hyper_config(tiny),
                                  "digits_hyper", 20),
                                 ("MAML meta-step", maml, maml_note, 60)):
    for kind in ("one_device", "mirrored"):
      kw = {"xla": "config", "dtype": "float32",
            "devices": ("1 GPU" if kind == "one_device" else f"{len(gpus)} GPU")
            if on_gpu else ""}
      label = f"{name}, {kind}"
      if not on_gpu:
        row(label, result="skipped", note=gpu_row, **kw)
        continue
      if len(gpus) < 2:
        row(label, result="skipped", note=ONE_GPU, **kw)
        continue
      if not budget_left(label, need, **kw):
        continue
      c = base.copy_and_resolve_references()
      c.distribution = kind
      rate_row(label, c, f"{note}, global batch {c.batch_size}", kw, f"{kind}_{name}")
  if not on_gpu:
    row("peak GPU memory", result="skipped", note=gpu_row)
  shutil.rmtree(tmp, ignore_errors=True)  # the rows' workdirs: checkpoints, summaries
  return {"correctness": checks, "canaries": report, "rows": rows}


CPU_ONE_XLA = "CPU (tiny): one XLA setting per step"
ONE_GPU = ("1 GPU: MirroredStrategy needs 2 or more (the one-GPU rate is the float32 "
           "row above)")


def check_table(checks) -> str:
  lines = ["| check | mode | rel. error | tolerance | result |", "|---|---|---|---|---|"]
  for r in checks:
    error = "" if r["rel_error"] is None else f"{r['rel_error']:.2e}"
    tol = "" if r["tolerance"] is None else (
        r["tolerance"] if isinstance(r["tolerance"], str) else f"{r['tolerance']:.0e}")
    lines.append(f"| {r['check']} | {r['mode']} | {error} | {tol} | {r['result']} |")
  return "\n".join(lines)


def table(rows) -> str:
  head = ["row", "XLA", "dtype", "devices", "result", "set-up / wall", "peak GPU MB", "note"]
  keys = ["row", "xla", "dtype", "devices", "result", "setup", "peak_gpu_mb", "note"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    lines.append("| " + " | ".join("" if r[k] is None else str(r[k]) for k in keys) + " |")
  return "\n".join(lines)


def gpu_names():
  """The visible GPUs' names as TensorFlow reports them (e.g. 'NVIDIA H200')."""
  names = []
  for g in tf.config.list_physical_devices("GPU"):
    try:
      names.append(tf.config.experimental.get_device_details(g).get("device_name", g.name))
    except Exception:  # pylint: disable=broad-except
      names.append(g.name)
  return names


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--cpu_only", action="store_true",
                      help="hide the GPUs (skip the GPU rows; the rest runs tiny)")
  parser.add_argument("--budget_s", type=float, default=270.0,
                      help="rows that would start past this many seconds are skipped")
  parser.add_argument("--steps", type=int, default=50, help="timed steps per rate (GPU)")
  parser.add_argument("--cpu_steps", type=int, default=20,
                      help="README job steps without a GPU")
  parser.add_argument("--deterministic", action="store_true",
                      help="tf.config.experimental.enable_op_determinism() first (cuDNN's "
                           "deterministic kernels; slower, and some ops then raise)")
  parser.add_argument("--omniglot_dir",
                      default=os.path.join(REPO, "..", "shared", "data", "omniglot"))
  parser.add_argument("--full_check", action="store_true",
                      help="without a GPU, also the MAML case of the second-order check "
                           "under XLA (its compile takes ~8 s on 2 CPU cores)")
  parser.add_argument("--json", default="", help="also write the results to this file")
  parser.add_argument("--reference_error", type=float, default=0.0,
                      help=argparse.SUPPRESS)  # tests: a wrong reference must FAIL
  args = parser.parse_args(argv)
  if args.cpu_only:
    # Before TensorFlow initialises its devices: the GPU rows are then really off.
    tf.config.set_visible_devices([], "GPU")
  if args.deterministic:
    tf.config.experimental.enable_op_determinism()
  names = [] if args.cpu_only else gpu_names()
  print(f"gpu_check: TensorFlow {tf.__version__}, Keras {__import__('keras').__version__}, "
        f"GPUs {names or 'none'}", flush=True)
  start = time.perf_counter()
  results = run(args)
  total = time.perf_counter() - start
  print(f"\n{check_table(results['correctness'])}\n\n{table(results['rows'])}\n\n"
        f"total {total:.0f} s")
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump({"tensorflow": tf.__version__, "keras": __import__("keras").__version__,
                 "gpus": names, "deterministic": args.deterministic,
                 "total_s": round(total, 1), **results}, f, indent=1)


if __name__ == "__main__":
  main()
