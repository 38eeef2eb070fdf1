"""Scale-out with ``tf.distribute``: the run's :class:`Runtime` (strategy from the config,
chief, cluster, write folder, dtype policy, stop agreement) and the cross-replica
reductions that make R replicas follow the single-device trajectory (Goyal et al. 2017,
"Accurate, large minibatch SGD"; the rules: docs/distributed.md).
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

from absl import logging
import keras
import tensorflow as tf

from hypernet.core import functional
from hypernet.numerics import compat

KINDS = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
DTYPE_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")

# One strategy per kind and device set per process: two MirroredStrategy objects over the
# same devices number their collectives from the same keys, and the second one's
# all-reduces then fail with "Shape mismatch in the collective instance" (measured, TF
# 2.21). A strategy can be reused by any number of Trainers.
_STRATEGIES: Dict[tuple, tf.distribute.Strategy] = {}


def _tf_config() -> dict:
  try:
    return json.loads(os.environ.get("TF_CONFIG", "") or "{}")
  except json.JSONDecodeError as e:
    from hypernet import config_lib  # pylint: disable=g-import-not-at-top
    raise config_lib.ConfigError(f"TF_CONFIG is not valid JSON ({e}); it must look like "
                     '{"cluster": {"worker": ["host:port", ...]}, '
                     '"task": {"type": "worker", "index": 0}}.') from e


def get_strategy(config) -> tf.distribute.Strategy:
  """Returns the strategy named by ``config.distribution``.

  * ``"auto"``: ``MirroredStrategy`` over the visible GPUs if there are two or more,
    else the default strategy (one device);
  * ``"one_device"``: ``OneDeviceStrategy`` on the first GPU, else the CPU;
  * ``"mirrored"``: ``MirroredStrategy`` over all visible GPUs (restrict them with
    ``CUDA_VISIBLE_DEVICES``), or over the logical CPUs when there is no GPU (as in the
    tests, which split the CPU in two);
  * ``"multi_worker"``: ``MultiWorkerMirroredStrategy`` with the cluster and this
    process's role read from the ``TF_CONFIG`` environment variable (each worker uses
    its local GPUs, else its CPU). Create it before any other TensorFlow work;
  * ``"tpu"``: ``TPUStrategy`` on the TPU named by ``$TPU_NAME`` (empty: the local TPU
    of a TPU VM).

  Args:
    config: an experiment config (reads ``config.distribution``), or the kind itself.

  Returns:
    A ``tf.distribute.Strategy``; ``strategy.num_replicas_in_sync`` is the number of
    replicas the global batch is split across.

  Raises:
    ValueError: an unknown kind (lists the known ones). ConfigError (a ValueError):
      ``"multi_worker"`` with a ``TF_CONFIG`` that is not JSON; ``"tpu"`` where no TPU can
      be found.
  """
  kind = config if isinstance(config, str) else config.distribution
  if kind not in KINDS:
    raise ValueError(f"config.distribution={kind!r} is unknown; known: {list(KINDS)}.")
  if kind in ("multi_worker", "tpu"):  # First: they set up the runtime at start-up.
    if kind not in _STRATEGIES:
      _STRATEGIES[kind] = _multi_worker() if kind == "multi_worker" else _tpu()
    return _STRATEGIES[kind]
  gpus = tf.config.list_logical_devices("GPU")
  if kind == "mirrored" or (kind == "auto" and len(gpus) > 1):
    devices = tuple(d.name for d in gpus) or tuple(
        d.name for d in tf.config.list_logical_devices("CPU"))
    key = ("mirrored", devices)
    if key not in _STRATEGIES:
      _STRATEGIES[key] = tf.distribute.MirroredStrategy(list(devices))
    return _STRATEGIES[key]
  if kind == "one_device":
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
  return tf.distribute.get_strategy()


def _multi_worker() -> tf.distribute.Strategy:
  if not _tf_config().get("cluster"):  # (And a clear error for malformed JSON.)
    logging.warning("config.distribution='multi_worker' but TF_CONFIG names no cluster: "
                    "this process trains alone, as one worker. Set TF_CONFIG on every "
                    "worker (docs/distributed.md).")
  return tf.distribute.MultiWorkerMirroredStrategy()


def _tpu() -> tf.distribute.Strategy:
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=os.environ.get("TPU_NAME", ""))
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
  except (ValueError, RuntimeError, tf.errors.OpError) as e:
    from hypernet import config_lib  # pylint: disable=g-import-not-at-top
    raise config_lib.ConfigError("config.distribution='tpu' but no TPU was found (set "
                                 f"$TPU_NAME, or use 'auto'/'mirrored'): {e}") from e
  return tf.distribute.TPUStrategy(resolver)


def task_info(strategy: tf.distribute.Strategy) -> Tuple[Optional[str], int]:
  """``(task type, task index)`` of this process in its cluster; ``(None, 0)`` alone."""
  resolver = strategy.cluster_resolver
  if resolver is not None and resolver.task_type is not None:
    return resolver.task_type, int(resolver.task_id or 0)
  task = _tf_config().get("task", {})
  return task.get("type"), int(task.get("index", 0))


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """True unless this process is a non-chief worker of a multi-worker cluster.

  The chief is the ``"chief"`` task if the cluster has one, else ``worker`` 0 (the
  ``tf.distribute`` convention); a process outside any cluster is its own chief.
  """
  task_type, task_id = task_info(strategy)
  if task_type is None or task_type == "chief":
    return True
  resolver = strategy.cluster_resolver
  cluster = (resolver.cluster_spec().as_dict() if resolver is not None
             else _tf_config().get("cluster", {}))
  return task_type == "worker" and task_id == 0 and "chief" not in cluster


def cluster_tasks(strategy: tf.distribute.Strategy) -> List[Tuple[str, int, str]]:
  """``[(type, index, address)]`` of the tasks that train, chief first, then the workers
  by index (``[]`` outside a cluster). A task's position in this list is its slot in
  :meth:`hypernet.training.loop.Trainer.agree_stop`."""
  resolver = strategy.cluster_resolver
  cluster = (resolver.cluster_spec().as_dict() if resolver is not None
             else _tf_config().get("cluster", {}))
  out = []
  for kind in ("chief", "worker"):
    addresses = cluster.get(kind, [])
    if isinstance(addresses, dict):  # {index: address} (sparse cluster specs).
      addresses = [addresses[k] for k in sorted(addresses)]
    out += [(kind, i, a) for i, a in enumerate(addresses)]
  return out


def task_name(task: Tuple[str, int, str]) -> str:
  """``"worker 1 (10.0.0.2:12345)"``."""
  return f"{task[0]} {task[1]} ({task[2]})"


_WRITE_DIR_LOCKS: Dict[str, int] = {}
_WRITE_DIR_LOCK = "owner.lock"


def _remove_stale_write_dirs(prefix: str) -> None:
  """Removes ``$TMPDIR/<prefix>*`` folders that no live process owns: a non-chief worker
  killed (``kill -9``, lost machine) cannot remove its own. A live owner holds an
  ``flock`` on the folder's lock file, which the kernel drops when it dies."""
  import fcntl  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  for folder in glob.glob(os.path.join(tempfile.gettempdir(), prefix + "*")):
    lock = os.path.join(folder, _WRITE_DIR_LOCK)
    try:
      fd = os.open(lock, os.O_RDWR)
    except OSError:
      continue  # Not one of ours, or just being created.
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      continue  # Its owner is alive.
    finally:
      os.close(fd)
    shutil.rmtree(folder, ignore_errors=True)
    logging.info("Removed %s, the checkpoint folder of an earlier run of this worker that "
                 "did not end normally.", folder)


