"""``tf.distribute`` strategy from the config, and who is the chief."""
from __future__ import annotations

import json
import os

import tensorflow as tf

KINDS = ("auto", "one_device", "mirrored", "multi_worker")


def get_strategy(config) -> tf.distribute.Strategy:
  """Returns the strategy named by ``config.distribution``.

  * ``"auto"``: MirroredStrategy over the visible GPUs if there are two or more, else the
    default strategy on one device;
  * ``"one_device"``: ``OneDeviceStrategy`` on the first GPU, else the CPU;
  * ``"mirrored"``: ``MirroredStrategy`` over all GPUs (or the logical CPUs when there is
    no GPU, as in the tests);
  * ``"multi_worker"``: ``MultiWorkerMirroredStrategy`` configured from ``TF_CONFIG``.

  Raises:
    ValueError: an unknown kind (lists the known ones).
  """
  kind = config.distribution
  gpus = tf.config.list_logical_devices("GPU")
  if kind == "auto":
    return tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()
  if kind == "one_device":
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
  if kind == "mirrored":
    devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(devices)
  if kind == "multi_worker":
    return tf.distribute.MultiWorkerMirroredStrategy()
  raise ValueError(f"config.distribution={kind!r} is unknown; known: {list(KINDS)}.")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """True unless this process is a non-chief worker of a multi-worker cluster."""
  resolver = getattr(strategy.extended, "_cluster_resolver", None)
  if resolver is None:
    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    task = tf_config.get("task", {})
  else:
    task = {"type": resolver.task_type, "index": resolver.task_id}
  if not task or task.get("type") is None:
    return True
  if task["type"] == "chief":
    return True
  has_chief = "chief" in json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
  return task["type"] == "worker" and task.get("index", 0) == 0 and not has_chief
