"""The gradient-based learners on Omniglot's standard split at a stated 2-core budget.

MAML (second order), first-order MAML, ANIL and MAML++ (``configs/omniglot_standard_
{maml,fomaml,anil,mamlpp}.py``: the 1,200 / 423-character split of Vinyals et al. 2016,
``data.split_seed = 0``, 5-way 1-shot, meta-batch 8; 5,000 meta-steps, MAML++ 1,000).
For each config and seed: trains it once with ``python -m hypernet.train
--config.seed=SEED`` in ``ROOT/<name>_s<seed>`` (a finished run, one with
``final_metrics.json``, is read, not re-run: ``experiments/seed_runs.py``). Writes:

* ``OUT/omniglot_learners.md`` (also printed): per learner and seed, the held-out 5-way
  1-shot accuracy +- CI95 over the run's meta-test episodes (1,000, 15 queries per class,
  as committed), meta-steps x meta-batch and wall time as the run's ``config.json`` and
  ``final_metrics.json`` give them; the mean +- sd over seeds; the published number at
  the paper's budget and the config that runs it (``configs/<name>_full.py``); the
  commands;
* ``OUT/omniglot_learners.png``: held-out accuracy against meta-step, one colour per
  learner (a line per seed), from the runs' TensorBoard events; dashed, where their runs
  are finished in ``--references_root`` (``experiments/omniglot_standard.py``'s root; read
  only, never trained here), the support-conditioned hypernetwork and Prototypical
  Networks on the same split.

    python experiments/omniglot_learners.py --data_dir=../shared/data/omniglot \\
        --root=/tmp/hypernet/omniglot_learners --seeds=0

``--no-run`` only reads finished runs. ``--set`` passes further flags to every training
run (e.g. ``--set=--config.num_steps=20``); it needs ``--out=DIR``, since the default
folder holds the committed tables.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # Run as a file (python experiments/omniglot_learners.py).
  sys.path.insert(0, REPO)
# pylint: disable-next=g-import-not-at-top
from experiments import meta_seeds, omniglot_standard, seed_runs

# (config, learner, published 5-way 1-shot accuracy (%) at the paper's budget or None).
LEARNERS = (
    ("omniglot_standard_maml", "MAML, second order (Finn et al. 2017)", 98.7),
    ("omniglot_standard_fomaml", "first-order MAML (Finn et al. 2017)", 98.3),
    ("omniglot_standard_anil", "ANIL (Raghu et al. 2020)", None),  # Reported 20-way only.
    ("omniglot_standard_mamlpp", "MAML++ (Antoniou et al. 2019)", 99.47),
)
REFERENCES = (
    ("omniglot_standard_support_hypernet", "support-conditioned hypernetwork"),
    ("omniglot_standard_protonet", "Prototypical Networks (Snell et al. 2017)"),
)


def _budget(workdir: str) -> Dict:
  """The run's own meta-steps, meta-batch and meta-test protocol (its config.json)."""
  with open(os.path.join(workdir, "config.json")) as f:
    config = json.load(f)
  meta = config["meta"]
  return {"steps": config["num_steps"], "batch": config["batch_size"],
          "ways": meta.get("train_ways") or meta["num_ways"],
          "episodes": meta["eval_episodes"], "queries": meta["eval_queries"]}


def _legend(label: str, workdirs: Sequence[str]) -> str:
  """``label`` with what one meta-step of its (first) run holds: the learners' steps
  compare only at the same episodes a step."""
  b = _budget(workdirs[0])
  return f"{label} ({b['batch']} x {b['ways']}-way a step)"


def table(results: Dict[str, Dict[int, Dict]]) -> str:
  """Markdown: a row per (learner, seed), then per learner the mean +- sd (sample sd)
  over seeds where there are several.

  Args:
    results: ``{config name: {seed: final metrics}}``, each with ``accuracy`` and
      ``accuracy_ci95`` in [0, 1], ``wall_time_sec`` and the run's ``workdir``.
  """
  names = {name: (learner, published) for name, learner, published in LEARNERS}
  lines = ["| learner (config) | seed | meta-steps x meta-batch | held-out 5w1s (+- CI95) "
           "| meta-test | wall time | published, paper's budget (config) |",
           "|---|---|---|---|---|---|---|"]
  for name, seeds in results.items():
    learner, published = names.get(name, (name, None))
    paper = "" if published is None else f"{published:g} (`{name}_full`)"
    for seed, m in sorted(seeds.items()):
      b = _budget(m["workdir"])
      lines.append(f"| {learner} (`{name}`) | {seed} | {b['steps']:,} x {b['batch']} | "
                   f"{omniglot_standard._cell(m)} | {b['episodes']:,} episodes x "
                   f"{b['queries']} queries | {m['wall_time_sec'] / 60:.1f} min | {paper} |")
    if len(seeds) > 1:
      mean, sd = omniglot_standard._mean_sd([m["accuracy"] for m in seeds.values()])
      lines.append(f"| {learner} (`{name}`) | mean +- sd ({len(seeds)}) | | "
                   f"**{mean:.2f} +- {sd:.2f}** | | | |")
  return "\n".join(lines)


