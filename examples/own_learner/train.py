"""Meta-trains ``my_learner.PerLayerMAML`` on sinusoid regression through Keras ``fit``.

Run from this folder: python train.py [--steps=300]. Prints the query MSE of held-out
tasks before and after adaptation, and the learned per-layer rates.
"""
import argparse

import keras
import tensorflow as tf

import hypernet as hn
from hypernet.data import sinusoid
from my_learner import PerLayerMAML


def episodes(seed: int, tasks_per_step: int) -> tf.data.Dataset:
  """Endless meta-batches of sinusoid tasks (10 support and 10 query points each)."""
  task = sinusoid.make_sinusoid_task_fn(num_support=10, num_query=10, seed=seed)
  return tf.data.Dataset.range(1 << 30).map(task).batch(tasks_per_step)


def main(steps: int = 300, seed: int = 0) -> dict:
  keras.utils.set_random_seed(seed)
  target = keras.Sequential([keras.Input((1,)),
                             keras.layers.Dense(40, activation="relu", name="dense1"),
                             keras.layers.Dense(40, activation="relu", name="dense2"),
                             keras.layers.Dense(1, name="head")])
  model = hn.keras.MetaModel(target, PerLayerMAML, loss="mse",
                             learner_args=dict(inner_lr=0.05, inner_steps=2),
                             eval_inner_steps=5)
  model.compile(optimizer=keras.optimizers.Adam(3e-3))
  model.fit(episodes(seed, 8), steps_per_epoch=steps, epochs=1, verbose=0)
  metrics = model.evaluate(episodes(seed + 1000, 25).take(4), return_dict=True, verbose=0)
  rates = {k: float(tf.exp(v)) for k, v in model.learner.log_lrs.items()}
  print(f"query MSE before adaptation {metrics['loss_before']:.3f}, after 5 steps "
        f"{metrics['loss']:.3f}; learned rates {rates}")
  return metrics


if __name__ == "__main__":
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=300)
  main(parser.parse_args().steps)
