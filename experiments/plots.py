"""PNG plots for the experiment scripts (matplotlib, the ``plots`` extra).

Only ``experiments/`` imports matplotlib; the hypernet package itself does not need it.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")  # Files only, no display.
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top
import matplotlib.ticker  # noqa: E402  pylint: disable=g-import-not-at-top

_STYLE = {"plain": dict(color="tab:blue", marker="o"),
          "hypernetwork": dict(color="tab:red", marker="s")}


def accuracy_vs_params(rows: Sequence[Mapping], path: str, title: str) -> None:
  """Test accuracy against trainable parameters, one line per kind of weight source.

  Args:
    rows: dicts with ``kind`` ("plain" | "hypernetwork"), ``name``, ``trainable``
      (int), ``accuracy`` (mean, in [0, 1]) and ``accuracy_std``.
    path: output PNG file.
    title: plot title.
  """
  fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=120)
  # Both curves rise to the right, the plain one above: its labels go up-left of each
  # point, the hypernetwork's down-right (straight below when the next point is within
  # 2x, and for the last), on a white box,
  # so that no label sits on a curve, a point or another label.
  place = {"plain": ("right", -5, 6), "hypernetwork": ("left", 5, -14)}
  for kind in ("plain", "hypernetwork"):
    points = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["trainable"])
    if not points:
      continue
    ax.errorbar([r["trainable"] for r in points], [100 * r["accuracy"] for r in points],
                yerr=[100 * r["accuracy_std"] for r in points], capsize=3,
                label="hypernetwork (chunked) generates the 32-64 CNN" if kind == "hypernetwork"
                else "plain CNN trained directly", **_STYLE[kind])
    for i, r in enumerate(points):
      ha, dx, dy = place[kind]
      close = i + 1 == len(points) or points[i + 1]["trainable"] < 2 * r["trainable"]
      if kind == "hypernetwork" and close:  # The last, or a neighbour close on the right.
        ha, dx, dy = "center", 0, -18
      ax.annotate(r["name"], (r["trainable"], 100 * r["accuracy"]), fontsize=7,
                  textcoords="offset points", xytext=(dx, dy), ha=ha,
                  color=_STYLE[kind]["color"],
                  bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))
  ax.set_xscale("log")
  low = min(r["trainable"] for r in rows)
  high = max(r["trainable"] for r in rows)
  ax.set_xlim(low / 1.6, high * 1.6)  # Room for the labels at both ends.
  bottom = min(100 * (r["accuracy"] - r["accuracy_std"]) for r in rows)
  ax.set_ylim(bottom - 4, 101)
  ax.set_xlabel("trainable parameters (log scale)")
  ax.set_ylabel("test accuracy (%)")
  ax.set_title(title)
  ax.grid(True, which="both", alpha=0.3)
  # The legend below the axes: it cannot cover a point.
  ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8,
            frameon=False)
  fig.tight_layout()
  fig.savefig(path, bbox_inches="tight")
  plt.close(fig)


def learning_curves(curves: Dict[str, Dict[str, List[Tuple[int, float]]]],
                    kinds: Mapping[str, str], path: str, title: str) -> None:
  """Eval accuracy and training loss against step, one line per run.

  Args:
    curves: ``{run name: {"eval_accuracy": [(step, value)], "train_loss": [...]}}``.
    kinds: ``{run name: "plain" | "hypernetwork"}`` (line style).
    path: output PNG file.
    title: figure title.
  """
  fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.6), dpi=120)
  colors = plt.get_cmap("tab10").colors
  for i, (name, curve) in enumerate(curves.items()):
    style = dict(linestyle="-" if kinds[name] == "hypernetwork" else "--", linewidth=1.3,
                 color=colors[i % len(colors)])
    if curve.get("eval_accuracy"):
      steps, values = zip(*curve["eval_accuracy"])
      left.plot(steps, [100 * v for v in values], label=name, **style)
    if curve.get("train_loss"):
      steps, values = zip(*curve["train_loss"])
      right.plot(steps, values, **style)
  left.set(xlabel="step", ylabel="test accuracy (%)", title="evaluation accuracy")
  right.set(xlabel="step", ylabel="training loss (nats)", title="training loss", yscale="log")
  for ax in (left, right):
    ax.grid(True, alpha=0.3)
  # One legend for both panels, below them (dashed: plain CNNs, solid: hypernetworks), so
  # it hides no curve.
  fig.legend(loc="lower center", ncol=min(len(curves), 4), fontsize=8, frameon=False,
             bbox_to_anchor=(0.5, 0.0))
  fig.suptitle(title)
  fig.tight_layout(rect=(0, 0.12, 1, 1))
  fig.savefig(path)
  plt.close(fig)


def run_curves(workdir: str, path: str, title: str, train_tags: Sequence[str] = ("loss",),
               eval_tags: Sequence[str] = (), log_scale: bool = True) -> None:
  """A finished run's curves from its TensorBoard events: training loss (``train/``) and
  every evaluation metric (``eval/``: e.g. post- and pre-adaptation ``loss`` /
  ``loss_before`` of a meta-learner, with its ``_ci95`` as a band), against step.

  Args:
    workdir: a training workdir (``python -m hypernet.train --workdir=...``).
    path: output PNG file.
    title: figure title.
    train_tags: ``train/`` scalars on the left (e.g. ``loss``, ``accuracy``).
    eval_tags: ``eval/`` scalars on the right (default: all but the ``_ci95`` bands).
    log_scale: log y axes (losses); ``False`` for accuracies.
  """
  from hypernet.training import summaries  # pylint: disable=g-import-not-at-top
  train = summaries.read_scalars(f"{workdir}/train")
  evals = summaries.read_scalars(f"{workdir}/eval")
  fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
  scale = "log" if log_scale else "linear"
  for tag in train_tags:
    steps, values = zip(*train[tag])
    left.plot(steps, values, linewidth=1.0, label=tag)
  left.set(xlabel="step", ylabel="meta-training (query set)",
           title="training (train/" + ", ".join(train_tags) + ")", yscale=scale)
  if len(train_tags) > 1:
    left.legend(fontsize=8)
  for tag in list(eval_tags) or sorted(t for t in evals if not t.endswith("_ci95")):
    steps, values = zip(*evals[tag])
    label = {"loss": "loss (after adaptation)", "loss_before": "loss_before (before)"}.get(
        tag, tag)
    line, = right.plot(steps, values, marker="o", markersize=3, label=label)
    if f"{tag}_ci95" in evals:
      half = dict(evals[f"{tag}_ci95"])
      right.fill_between(steps, [v - half.get(s, 0) for s, v in zip(steps, values)],
                         [v + half.get(s, 0) for s, v in zip(steps, values)],
                         color=line.get_color(), alpha=0.2, linewidth=0)
  right.set(xlabel="step", ylabel="meta-test value (band: 95% CI)",
            title="evaluation (eval/)", yscale=scale)
  right.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3,
               frameon=False)
  for ax in (left, right):
    ax.grid(True, alpha=0.3)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda x, _: f"{x / 1000:g}k" if x >= 1000 else f"{x:g}"))
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, bbox_inches="tight")
  plt.close(fig)


def heldout_accuracy_curves(lines: Sequence[Mapping], path: str, title: str) -> None:
  """Held-out accuracy against meta-step, one colour per learner, one line per seed, from
  the runs' ``<workdir>/eval`` TensorBoard events (``accuracy``; step 0, before any
  training, left out as ``experiments/meta_seeds.py`` does).

  Args:
    lines: dicts with ``label`` (legend, drawn once per learner), ``workdirs`` (one
      finished run per seed) and optionally ``dashed`` (True: a reference learner).
    path: output PNG file.
    title: figure title.
  """
  from hypernet.training import summaries  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 4.6), dpi=120)
  colors = plt.get_cmap("tab10").colors
  for i, line in enumerate(lines):
    for j, workdir in enumerate(line["workdirs"]):
      steps, values = zip(*[(s, v) for s, v in
                            summaries.read_scalars(f"{workdir}/eval")["accuracy"] if s > 0])
      ax.plot(steps, [100 * v for v in values], color=colors[i % len(colors)],
              linestyle="--" if line.get("dashed") else "-", marker="o", markersize=3,
              linewidth=1.2, label=line["label"] if j == 0 else None)
  ax.set(xlabel="meta-step", ylabel="held-out accuracy (%)", title=title)
  ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
      lambda x, _: f"{x / 1000:g}k" if x >= 1000 else f"{x:g}"))
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=8, loc="lower right")
  fig.tight_layout()
  fig.savefig(path, bbox_inches="tight")
  plt.close(fig)


if __name__ == "__main__":
  import argparse  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description="Curves of a finished run as a PNG.")
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--out", required=True)
  parser.add_argument("--title", default="")
  parser.add_argument("--train", default="loss", help="comma-separated train/ tags")
  parser.add_argument("--eval", default="", help="comma-separated eval/ tags (default all)")
  parser.add_argument("--linear", action="store_true", help="linear y axes (accuracies)")
  args = parser.parse_args()
  run_curves(args.workdir, args.out, args.title or args.workdir,
             train_tags=[t for t in args.train.split(",") if t],
             eval_tags=[t for t in args.eval.split(",") if t], log_scale=not args.linear)
  print(f"wrote {args.out}")
