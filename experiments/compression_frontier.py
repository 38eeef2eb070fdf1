"""Compression frontier on Fashion-MNIST: test accuracy against compression for the
chunked, static (Ha et al. 2016) and MLP hypernetwork kinds, against direct training of
the same target.

Every run is ``python -m hypernet.train`` on a committed config (``fmnist_chunked``,
``fmnist_static``, ``fmnist_mlp``; ``fmnist_plain`` for direct training) with the
overrides listed in :data:`POINTS`, all at the same steps and learning rate. The target is
``fmnist_plain``'s CNN (conv 16-32, dense 64; 105,866 weights). *Compression* is
generated scalars / trainable hypernetwork parameters (``params/compression_ratio`` in
``final_metrics.json``):

* chunked: generates every weight; its size is set by chunk size, chunk embedding size
  and generator width (0.5x to 17x); ``chunked_emb10``: the same points with
  ``hypernet.emb_multiplier = 10`` (Adam steps the chunk embeddings 10x faster);
  ``chunked_emb10_pre``: those points with the output head's gradient K-FAC-preconditioned
  (``hypernet.head_precondition = 1e-3``); ``chunked_linear``: a linear generator
  (``hypernet.hidden = ()``, no ReLU layer: a rank-``d_e + 1`` factorisation of the chunk
  matrix) at the same compressions, and ``chunked_linear_emb10_pre`` with both remedies;
* static: generates the two conv kernels (4,752 weights; the dense layers are trained
  directly), sized by ``N_z = d`` (0.4x to 15x);
* MLP: generates every weight with one linear head per tensor, ``(d_h + 1) P`` head
  parameters, so it cannot compress: its points run from 0.06x to 0.5x (``d_h = 1``: no
  trunk, the heads read a 1-d embedding).

Writes under ``--out``: ``frontier.md`` (table with the command of every run, mean +- std
over seeds where a point has several), ``frontier.json`` and ``frontier.png``
(accuracy vs compression, error bars = std over seeds, the direct-training mean +- std as
a band); ``runs/<name>_seed<k>/`` are the workdirs (a rerun reuses finished runs).

    python -m experiments.compression_frontier --out=/tmp/hypernet/frontier \
        --data_dir=../shared/data/fashion-mnist --steps=3000 --key_seeds=0,1,2
    python -m experiments.compression_frontier --out=/tmp/smoke --preset=smoke \
        --data_dir=../shared/data/fashion-mnist     # 4 short runs (tests)

Needs matplotlib (``pip install -e ".[plots]"``).
"""
from __future__ import annotations

import json
import os
import time
from typing import Dict, List, Mapping, Sequence

from absl import app
from absl import flags
from absl import logging
import numpy as np