def references(names: Sequence[str], root: str, seeds: Sequence[int]) -> List[Dict]:
  """The curve lines of the reference runs finished in ``root`` (``ROOT/<name>_s<seed>``):
  a learner none of whose seeds is finished is left out (printed)."""
  labels = dict(REFERENCES)
  lines = []
  for name in names:
    workdirs = [os.path.join(root, f"{name}_s{seed}") for seed in seeds]
    workdirs = [w for w in workdirs if os.path.exists(os.path.join(w, "final_metrics.json"))]
    if workdirs:
      lines.append({"label": _legend(labels.get(name, name), workdirs), "workdirs": workdirs,
                    "dashed": True})
    else:
      print(f"{name}: no finished run in {root}; not on the plot.")
  return lines


def report(results: Dict[str, Dict[int, Dict]], commands: Sequence[str]) -> str:
  """The whole markdown: the table, the commands."""
  return ("Held-out 5-way 1-shot accuracy (%) +- CI95 over the meta-test episodes, on "
          "Omniglot's standard split (1,200 / 423 characters x 4 rotations, "
          "`data.split_seed = 0`), at the budget each run states.\n\n" + table(results) +
          "\n\nCommands:\n\n" + "\n".join(f"    {c}" for c in commands) + "\n")


def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--configs", default=",".join(n for n, _, _ in LEARNERS))
  parser.add_argument("--seeds", default="0")
  parser.add_argument("--root", default="/tmp/hypernet/omniglot_learners")
  parser.add_argument("--references", default=",".join(n for n, _ in REFERENCES),
                      help="configs drawn dashed where finished in --references_root "
                      "('' for none)")
  parser.add_argument("--references_root", default="/tmp/hypernet/omniglot_standard")
  parser.add_argument("--data_dir", default=os.path.join(REPO, "..", "shared", "data",
                                                         "omniglot"))
  parser.add_argument("--out", default=os.path.join(REPO, "experiments", "omniglot_learners"))
  parser.add_argument("--set", action="append", default=[],
                      help="a further flag for every training run, e.g. "
                      "--set=--config.num_steps=20")
  parser.add_argument("--no-run", dest="execute", action="store_false",
                      help="only read finished runs")
  args = parser.parse_args(argv)
  seed_runs.check_out(parser, args)
  seeds = [int(s) for s in args.seeds.split(",")]
  data_dir = os.path.abspath(os.path.expanduser(args.data_dir))
  names = args.configs.split(",")
  results = {name: {seed: meta_seeds.run(name, seed, args.root, data_dir, args.set,
                                         args.execute) for seed in seeds}
             for name in names}
  commands = [" ".join(["python"] + seed_runs.train_command(
      name, os.path.join(args.root, f"{name}_sSEED"), 0, data_dir, args.set)[1:]).replace(
          "--config.seed=0", "--config.seed=SEED") for name in names]
  text = report(results, commands)
  print(text)
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "omniglot_learners.md"), "w") as f:
    f.write(text)
  labels = {name: learner for name, learner, _ in LEARNERS}
  workdirs = {name: [m["workdir"] for _, m in sorted(results[name].items())] for name in names}
  lines = [{"label": _legend(labels.get(name, name), workdirs[name]),
            "workdirs": workdirs[name]} for name in names]
  lines += references([n for n in args.references.split(",") if n], args.references_root,
                      seeds)
  from experiments import plots  # pylint: disable=g-import-not-at-top
  path = os.path.join(args.out, "omniglot_learners.png")
  plots.heldout_accuracy_curves(lines, path, "Omniglot standard split, held-out 5-way 1-shot")
  print(f"wrote {path}")


if __name__ == "__main__":
  main()
