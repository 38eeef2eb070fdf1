"""What hypernet does on a GPU machine, in one table, in at most ~8 minutes on one GPU.

Rows (each one a real :class:`hypernet.training.loop.Trainer` of a committed config):

* **README job**: ``configs/digits_hyper.py`` trained and evaluated in full
  (``loop.train_and_evaluate``): final test accuracy and wall time, with the Trainer's
  own device choices (``loop.device_choices``: XLA ``auto``).
* **hypernetwork step**: the same config's training step, steps/s, for XLA off / on and
  ``float32`` / ``mixed_bfloat16`` / ``mixed_float16`` (``LossScaleOptimizer``).
* **MAML meta-step**: ``configs/omniglot_maml.py`` (second order, conv4 + BatchNorm, 5-way
  1-shot, meta-batch 16) on the Omniglot subset zips of ``--omniglot_dir`` (the images
  are only timed; without the folder: 5-way 1-shot on 8x8 digits, said in the row),
  meta-steps/s for the same six settings.
* **MirroredStrategy**: the hypernetwork step over all visible GPUs
  (``config.distribution="mirrored"``) against one (``"one_device"``), same global batch.
* **peak GPU memory** of every row (``tf.config.experimental.get_memory_info``, reset
  before each row; the largest over the row's GPUs).

Each step rate times one compiled chunk of ``--steps`` steps after a warm-up chunk
(trace, XLA compile) and reports the warm-up time as set-up. Rows are run in the order
above and skipped, saying so, once ``--budget_s`` would be passed.

Without a GPU (or with ``--cpu_only``) the GPU rows (mixed precision, MirroredStrategy,
memory) are printed as skipped, with the reason, and the rest runs tiny: the README job
for ``--cpu_steps`` steps and the float32 step rows on 2 steps, so the script itself is
tested on CPU (``tests/test_gpu_check.py``). Nothing is faked: every number printed was
measured in this run.

    python benchmarks/gpu_check.py [--cpu_only] [--budget_s=480] [--steps=50]
        [--omniglot_dir=../shared/data/omniglot] [--json=PATH]

docs/gpu.md says how to read the table.
"""
import argparse
import gc
import json
import os
import sys
import tempfile
import time

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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


def run(args):
  """Runs every row; returns a list of row dicts (also printed as a table)."""
  from hypernet.training import loop  # pylint: disable=g-import-not-at-top
  gpus = [] if args.cpu_only else _gpus()
  on_gpu = bool(gpus)
  tiny = not on_gpu
  steps = args.steps if on_gpu else 2
  why_not = ("--cpu_only" if args.cpu_only else "no GPU visible") + ": GPU row"
  deadline = time.perf_counter() + args.budget_s
  rows = []
  tmp = tempfile.mkdtemp(prefix="gpu_check_")

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
      f"{c.num_steps} steps" + (" (tiny: CPU)" if tiny else ""))

  # 2./3. Step rates: XLA off/on x dtype policy.
  maml, maml_note = _maml_config(args.omniglot_dir, tiny)
  for name, base, note, need in (("hypernetwork step", _hyper_config(tiny), "digits_hyper", 20),
                                 ("MAML meta-step", maml, maml_note, 60)):
    for xla in ("false", "true"):
      for policy in POLICIES:
        kw = {"xla": "on" if xla == "true" else "off", "dtype": policy, "devices": device_text}
        if not on_gpu and policy != "float32":
          row(name, result="skipped", note=why_not, **kw)
          continue
        if not budget_left(name, need, **kw):
          continue
        c = base.copy_and_resolve_references()
        c.jit_compile, c.dtype_policy, c.distribution = xla, policy, "one_device"
        _reset_memory(gpus)
        rate, setup, _ = time_steps(c, steps, os.path.join(tmp, f"{name}_{xla}_{policy}"))
        row(name, result=f"{rate:.2f} steps/s", setup=f"set-up {setup:.1f} s",
            peak=_peak_mb(gpus), note=note, **kw)

  # 4. MirroredStrategy over every GPU vs one.
  for kind in ("one_device", "mirrored"):
    kw = {"xla": "auto", "dtype": "float32",
          "devices": ("1 GPU" if kind == "one_device" else f"{len(gpus)} GPU")
          if on_gpu else ""}
    name = f"hypernetwork step, {kind}"
    if not on_gpu:
      row(name, result="skipped", note=why_not, **kw)
      continue
    if not budget_left(name, 20, **kw):
      continue
    c = _hyper_config(tiny)
    c.distribution = kind
    _reset_memory(gpus)
    rate, setup, choices = time_steps(c, steps, os.path.join(tmp, f"mirrored_{kind}"))
    kw["xla"] = "on" if choices["jit"] else "off"
    row(name, result=f"{rate:.2f} steps/s", setup=f"set-up {setup:.1f} s",
        peak=_peak_mb(gpus), note=f"global batch {c.batch_size}", **kw)
  if not on_gpu:
    row("peak GPU memory", result="skipped", note=why_not)
  return rows


def table(rows) -> str:
  head = ["row", "XLA", "dtype", "devices", "result", "set-up / wall", "peak GPU MB", "note"]
  keys = ["row", "xla", "dtype", "devices", "result", "setup", "peak_gpu_mb", "note"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    lines.append("| " + " | ".join("" if r[k] is None else str(r[k]) for k in keys) + " |")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--cpu_only", action="store_true",
                      help="hide the GPUs (skip the GPU rows; the rest runs tiny)")
  parser.add_argument("--budget_s", type=float, default=480.0,
                      help="rows that would start past this many seconds are skipped")
  parser.add_argument("--steps", type=int, default=50, help="timed steps per rate (GPU)")
  parser.add_argument("--cpu_steps", type=int, default=20,
                      help="README job steps without a GPU")
  parser.add_argument("--omniglot_dir",
                      default=os.path.join(REPO, "..", "shared", "data", "omniglot"))
  parser.add_argument("--json", default="", help="also write the rows to this file")
  args = parser.parse_args(argv)
  if args.cpu_only:
    # Before TensorFlow initialises its devices: the GPU rows are then really off.
    tf.config.set_visible_devices([], "GPU")
  print(f"gpu_check: TensorFlow {tf.__version__}, Keras {__import__('keras').__version__}, "
        f"GPUs {_gpus() or 'none'}", flush=True)
  start = time.perf_counter()
  rows = run(args)
  print(f"\n{table(rows)}\n\ntotal {time.perf_counter() - start:.0f} s")
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(rows, f, indent=1)


if __name__ == "__main__":
  main()