from experiments.digits_sweep import command  # one command-line writer for both
from hypernet import config_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (kind, name, config, overrides, key point). Sizes in comments: trainable hypernetwork
# parameters and compression for the fmnist_plain target.
POINTS = [
    ("direct", "direct", "fmnist_plain", {}, True),
    # chunked, all 105,866 weights: C d_e + (d_e d_h + d_h) + (d_h k + k), C = ceil(P / k)
    ("chunked", "chunked_k2048_e32_h96", "fmnist_chunked",      # 203,488: 0.52x
     {"hypernet.chunk_size": 2048, "hypernet.chunk_emb_dim": 32, "hypernet.hidden": (96,)}, False),
    ("chunked", "chunked_k2048_e32_h32", "fmnist_chunked",      # 70,304: 1.51x
     {"hypernet.chunk_size": 2048, "hypernet.chunk_emb_dim": 32, "hypernet.hidden": (32,)}, True),
    ("chunked", "chunked_k2048_e32_h16", "fmnist_chunked",      # 37,008: 2.86x
     {"hypernet.chunk_size": 2048, "hypernet.chunk_emb_dim": 32, "hypernet.hidden": (16,)}, False),
    ("chunked", "chunked_k1024_e32_h16", "fmnist_chunked",      # 21,264: 4.98x
     {"hypernet.chunk_size": 1024, "hypernet.chunk_emb_dim": 32, "hypernet.hidden": (16,)}, False),
    ("chunked", "chunked_k1024_e16_h7", "fmnist_chunked",       # 9,975: 10.6x
     {"hypernet.chunk_size": 1024, "hypernet.chunk_emb_dim": 16, "hypernet.hidden": (7,)}, True),
    ("chunked", "chunked_k512_e8_h8", "fmnist_chunked",         # 6,336: 16.7x
     {"hypernet.chunk_size": 512, "hypernet.chunk_emb_dim": 8, "hypernet.hidden": (8,)}, False),
    # static, the two conv kernels (4,752 weights): 3 N_z + 16 (N_z d + d) + 144 d + 144
    ("static", "static_z24", "fmnist_static",                   # 13,272: 0.36x
     {"hypernet.z_dim": 24, "hypernet.hidden_dim": 24}, False),
    ("static", "static_z12", "fmnist_static",                   # 4,404: 1.08x
     {"hypernet.z_dim": 12, "hypernet.hidden_dim": 12}, False),
    ("static", "static_z8", "fmnist_static",                    # 2,472: 1.92x
     {"hypernet.z_dim": 8, "hypernet.hidden_dim": 8}, False),
    ("static", "static_z4", "fmnist_static",                    # 1,052: 4.52x
     {"hypernet.z_dim": 4, "hypernet.hidden_dim": 4}, True),
    ("static", "static_z2", "fmnist_static",                    # 534: 8.90x
     {"hypernet.z_dim": 2, "hypernet.hidden_dim": 2}, False),
    ("static", "static_z1", "fmnist_static",                    # 323: 14.7x
     {"hypernet.z_dim": 1, "hypernet.hidden_dim": 1}, True),
    # MLP, all 105,866 weights: (d_h + 1) P heads, so below 1x by construction
    # No trunk (heads on a 1-d embedding): a trunk of one ReLU unit can start dead, and
    # then every generated weight is 0 and receives no gradient (measured: loss ln 10).
    ("mlp", "mlp_e1", "fmnist_mlp", {"hypernet.embedding_dim": 1, "hypernet.hidden": ()},
     True),                                                                 # 0.50x
    ("mlp", "mlp_h2", "fmnist_mlp", {"hypernet.hidden": (2,)}, False),      # 0.33x
    ("mlp", "mlp_h4", "fmnist_mlp", {"hypernet.hidden": (4,)}, False),      # 0.20x
    ("mlp", "mlp_h8", "fmnist_mlp", {"hypernet.hidden": (8,)}, False),      # 0.11x
    ("mlp", "mlp_h16", "fmnist_mlp", {"hypernet.hidden": (16,)}, False),    # 0.059x
]
# The chunked points again with the chunk embeddings stepped 10x faster
# (hypernet.emb_multiplier, the best of 1-100 at chunked_k2048_e32_h32).
EMB_MULTIPLIER = 10
EMB_KIND = f"chunked_emb{EMB_MULTIPLIER}"
POINTS += [(EMB_KIND, f"{name}_m{EMB_MULTIPLIER}", config,
            dict(overrides, **{"hypernet.emb_multiplier": EMB_MULTIPLIER}), key)
           for kind, name, config, overrides, key in list(POINTS) if kind == "chunked"]
# And with the output head's gradient K-FAC-preconditioned (hypernet.head_precondition,
# damping 1e-3; hypernet/hypernetworks/chunked.py).
HEAD_PRECONDITION = 1e-3
PRE_KIND = f"{EMB_KIND}_pre"
POINTS += [(PRE_KIND, f"{name}_pre", config,
            dict(overrides, **{"hypernet.head_precondition": HEAD_PRECONDITION}), key)
           for kind, name, config, overrides, key in list(POINTS) if kind == EMB_KIND]
