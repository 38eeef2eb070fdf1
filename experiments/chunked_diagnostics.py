"""Why a chunked hypernetwork underfits: per-layer relative step sizes of the generated
weights, against direct training of the same target, at given learning rates.

Trains a config for ``--steps`` steps with the one train loop (``loop.Trainer``) and
every ``--every`` steps records, per target layer ``l``, the relative change of its
weights ``||w_l(t + every) - w_l(t)|| / ||w_l(t)||`` divided by ``every`` (the mean
relative step), for each variant. Prints a markdown table (variants as columns, layers
as rows, in units of 1e-3 per step) with the ratio to the first ``direct`` variant.

    python -m experiments.chunked_diagnostics --config=digits_hyper --steps=200 \
        --chunk_size=256 --chunk_emb_dim=16 --hidden=32 \
        --variants=direct:1e-3,chunked:1e-3,chunked:3e-3,chunked:1e-2

A variant is ``KIND:LR``: ``direct`` (``hypernet.kind = "none"``) or ``chunked`` (the
config's chunked hypernetwork; chunk settings from the config unless ``--chunk_size``,
``--chunk_emb_dim``, ``--hidden`` are given) trained with Adam at learning rate ``LR``.
"""
from __future__ import annotations

import difflib
import os
import tempfile
from typing import Dict

from absl import app
from absl import flags
from absl import logging
import numpy as np

from hypernet import config_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CONFIG = flags.DEFINE_string("config", "digits_hyper", "Config to start from: a name in "
                              "configs/ (configs/<name>.py), or a .py file.")
_STEPS = flags.DEFINE_integer("steps", 300, "Training steps per variant.")
_EVERY = flags.DEFINE_integer("every", 50, "Steps between weight snapshots.")
_VARIANTS = flags.DEFINE_list("variants", ["direct:1e-3", "chunked:1e-3", "chunked:3e-3"],
                              "Variants KIND:LR to compare (see the module doc).")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "config.data.data_dir override.")
_CHUNK = flags.DEFINE_integer("chunk_size", None, "hypernet.chunk_size override.")
_EMB = flags.DEFINE_integer("chunk_emb_dim", None, "hypernet.chunk_emb_dim override.")
_HIDDEN = flags.DEFINE_list("hidden", None, "hypernet.hidden override, e.g. 32.")
_SEED = flags.DEFINE_integer("seed", 0, "config.seed.")

KINDS = {"direct": "none", "chunked": "chunked"}


def config_path(name: str) -> str:
  """The config file ``--config`` names: ``configs/<name>.py`` for a bare name
  (``digits_hyper``), else ``name`` itself when it is a ``.py`` file
  (``configs/digits_hyper.py``)."""
  if name.endswith(".py") and os.path.isfile(name):
    return name
  return os.path.join(REPO, "configs", f"{name}.py")


def load_config(name: str):
  """``configs/<name>.py:get_config()`` (see :func:`config_path`)."""
  return config_lib.load_config_file(config_path(name))


def parse_flags(argv):
  """absl flag parsing for this script (``app.run(main, flags_parser=parse_flags)``).

  ``--config`` here is a config NAME from configs/ (a plain string flag), not the config
  FILE of ``hypernet.training.cli.parse_flags`` (ml_collections), so that parser does not apply.
  ``--help`` / ``--helpfull`` print the flags and exit 0; a bad flag or value, or a
  ``--config`` naming no config, is one line on stderr and exit status 1.

  Returns:
    The remaining (positional) arguments, program name first.
  """
  import sys  # pylint: disable=g-import-not-at-top
  program = "chunked_diagnostics"
  try:
    rest = flags.FLAGS(argv)
  except SystemExit:
    # absl's --help / --helpfull print the usage and exit 1; asking for help succeeds.
    if any(a in ("-h", "-help", "--help", "--helpshort", "--helpfull", "-?")
           for a in argv[1:]):
      sys.exit(0)
    raise
  except flags.Error as e:
    sys.stderr.write(f"{program}: error: {e}\n")
    sys.exit(1)
  if not os.path.isfile(config_path(_CONFIG.value)):
    names = sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "configs"))
                   if f.endswith(".py") and not f.startswith("_"))
    close = difflib.get_close_matches(_CONFIG.value, names, n=1)
    hint = f" Did you mean {close[0]}?" if close else f" Known: {', '.join(names)}."
    sys.stderr.write(f"{program}: error: --config={_CONFIG.value}: no config "
                     f"configs/{_CONFIG.value}.py.{hint}\n")
    sys.exit(1)
  return rest


def _layer_weights(trainer) -> Dict[str, np.ndarray]:
  """``{layer: all its kernel and bias scalars}`` as the target sees them now."""
  from hypernet.core import functional  # pylint: disable=g-import-not-at-top
  source = trainer.task.source
  values = {p: v.numpy() for p, v in functional.variable_paths(source.target,
                                                               trainable=True).items()}
  values.update({p: w.numpy() for p, w in source.weights().items()})
  layers: Dict[str, list] = {}
  for p in sorted(values):
    layers.setdefault(p.rsplit("/", 1)[0], []).append(values[p].ravel())
  return {l: np.concatenate(v) for l, v in layers.items()}


