"""Continual learning with a task-conditioned hypernetwork (von Oswald et al. 2020).

Run: python examples/continual_hypernetwork.py [--steps_per_task=150] [--beta=0.05]
Five tasks learned one after the other, each telling two classes of the 8x8
digits apart (0/1, 2/3, ..., 8/9; real images, no download). A hypernetwork maps a
learned task embedding to every weight of a small Keras MLP. While it learns task t,
`hn.continual.output_regularizer` keeps the weights it generates for tasks < t where
they were (Eq. 2 of the paper), so the earlier tasks are not forgotten. With `--beta=0`
(no regulariser) they are.
"""
import argparse

import keras
import numpy as np
import tensorflow as tf
import hypernet as hn

NUM_TASKS = 5


def main(steps_per_task: int = 150, beta: float = 0.05, seed: int = 0) -> dict:
  x, y = hn.data.digits_arrays()                              # [1797, 8, 8] uint8, [1797]
  x = (x.reshape(-1, 64) / 16.0).astype("float32")                            # [1797, 64] in [0, 1]
  perm = np.random.default_rng(seed).permutation(len(x))
  x, y = x[perm], y[perm]
  tasks = []                                                  # task t: digits 2t vs 2t+1
  for t in range(NUM_TASKS):
    idx = np.flatnonzero((y == 2 * t) | (y == 2 * t + 1))
    half = len(idx) * 3 // 4
    tasks.append((x[idx[:half]], y[idx[:half]] - 2 * t, x[idx[half:]], y[idx[half:]] - 2 * t))

  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((64,)),
                            keras.layers.Dense(32, activation="relu", name="hidden"),
                            keras.layers.Dense(2, name="out")])
  spec = hn.weight_spec(model)
  hnet = hn.MLPHypernetwork(spec, num_conditions=NUM_TASKS, condition_dim=8,
                            embedding_dim=0, hidden=(32,), seed=seed)
  opt = keras.optimizers.Adam(1e-3)
  # What the hypernetwork generated for each finished task, flattened: [NUM_TASKS, P].
  stored = tf.Variable(tf.zeros([NUM_TASKS, hnet.num_generated]), trainable=False)

  @tf.function
  def train_step(task, images, labels):
    with tf.GradientTape() as tape:
      logits = hn.functional_call(model, hnet(task), images, training=True)
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
      past = tf.range(task)                                   # the tasks learned before
      generated = hn.continual.flatten_weights(hnet(past), hnet.paths, leading=1)
      loss += hn.continual.output_regularizer(generated, tf.gather(stored, past), beta)
    grads = tape.gradient(loss, hnet.trainable_variables)
    opt.apply_gradients(zip(grads, hnet.trainable_variables))

  def accuracy(t):
    logits = hn.functional_call(model, hnet(t), tasks[t][2])
    return float(np.mean(np.argmax(logits, -1) == tasks[t][3]))

  rng = np.random.default_rng(seed)
  just_learned = []
  for t, (xt, yt, _, _) in enumerate(tasks):
    for _ in range(steps_per_task):
      idx = rng.integers(0, len(xt), 32)
      train_step(tf.constant(t), xt[idx], yt[idx])
    just_learned.append(accuracy(t))
    stored[t].assign(hn.continual.flatten_weights(hnet(t), hnet.paths))
  final = [accuracy(t) for t in range(NUM_TASKS)]
  forgetting = float(np.mean(np.subtract(just_learned, final)[:-1]))
  print(f"beta={beta}: accuracy per task after all five {np.round(final, 3).tolist()}, "
        f"mean {np.mean(final):.3f}; forgetting {100 * forgetting:.1f} points")
  return {"final": final, "mean_final": float(np.mean(final)), "forgetting": forgetting}


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps_per_task", type=int, default=150)
  parser.add_argument("--beta", type=float, default=0.05)
  args = parser.parse_args()
  result = main(args.steps_per_task, args.beta)
  if args.beta > 0:
    assert result["mean_final"] > 0.9, result