# The chunked kind with a linear generator (``hypernet.hidden = ()``: chunk = W_out e_c +
# b_out, a rank-(d_e + 1) factorisation of the [C, k] chunk matrix, as Ha et al.'s linear
# two-layer generator), sized like the chunked points: C d_e + (d_e + 1) k parameters.
LINEAR_KIND = "chunked_linear"
LINEAR_POINTS = [
    ("linear_k2048_e96", {"hypernet.chunk_size": 2048, "hypernet.chunk_emb_dim": 96},
     False),                                                # 203,648: 0.52x
    ("linear_k2048_e32", {"hypernet.chunk_size": 2048, "hypernet.chunk_emb_dim": 32},
     True),                                                 # 69,248: 1.53x
    ("linear_k2048_e16", {"hypernet.chunk_size": 2048, "hypernet.chunk_emb_dim": 16},
     False),                                                # 35,648: 2.97x
    ("linear_k1024_e16", {"hypernet.chunk_size": 1024, "hypernet.chunk_emb_dim": 16},
     False),                                                # 19,072: 5.55x
    ("linear_k1024_e7", {"hypernet.chunk_size": 1024, "hypernet.chunk_emb_dim": 7},
     True),                                                 # 8,920: 11.9x
    ("linear_k512_e8", {"hypernet.chunk_size": 512, "hypernet.chunk_emb_dim": 8},
     False),                                                # 6,264: 16.9x
]
POINTS += [(LINEAR_KIND, name, "fmnist_chunked", dict(overrides, **{"hypernet.hidden": ()}),
            key) for name, overrides, key in LINEAR_POINTS]
# And with the embedding multiplier and the K-FAC head as in PRE_KIND.
LINEAR_PRE_KIND = f"chunked_linear_emb{EMB_MULTIPLIER}_pre"
POINTS += [(LINEAR_PRE_KIND, f"{name}_m{EMB_MULTIPLIER}_pre", config,
            dict(overrides, **{"hypernet.emb_multiplier": EMB_MULTIPLIER,
                               "hypernet.head_precondition": HEAD_PRECONDITION}), key)
           for kind, name, config, overrides, key in list(POINTS) if kind == LINEAR_KIND]
SMOKE = ["direct", "chunked_k1024_e16_h7", "static_z4", "mlp_e1"]
DEFAULT_STEPS = {"full": 3000, "smoke": 40}


def load_config(name: str):
  """``configs/<name>.py:get_config()``."""
  return config_lib.load_config_file(os.path.join(REPO, "configs", f"{name}.py"))


