"""Which signal finds the task of a test image (CL3) in a finished continual run.

For a ``config.task = "continual"`` workdir of method ``hnet`` or ``independent``, every
task's network (generated weights and per-task statistics, as the run evaluates them) is
run on the first ``--examples`` test images of every task, and the task is picked by:

* a score of its outputs, highest wins: ``neg_entropy`` (von Oswald et al. 2020's
  HNET+ENT), ``max_prob``, ``max_logit``, ``energy`` (log-sum-exp of the logits, Liu et
  al. 2020); each ``raw``, ``z`` (standardised by its mean and std over the task's own
  training images under that task's network) or ``rank`` (its empirical quantile there);
* a probabilistic PCA density of each task's training images
  (:mod:`hypernet.continual.task_inference`), one per task or one per class (the task's
  density the log-sum of its classes'), at ``--components``.

Printed: the share of test images whose task is found, and CL3 accuracy (task found and
its class right; for the densities the class comes from the run's own network).

    python -m experiments.cl3_scores --workdir=/tmp/hypernet/continual/split_fmnist_hnet_s0
"""
from __future__ import annotations

import argparse
import os

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _scores(logits: np.ndarray) -> dict:
  l = logits.astype(np.float64)
  top = l.max(-1, keepdims=True)
  lse = np.log(np.exp(l - top).sum(-1)) + top[..., 0]
  logp = l - lse[..., None]
  p = np.exp(logp)
  return {"neg_entropy": (p * logp).sum(-1), "max_prob": p.max(-1), "max_logit": l.max(-1),
          "energy": lse}


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", required=True, help="a finished continual run")
  parser.add_argument("--examples", type=int, default=2000, help="test images per task")
  parser.add_argument("--train_examples", type=int, default=2000,
                      help="training images per task for the z / rank statistics")
  parser.add_argument("--components", default="5,10,20,40,80")
  args = parser.parse_args()

  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet import evaluate  # pylint: disable=g-import-not-at-top
  from hypernet.continual import task_inference  # pylint: disable=g-import-not-at-top
  from hypernet.hypernetworks import batched  # pylint: disable=g-import-not-at-top
  from hypernet.training import loop  # pylint: disable=g-import-not-at-top

  if not os.path.isfile(os.path.join(args.workdir, "config.json")):
    parser.error(f"--workdir={args.workdir} holds no config.json: not a training workdir.")
  config = evaluate.load_config(args.workdir)
  if config.task != "continual" or config.continual.method not in ("hnet", "independent"):
    parser.error(f"--workdir={args.workdir}: needs a continual run of method hnet or "
                 "independent (one network per task).")
  trainer = loop.Trainer(config, args.workdir)
  trainer.restore()
  task = trainer.task
  num_tasks = task.num_tasks
  weights = task.source.weights(tf.range(num_tasks))
  weights.update(task._task_state(tf.range(num_tasks)))  # pylint: disable=protected-access

  def logits_of(x):  # [T, N, c]
    return np.concatenate([batched.batched_functional_call(
        task.target, weights, tf.constant(x[i:i + 1000]), shared_inputs=True).numpy()
                           for i in range(0, len(x), 1000)], 1)

  def images(d, split, n):
    x = getattr(d, "x_" + split)[:n]
    return x.astype(np.float32) * d.pixel_scale, getattr(d, "y_" + split)[:n]

  test = [images(d, "test", args.examples) for d in task.tasks]
  train = [images(d, "train", args.train_examples) for d in task.tasks]
  test_logits = [logits_of(x) for x, _ in test]                          # per true task
  own = [_scores(logits_of(x)[k]) for k, (x, _) in enumerate(train)]     # own network
  truth = np.concatenate([np.full(len(y), k) for k, (_, y) in enumerate(test)])
  labels = np.concatenate([y for _, y in test])
  all_logits = np.concatenate(test_logits, 1)                            # [T, N, c]

  def report(name, picked):
    cls = np.take_along_axis(all_logits.transpose(1, 0, 2), picked[:, None, None], 1)
    right = (picked == truth) & (cls[:, 0].argmax(-1) == labels)
    print(f"| {name} | {100 * np.mean(picked == truth):.2f} | {100 * np.mean(right):.2f} |")

  print(f"{args.workdir}: {num_tasks} tasks, {len(truth)} test images\n")
  print("| task found by | task found (%) | CL3 accuracy (%) |\n|---|---|---|")
  for name in ("neg_entropy", "max_prob", "max_logit", "energy"):
    score = _scores(all_logits)[name]                                     # [T, N]
    reference = [o[name] for o in own]
    mean = np.array([r.mean() for r in reference])[:, None]
    std = np.array([r.std() + 1e-12 for r in reference])[:, None]
    quantile = np.stack([np.searchsorted(np.sort(reference[t]), score[t]) / len(reference[t])
                         for t in range(num_tasks)])
    for mode, value in (("raw", score), ("z", (score - mean) / std), ("rank", quantile)):
      report(f"{name}, {mode}", value.argmax(0))
  x_all = np.concatenate([x for x, _ in test]).reshape(len(truth), -1)
  for per_class in (False, True):
    for r in (int(c) for c in args.components.split(",")):
      densities = []
      for d in task.tasks:
        x = d.x_train.reshape(len(d.x_train), -1).astype(np.float64) * d.pixel_scale
        groups = [x[d.y_train == c] for c in np.unique(d.y_train)] if per_class else [x]
        logs = [task_inference.ppca_log_likelihood(
            tf.constant(x_all, tf.float64),
            *[tf.constant(np.asarray(a)) for a in task_inference.ppca_fit(g, r)]).numpy()
                for g in groups]
        densities.append(np.logaddexp.reduce(np.stack(logs), 0))
      report(f"PPCA per {'class' if per_class else 'task'}, {r} components",
             np.argmax(np.stack(densities), 0))


if __name__ == "__main__":
  main()
