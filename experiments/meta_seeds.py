"""Few-shot results over seeds from the committed configs: table and learning curves.

Runs (or, with ``--no-run``, only reads) ``configs/<name>.py`` for each seed with
``python -m hypernet.train --config.seed=SEED``, each in ``ROOT/<name>_s<seed>`` (a
finished run, one with ``final_metrics.json``, is read, not re-run), and writes:

* the table printed (copied into ``experiments/RESULTS_meta.md``): per config and seed,
  the held-out N-way accuracy with its 95% interval over the meta-test episodes and,
  where the config scores Lake et al.'s 20 one-shot runs, their error with its binomial
  95% interval ``1.96 sqrt(p (1 - p) / 400)``; then the mean +- sd over seeds;
* ``OUT/<name>_seeds.png``: held-out accuracy (and the runs' error) against step, one
  line per seed, from the runs' TensorBoard events.

    python experiments/meta_seeds.py --data_dir=../shared/data/omniglot \\
        --root=/tmp/hypernet/meta_seeds --seeds=0,1,2 \\
        --configs=omniglot_support_hypernet,omniglot_20way_support_hypernet

``--set`` passes further flags to every run (e.g. ``--set=--config.num_steps=20``); it
needs ``--out=DIR``, since the default folder holds the committed tables.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Dict, Sequence

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # Run as a file (python experiments/meta_seeds.py).
  sys.path.insert(0, REPO)
from experiments import seed_runs  # pylint: disable=g-import-not-at-top
RUN_QUERIES = 400  # Lake et al.'s 20 runs x 20 queries


def run(name: str, seed: int, root: str, data_dir: str, extra: Sequence[str] = (),
        execute: bool = True) -> Dict:
  """``final_metrics.json`` of ``ROOT/<name>_s<seed>`` (with its ``workdir``), training
  it first if it has none and ``execute`` (``seed_runs.train_or_read``).

  Raises:
    FileNotFoundError: no final metrics and ``execute`` is False (names the workdir).
    subprocess.CalledProcessError: the run failed.
  """
  workdir = os.path.join(root, f"{name}_s{seed}")
  metrics = seed_runs.train_or_read(name, workdir, seed, data_dir, extra, execute)
  metrics["workdir"] = workdir
  return metrics


def _runs_ci(error: float) -> float:
  return 1.96 * math.sqrt(error * (1 - error) / RUN_QUERIES)


def _mean_sd(values: Sequence[float]) -> str:
  values = 100 * np.asarray(values, np.float64)
  sd = values.std(ddof=1) if len(values) > 1 else float("nan")
  return f"**{values.mean():.2f} +- {sd:.2f}**"


def table(results: Dict[str, Dict[int, Dict]]) -> str:
  """Markdown: one row per (config, seed), then the mean +- sd (sample sd) row."""
  lines = ["| config | seed | held-out accuracy (+- CI95) | one-shot runs error (+- CI95) "
           "| wall time |", "|---|---|---|---|---|"]
  for name, seeds in results.items():
    for seed, m in sorted(seeds.items()):
      err = m.get("one_shot_error")
      runs = "" if err is None else (f"{100 * err:.2f}% +- {100 * _runs_ci(err):.2f} "
                                     f"({round(err * RUN_QUERIES)} of {RUN_QUERIES})")
      lines.append(f"| `{name}` | {seed} | {100 * m['accuracy']:.2f}% +- "
                   f"{100 * m['accuracy_ci95']:.2f} | {runs} | "
                   f"{m['wall_time_sec'] / 60:.1f} min |")
    ms = list(seeds.values())
    errs = [m["one_shot_error"] for m in ms if "one_shot_error" in m]
    lines.append(f"| `{name}` | mean +- sd ({len(ms)}) | "
                 f"{_mean_sd([m['accuracy'] for m in ms])} | "
                 f"{_mean_sd(errs) if errs else ''} | |")
  return "\n".join(lines)


def curves(name: str, seeds: Dict[int, Dict], path: str) -> None:
  """Held-out accuracy (left) and, where logged, the one-shot runs' error (right)
  against step, one line per seed, from ``<workdir>/eval`` events."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  from hypernet.training import summaries  # pylint: disable=g-import-not-at-top
  with_runs = any("one_shot_error" in m for m in seeds.values())
  fig, axes = plt.subplots(1, 2 if with_runs else 1, figsize=(10 if with_runs else 5.5, 4),
                           dpi=110, squeeze=False)
  left, right = axes[0][0], axes[0][-1]
  for seed, m in sorted(seeds.items()):
    evals = summaries.read_scalars(os.path.join(m["workdir"], "eval"))
    steps, acc = zip(*[(s, v) for s, v in evals["accuracy"] if s > 0])
    left.plot(steps, [100 * v for v in acc], marker="o", markersize=3, label=f"seed {seed}")
    if "one_shot_error" in evals:
      steps, err = zip(*[(s, v) for s, v in evals["one_shot_error"] if s > 0])
      right.plot(steps, [100 * v for v in err], marker="o", markersize=3,
                 label=f"seed {seed}")
  with open(os.path.join(next(iter(seeds.values()))["workdir"], "config.json")) as f:
    meta = json.load(f)["meta"]
  left.set(xlabel="step", ylabel="held-out accuracy (%)",
           title=f"held-out {meta['num_ways']}-way {meta['num_shots']}-shot")
  if with_runs:
    right.set(xlabel="step", ylabel="error (%)", title="Lake et al.'s 20 one-shot runs")
  for ax in axes[0]:
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
  fig.suptitle(name)
  fig.tight_layout()
  fig.savefig(path, bbox_inches="tight")
  plt.close(fig)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--configs", default="omniglot_support_hypernet,"
                      "omniglot_20way_support_hypernet")
  parser.add_argument("--seeds", default="0,1,2")
  parser.add_argument("--root", default="/tmp/hypernet/meta_seeds")
  parser.add_argument("--data_dir", default=os.path.join(REPO, "..", "shared", "data",
                                                         "omniglot"))
  parser.add_argument("--out", default=os.path.join(REPO, "experiments", "meta_curves"))
  parser.add_argument("--set", action="append", default=[],
                      help="a further flag for every run, e.g. --set=--config.num_steps=20")
  parser.add_argument("--no-run", dest="execute", action="store_false",
                      help="only read finished runs")
  args = parser.parse_args(argv)
  seed_runs.check_out(parser, args)
  seeds = [int(s) for s in args.seeds.split(",")]
  data_dir = os.path.abspath(os.path.expanduser(args.data_dir))
  results = {name: {seed: run(name, seed, args.root, data_dir, args.set, args.execute)
                    for seed in seeds}
             for name in args.configs.split(",")}
  print(table(results))
  os.makedirs(args.out, exist_ok=True)
  for name, by_seed in results.items():
    path = os.path.join(args.out, f"{name}_seeds.png")
    curves(name, by_seed, path)
    print(f"wrote {path}")


if __name__ == "__main__":
  main()