def run_overrides(overrides: Mapping, steps: int, seed: int, lr: float,
                  data_dir: str) -> Dict:
  """Every override one run applies, as ``{dotted field: value}``.

  The table needs the final test accuracy only, so the 10,000 test images are evaluated
  at the end only (``eval_every=0``; not every ``steps / 10``), and the model summaries
  (weight histograms, kernel images: tracing them took ~45% of a 20-step run) are off.
  """
  return dict(overrides, num_steps=steps, seed=seed, eval_every=0,
              log_every=max(steps // 10, 1), checkpoint_every=max(steps // 2, 1),
              **{"summaries.every": 0},
              **{"optim.lr": lr, "data.data_dir": data_dir})


def points(preset: str) -> List[tuple]:
  """The points of a preset, in :data:`POINTS` order."""
  return [p for p in POINTS if preset == "full" or p[1] in SMOKE]


def run_frontier(out: str, data_dir: str, preset: str = "full", steps: int = None,
                 lr: float = 3e-3, seeds: Sequence[int] = (0,),
                 key_seeds: Sequence[int] = (0, 1, 2)) -> List[Dict]:
  """Trains (or reuses) every run; returns one row per point.

  Returns:
    Rows with ``kind``, ``name``, ``source``/``generated`` (parameters), ``compression``,
    ``accuracy``/``accuracy_std`` (test set, fractions; mean and std over its seeds),
    ``accuracies`` (per seed), ``seeds``, ``steps``, ``lr``, ``command`` (seed 0) and
    ``workdirs``.
  """
  from hypernet.training import loop  # pylint: disable=g-import-not-at-top
  steps = steps or DEFAULT_STEPS[preset]
  rows = []
  for kind, name, config_name, overrides, key in points(preset):
    run_seeds = sorted(set(seeds) | (set(key_seeds) if key else set()))
    results, workdirs = [], []
    for seed in run_seeds:
      workdir = os.path.join(out, "runs", f"{name}_seed{seed}")
      ov = run_overrides(overrides, steps, seed, lr, data_dir)
      final = os.path.join(workdir, "final_metrics.json")
      t = time.time()
      if os.path.exists(final) and json.load(open(final)).get("step") == steps:
        result = json.load(open(final))  # Finished before: reuse.
      else:
        config = load_config(config_name)
        config.update_from_flattened_dict(ov)
        result = loop.train_and_evaluate(config, workdir)
      print(f"{name} seed {seed}: test accuracy {100 * result['accuracy']:.2f}%  "
            f"compression {result['params/compression_ratio']:.2f}  "
            f"({time.time() - t:.0f} s)", flush=True)
      results.append(result)
      workdirs.append(workdir)
    accuracy = np.array([r["accuracy"] for r in results])
    seed0_overrides = run_overrides(overrides, steps, run_seeds[0], lr, data_dir)
    rows.append(dict(
        kind=kind, name=name, source=int(results[0]["params/source"]),
        generated=int(results[0]["params/generated"]),
        compression=float(results[0]["params/compression_ratio"]),
        accuracy=float(accuracy.mean()), accuracy_std=float(accuracy.std()),
        accuracies=[float(a) for a in accuracy], seeds=run_seeds, steps=steps, lr=lr,
        command=command(config_name, workdirs[0], seed0_overrides),
        workdirs=workdirs))
  return rows


def markdown_table(rows: Sequence[Mapping]) -> str:
  """The frontier as a markdown table (accuracy in %, mean +- std over the seeds)."""
  direct = next(r for r in rows if r["kind"] == "direct")
  lines = [f"Fashion-MNIST, target conv 16-32 / dense 64 (105,866 weights), "
           f"{rows[0]['steps']} steps, Adam lr {rows[0]['lr']:g} (cosine), batch 64, every "
           f"run. Compression = generated / trainable hypernetwork parameters. Std over "
           f"seeds (population std) where a point has several.", "",
           "| kind | point | hypernetwork params | generated | compression | test accuracy (%) "
           "| gap to direct | seeds |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
  for r in rows:
    acc = f"{100 * r['accuracy']:.2f}" + (f" ± {100 * r['accuracy_std']:.2f}"
                                          if len(r["seeds"]) > 1 else "")
    gap = "-" if r is direct else f"{100 * (r['accuracy'] - direct['accuracy']):+.2f}"
    comp = "-" if r is direct else f"{r['compression']:.2f}x"
    lines.append(f"| {r['kind']} | {r['name']} | {r['source']:,} | {r['generated']:,} | "
                 f"{comp} | {acc} | {gap} | {','.join(map(str, r['seeds']))} |")
  lines += ["", "Commands (first seed; `--config.seed=N` for the others):", "", "```bash"]
  lines += [r["command"] for r in rows] + ["```"]
  return "\n".join(lines) + "\n"


def plot(rows: Sequence[Mapping], path: str) -> None:
  """Accuracy against compression (log x), one line per kind, direct training as a band."""
  from experiments import plots  # pylint: disable=g-import-not-at-top  (sets the Agg backend)
  plt = plots.plt
  direct = next(r for r in rows if r["kind"] == "direct")
  fig, ax = plt.subplots(figsize=(7, 4.6), dpi=120)
  styles = {"chunked": ("tab:red", "s", "chunked hypernetwork"),
            EMB_KIND: ("tab:orange", "D",
                       f"chunked, chunk embeddings stepped {EMB_MULTIPLIER}x"),
            PRE_KIND: ("tab:brown", "v", f"chunked, embeddings {EMB_MULTIPLIER}x, "
                       "head K-FAC-preconditioned"),
            LINEAR_KIND: ("black", "x", "chunked, linear generator (no hidden layer)"),
            LINEAR_PRE_KIND: ("tab:gray", "P", f"chunked, linear generator, embeddings "
                              f"{EMB_MULTIPLIER}x, head K-FAC-preconditioned"),
            "static": ("tab:green", "^", "static hypernetwork"),
            "mlp": ("tab:purple", "o", "MLP hypernetwork")}
  for kind, (color, marker, label) in styles.items():
    pts = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["compression"])
    if not pts:
      continue
    ax.errorbar([r["compression"] for r in pts], [100 * r["accuracy"] for r in pts],
                yerr=[100 * r["accuracy_std"] for r in pts], color=color, marker=marker,
                capsize=3, label=label)
  mean, std = 100 * direct["accuracy"], 100 * direct["accuracy_std"]
  ax.axhline(mean, color="tab:blue", linestyle="--", label="direct training (mean ± std)")
  ax.axhspan(mean - std, mean + std, color="tab:blue", alpha=0.15)
  ax.axvline(1.0, color="gray", linewidth=0.8)
  ax.set_xscale("log")
  ax.set_xlabel("compression: generated weights / hypernetwork parameters (log)")
  ax.set_ylabel("test accuracy (%)")
  ax.set_title(f"Fashion-MNIST compression frontier ({rows[0]['steps']} steps, "
               f"lr {rows[0]['lr']:g})")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=8, loc="lower left")
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


