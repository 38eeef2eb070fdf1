"""Continual-learning results table and accuracy heat-maps from the committed configs.

Runs (or, with ``--no-run``, only reads) ``configs/{split,permuted}_<data>_{hnet,finetune,
ewc,independent}.py`` for the given seeds with ``python -m hypernet.train``, each in
``ROOT/<config>_s<seed>``, reads their ``final_metrics.json`` and writes (``<data>``:
``fmnist`` for ``--dataset=fashion_mnist``, the default; ``mnist`` for ``--dataset=mnist``,
von Oswald et al. 2020's own benchmarks):

* the table printed (copied into ``experiments/RESULTS_continual.md``): per benchmark and method, mean final accuracy,
  mean during-training accuracy and forgetting (CL1 and CL3; mean +- std over seeds),
  compression ratio, wall time;
* ``experiments/continual_matrices_<benchmark>.png``: the CL1 accuracy matrices (row:
  after task t, column: task k) of each method, first seed, one figure per benchmark run
  (``continual_matrices_mnist_<benchmark>.png`` for MNIST);
* ``experiments/continual_curves_<benchmark>.png``: the learning curves, mean accuracy
  over the tasks learned so far after each task (CL1 and CL3), mean +- std over seeds
  (``continual_curves_mnist_<benchmark>.png`` for MNIST).

Each seed's final accuracy is given with its binomial 95% confidence half-width
``1.96 sqrt(p (1 - p) / N)`` over the ``N`` test images of all tasks.

    python experiments/continual.py --data_dir=../shared/data/fashion-mnist \
        --root=/tmp/hypernet/continual --seeds=0,1,2
    python experiments/continual.py --dataset=mnist --data_dir=../shared/data/mnist \
        --root=/tmp/hypernet/continual_mnist --seeds=0,1,2

A small run of the whole pipeline (4 steps per task, 2 methods, in its own root):

    python experiments/continual.py --data_dir=../shared/data/fashion-mnist \
        --root=/tmp/hypernet/continual_small --steps_per_task=4 --methods=finetune,hnet \
        --benchmarks=split --out=/tmp/hypernet/continual_small
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # Run as a file (python experiments/continual.py).
  sys.path.insert(0, REPO)
from experiments import seed_runs  # pylint: disable=g-import-not-at-top
BENCHMARKS = ("split", "permuted")
METHODS = ("hnet", "finetune", "ewc", "independent", "lora_hnet", "lora_independent")
# Run by default: the four methods every benchmark and data set has a config for; the
# low-rank adapters (configs/split_mnist_lora_*.py) on request (--methods).
DEFAULT_METHODS = METHODS[:4]
LABELS = {"hnet": "HNET (ours, von Oswald et al.)", "finetune": "fine-tuning",
          "lora_hnet": "generated LoRA adapters",
          "lora_independent": "independent LoRA adapters",
          "ewc": "online EWC", "independent": "independent networks"}
# --dataset: (the configs' name part, the name in tables and plots, the plots' file prefix).
DATASETS = {"fashion_mnist": ("fmnist", "Fashion-MNIST", ""),
            "mnist": ("mnist", "MNIST", "mnist_")}
# Test images per class (Fashion-MNIST: 1,000 each; MNIST: the t10k label counts, as
# ../shared/data/mnist/README.md lists them).
TEST_PER_CLASS = {"fashion_mnist": (1000,) * 10,
                  "mnist": (980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009)}


def config_name(benchmark: str, dataset: str, method: str) -> str:
  """``configs/<name>.py`` of a benchmark, data set (a ``DATASETS`` key) and method, e.g.
  ``split_mnist_hnet``."""
  return f"{benchmark}_{DATASETS[dataset][0]}_{method}"


def unfinished(workdir: str):
  """Why the run in ``workdir`` has no final results to read (a line naming the workdir
  and the steps it is missing), or None when its ``final_metrics.json`` records the whole
  task sequence. A run stopped inside the sequence (``--config.num_steps`` below
  ``num_tasks * steps_per_task``, or killed) has no ``cl1/*`` / ``cl3/*`` results."""
  path = os.path.join(workdir, "final_metrics.json")
  metrics = {}
  if os.path.exists(path):
    with open(path) as f:
      metrics = json.load(f)
    if "cl1/final_accuracy" in metrics:
      return None
  total = None
  try:
    with open(os.path.join(workdir, "config.json")) as f:
      continual = json.load(f).get("continual", {})
    total = int(continual["num_tasks"]) * int(continual["steps_per_task"])
  except (OSError, ValueError, KeyError, TypeError):
    pass
  step = metrics.get("step")
  if step is None:  # Killed before the end: the latest checkpoint's step, if any.
    from hypernet.training import cli  # pylint: disable=g-import-not-at-top  (TensorFlow-free
    step = cli.latest_checkpoint_step(os.path.join(workdir, "checkpoints"))
  done = f"stopped at step {step if step is not None else '?'}"
  missing = (f"{total - step} of its {total} steps missing" if total is not None and
             step is not None else f"{total} steps in all" if total is not None else
             "the total is unknown: no config.json")
  return (f"skipping unfinished run {workdir}: {done}, {missing} (no "
          f"cl1/final_accuracy in final_metrics.json)")


def short_run_overrides(name: str, steps_per_task: int) -> list:
  """``--config.*`` flags that shorten ``configs/<name>.py`` to ``steps_per_task`` steps
  per task, the whole task sequence (``num_steps = num_tasks * steps_per_task``)."""
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  config = config_lib.load_config_file(os.path.join(REPO, "configs", f"{name}.py"))
  return [f"--config.continual.steps_per_task={steps_per_task}",
          f"--config.num_steps={config.continual.num_tasks * steps_per_task}"]


def test_images(workdir: str, dataset: str = "fashion_mnist") -> int:
  """The number of test images a run's final accuracy averages over: split task ``t``
  holds the test images of classes ``[t c, (t + 1) c)`` (``TEST_PER_CLASS``), a permuted
  task all 10,000; each at most ``eval_examples_per_task`` when that is set."""
  with open(os.path.join(workdir, "config.json")) as f:
    cc = json.load(f)["continual"]
  counts = TEST_PER_CLASS[dataset]
  c, limit = int(cc["classes_per_task"]), int(cc.get("eval_examples_per_task") or 0)
  if cc["benchmark"] == "split":
    per_task = [sum(counts[t * c:(t + 1) * c]) for t in range(int(cc["num_tasks"]))]
  else:
    per_task = [sum(counts)] * int(cc["num_tasks"])
  return sum(min(n, limit) if limit else n for n in per_task)


def _per_seed(runs, key):
  """``a ± ci / b ± ci ...``: each seed's value and binomial CI95 half-width, in %."""
  out = []
  for r in runs:
    p, n = r[key], r["_test_images"]
    out.append(f"{100 * p:.2f} ± {196 * np.sqrt(p * (1 - p) / n):.2f}")
  return " / ".join(out)


def _fmt(values, scale=100.0):
  values = [scale * v for v in values]
  if len(values) == 1:
    return f"{values[0]:.2f}"
  return f"{np.mean(values):.2f} ± {np.std(values):.2f}"


def _count(value) -> str:
  """A parameter count with thousands separators, "–" where the run has none."""
  return f"{int(value):,}" if value else "–"


def table(results: dict, seeds, dataset: str = "fashion_mnist") -> str:
  lines = []
  for bench in BENCHMARKS:
    rows = [(m, results.get((bench, m))) for m in METHODS if results.get((bench, m))]
    if not rows:
      continue
    counts = sorted({len(r) for _, r in rows})
    lines += [f"### {bench} {DATASETS[dataset][1]} (seeds per method: "
              f"{'/'.join(map(str, counts))})",
              "",
              "| method | CL1 final | CL1 during | CL1 forgetting | CL3 final | CL3 forgetting "
              "| trained parameters | compression | wall time (s) |",
              "|---|---|---|---|---|---|---|---|---|"]
    seeds_lines = ["", "Each seed, final accuracy with its binomial CI95 (seeds "
                   f"{', '.join(map(str, seeds))}):", "",
                   "| method | CL1 final per seed | CL3 final per seed |", "|---|---|---|"]
    for method, runs in rows:
      get = lambda k: [r[k] for r in runs]
      comp = runs[0].get("params/compression_ratio", 0.0)
      comp = f"{comp:.2f}x" if comp else "–"
      lines.append(
          f"| {LABELS[method]} | {_fmt(get('cl1/final_accuracy'))} | "
          f"{_fmt(get('cl1/during_accuracy'))} | {_fmt(get('cl1/forgetting'))} | "
          f"{_fmt(get('cl3/final_accuracy'))} | {_fmt(get('cl3/forgetting'))} | "
          f"{_count(runs[0].get('params/trainable'))} | {comp} | "
          f"{np.mean(get('wall_time_sec')):.0f} |")
      seeds_lines.append(f"| {LABELS[method]} | {_per_seed(runs, 'cl1/final_accuracy')} | "
                         f"{_per_seed(runs, 'cl3/final_accuracy')} |")
    lines += seeds_lines + [""]
  return "\n".join(lines)


def _pyplot():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def _benchmarks_run(results: dict):
  """``(benchmark, methods with runs)`` for each benchmark with any run in ``results``."""
  for bench in BENCHMARKS:
    methods = [m for m in METHODS if results.get((bench, m))]
    if methods:
      yield bench, methods


def curves(results: dict, out_dir: str, dataset: str = "fashion_mnist") -> list:
  """Writes ``continual_curves_<prefix><benchmark>.png`` (prefix ``DATASETS[dataset][2]``):
  after each task t, the mean accuracy over tasks 0..t (CL1 left, CL3 right; row t of the
  accuracy matrices), one line per method, mean +- std over its seeds. Returns the paths
  written."""
  _, shown_name, prefix = DATASETS[dataset]
  plt = _pyplot()
  paths = []
  for bench, methods in _benchmarks_run(results):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), dpi=110)
    for ax, scenario in zip(axes, ("cl1", "cl3")):
      for method in methods:
        rows = []
        for r in results[(bench, method)]:
          m = np.array(r[f"{scenario}/matrix"], dtype=float)
          rows.append([100 * m[t, :t + 1].mean() for t in range(m.shape[0])])
        rows = np.array(rows)
        x = np.arange(1, rows.shape[1] + 1)
        mean, std = rows.mean(0), rows.std(0)
        ax.plot(x, mean, marker="o", ms=3, label=LABELS[method])
        ax.fill_between(x, mean - std, mean + std, alpha=0.2)
      ax.set_xticks(x)
      ax.set_xlabel("tasks learned", fontsize=8)
      ax.set_ylabel(f"mean {scenario.upper()} accuracy over them (%)", fontsize=8)
      ax.set_title(f"{bench} {shown_name}, {scenario.upper()}", fontsize=9)
      ax.tick_params(labelsize=7)
      ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out_dir, f"continual_curves_{prefix}{bench}.png")
    fig.savefig(path)
    plt.close(fig)
    paths.append(path)
  return paths


def heatmaps(results: dict, out_dir: str, dataset: str = "fashion_mnist") -> list:
  """Writes ``continual_matrices_<prefix><benchmark>.png`` (prefix
  ``DATASETS[dataset][2]``) in ``out_dir`` for each benchmark in ``results``: one panel
  per method, the CL1 accuracy matrix of its first seed (rows: after learning task t;
  columns: task evaluated; colour scale 50-100%). Returns the paths written."""
  prefix = DATASETS[dataset][2]
  plt = _pyplot()
  paths = []
  for bench, methods in _benchmarks_run(results):
    cols = len(METHODS)
    fig, axes = plt.subplots(1, cols, figsize=(3.2 * cols, 3.3), dpi=110, squeeze=False)
    for ax in axes.ravel():
      ax.axis("off")
    for method in methods:
      ax = axes[0, METHODS.index(method)]
      ax.axis("on")
      matrix = np.array(results[(bench, method)][0]["cl1/matrix"], dtype=float)
      shown = np.where(matrix < 0, np.nan, 100 * matrix)
      image = ax.imshow(shown, vmin=50, vmax=100, cmap="viridis")
      ax.set_title(f"{bench}: {LABELS[method]}", fontsize=8)
      ax.set_xlabel("task evaluated", fontsize=7)
      ax.set_ylabel("after learning task", fontsize=7)
      ax.set_xticks(range(matrix.shape[1]))
      ax.set_yticks(range(matrix.shape[0]))
      ax.tick_params(labelsize=6)
      for (i, j), v in np.ndenumerate(shown):
        if not np.isnan(v):
          ax.text(j, i, f"{v:.0f}", ha="center", va="center",
                  fontsize=6 if matrix.shape[0] <= 5 else 4, color="white")
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="CL1 test accuracy (%)")
    path = os.path.join(out_dir, f"continual_matrices_{prefix}{bench}.png")
    fig.savefig(path)
    plt.close(fig)
    paths.append(path)
  return paths


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--dataset", default="fashion_mnist", choices=sorted(DATASETS),
                      help="the configs run: configs/<benchmark>_fmnist_<method>.py "
                      "(fashion_mnist) or configs/<benchmark>_mnist_<method>.py (mnist)")
  parser.add_argument("--data_dir", default="", help="the data set's IDX folder")
  parser.add_argument("--root", default="/tmp/hypernet/continual", help="workdirs go here")
  parser.add_argument("--seeds", default="0")
  parser.add_argument("--benchmarks", default=",".join(BENCHMARKS))
  parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                      help="methods to run (the others' finished runs are still read)")
  parser.add_argument("--no-run", dest="run", action="store_false",
                      help="only read finished runs")
  parser.add_argument("--out", default=os.path.join(REPO, "experiments"))
  parser.add_argument("--steps_per_task", type=int, default=0,
                      help="train N steps per task instead of the config's (a small run, "
                      "e.g. 4; use its own --root: runs found there are read as they are)")
  args = parser.parse_args()
  if args.steps_per_task < 0:
    parser.error("--steps_per_task must be positive (0: the config's).")
  seeds = [int(s) for s in args.seeds.split(",")]
  methods = args.methods.split(",")
  unknown = sorted(set(methods) - set(METHODS))
  if unknown:
    parser.error(f"--methods: unknown {unknown}; known: {list(METHODS)}")
  try:
    import matplotlib  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    parser.exit(1, f"{parser.prog}: error: the heat-maps need matplotlib, which is not "
                   f"installed: pip install -e \".[plots]\"\n")
  results = {}
  for bench in args.benchmarks.split(","):
    for method in METHODS:
      name = config_name(bench, args.dataset, method)
      runs = []
      for seed in seeds:
        workdir = os.path.join(args.root, f"{name}_s{seed}")
        path = os.path.join(workdir, "final_metrics.json")
        why = None
        if (args.run and method in methods) or os.path.exists(path):
          why = unfinished(workdir) if os.path.exists(path) else None
          if why is None:
            short = (short_run_overrides(name, args.steps_per_task)
                     if args.steps_per_task else [])
            result = seed_runs.train_or_read(name, workdir, seed, args.data_dir, short)
            why = unfinished(workdir)
            if why is None:
              result["_test_images"] = test_images(workdir, args.dataset)
              runs.append(result)
        elif os.path.isdir(workdir):
          why = unfinished(workdir)
        if why:
          print(why, file=sys.stderr, flush=True)
      if runs:
        results[(bench, method)] = runs
  if not results:
    parser.exit(1, f"{parser.prog}: error: no finished runs under {args.root} (benchmarks "
                   f"{args.benchmarks}, seeds {args.seeds}); run without --no-run to train "
                   f"them.\n")
  text = table(results, seeds, args.dataset)
  print(text)
  os.makedirs(args.out, exist_ok=True)
  for path in (heatmaps(results, args.out, args.dataset) +
               curves(results, args.out, args.dataset)):
    print("wrote", path)


if __name__ == "__main__":
  main()
