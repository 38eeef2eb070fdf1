"""The main job (``configs/digits_hyper.py``), or another classification config, across
seeds: test accuracy per seed.

Runs ``python -m hypernet.train --config=configs/<config>.py --workdir=OUT/seed<N>
--config.seed=<N>`` for each seed, one after another (a finished run, whose
``final_metrics.json`` records the config's last step, is read instead of rerun), then
prints a markdown table (seed, test accuracy and error, errors of the test set, wall
time) with the minimum, mean and maximum, and writes it to ``OUT/seeds.md``.

    python -m experiments.digits_seeds --out=/tmp/hypernet/digits_seeds            # seeds 0-9
    python -m experiments.digits_seeds --out=/tmp/hypernet/digits_seeds --seeds=3  # one seed
    python -m experiments.digits_seeds --config=mnist_ha_static --test_size=10000 \
        --data_dir=../shared/data/mnist --out=/tmp/hypernet/mnist_ha_static --seeds=0,1,2
    python -m experiments.digits_seeds --config=digits_plain --set=num_steps=10000 \
        --set=model.dropout=0.2 --out=/tmp/hypernet/digits_plain_seeds  # the main job's schedule
"""
from __future__ import annotations

import argparse
import os
from typing import Dict, Optional, Sequence

from experiments import seed_runs

CONFIG_NAME = "digits_hyper"


def run_seed(out: str, seed: int, config: str = CONFIG_NAME,
             data_dir: Optional[str] = None, overrides: Sequence[str] = ()) -> Dict:
  """Trains (or reads) one seed in ``OUT/seed<N>``; returns its ``final_metrics.json``.
  ``overrides`` are ``FIELD=VALUE`` strings, passed as ``--config.FIELD=VALUE``."""
  return seed_runs.train_or_read(config, os.path.join(out, f"seed{seed}"), seed, data_dir,
                                 [f"--config.{o}" for o in overrides])


def table(results: Dict[int, Dict], test_size: int = 359) -> str:
  """Markdown table of the seeds with min / mean / max accuracy and error."""
  lines = [f"| seed | test accuracy (%) | test error (%) | errors (of {test_size:,}) | "
           "wall time (s) |", "|---:|---:|---:|---:|---:|"]
  accs = []
  for seed, r in sorted(results.items()):
    acc = 100 * r["accuracy"]
    accs.append(acc)
    lines.append(f"| {seed} | {acc:.2f} | {100 - acc:.2f} | "
                 f"{round(test_size * (1 - r['accuracy']))} | "
                 f"{r.get('wall_time_sec', float('nan')):.0f} |")
  mean = sum(accs) / len(accs)
  lines.append(f"| min / mean / max | {min(accs):.2f} / {mean:.2f} / {max(accs):.2f} | "
               f"{100 - max(accs):.2f} / {100 - mean:.2f} / {100 - min(accs):.2f} | | |")
  return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> None:
  # argparse, not absl flags: importing this module defines no global flag (the tests
  # import it beside hypernet.evaluate, whose flags share these names).
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--config", default=CONFIG_NAME, help="configs/<config>.py to run.")
  parser.add_argument("--data_dir", default=None,
                      help="--config.data.data_dir of every run (default: the config's).")
  parser.add_argument("--test_size", type=int, default=359,
                      help="Images in the config's test set (digits 359, MNIST 10,000).")
  parser.add_argument("--out", required=True,
                      help="Folder of the runs' workdirs and seeds.md.")
  parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                      help="A config override for every run (--config.FIELD=VALUE), e.g. "
                      "--set=num_steps=10000; repeatable.")
  parser.add_argument("--seeds", default=",".join(str(s) for s in range(10)),
                      help="Seeds to run, comma-separated.")
  args = parser.parse_args(argv)
  os.makedirs(args.out, exist_ok=True)
  results = {}
  for seed in (int(s) for s in args.seeds.split(",")):
    results[seed] = run_seed(args.out, seed, args.config, args.data_dir, args.set)
    print(f"seed {seed}: test accuracy {100 * results[seed]['accuracy']:.2f}%", flush=True)
  text = table(results, args.test_size)
  with open(os.path.join(args.out, "seeds.md"), "w") as f:
    f.write(text)
  print(text)


if __name__ == "__main__":
  main()