def write_outputs(rows: Sequence[Mapping], out: str) -> Dict[str, str]:
  """Writes frontier.md, frontier.json and frontier.png under ``out``; returns the paths."""
  paths = {k: os.path.join(out, f"frontier.{k}") for k in ("md", "json", "png")}
  with open(paths["md"], "w") as f:
    f.write(markdown_table(rows))
  with open(paths["json"], "w") as f:
    json.dump(list(rows), f, indent=2)
  plot(rows, paths["png"])
  return paths


def _define_flags():
  """Command-line flags (defined only when run as a script, so that tests can import this
  module beside experiments/digits_sweep.py and hypernet.evaluate, whose flags share
  names)."""
  flags.DEFINE_string("out", None, "Output folder (table, plot, run workdirs).",
                      required=True)
  flags.DEFINE_string("data_dir", "../shared/data/fashion-mnist",
                      "Fashion-MNIST IDX folder (config.data.data_dir).")
  flags.DEFINE_enum("preset", "full", ["full", "smoke"],
                              "full: every point of POINTS; smoke: one point per kind, "
                              "40 steps (tests).")
  flags.DEFINE_integer("steps", None, "Training steps of every run (default 3000 "
                                "for full, 40 for smoke).")
  flags.DEFINE_float("lr", 3e-3, "Adam learning rate of every run (direct included).")
  flags.DEFINE_list("seeds", ["0"], "Seeds of every point.")
  flags.DEFINE_list("key_seeds", ["0", "1", "2"],
                                 "Seeds of the key points (direct training and the points "
                                 "marked key); they get error bars.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  f = flags.FLAGS
  os.makedirs(f.out, exist_ok=True)
  rows = run_frontier(f.out, f.data_dir, f.preset, f.steps, f.lr, [int(s) for s in f.seeds],
                      [int(s) for s in f.key_seeds])
  paths = write_outputs(rows, f.out)
  print(markdown_table(rows))
  print("\n".join(f"wrote {p}" for p in paths.values()))


if __name__ == "__main__":
  _define_flags()
  from hypernet.training import cli  # pylint: disable=g-import-not-at-top
  app.run(main, flags_parser=cli.parse_flags)
