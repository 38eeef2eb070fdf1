"""Few-shot adaptation of a small transformer's adapters from a support set, on Omniglot.

A small Keras transformer reads a 28x28 Omniglot drawing as a sequence of its 28 rows
(tokens of 28 pixels): a Dense token embedding plus a learned position embedding, pre-LN
blocks of ``MultiHeadAttention`` and a GELU MLP, a final LayerNorm, the mean over the
tokens (``D`` = ``--width`` features) and a Dense head of 5 outputs that the learners
write per task (never trained). It is meta-trained on the standard split's meta-training
characters (``configs/omniglot_standard_protonet.py``'s: all 1,623 characters of
``images_background.zip`` + ``images_evaluation.zip``, 423 held out by
``split_by_character(seed=data.split_seed=0)``, each character's four rotations four
classes: 4,800 meta-training and 1,692 meta-test classes) in 5-way 1-shot episodes, and
scored on fixed meta-test episodes (5-way 1-shot and 5-way 5-shot, ``--eval_queries``
queries per class, the episode seed of ``config.meta.eval_seed``) with the 95% interval
over the episodes. Methods, on the same transformer, seeds, episodes, meta-steps and
meta-batch:

* ``protonet``: Prototypical Networks (``hn.meta.PrototypicalNetwork``), every body
  weight meta-trained;
* ``support_adapter``: ``hn.meta.SupportAdapter``, the base meta-trained together with
  rank-``--rank`` adapters ``W_0 + s A(e) @ B(e)`` generated from the support set's mean
  prototype ``e`` on the kernels ``--adapt`` selects (default: the attention's query,
  key, value and output projections of every block);
* ``frozen_adapter``: ``SupportAdapter(train_base=False)`` on the base the ``protonet``
  run of the same seed trained (read from its ``base.weights.h5``): only the generator
  learns, as adapters of a frozen pre-trained model do;
* ``protonet_continued`` (on request): the ``protonet`` run's base meta-trained further
  by Prototypical Networks for as many steps as ``frozen_adapter`` trains its generator:
  the same extra meta-steps spent on the whole base instead.

The ``support_adapter`` run is also scored with its adapters off (its jointly trained
base under Prototypical Networks); ``frozen_adapter``'s base with its adapters off is
the ``protonet`` run itself (the same weights and episodes).
Meta-training is ``hn.keras.MetaModel(transformer, learner).fit()`` on
``hypernet.data.episodes`` meta-batches, Adam with a cosine decay of the rate to zero.

Each (method, seed) runs in ``ROOT/<method>_s<seed>`` and writes ``result.json`` (and
the target's weights, ``base.weights.h5``); a run that has its ``result.json`` is read,
not run again. Writes ``OUT/fewshot_transformer.md`` (also printed): per method each
seed's accuracy +- CI95 in both settings, the mean +- sd over seeds, the trainable
parameters, the wall times; the paired differences on the shared episodes per seed, their
mean +- sd over seeds and the seeds pooled; the adapters' statistics
(:func:`adapter_statistics`, computed once from a finished run's ``meta.weights.h5`` and
kept in its ``result.json``); and the command.

    python experiments/fewshot_transformer.py --data_dir=../shared/data/omniglot \\
        --root=/tmp/fewshot_transformer --seeds=0,1,2

``--no-run`` only reads finished runs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # Run as a file (python experiments/fewshot_transformer.py).
  sys.path.insert(0, REPO)

METHODS = ("protonet", "support_adapter", "frozen_adapter", "protonet_continued")
DEFAULT_METHODS = METHODS[:3]
LABELS = {
    "protonet": "(1) Prototypical Networks, all weights meta-trained",
    "support_adapter": "(2) support-set adapters + base, meta-trained together",
    "frozen_adapter": "(3) support-set adapters on (1)'s frozen base",
    "protonet_continued": "(1) continued by Prototypical Networks for (3)'s extra steps",
}
# The kernels --adapt names: path patterns of the target's weights.
ADAPT = {"attention": "block*_mha/*/kernel",
         "mlp": "block*_mlp_*/kernel",
         "attention+mlp": "block*_mha/*/kernel,block*_mlp_*/kernel"}
SETTINGS = (("5w1s", 5, 1), ("5w5s", 5, 5))
WAYS = 5
EVAL_SEED = 12345            # config.meta.eval_seed's default: the meta-test episodes
SPLIT_SEED = 0               # config.data.split_seed of the standard split
NUM_TEST_CHARACTERS = 423    # 1,623 - 1,200 (Vinyals et al. 2016)
ZIPS = "images_background.zip,images_evaluation.zip"


# -- the target -------------------------------------------------------------------------
def make_transformer(*, width: int = 64, heads: int = 4, blocks: int = 2,
                     mlp_width: int = 128, ways: int = WAYS, image_size: int = 28,
                     seed: int = 0):
  """The transformer over image rows and its body / head split.

  Returns:
    ``(model, split)``: ``model`` maps ``[B, S, S, 1]`` images to ``[B, ways]`` logits;
    ``split`` is ``dict(body=..., head_model=...)``, the two models sharing its layers
    that ``PrototypicalNetwork`` / ``SupportAdapter`` take (``body``: images -> ``[B,
    width]`` features, the mean over tokens after the final LayerNorm).
  """
  import keras  # pylint: disable=g-import-not-at-top
  L = keras.layers
  keras.utils.set_random_seed(seed)
  image = keras.Input((image_size, image_size, 1), name="image")
  rows = L.Reshape((image_size, image_size), name="rows")(image)      # 28 tokens of 28
  h = L.Dense(width, name="token_embedding")(rows)
  positions = keras.ops.cast(
      keras.ops.cumsum(keras.ops.ones_like(rows[..., 0]), axis=1) - 1, "int32")
  h = h + L.Embedding(image_size, width, name="position_embedding")(positions)
  for b in range(blocks):
    a = L.LayerNormalization(name=f"block{b}_ln_attention")(h)
    h = h + L.MultiHeadAttention(heads, width // heads, name=f"block{b}_mha")(a, a)
    f = L.LayerNormalization(name=f"block{b}_ln_mlp")(h)
    f = L.Dense(mlp_width, activation="gelu", name=f"block{b}_mlp_in")(f)
    h = h + L.Dense(width, name=f"block{b}_mlp_out")(f)
  h = L.LayerNormalization(name="final_ln")(h)
  features = L.GlobalAveragePooling1D(name="pool")(h)
  head = L.Dense(ways, name="head")
  model = keras.Model(image, head(features), name="row_transformer")
  body = keras.Model(image, features, name="body")
  head_model = keras.Sequential([keras.Input((width,)), head], name="head_model")
  return model, dict(body=body, head_model=head_model)


def count(variables) -> int:
  return int(sum(math.prod(v.shape) for v in variables))


# -- data -------------------------------------------------------------------------------
def load_split(data_dir: str, zips: str = ZIPS,
               num_test_characters: int = NUM_TEST_CHARACTERS):
  """``(train, test)`` :class:`hypernet.data.episodes.ClassIndexed` of the standard split
  (``configs/omniglot_standard_protonet.py``'s data fields)."""
  from hypernet.data import episodes, omniglot  # pylint: disable=g-import-not-at-top
  train, test = omniglot.split_by_character(
      [z.strip() for z in zips.split(",")], SPLIT_SEED,
      num_test_characters=num_test_characters, rotations=(0, 90, 180, 270),
      data_dir=data_dir)
  return (episodes.class_indexed(train.images, train.labels),
          episodes.class_indexed(test.images, test.labels))


# -- one run ----------------------------------------------------------------------------
def learner_args(args, method: str, seed: int, split) -> Dict:
  """The learner's arguments: ``split`` (body and head models) for Prototypical
  Networks; with the adapters' fields for ``SupportAdapter`` (the generator's initial
  weights seeded by ``seed + --generator_seed``)."""
  if method in ("protonet", "protonet_continued"):
    return dict(split)
  return dict(adapt=ADAPT[args.adapt], rank=args.rank, adapter_scale=args.adapter_scale,
              generator_widths=tuple(args.generator_widths), task_dim=args.task_dim,
              train_base=method == "support_adapter", seed=seed + args.generator_seed,
              **split)


def evaluate(learner, test, shots: int, episodes_count: int, queries: int,
             batch: int) -> Dict:
  """Accuracy +- CI95 over ``episodes_count`` fixed 5-way ``shots``-shot meta-test
  episodes (episode ``i`` of seed :data:`EVAL_SEED`), ``queries`` per class."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet.data import episodes  # pylint: disable=g-import-not-at-top
  from hypernet.meta import meta_batch  # pylint: disable=g-import-not-at-top
  from hypernet.tasks import objectives  # pylint: disable=g-import-not-at-top
  fn = episodes.make_episode_fn(test, num_ways=WAYS, num_shots=shots, num_queries=queries,
                                seed=EVAL_SEED)
  data = episodes.meta_batch_dataset(fn, meta_batch_size=1,
                                     num_steps=episodes_count).unbatch().batch(batch)

  @tf.function
  def per_task(tasks):
    return meta_batch.meta_batch_loss(learner, tasks, before_metrics=False,
                                      accuracy=True).per_task["accuracy"]

  t0 = time.time()
  acc = np.concatenate([per_task(b).numpy() for b in data]).astype(np.float64)
  mean, ci = objectives.mean_and_ci95(acc.sum(), np.square(acc).sum(), len(acc))
  return {"accuracy": mean, "accuracy_ci95": ci, "episodes": len(acc),
          "eval_wall_time_sec": time.time() - t0,
          "per_episode": [round(float(a), 6) for a in acc]}


def run_one(args, method: str, seed: int, train, test, workdir: str) -> Dict:
  """Meta-trains ``method`` for ``seed`` in ``workdir`` and scores it; returns and writes
  ``workdir/result.json``."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import hypernet as hn  # pylint: disable=g-import-not-at-top
  from hypernet.data import episodes  # pylint: disable=g-import-not-at-top
  os.makedirs(workdir, exist_ok=True)
  model, split = make_transformer(width=args.width, heads=args.heads, blocks=args.blocks,
                                  mlp_width=args.mlp_width, seed=seed)
  if method in ("frozen_adapter", "protonet_continued"):
    base = os.path.join(args.root, f"protonet_s{seed}", "base.weights.h5")
    if not os.path.exists(base):
      raise FileNotFoundError(f"{method} needs the protonet run's base {base}: run "
                              "--methods=protonet first (same --root and seed).")
    model.load_weights(base)
  learner = "protonet" if method.startswith("protonet") else "support_adapter"
  meta = hn.keras.MetaModel(model, learner, learner_args=learner_args(args, method, seed, split))
  trainable = count(meta.trainable_weights)
  generator = (meta.learner.parameter_counts()["generator"]
               if learner == "support_adapter" else 0)
  schedule = keras.optimizers.schedules.CosineDecay(args.lr, args.steps)
  meta.compile(optimizer=keras.optimizers.Adam(schedule))
  # Meta-training episodes: 5-way 1-shot, a pure function of (seed, index).
  fn = episodes.make_episode_fn(train, num_ways=WAYS, num_shots=1,
                                num_queries=args.train_queries, seed=seed)
  data = episodes.meta_batch_dataset(fn, meta_batch_size=args.meta_batch)
  log_every = max(1, min(args.log_every, args.steps))
  epochs = args.steps // log_every
  load_start = os.getloadavg()
  t0, c0 = time.time(), time.process_time()
  history = meta.fit(data, steps_per_epoch=log_every, epochs=epochs, verbose=0)
  steps = epochs * log_every
  train_wall, train_cpu = time.time() - t0, time.process_time() - c0
  model.save_weights(os.path.join(workdir, "base.weights.h5"))   # The target alone.
  meta.save_weights(os.path.join(workdir, "meta.weights.h5"))     # With the generator.
  result = {"method": method, "seed": seed, "steps": steps,
            "meta_batch": args.meta_batch, "train_queries": args.train_queries,
            "trainable_parameters": trainable, "generator_parameters": generator,
            "target_parameters": count(model.trainable_weights),
            "train_wall_time_sec": train_wall, "train_cpu_time_sec": train_cpu,
            "curve": {"step": [log_every * (i + 1) for i in range(epochs)],
                      "loss": [float(v) for v in history.history["loss"]],
                      "accuracy": [float(v) for v in history.history["accuracy"]]},
            "learner_args": {k: v for k, v in meta.learner_args.items()
                             if k not in ("body", "head_model")},
            "args": {k: v for k, v in vars(args).items() if k not in ("execute",)},
            "load_average_start": load_start, "load_average_trained": os.getloadavg()}
  for name, _, shots in SETTINGS:
    result[name] = evaluate(meta.learner, test, shots, args.eval_episodes,
                            args.eval_queries, args.eval_batch)
    print(f"{method} s{seed} {name}: {100 * result[name]['accuracy']:.2f} +- "
          f"{100 * result[name]['accuracy_ci95']:.2f}", flush=True)
  if method == "support_adapter":   # Its base with the adapters off (frozen_adapter's: protonet).
    proto = hn.meta.PrototypicalNetwork(model, "sparse_softmax_cross_entropy", **split)
    result["adapters_off"] = {name: evaluate(proto, test, shots, args.eval_episodes,
                                             args.eval_queries, args.eval_batch)
                              for name, _, shots in SETTINGS}
  result["wall_time_sec"] = time.time() - t0
  result["cpu_time_sec"] = time.process_time() - c0
  with open(os.path.join(workdir, "result.json"), "w") as f:
    json.dump(result, f, indent=1, default=lambda o: list(o) if isinstance(o, tuple)
              else str(o))
  return result


def adapter_statistics(args, method: str, seed: int, test, workdir: str,
                       episodes_count: int = 200) -> Dict:
  """How large the generated adapters of a finished run are, and how much they vary with
  the task, over the first ``episodes_count`` 5-way 1-shot meta-test episodes' support
  sets (those of :func:`evaluate`), every adapted kernel pooled:

  * ``relative_update``: the mean over tasks of ``||dW_t|| / ||W_0||`` (Frobenius);
  * ``task_specific_share``: ``sum_t ||dW_t - mean_t dW_t||^2 / sum_t ||dW_t||^2``, the
    share of the update that depends on the task (0: one fixed low-rank update);
  * ``embedding_spread``: ``sqrt(mean_t ||e_t - mean_t e_t||^2) / ||mean_t e_t||``, how
    much the generator's condition (the support set's mean prototype) varies by task.

  Read from ``workdir/meta.weights.h5``.
  """
  import hypernet as hn  # pylint: disable=g-import-not-at-top
  from hypernet.data import episodes  # pylint: disable=g-import-not-at-top
  model, split = make_transformer(width=args.width, heads=args.heads, blocks=args.blocks,
                                  mlp_width=args.mlp_width, seed=seed)
  meta = hn.keras.MetaModel(model, "support_adapter",
                            learner_args=learner_args(args, method, seed, split))
  meta.load_weights(os.path.join(workdir, "meta.weights.h5"))
  learner = meta.learner
  base = {p: v.numpy().astype(np.float64) for p, v in
          hn.variable_paths(model, trainable=True).items() if p in learner.adapter_paths}
  fn = episodes.make_episode_fn(test, num_ways=WAYS, num_shots=1,
                                num_queries=args.eval_queries, seed=EVAL_SEED)
  deltas, embeddings = [], []
  for i in range(episodes_count):
    task = fn(i)
    adapted = learner.task_weights(task["support_x"], task["support_y"])
    deltas.append(np.concatenate([(adapted[p].numpy() - base[p]).ravel() for p in base]))
    embeddings.append(learner.task_embedding(task["support_x"], task["support_y"]).numpy())
  deltas = np.stack(deltas)                                  # [tasks, adapted scalars]
  embeddings = np.stack(embeddings).astype(np.float64)      # [tasks, D]
  center = embeddings.mean(0)
  norm0 = np.sqrt(sum(np.sum(np.square(w)) for w in base.values()))
  spread = np.sum(np.square(deltas - deltas.mean(0)))
  return {"episodes": episodes_count,
          "relative_update": float(np.mean(np.linalg.norm(deltas, axis=1)) / norm0),
          "task_specific_share": float(spread / max(np.sum(np.square(deltas)), 1e-30)),
          "embedding_spread": float(np.sqrt(np.mean(np.sum(np.square(embeddings - center),
                                                           1))) / np.linalg.norm(center))}


def stats_table(results: Dict[str, Dict[int, Dict]]) -> str:
  """Markdown of the adapter runs' :func:`adapter_statistics`; "" without any."""
  rows = [(m, s, r["adapter_stats"]) for m, by_seed in results.items()
          for s, r in sorted(by_seed.items()) if "adapter_stats" in r]
  if not rows:
    return ""
  lines = ["| method | seed | mean `‖ΔW_t‖ / ‖W_0‖` | task-specific share of `‖ΔW_t‖²` | "
           "spread of the condition `e_t` |", "|---|---|---|---|---|"]
  lines += [f"| `{m}` | {s} | {st['relative_update']:.4f} | {st['task_specific_share']:.3f} "
            f"| {st['embedding_spread']:.3f} |" for m, s, st in rows]
  return "\n".join(lines)


# -- the table --------------------------------------------------------------------------
def _cell(m: Dict) -> str:
  return f"{100 * m['accuracy']:.2f} +- {100 * m['accuracy_ci95']:.2f}"


def _mean_sd(values: Sequence[float]) -> str:
  v = 100 * np.asarray(values, np.float64)
  return f"{v.mean():.2f}" + (f" +- {v.std(ddof=1):.2f}" if len(v) > 1 else "")


def table(results: Dict[str, Dict[int, Dict]]) -> str:
  """Markdown: a row per method and seed (accuracy +- CI95 in % per setting, adapters
  off where there are adapters, trainable parameters, meta-training wall and CPU time,
  evaluation wall time), then per method the mean +- sd over seeds."""
  names = [s[0] for s in SETTINGS]
  lines = ["| method | seed | " + " | ".join(names) + " | " +
           " | ".join(f"{n}, adapters off" for n in names) +
           " | trainable parameters | meta-training | evaluation |",
           "|---|---|" + "---|" * (2 * len(names) + 3)]
  for method, by_seed in results.items():
    for seed, r in sorted(by_seed.items()):
      off = r.get("adapters_off")
      evals = r["wall_time_sec"] - r["train_wall_time_sec"]
      lines.append(
          f"| {LABELS[method]} (`{method}`) | {seed} | " +
          " | ".join(_cell(r[n]) for n in names) + " | " +
          " | ".join(_cell(off[n]) if off else "" for n in names) +
          f" | {r['trainable_parameters']:,} | {r['train_wall_time_sec'] / 60:.1f} min "
          f"({r['train_cpu_time_sec'] / 60:.1f} min CPU, {r['steps']:,} steps) | "
          f"{evals / 60:.1f} min |")
    if len(by_seed) > 1:
      rows = list(by_seed.values())
      off = [r["adapters_off"] for r in rows if "adapters_off" in r]
      lines.append(
          f"| {LABELS[method]}: mean +- sd | {len(rows)} seeds | " +
          " | ".join(f"**{_mean_sd([r[n]['accuracy'] for r in rows])}**" for n in names)
          + " | " + " | ".join(_mean_sd([o[n]["accuracy"] for o in off]) if off else ""
                               for n in names) + " | | | |")
  return "\n".join(lines)


def command(args, methods: Sequence[str], seeds: Sequence[int]) -> str:
  """The command line that produces (or reads) these runs."""
  parts = ["python", "experiments/fewshot_transformer.py", f"--data_dir={args.data_dir}",
           f"--root={args.root}", f"--methods={','.join(methods)}",
           f"--seeds={','.join(map(str, seeds))}"]
  defaults = vars(parser().parse_args([]))
  for k in ("steps", "meta_batch", "lr", "train_queries", "eval_episodes", "eval_queries",
            "adapt", "rank", "adapter_scale", "generator_widths", "task_dim", "width",
            "heads", "blocks", "mlp_width", "zips", "num_test_characters"):
    v = getattr(args, k)
    if v != defaults[k]:
      v = ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v
      parts.append(f"--{k}={v}")
  return " ".join(shlex.quote(p) for p in parts)


# (label, run, reference run): a run's accuracy minus another's on the same episodes.
COMPARISONS = (
    ("(2) - (1)", "support_adapter", "protonet"),
    ("(2) - (2) with its adapters off", "support_adapter", "support_adapter/adapters_off"),
    ("(3) - (1) (= (3) - its base with adapters off)", "frozen_adapter", "protonet"),
    ("(3) - (1) continued", "frozen_adapter", "protonet_continued"),
    ("(1) continued - (1)", "protonet_continued", "protonet"),
)


def paired(a: Sequence[float], b: Sequence[float]):
  """``(mean, CI95)`` of the per-episode differences ``a - b`` (the same episodes)."""
  from hypernet.tasks import objectives  # pylint: disable=g-import-not-at-top
  d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
  return objectives.mean_and_ci95(d.sum(), np.square(d).sum(), len(d))


def _scores(results, name: str, seed: int) -> Optional[Dict]:
  method, _, part = name.partition("/")
  r = results.get(method, {}).get(seed)
  if r is None or (part and part not in r):
    return None
  r = r[part] if part else r
  return r if all("per_episode" in r[n] for n, _, _ in SETTINGS) else None


def pooled(per_seed: Sequence[Sequence[float]]):
  """``(mean, CI95)`` over the episodes of the per-episode differences averaged over the
  seeds (``per_seed``: a list of differences per seed, on the same episodes): the mean
  over seeds, its interval from the episodes alone (the seeds' spread is the sd)."""
  from hypernet.tasks import objectives  # pylint: disable=g-import-not-at-top
  d = np.mean(np.asarray(per_seed, np.float64), axis=0)
  return objectives.mean_and_ci95(d.sum(), np.square(d).sum(), len(d))


def differences(results: Dict[str, Dict[int, Dict]]) -> str:
  """Markdown: for each comparison of :data:`COMPARISONS` whose runs exist, per seed the
  mean per-episode difference in accuracy (points) +- its CI95 over the shared
  episodes; with several seeds, the mean +- sd over seeds and the seeds pooled
  (:func:`pooled`); "" when there is none."""
  names = [s[0] for s in SETTINGS]
  lines = ["| difference (points) | seed | " + " | ".join(names) + " |",
           "|---|---|" + "---|" * len(names)]
  seeds = sorted({s for by_seed in results.values() for s in by_seed})
  found = False
  for label, run, ref in COMPARISONS:
    means = {n: [] for n in names}
    diffs = {n: [] for n in names}
    for seed in seeds:
      a, b = _scores(results, run, seed), _scores(results, ref, seed)
      if a is None or b is None:
        continue
      found = True
      cells = []
      for n in names:
        mean, ci = paired(a[n]["per_episode"], b[n]["per_episode"])
        means[n].append(mean)
        diffs[n].append(np.subtract(a[n]["per_episode"], b[n]["per_episode"]))
        cells.append(f"{100 * mean:+.2f} +- {100 * ci:.2f}")
      lines.append(f"| {label} | {seed} | " + " | ".join(cells) + " |")
    count = len(means[names[0]])
    if count > 1:
      lines.append(f"| {label}: mean +- sd | {count} seeds | " + " | ".join(
          f"**{100 * np.mean(means[n]):+.2f} +- {100 * np.std(means[n], ddof=1):.2f}**"
          for n in names) + " |")
      cells = [pooled(diffs[n]) for n in names]
      lines.append(f"| {label}: seeds pooled, +- CI95 | {count} seeds x "
                   f"{len(diffs[names[0]][0]):,} episodes | " +
                   " | ".join(f"{100 * m:+.2f} +- {100 * ci:.2f}" for m, ci in cells) + " |")
  return "\n".join(lines) if found else ""


def report(args, results: Dict[str, Dict[int, Dict]], methods, seeds) -> str:
  first = next(iter(next(iter(results.values())).values()))
  a = first["args"]
  head = (f"Accuracy (%) +- CI95 over {first['5w1s']['episodes']:,} fixed meta-test episodes "
          f"({a['eval_queries']} queries per class) of the standard split's 1,692 held-out "
          f"classes; one model per method and seed, meta-trained {first['steps']:,} steps "
          f"of {a['meta_batch']} 5-way 1-shot episodes ({a['train_queries']} queries per "
          f"class), Adam {a['lr']:g} with a cosine decay. Transformer: {a['blocks']} pre-LN "
          f"blocks, width {a['width']}, {a['heads']} heads, MLP {a['mlp_width']}; "
          f"{first['target_parameters']:,} weights. Adapters: rank {a['rank']} on "
          f"`{ADAPT[a['adapt']]}`, generator hidden widths {tuple(a['generator_widths'])}.")
  diffs, stats = differences(results), stats_table(results)
  parts = [head, table(results)]
  if diffs:
    parts += ["Paired differences on the same meta-test episodes (accuracy points, +- "
              "CI95 of the mean per-episode difference; seeds pooled: the per-episode "
              "difference averaged over the seeds, its CI95 over the episodes):", diffs]
  if stats:
    parts += ["The generated adapters on the first 5-way 1-shot meta-test tasks' support "
              "sets (all adapted kernels pooled; task-specific share: the part of the "
              "update that varies from task to task):", stats]
  return "\n\n".join(parts + ["Command:\n\n    " + command(args, methods, seeds)]) + "\n"


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--data_dir", default=os.path.join(REPO, "..", "shared", "data", "omniglot"))
  p.add_argument("--root", default="/tmp/fewshot_transformer")
  p.add_argument("--out", default=os.path.join(REPO, "experiments"))
  p.add_argument("--methods", default=",".join(DEFAULT_METHODS))
  p.add_argument("--seeds", default="0")
  p.add_argument("--steps", type=int, default=3000, help="meta-steps per method")
  p.add_argument("--meta_batch", type=int, default=4, help="episodes per meta-step")
  p.add_argument("--lr", type=float, default=1e-3)
  p.add_argument("--train_queries", type=int, default=5)
  p.add_argument("--eval_episodes", type=int, default=1000)
  p.add_argument("--eval_queries", type=int, default=15)
  p.add_argument("--eval_batch", type=int, default=50, help="episodes per evaluation call")
  p.add_argument("--log_every", type=int, default=100)
  p.add_argument("--adapt", choices=sorted(ADAPT), default="attention")
  p.add_argument("--rank", type=int, default=4)
  p.add_argument("--adapter_scale", type=float, default=1.0)
  p.add_argument("--generator_widths", type=lambda s: [int(w) for w in s.split(",") if w],
                 default=[32])
  p.add_argument("--task_dim", type=int, default=0)
  p.add_argument("--generator_seed", type=int, default=0,
                 help="added to the seed: the generator's initial weights")
  p.add_argument("--width", type=int, default=64)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--blocks", type=int, default=2)
  p.add_argument("--mlp_width", type=int, default=128)
  p.add_argument("--zips", default=ZIPS)
  p.add_argument("--num_test_characters", type=int, default=NUM_TEST_CHARACTERS)
  p.add_argument("--no-run", dest="execute", action="store_false",
                 help="only read finished runs")
  return p


def main(argv=None) -> Dict[str, Dict[int, Dict]]:
  args = parser().parse_args(argv)
  methods = [m for m in args.methods.split(",") if m]
  unknown = [m for m in methods if m not in METHODS]
  if unknown:
    raise SystemExit(f"--methods: unknown {unknown}; choose from {list(METHODS)}.")
  seeds = [int(s) for s in args.seeds.split(",")]
  data = None
  results: Dict[str, Dict[int, Dict]] = {}
  for method in methods:
    results[method] = {}
    for seed in seeds:
      workdir = os.path.join(args.root, f"{method}_s{seed}")
      path = os.path.join(workdir, "result.json")
      if not os.path.exists(path):
        if not args.execute:
          raise FileNotFoundError(f"{workdir} has no result.json: run it (drop --no-run).")
        if data is None:
          data = load_split(os.path.expanduser(args.data_dir), args.zips,
                            args.num_test_characters)
        run_one(args, method, seed, *data, workdir)
      with open(path) as f:
        result = json.load(f)
      if (args.execute and "adapter" in method and "adapter_stats" not in result
          and os.path.exists(os.path.join(workdir, "meta.weights.h5"))):
        if data is None:
          data = load_split(os.path.expanduser(args.data_dir), args.zips,
                            args.num_test_characters)
        result["adapter_stats"] = adapter_statistics(args, method, seed, data[1], workdir,
                                                     min(200, args.eval_episodes))
        with open(path, "w") as f:
          json.dump(result, f, indent=1)
      results[method][seed] = result
  text = report(args, results, methods, seeds)
  print(text)
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "fewshot_transformer.md"), "w") as f:
    f.write(text)
  return results


if __name__ == "__main__":
  main()
