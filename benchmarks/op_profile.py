"""Where the Omniglot MAML meta-step's time goes, per TensorFlow op type.

Builds the Trainer of configs/omniglot_maml.py on the Omniglot subset (conv4 +
BatchNorm, 5-way 1-shot, 15 queries per class, as ``benchmarks/meta_bench.py``), warms
it up, times ``--windows`` windows of ``--steps`` meta-steps (median), then records
``--steps`` steps with ``tf.profiler`` and prints the kernel time per op type summed
over the executor's threads (milliseconds for the recorded steps; ``Process`` lines are
the executor's own bookkeeping, not kernels). ``--unfused`` runs everything under
``hypernet.numerics.fused_norm.disabled()``: Keras' element-wise BatchNorm instead of the fused
kernel, for the comparison.

  python benchmarks/op_profile.py --data_dir=../shared/data/omniglot \\
      [--order first|second] [--meta_batch 16] [--steps 2] [--unfused] [--top 25]
"""
import argparse
import collections
import contextlib
import glob
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--data_dir", required=True, help="folder of the Omniglot zips")
  parser.add_argument("--order", choices=("first", "second"), default="first")
  parser.add_argument("--meta_batch", type=int, default=16)
  parser.add_argument("--steps", type=int, default=2, help="meta-steps per window")
  parser.add_argument("--windows", type=int, default=5, help="timed windows")
  parser.add_argument("--unfused", action="store_true",
                      help="Keras' element-wise BatchNorm (fused_norm.disabled())")
  parser.add_argument("--top", type=int, default=25, help="op types to print")
  args = parser.parse_args()

  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  from hypernet.training import loop  # pylint: disable=g-import-not-at-top
  from hypernet.numerics import fused_norm

  c = config_lib.load_config_file(os.path.join(HERE, "..", "configs", "omniglot_maml.py"))
  c.data.data_dir = args.data_dir
  c.data.omniglot_zips = "images_background_small1.zip,images_background_small2.zip"
  c.data.num_test_characters = 50
  c.meta.learner = {"second": "maml", "first": "fomaml"}[args.order]
  c.meta.num_queries = 15
  c.batch_size = args.meta_batch
  with tempfile.TemporaryDirectory() as workdir, tempfile.TemporaryDirectory() as logdir:
    trainer = loop.Trainer(c, workdir)
    if args.unfused:  # entered inside the traced step: a switch counts where it is entered
      kernels = trainer._kernels  # pylint: disable=protected-access

      def unfused_kernels():
        stack = contextlib.ExitStack()
        stack.enter_context(kernels())
        stack.enter_context(fused_norm.disabled())
        return stack

      trainer._kernels = unfused_kernels  # pylint: disable=protected-access
    iterator = trainer.train_iterator(0)
    t0 = time.perf_counter()
    trainer.train_chunk(iterator, 1)
    setup = time.perf_counter() - t0
    trainer.train_chunk(iterator, args.steps)
    seconds = []
    for _ in range(args.windows):
      t0 = time.perf_counter()
      trainer.train_chunk(iterator, args.steps)
      seconds.append((time.perf_counter() - t0) / args.steps)
    tf.profiler.experimental.start(logdir)
    trainer.train_chunk(iterator, args.steps)
    tf.profiler.experimental.stop()
    total, count = collections.Counter(), collections.Counter()
    for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
      space = xplane_pb2.XSpace()
      with open(path, "rb") as f:
        space.ParseFromString(f.read())
      for plane in space.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
          if not line.name.startswith("tf_Compute"):
            continue  # the executor's threads; not tf.data's or Python's
          for event in line.events:
            op = names.get(event.metadata_id, "?").split(":")[-1]
            total[op] += event.duration_ps / 1e9
            count[op] += 1
  kernels = sum(v for k, v in total.items() if k != "Process")
  print(f"{args.order} order, meta-batch {args.meta_batch}, "
        f"{'unfused (Keras) BatchNorm' if args.unfused else 'fused BatchNorm'}: set-up "
        f"{setup:.1f} s, meta-step {statistics.median(seconds):.3f} s (median of "
        f"{args.windows} windows of {args.steps}); kernel time of {args.steps} profiled "
        f"steps {kernels:.0f} ms")
  print(f"{'ms':>9s} {'share':>6s} {'ops':>6s}  op type")
  for op, ms in total.most_common(args.top):
    share = f"{ms / kernels:6.1%}" if op != "Process" else f"{'-':>6s}"
    print(f"{ms:9.1f} {share} {count[op]:6d}  {op}")


if __name__ == "__main__":
  main()
