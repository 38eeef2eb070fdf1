"""A training step's convolutions, one by one, in TensorFlow and PyTorch.

``--net conv4`` (the default): the forward convolution, its filter gradient and its input
gradient for each block of Finn et al.'s conv4 (3x3, 64 channels, 'same' padding; 28x28x1
Omniglot images, halved by each block's max-pool) on the query set (``--queries`` images)
and the support set (``--support`` images) of one 5-way task, as ``meta_bench.py``'s step
runs them. ``--net cnn``: the two convolutions of ``step_ratio.py``'s CNN (the
``fashion_mnist_hyper`` target: 3x3 'same', 1 -> 32 channels on 28x28, 32 -> 64 on
14x14) on one batch of ``--batch`` images. Both frameworks run them:
TensorFlow's ops in a ``tf.range`` loop in a ``tf.function`` (oneDNN; no Python dispatch
per call), PyTorch's ``conv2d`` / ``torch.nn.grad.conv2d_weight`` / ``conv2d_input`` in
a Python loop, with glibc keeping freed memory
(:func:`torch_reference.keep_freed_memory`: no page faults on fresh outputs). Prints
milliseconds per call (median of ``--repeats`` windows of ``--calls`` calls, the
frameworks interleaved) and
the total of one first-order task (support and query: forward and filter gradient of
every block, input gradient of blocks 2-4), the floor under a first-order meta-step's
time per task in either framework; with ``--net cnn`` the total of one training step
(forward and filter gradient of both, input gradient of the second), the floor under
``step_ratio.py``'s steps.

  python benchmarks/conv_kernels.py [--queries 75] [--support 5] [--calls 50] [--repeats 5]
  python benchmarks/conv_kernels.py --net cnn [--batch 128]
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
OPS = ("forward", "filter grad", "input grad")


def _shapes(images, size=28, widths=(64, 64, 64, 64)):
  """``[(input shape NHWC, output channels)]`` of each 3x3 'same' convolution, a 2x2
  max-pool after each."""
  shapes, channels = [], 1
  for width in widths:
    shapes.append(((images, size, size, channels), width))
    size, channels = size // 2, width
  return shapes


def _cnn_widths():
  """The ``fashion_mnist_hyper`` target's convolution widths, read from its config."""
  import sys  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.join(HERE, "..", "configs"))
  import fashion_mnist_hyper  # pylint: disable=g-import-not-at-top
  return tuple(fashion_mnist_hyper.get_config().model.conv_widths)


#: Each ``--net``'s convolution widths (a callable: read when chosen).
NETS = {"conv4": lambda: (64, 64, 64, 64), "cnn": _cnn_widths}


def _tf_calls(shape, out, calls):
  """Each op ``calls`` times in one ``tf.function`` (a ``tf.range`` loop, as the Trainer
  runs them): no Python dispatch per call."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  x = tf.random.stateless_normal(shape, (0, 1))
  w = tf.random.stateless_normal((3, 3, shape[3], out), (0, 2))
  g = tf.random.stateless_normal(shape[:3] + (out,), (0, 3))
  strides = [1, 1, 1, 1]
  ops = (lambda: tf.nn.conv2d(x, w, 1, "SAME"),
         lambda: tf.raw_ops.Conv2DBackpropFilter(
             input=x, filter_sizes=w.shape, out_backprop=g, strides=strides, padding="SAME"),
         lambda: tf.raw_ops.Conv2DBackpropInput(
             input_sizes=x.shape, filter=w, out_backprop=g, strides=strides, padding="SAME"))

  def loop(op):
    @tf.function
    def run():
      acc = tf.constant(0.0)
      for _ in tf.range(calls):
        acc += tf.reshape(op(), [-1])[0]  # A data dependency, so no call is pruned.
      return acc
    return lambda: run().numpy()
  return [loop(op) for op in ops]


def _torch_calls(shape, out, calls):
  import torch  # pylint: disable=g-import-not-at-top
  n, h, w_, c = shape
  x, w = torch.randn(n, c, h, w_), torch.randn(out, c, 3, 3)
  g = torch.randn(n, out, h, w_)
  grad = torch.nn.grad
  ops = (lambda: torch.nn.functional.conv2d(x, w, padding=1),
         lambda: grad.conv2d_weight(x, w.shape, g, padding=1),
         lambda: grad.conv2d_input(x.shape, w, g, padding=1))

  def loop(op):
    def run():
      for _ in range(calls):
        op()
    return run
  return [loop(op) for op in ops]


def _time(run, calls):
  t = time.perf_counter()
  run()
  return (time.perf_counter() - t) / calls * 1e3


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--net", choices=sorted(NETS), default="conv4",
                      help="conv4: one MAML task's blocks; cnn: step_ratio.py's CNN")
  parser.add_argument("--queries", type=int, default=75, help="conv4: query images per task")
  parser.add_argument("--support", type=int, default=5, help="conv4: support images per task")
  parser.add_argument("--batch", type=int, default=128, help="cnn: images per step")
  parser.add_argument("--calls", type=int, default=50, help="calls per timed window")
  parser.add_argument("--repeats", type=int, default=5, help="interleaved windows")
  args = parser.parse_args()
  import sys  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, HERE)
  import torch_reference  # pylint: disable=g-import-not-at-top
  frameworks = {"tf": _tf_calls}
  if torch_reference.available():
    import torch  # pylint: disable=g-import-not-at-top
    torch_reference.keep_freed_memory()
    torch.set_num_threads(os.cpu_count())
    frameworks["torch"] = _torch_calls
  else:
    print(torch_reference.MISSING)
  rows, totals = [], {name: 0.0 for name in frameworks}
  batches = ((("query", args.queries), ("support", args.support)) if args.net == "conv4"
             else (("batch", args.batch),))
  for label, images in batches:
    for block, (shape, out) in enumerate(_shapes(images, widths=NETS[args.net]()), 1):
      calls = {name: make(shape, out, args.calls) for name, make in frameworks.items()}
      for fns in calls.values():  # Warm-up: traces, oneDNN primitive creation.
        for fn in fns:
          fn()
      times = {name: [[] for _ in OPS] for name in frameworks}
      for r in range(args.repeats):
        order = list(frameworks)[r % len(frameworks):] + list(frameworks)[:r % len(frameworks)]
        for name in order:
          for k, fn in enumerate(calls[name]):
            times[name][k].append(_time(fn, args.calls))
      med = {name: [statistics.median(t) for t in times[name]] for name in frameworks}
      for name in frameworks:  # No input gradient into the first convolution.
        totals[name] += med[name][0] + med[name][1] + (med[name][2] if block > 1 else 0.0)
      rows.append((f"{label} conv {block} {shape}->{out}", med))
  print(f"{os.cpu_count()} CPUs; ms per call, median of {args.repeats} interleaved windows "
        f"of {args.calls} calls")
  print(f"{'convolution':34s} " + " ".join(f"{name + ' ' + op:>17s}" for name in frameworks
                                             for op in OPS))
  for label, med in rows:
    print(f"{label:34s} " + " ".join(f"{v:17.3f}" for name in frameworks for v in med[name]))
  whole = "one first-order task's" if args.net == "conv4" else "one training step's"
  print(f"{whole} convolutions (ms): " + ", ".join(
      f"{name} {t:.2f}" for name, t in totals.items()))


if __name__ == "__main__":
  main()