def write_dir(workdir: str, strategy: tf.distribute.Strategy) -> str:
  """Where this process writes checkpoints: ``workdir`` on the chief, else a fresh
  temporary folder (``$TMPDIR/hypernet-<type><index>-*``).

  Under ``MultiWorkerMirroredStrategy`` every worker must take part in a checkpoint save
  (reading distributed variables may need collectives), but only the chief's copy is
  kept; remove the others with :func:`remove_write_dir` when done. The process holds a
  lock on its folder while it lives; folders of this worker's earlier processes that
  died without removing theirs (``kill -9``) are removed here.
  """
  if is_chief(strategy):
    return workdir
  task_type, task_id = task_info(strategy)
  prefix = f"hypernet-{task_type}{task_id}-"
  try:
    import fcntl  # pylint: disable=g-import-not-at-top
  except ImportError:  # Not a POSIX system: no lock, no clean-up.
    return tempfile.mkdtemp(prefix=prefix)
  _remove_stale_write_dirs(prefix)
  path = tempfile.mkdtemp(prefix=prefix)
  fd = os.open(os.path.join(path, _WRITE_DIR_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
  fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  _WRITE_DIR_LOCKS[path] = fd
  return path


def remove_write_dir(path: str, workdir: str) -> None:
  """Deletes a non-chief's temporary folder from :func:`write_dir` (never ``workdir``)."""
  if os.path.abspath(path) != os.path.abspath(workdir) and tf.io.gfile.exists(path):
    tf.io.gfile.rmtree(path)
  fd = _WRITE_DIR_LOCKS.pop(path, None)
  if fd is not None:
    os.close(fd)


class Runtime:
  """The distribution strategy of a run and everything the Trainer asks of it.

  Built once from the config (``config.distribution``, ``config.dtype_policy``): the
  strategy, whether this process is the chief, the workers of a multi-worker run and
  this process's slot among them, where it writes checkpoints, the dtype policy the
  models are built under, and the agreement on a stop between chunks of steps.

  Args:
    config: the experiment config.
    workdir: the run's output folder (non-chief workers write their checkpoints to a
      temporary folder instead, removed by :meth:`close`).

  Raises:
    ValueError: an unknown distribution or dtype policy (see :func:`get_strategy`,
      :func:`check_dtype_policy`).
  """

  def __init__(self, config, workdir: str):
    self.strategy = get_strategy(config)
    self.num_replicas = self.strategy.num_replicas_in_sync
    self.is_chief = is_chief(self.strategy)
    if config.distribution != "auto" or self.num_replicas > 1:
      logging.info("Distribution: %s (config.distribution=%r), %d replica(s).",
                   type(self.strategy).__name__, config.distribution, self.num_replicas)
    self.policy = check_dtype_policy(config.dtype_policy)
    self.workdir = workdir
    self.write_dir = write_dir(workdir, self.strategy)
    # The workers of a multi-worker run, and this process's slot among them (agree_stop).
    self.cluster = cluster_tasks(self.strategy)
    own = task_info(self.strategy)
    self.task_slot = next((i for i, t in enumerate(self.cluster) if t[:2] == own), 0)
    self.multi_worker = len(self.cluster) > 1 and isinstance(
        self.strategy, tf.distribute.MultiWorkerMirroredStrategy)
    self._agree = tf.function(self._agree_fn, autograph=False)

  @contextlib.contextmanager
  def scope(self) -> Iterator[None]:
    """Where models, optimiser and variables are built: the dtype policy and the
    strategy's scope."""
    with dtype_policy(self.policy), self.strategy.scope():
      yield

  def prepare_optimizer(self, optimizer):
    """``optimizer`` taking gradients already summed over replicas
    (:func:`apply_reduced_gradients`), built for nothing yet."""
    return apply_reduced_gradients(optimizer, self.num_replicas)

  def _agree_fn(self, flags):
    def replica_fn(f):  # (A float tensor made on the replica's device: the collective
      # all-reduce refuses an int32 constant placed nowhere.)
      f = tf.cast(f, tf.float32)
      return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, f)
    summed = self.strategy.experimental_local_results(
        self.strategy.run(replica_fn, args=(flags,)))[0]
    return summed / (self.num_replicas // len(self.cluster))  # Per worker, not replica.

  def agree_stop(self, signum: Optional[int]) -> List[int]:
    """Shares "a signal asked me to stop" with every worker (a collective: every worker
    calls it at the same point of the loop, between chunks of steps).

    Args:
      signum: the signal this process received (``None``: none).

    Returns:
      One signal number per worker of :attr:`cluster` (0: none; one entry outside a
      multi-worker run), the same list on every worker, so all stop at the same step.
    """
    if not self.multi_worker:
      return [signum or 0]
    flags = [0] * len(self.cluster)
    flags[self.task_slot] = int(signum or 0)
    return [int(round(float(v))) for v in self._agree(tf.constant(flags, tf.int32)).numpy()]

  def close(self) -> None:
    """Removes a non-chief worker's temporary checkpoint folder."""
    remove_write_dir(self.write_dir, self.workdir)


# -- inside the replica step ---------------------------------------------------------

def _replica_context() -> Optional[tf.distribute.ReplicaContext]:
  ctx = tf.distribute.get_replica_context()
  if ctx is None:
    raise RuntimeError("Call this inside strategy.run (replica context), not in "
                       "cross-replica context.")
  return ctx


def all_reduce_sum(values):
  """Sums a nested structure of tensors over all replicas (identity on one replica).

  Call inside ``strategy.run``. Returns the same structure; every replica gets the sum.
  """
  ctx = _replica_context()
  if ctx.num_replicas_in_sync == 1:
    return values
  return ctx.all_reduce(tf.distribute.ReduceOp.SUM, values)


def all_reduce_state(state: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """:func:`hypernet.core.functional.all_reduce_state` (BatchNorm statistics averaged,
  seed states from replica 0), inside ``strategy.run`` only.

  Raises:
    RuntimeError: called in cross-replica context.
  """
  _replica_context()
  return functional.all_reduce_state(state)


def apply_reduced_gradients(optimizer: keras.optimizers.Optimizer,
                            num_replicas: Optional[int] = None) -> keras.optimizers.Optimizer:
  """Makes ``optimizer.apply`` take gradients that are already summed over replicas.

  A Keras 3 optimizer on the TensorFlow backend sums the gradients over replicas inside
  ``apply`` (replica context), *after* its ``global_clipnorm`` clipping: under two
  replicas it clips each replica's share (measured: SGD(lr=1, global_clipnorm=1) on
  shares -1.5 and -3.5 of the gradient -5 moves the weight by 2, not 1), and the caller
  never sees the applied gradient, so neither the global norm nor a NaN check can be
  computed on it. The train step therefore sums the gradients itself
  (:func:`all_reduce_sum`) and hands the sum to an optimizer whose own sum is switched
  off here; clipping, loss scaling's finite check and the update then all see the
  summed gradient. For a ``LossScaleOptimizer`` the inner optimizer is switched.

  Args:
    optimizer: a Keras optimizer.
    num_replicas: the replicas the train step runs on (default: the current strategy's
      ``num_replicas_in_sync``).

  Returns:
    ``optimizer`` (modified in place; unchanged on one replica when this Keras no longer
    sums where expected: a sum over one replica changes nothing).

  Raises:
    hypernet.numerics.compat.UnsupportedVersionError: more than one replica, and this
      Keras version no longer sums over replicas where expected (checked once:
      ``SGD.apply`` must reach the sum).
  """
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  compat.switch_off_optimizer_sum(inner, num_replicas)
  return optimizer


# -- precision -------------------------------------------------------------------------

def check_dtype_policy(name: str) -> str:
  """Returns ``name`` if it is a supported Keras dtype policy.

  Raises:
    ValueError: naming ``config.dtype_policy`` and the supported policies.
  """
  if name not in DTYPE_POLICIES:
    raise ValueError(f"config.dtype_policy={name!r} is unsupported; use one of "
                     f"{list(DTYPE_POLICIES)}.")
  return name


@contextlib.contextmanager
def dtype_policy(name: str) -> Iterator[None]:
  """Sets Keras's global dtype policy to ``name`` while models are built, then restores it.

  Under ``"mixed_bfloat16"`` / ``"mixed_float16"`` layers keep float32 variables and
  compute in bfloat16 / float16 (Micikevicius et al. 2018, "Mixed precision training").
  Weights passed to :func:`hypernet.core.functional.functional_call` must still have the
  variables' dtype (float32); layers cast them to the compute dtype as they read them.
  float16 needs loss scaling (``keras.optimizers.LossScaleOptimizer``); bfloat16 does not.

  Raises:
    ValueError: an unsupported policy (see :func:`check_dtype_policy`).
  """
  check_dtype_policy(name)
  old = keras.config.dtype_policy()
  keras.config.set_dtype_policy(name)
  try:
    yield
  finally:
    keras.config.set_dtype_policy(old)


def local_values(strategy: tf.distribute.Strategy, value) -> List[tf.Tensor]:
  """Each local replica's copy of a distributed value or variable (tests, debugging)."""
  if isinstance(value, keras.Variable):
    value = value.value
  return [tf.convert_to_tensor(v) for v in strategy.experimental_local_results(value)]
