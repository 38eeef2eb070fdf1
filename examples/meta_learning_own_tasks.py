"""MAML and ANIL on your own few-shot tasks, through `hn.meta`.

Run: python examples/meta_learning_own_tasks.py [--steps=300] [--learner=maml|anil]
Each task is a 5-way 1-shot classification of the 8x8 digits hypernet ships (real images, no
download) with its own random choice and order of classes, so before adaptation the
model is at chance (20%). Meta-training uses the train images, meta-testing new tasks
drawn from held-out images.
"""
import argparse

import keras
import numpy as np
import tensorflow as tf
import hypernet as hn

WAYS, SHOTS, QUERIES = 5, 1, 5


def sample_tasks(x, y, num_tasks, rng):
  """A meta-batch: support_x [T, WAYS*SHOTS, 64], support_y [T, WAYS*SHOTS], query_*."""
  batch = {k: [] for k in ("support_x", "support_y", "query_x", "query_y")}
  for _ in range(num_tasks):
    classes = rng.choice(10, WAYS, replace=False)            # label i = classes[i]
    sx, sy, qx, qy = [], [], [], []
    for label, c in enumerate(classes):
      idx = rng.choice(np.flatnonzero(y == c), SHOTS + QUERIES, replace=False)
      sx.append(x[idx[:SHOTS]]); qx.append(x[idx[SHOTS:]])
      sy += [label] * SHOTS; qy += [label] * QUERIES
    for k, v in zip(batch, (np.concatenate(sx), sy, np.concatenate(qx), qy)):
      batch[k].append(v)
  return {k: tf.constant(np.array(v), tf.float32 if k.endswith("x") else tf.int32)
          for k, v in batch.items()}


def main(steps: int = 300, learner: str = "maml", seed: int = 0) -> dict:
  x, y = hn.data.digits_arrays()                              # [1797, 8, 8] uint8, [1797]
  x = (x.reshape(-1, 64) / 16.0).astype("float32")                            # [1797, 64] in [0, 1]
  perm = np.random.default_rng(seed).permutation(len(x))
  train, test = perm[:1400], perm[1400:]

  keras.utils.set_random_seed(seed)
  model = keras.Sequential([
      keras.Input((64,)),
      keras.layers.Dense(64, activation="relu", name="body1"),
      keras.layers.Dense(64, activation="relu", name="body2"),
      keras.layers.Dense(WAYS, name="head"),
  ])
  if learner == "maml":       # every weight adapted, second-order meta-gradient
    meta_learner = hn.meta.MAML(model, "sparse_softmax_cross_entropy",
                                inner_lr=0.5, inner_steps=1)
  else:                       # only head/* adapted; the body runs once per task
    meta_learner = hn.meta.ANIL(model, "sparse_softmax_cross_entropy", head="head/*",
                                inner_lr=0.5, inner_steps=5)
  variables = model.trainable_variables + list(meta_learner.trainable_variables)
  opt = keras.optimizers.Adam(1e-3)

  @tf.function
  def meta_step(batch):
    with tf.GradientTape() as tape:
      # Adapts to each task's support set, then the mean query loss at the fast weights.
      result = hn.meta.meta_batch_loss(meta_learner, batch, before_metrics=False)
    grads = tape.gradient(result.loss, variables)
    opt.apply_gradients(zip(grads, variables))
    return result.metrics

  rng = np.random.default_rng(seed)
  for _ in range(steps):
    meta_step(sample_tasks(x[train], y[train], 8, rng))
  evaluate = tf.function(lambda batch: hn.meta.meta_batch_loss(meta_learner, batch).metrics)
  metrics = evaluate(sample_tasks(x[test], y[test], 200, np.random.default_rng(seed + 1)))
  before = float(metrics["accuracy_before"])
  after = float(metrics["accuracy"])
  print(f"{learner}: 200 new 5-way 1-shot tasks, query accuracy {before:.3f} before "
        f"adaptation, {after:.3f} after")
  return {"accuracy_before": before, "accuracy_after": after}


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--learner", choices=("maml", "anil"), default="maml")
  args = parser.parse_args()
  result = main(args.steps, args.learner)
  if args.steps >= 300:  # The default budget learns; fewer steps may not reach 0.6 yet.
    assert result["accuracy_after"] > 0.6, result
