"""Training throughput with 1 and 2 replicas, with and without XLA.

    python benchmarks/distribute_bench.py                      # digits_hyper, 200 steps
    python benchmarks/distribute_bench.py --steps=500 --config=configs/digits_plain.py

With two or more GPUs the replicas are GPUs; without, the CPU is split into two logical
devices (as in the tests), so both replicas share the same cores and 2 replicas measure
the overhead of the cross-replica sums rather than a speed-up. Each setting is built,
run for one warm-up chunk (tracing and XLA compilation), then timed over ``--steps``
steps inside one ``tf.function`` chunk; the best of ``--repeats`` timings is printed.
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
from ml_collections import config_flags
import tensorflow as tf

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "..", "configs", "digits_hyper.py"),
    "Experiment config to time.")
_STEPS = flags.DEFINE_integer("steps", 200, "Timed steps per setting.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timings per setting (best is shown).")
_BATCH = flags.DEFINE_integer("batch_size", 0, "Global batch size (0: the config's).")


def _split_cpu_if_no_gpu():
  if not tf.config.list_physical_devices("GPU"):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def _time(config, workdir):
  from hypernet.training import loop  # pylint: disable=g-import-not-at-top
  trainer = loop.Trainer(config, workdir)
  iterator = trainer.train_iterator(0)
  trainer.train_chunk(iterator, 5)   # Trace and compile.
  best = float("inf")
  for _ in range(_REPEATS.value):
    t0 = time.perf_counter()
    _, first_bad = trainer.train_chunk(iterator, _STEPS.value)
    best = min(best, time.perf_counter() - t0)
    if first_bad >= 0:
      raise FloatingPointError(f"Non-finite loss at step {first_bad}.")
  return trainer.num_replicas, _STEPS.value / best


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  tf.get_logger().setLevel("ERROR")
  import tempfile  # pylint: disable=g-import-not-at-top
  devices = "GPU" if tf.config.list_physical_devices("GPU") else "logical CPU"
  print(f"config: {_CONFIG.value.model.name} / hypernet {_CONFIG.value.hypernet.kind}, "
        f"devices: {devices}, {_STEPS.value} steps, best of {_REPEATS.value}")
  print(f"{'distribution':<12} {'replicas':>8} {'XLA':>5} {'global batch':>12} {'steps/s':>9}")
  for distribution in ("one_device", "mirrored"):
    for jit in ("false", "true"):
      config = _CONFIG.value.copy_and_resolve_references()
      config.distribution = distribution
      config.jit_compile = jit
      if _BATCH.value:
        config.batch_size = _BATCH.value
      with tempfile.TemporaryDirectory() as workdir:
        replicas, rate = _time(config, workdir)
      print(f"{distribution:<12} {replicas:>8} {jit:>5} {config.batch_size:>12} {rate:>9.1f}",
            flush=True)


if __name__ == "__main__":
  _split_cpu_if_no_gpu()
  from hypernet.training import cli  # pylint: disable=g-import-not-at-top
  app.run(main, flags_parser=cli.parse_flags)
