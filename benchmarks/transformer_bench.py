"""Cost of ``hn.functional_call`` on a small BERT relative to the plain Keras call.

A ``keras_hub.models.BertBackbone`` built from a config (no preset download; ``pip
install -e ".[transformers]"``), float32, inference mode (dropout off), on one batch of
token ids with a padding mask (the last quarter of every other sequence padded). Five
variants, each compiled once in a ``tf.function`` that runs ``--steps`` calls in a
``tf.range`` loop:

* plain forward: ``model(inputs)``;
* functional forward: ``hn.functional_call(model, weights, inputs)`` with every trainable
  weight given as a tensor (read from the variables inside the step, as a hypernetwork's
  or an inner loop's weights would be computed there);
* plain forward + backward: the gradient of a scalar of both outputs with respect to the
  model's trainable variables;
* functional forward + backward: the same with respect to the weight tensors given;
* the same inside ``second_order.all_tapes_visible()`` (the caller's promise that no tape
  outside the trace differentiates it, as the train loop's step makes): Keras' own
  LayerNorm moments instead of the exact second-order ones (5 fewer small ops per
  LayerNorm in the backward pass).

The variants are timed in interleaved windows (round r runs every variant once, the
starting variant rotating), so load from other jobs hits all of them; rates are medians
over ``--repeats`` rounds. Prints the time per call and the functional call's speed
relative to the plain call (plain time / functional time: >= 0.95 is the target), of
wall and of process CPU time.

    python benchmarks/transformer_bench.py [--num_layers=2] [--hidden_dim=128]
        [--num_heads=4] [--seq_len=64] [--batch_size=16] [--steps=10] [--repeats=7]
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from absl import app, flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hypernet as hn  # noqa: E402
from hypernet.numerics import second_order  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing  # noqa: E402  pylint: disable=g-import-not-at-top

flags.DEFINE_integer("num_layers", 2, "Transformer layers.")
flags.DEFINE_integer("hidden_dim", 128, "Hidden width.")
flags.DEFINE_integer("num_heads", 4, "Attention heads.")
flags.DEFINE_integer("intermediate_dim", 512, "Feed-forward width.")
flags.DEFINE_integer("vocabulary_size", 1000, "Vocabulary size.")
flags.DEFINE_integer("seq_len", 64, "Tokens per sequence.")
flags.DEFINE_integer("batch_size", 16, "Sequences per call.")
flags.DEFINE_integer("steps", 10, "Calls per timed window.")
flags.DEFINE_integer("repeats", 7, "Interleaved timed rounds (medians are reported).")
FLAGS = flags.FLAGS


def _inputs():
  rng = np.random.default_rng(0)
  ids = rng.integers(1, FLAGS.vocabulary_size, (FLAGS.batch_size, FLAGS.seq_len))
  mask = np.ones_like(ids)
  mask[1::2, -FLAGS.seq_len // 4:] = 0
  return {"token_ids": tf.constant(ids * mask, tf.int32),
          "segment_ids": tf.zeros(ids.shape, tf.int32),
          "padding_mask": tf.constant(mask, tf.int32)}


def _scalar(outputs):
  return (tf.reduce_sum(tf.square(outputs["sequence_output"]))
          + tf.reduce_sum(outputs["pooled_output"]))


def _gradient_sum(grads):
  return tf.add_n([tf.reduce_sum(tf.convert_to_tensor(g)) for g in grads])


def _variants(model, inputs):
  """``{name: step()}``: one call each, returning a float32 scalar."""
  variables = hn.variable_paths(model, trainable=True)
  own = model.trainable_variables

  def weights():
    return {p: tf.convert_to_tensor(v) for p, v in variables.items()}

  def plain_forward():
    return _scalar(model(inputs))

  def functional_forward():
    return _scalar(hn.functional_call(model, weights(), inputs))

  def plain_backward():
    with tf.GradientTape() as tape:
      loss = _scalar(model(inputs))
    return loss + _gradient_sum(tape.gradient(loss, own))

  def functional_backward():
    given = weights()
    with tf.GradientTape() as tape:
      tape.watch(list(given.values()))
      loss = _scalar(hn.functional_call(model, given, inputs))
    return loss + _gradient_sum(tape.gradient(loss, list(given.values())))

  def functional_backward_first_order():
    # The caller's promise that no tape outside this trace differentiates it: Keras'
    # own (first-order) LayerNorm moments, as in the train loop's step.
    with second_order.all_tapes_visible():
      return functional_backward()

  return {"plain forward": plain_forward, "functional forward": functional_forward,
          "plain forward+backward": plain_backward,
          "functional forward+backward": functional_backward,
          "functional f+b, all_tapes_visible": functional_backward_first_order}


def main(_):
  import keras_hub  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  model = keras_hub.models.BertBackbone(
      vocabulary_size=FLAGS.vocabulary_size, num_layers=FLAGS.num_layers,
      num_heads=FLAGS.num_heads, hidden_dim=FLAGS.hidden_dim,
      intermediate_dim=FLAGS.intermediate_dim, max_sequence_length=FLAGS.seq_len)
  inputs = _inputs()
  variants = _variants(model, inputs)
  # Same values first: the functional call runs the model on its own weights.
  values = {k: float(tf.function(f)()) for k, f in variants.items()}
  for kind in ("forward", "forward+backward"):
    a, b = values[f"plain {kind}"], values[f"functional {kind}"]
    assert abs(a - b) <= 1e-4 * abs(a), (kind, a, b)
  a = values["functional f+b, all_tapes_visible"]
  assert abs(a - values["plain forward+backward"]) <= 1e-4 * abs(a), a
  results = timing.interleaved({k: timing.compiled_window(f) for k, f in variants.items()},
                                FLAGS.steps, FLAGS.repeats)
  count = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
  print(f"BertBackbone: {FLAGS.num_layers} layers, hidden {FLAGS.hidden_dim}, "
        f"{FLAGS.num_heads} heads, intermediate {FLAGS.intermediate_dim}, vocabulary "
        f"{FLAGS.vocabulary_size} ({count:,} weights, float32); batch {FLAGS.batch_size} x "
        f"{FLAGS.seq_len} tokens with a padding mask; {FLAGS.steps} calls/window, median of "
        f"{FLAGS.repeats} interleaved rounds; TF {tf.__version__}, Keras "
        f"{keras.__version__}, keras_hub {keras_hub.__version__}, {os.cpu_count()} CPUs")
  print(f"{'variant':36s} {'ms/call':>9s} {'CPU ms/call':>12s} {'warm-up s':>10s}")
  for name, (wall, cpu, warm) in results.items():
    print(f"{name:36s} {wall * 1e3:9.2f} {cpu * 1e3:12.2f} {warm:10.2f}")
  for kind in ("forward", "forward+backward"):
    plain, functional = results[f"plain {kind}"], results[f"functional {kind}"]
    print(f"RATIO {kind}: functional_call speed / plain call = {plain[0] / functional[0]:.3f} "
          f"wall, {plain[1] / functional[1]:.3f} CPU (target >= 0.95)")
  plain, visible = results["plain forward+backward"], results["functional f+b, all_tapes_visible"]
  print(f"     forward+backward inside all_tapes_visible(): {plain[0] / visible[0]:.3f} wall, "
        f"{plain[1] / visible[1]:.3f} CPU")


if __name__ == "__main__":
  app.run(main)
