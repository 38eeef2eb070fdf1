"""Accuracy against trainable parameters: chunked hypernetworks vs plain CNNs on digits.

Trains a set of configs on the embedded 8x8 digits (no download) with the one train
loop, then writes, under ``--out``:

* ``results.md`` -- a markdown table (trainable and target parameters, compression,
  test accuracy and loss, wall time, and the exact ``python -m hypernet.train`` command
  of each run);
* ``results.json`` -- the same numbers;
* ``accuracy_vs_params.png`` -- test accuracy against trainable parameters, plain CNNs
  of four widths vs chunked hypernetworks of four sizes generating every weight of the
  32-64 CNN;
* ``learning_curves.png`` -- evaluation accuracy and training loss against step;
* ``runs/<name>_seed<k>/`` -- each run's workdir (TensorBoard: ``--logdir=OUT/runs``
  compares them, HParams tab included). A rerun resumes or skips finished runs.

    python -m experiments.digits_sweep --out=/tmp/hypernet/digits_sweep
    python -m experiments.digits_sweep --out=/tmp/hypernet/digits_sweep3 --seeds=0,1,2
    python -m experiments.digits_sweep --out=/tmp/smoke --preset=smoke   # 2 short runs

Needs matplotlib (``pip install -e ".[plots]"``).
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Dict, List, Mapping, Sequence

from absl import app
from absl import flags
from absl import logging
import numpy as np

from hypernet import config_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# (name, config file, overrides). Plain CNNs of growing width; chunked hypernetworks of
# growing size, all generating every weight of the 32-64 CNN of configs/digits_hyper.py, in
# the 3,000-step ReLU form of configs/digits_hyper_relu.py (the base of digits_plain.py).
PRESETS = {
    "full": [
        ("plain_4-8", "digits_plain", {"model.conv_widths": (4, 8),
                                       "model.dense_widths": (16,)}),
        ("plain_8-16", "digits_plain", {"model.conv_widths": (8, 16),
                                        "model.dense_widths": (32,)}),
        ("plain_16-32", "digits_plain", {"model.conv_widths": (16, 32),
                                         "model.dense_widths": (64,)}),
        ("plain_32-64", "digits_plain", {}),
        ("hyper_c128", "digits_hyper_relu", {"hypernet.chunk_size": 128,
                                        "hypernet.chunk_emb_dim": 8, "hypernet.hidden": (16,)}),
        ("hyper_c256", "digits_hyper_relu", {"hypernet.chunk_size": 256,
                                        "hypernet.chunk_emb_dim": 16, "hypernet.hidden": (32,)}),
        ("hyper_c512", "digits_hyper_relu", {"hypernet.chunk_size": 512,
                                        "hypernet.chunk_emb_dim": 16, "hypernet.hidden": (32,)}),
        ("hyper_c1024", "digits_hyper_relu", {}),
    ],
    "smoke": [
        ("plain_8-16", "digits_plain", {"model.conv_widths": (8, 16),
                                        "model.dense_widths": (32,)}),
        ("hyper_c128", "digits_hyper_relu", {"hypernet.chunk_size": 128,
                                        "hypernet.chunk_emb_dim": 8, "hypernet.hidden": (16,)}),
    ],
}
DEFAULT_STEPS = {"full": 3000, "smoke": 60}


def load_config(name: str):
  """``configs/<name>.py:get_config()``."""
  return config_lib.load_config_file(os.path.join(REPO, "configs", f"{name}.py"))


def run_overrides(overrides: Mapping, steps: int, seed: int) -> Dict:
  """Every override a sweep run applies, as ``{dotted field: value}``."""
  every = max(steps // 10, 1)
  return dict(overrides, num_steps=steps, seed=seed, eval_every=every, log_every=every,
              checkpoint_every=max(steps // 2, 1), **{"summaries.every": max(steps // 5, 1)})


def _apply(config, overrides: Mapping):
  config.update_from_flattened_dict(dict(overrides))
  return config


def command(config_name: str, workdir: str, overrides: Mapping) -> str:
  """The equivalent ``python -m hypernet.train`` command line of one run."""
  parts = ["python -m hypernet.train", f"--config=configs/{config_name}.py",
           f"--workdir={workdir}"]
  for key, value in overrides.items():
    text = f"'{tuple(value)}'" if isinstance(value, (tuple, list)) else str(value)
    parts.append(f"--config.{key}={text}")
  return " ".join(parts)


def run_sweep(out: str, preset: str = "full", steps: int = None,
              seeds: Sequence[int] = (0,)) -> List[Dict]:
  """Trains (or resumes, or reuses) every run of ``preset``; returns one row per config.

  Returns:
    Rows with ``name``, ``kind``, ``trainable``, ``target`` (parameters), ``compression``,
    ``accuracy``/``accuracy_std``/``loss`` (test set, mean and std over seeds),
    ``wall_time_sec`` (mean), ``command`` (seed 0), ``workdirs`` and ``curves``.
  """
  from hypernet.training import summaries, loop  # pylint: disable=g-import-not-at-top
  steps = steps or DEFAULT_STEPS[preset]
  rows = []
  for name, config_name, overrides in PRESETS[preset]:
    results, workdirs = [], []
    for seed in seeds:
      workdir = os.path.join(out, "runs", f"{name}_seed{seed}")
      ov = run_overrides(overrides, steps, seed)
      config = _apply(load_config(config_name), ov)
      t = time.time()
      final = os.path.join(workdir, "final_metrics.json")
      if os.path.exists(final) and json.load(open(final)).get("step") == steps:
        result = json.load(open(final))  # Finished before: reuse.
      else:
        result = loop.train_and_evaluate(config, workdir)
      print(f"{name} seed {seed}: test accuracy {100 * result['accuracy']:.2f}%  "
            f"trainable {result['params/trainable']:,}  ({time.time() - t:.0f} s)", flush=True)
      results.append(result)
      workdirs.append(workdir)
    accuracy = np.array([r["accuracy"] for r in results])
    curves = {"eval_accuracy": summaries.read_scalars(os.path.join(workdirs[0], "eval")).get(
                  "accuracy", []),
              "train_loss": summaries.read_scalars(os.path.join(workdirs[0], "train")).get(
                  "loss", [])}
    rows.append(dict(
        name=name, kind="plain" if config.hypernet.kind == "none" else "hypernetwork",
        trainable=int(results[0]["params/trainable"]), target=int(results[0]["params/target"]),
        compression=results[0]["params/target"] / results[0]["params/trainable"],
        accuracy=float(accuracy.mean()), accuracy_std=float(accuracy.std()),
        loss=float(np.mean([r["loss"] for r in results])),
        wall_time_sec=float(np.mean([r["wall_time_sec"] for r in results])),
        command=command(config_name, workdirs[0], run_overrides(overrides, steps, seeds[0])),
        workdirs=workdirs, curves=curves, steps=steps, seeds=list(seeds)))
  return rows


def markdown_table(rows: Sequence[Mapping]) -> str:
  """The results as a markdown table (accuracy in %, mean +- std over seeds)."""
  seeds = len(rows[0]["seeds"]) if rows else 1
  lines = [f"Digits (8x8, 1,438 train / 359 test images), {rows[0]['steps']} steps, "
           f"{seeds} seed(s); compression = target parameters / trainable parameters.", "",
           "| run | weight source | trainable params | target params | compression | "
           "test accuracy (%) | test loss | wall time (s) |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
  for r in rows:
    acc = f"{100 * r['accuracy']:.2f}" + (f" ± {100 * r['accuracy_std']:.2f}" if seeds > 1
                                          else "")
    lines.append(f"| {r['name']} | {r['kind']} | {r['trainable']:,} | {r['target']:,} | "
                 f"{r['compression']:.2f} | {acc} | {r['loss']:.3f} | "
                 f"{r['wall_time_sec']:.0f} |")
  lines += ["", "Commands (seed 0):", "", "```bash"] + [r["command"] for r in rows] + ["```"]
  return "\n".join(lines) + "\n"


def write_outputs(rows: Sequence[Mapping], out: str) -> Dict[str, str]:
  """Writes results.md, results.json and the two PNG plots; returns their paths.

  The table and the JSON are written first, so they are there even if plotting fails.
  """
  paths = {k: os.path.join(out, f) for k, f in (
      ("table", "results.md"), ("json", "results.json"),
      ("accuracy_vs_params", "accuracy_vs_params.png"),
      ("learning_curves", "learning_curves.png"))}
  with open(paths["table"], "w") as f:
    f.write(markdown_table(rows))
  with open(paths["json"], "w") as f:
    json.dump(list(rows), f, indent=2)
  from experiments import plots  # pylint: disable=g-import-not-at-top
  title = f"digits, {rows[0]['steps']} steps"
  plots.accuracy_vs_params(rows, paths["accuracy_vs_params"], f"Accuracy vs parameters ({title})")
  plots.learning_curves({r["name"]: r["curves"] for r in rows},
                        {r["name"]: r["kind"] for r in rows}, paths["learning_curves"],
                        f"Learning curves, seed {rows[0]['seeds'][0]} ({title})")
  return paths


def matplotlib_missing() -> bool:
  """Whether matplotlib (needed by the plots) cannot be imported."""
  try:
    import matplotlib  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return True
  return False


def _define_flags():
  """Command-line flags, defined only when run as a script: importing this module (the
  compression frontier imports :func:`command`, tests import it) must not define flags
  whose names other scripts also use."""
  flags.DEFINE_string("out", None, "Output folder (table, plots, run workdirs).",
                      required=True)
  flags.DEFINE_enum("preset", "full", ["full", "smoke"], "full: 8 configs; smoke: "
                    "2 configs (tests).")
  flags.DEFINE_integer("steps", None, "Training steps per run (default: 3000 for "
                       "full, 60 for smoke).")
  flags.DEFINE_list("seeds", ["0"], "Seeds; the table reports mean and std.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if matplotlib_missing():  # Before any training: the plots come last.
    sys.exit("digits_sweep: error: the plots need matplotlib, which is not installed: "
             "pip install -e \".[plots]\"")
  from hypernet.training import cli  # pylint: disable=g-import-not-at-top
  cli.quiet_startup(sys.argv)  # TensorFlow's start-up and info lines off.
  logging.set_verbosity(logging.WARNING)
  f = flags.FLAGS
  os.makedirs(f.out, exist_ok=True)
  rows = run_sweep(f.out, f.preset, f.steps, [int(s) for s in f.seeds])
  paths = write_outputs(rows, f.out)
  print(markdown_table(rows))
  print("\n".join(f"wrote {p}" for p in paths.values()))


if __name__ == "__main__":
  from hypernet.training import cli  # pylint: disable=g-import-not-at-top
  _define_flags()
  app.run(main, flags_parser=cli.parse_flags)