def raw_gradient_rms(config, num_batches: int = 5) -> Dict[str, float]:
  """``{layer: RMS of gain * dL/dw}`` at initialisation, over ``num_batches`` batches.

  ``gain * dL/dw`` is the gradient a chunked hypernetwork's output head receives from the
  layer's chunk elements (each generated weight is ``gain * raw + mean``); ``gain`` is
  the layer's initial standard deviation from :mod:`hypernet.hypernetworks.init`. One
  shared head sums these over every chunk, and Adam divides by their overall RMS.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from hypernet.core import functional  # pylint: disable=g-import-not-at-top
  from hypernet.tasks import objectives, protocol
  from hypernet.hypernetworks import base  # pylint: disable=g-import-not-at-top
  config = config.copy_and_resolve_references()
  config.hypernet.kind = "none"
  task = protocol.build_task(config)
  variables = functional.variable_paths(task.target, trainable=True)
  spec = functional.weight_spec(task.target, config.hypernet.targets)
  stats = base.stats_for(spec, {p: variables[p].numpy() for p in spec}, config.hypernet.init)
  sums: Dict[str, list] = {}
  for i, batch in enumerate(task.train_dataset(config.batch_size, config.seed)):
    if i == num_batches:
      break
    weights = {p: tf.convert_to_tensor(variables[p]) for p in spec}
    with tf.GradientTape() as tape:
      tape.watch(list(weights.values()))
      logits = functional.functional_call(task.target, weights, batch["image"], training=True)
      per_example, _ = objectives.classification(logits, batch["label"])
      loss = tf.reduce_mean(per_example)
    grads = tape.gradient(loss, weights)
    for p, g in grads.items():
      sums.setdefault(p.rsplit("/", 1)[0], []).append((stats[p][1] * g.numpy()).ravel())
  return {l: float(np.sqrt(np.mean(np.square(np.concatenate(v))))) for l, v in sums.items()}


def relative_steps(config, steps: int, every: int) -> Dict[str, float]:
  """``{layer: mean ||dw|| / ||w|| per step}`` over ``steps`` steps of training."""
  from hypernet.training import loop  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as workdir:
    trainer = loop.Trainer(config, workdir)
    iterator = trainer.train_iterator(0)
    before = _layer_weights(trainer)
    sums = {l: 0.0 for l in before}
    for _ in range(steps // every):
      trainer.train_chunk(iterator, every)
      after = _layer_weights(trainer)
      for l in sums:
        sums[l] += np.linalg.norm(after[l] - before[l]) / np.linalg.norm(before[l]) / every
      before = after
    trainer.close()
  return {l: s / (steps // every) for l, s in sums.items()}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  results = {}
  config = load_config(_CONFIG.value)
  if _DATA_DIR.value:
    config.data.data_dir = _DATA_DIR.value
  config.seed = _SEED.value
  rms = raw_gradient_rms(config)
  print(f"RMS of gain * dL/dw at init (the shared head's gradient per chunk element), "
        f"{_CONFIG.value}, 5 batches, seed {_SEED.value}\n")
  print("| layer | RMS | ratio to the smallest |\n|---|---:|---:|")
  for l, v in rms.items():
    print(f"| {l} | {v:.3g} | {v / min(rms.values()):.1f} |")
  print(flush=True)
  for variant in _VARIANTS.value:
    kind, _, lr = variant.partition(":")
    if kind not in KINDS or not lr:
      raise app.UsageError(f"--variants: {variant!r} is not KIND:LR with KIND in "
                           f"{list(KINDS)}, e.g. chunked:3e-3.")
    config = load_config(_CONFIG.value)
    overrides = {"hypernet.kind": KINDS[kind], "optim.lr": float(lr),
                 "num_steps": _STEPS.value, "seed": _SEED.value}
    if _DATA_DIR.value:
      overrides["data.data_dir"] = _DATA_DIR.value
    if _CHUNK.value:
      overrides["hypernet.chunk_size"] = _CHUNK.value
    if _EMB.value:
      overrides["hypernet.chunk_emb_dim"] = _EMB.value
    if _HIDDEN.value:
      overrides["hypernet.hidden"] = tuple(int(h) for h in _HIDDEN.value)
    config.update_from_flattened_dict(overrides)
    results[variant] = relative_steps(config, _STEPS.value, _EVERY.value)
    print(f"{variant}: done", flush=True)
  if not results:
    return
  layers = list(next(iter(results.values())))
  base = next((n for n in results if n.startswith("direct")), None)
  names = list(results)
  print(f"\nMean relative step ||dw|| / ||w|| per step (1e-3), {_CONFIG.value}, "
        f"{_STEPS.value} steps, seed {_SEED.value}"
        + (f"; in brackets: ratio to {base}" if base else "") + "\n")
  print("| layer | " + " | ".join(names) + " |")
  print("|---|" + "---:|" * len(names))
  for l in layers:
    cells = []
    for n in names:
      v = results[n][l]
      ratio = f" ({v / results[base][l]:.2f})" if base and n != base else ""
      cells.append(f"{1e3 * v:.3f}{ratio}")
    print(f"| {l} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
