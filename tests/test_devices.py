"""Every device-dependent choice, checked on CPU with the device kind passed in or the
device list mocked (hypernet/numerics/devices.py, loop.device_choices).

The mock replaces only TensorFlow's *answer to "which devices are there"*
(``devices._logical_devices``); everything else runs for real on the CPU: traced graphs
are inspected for the ops each choice puts in, and the Trainer builds and steps.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional
from hypernet.numerics import devices, norm_relu_pool
from hypernet import config_lib

from hypernet.training import distribute, loop

from test_meta_tasks import _digits_config
from test_norm_relu_pool import OP, _conv4, _weights
from test_plain_bias import _op_types


def _seen(monkeypatch, kind):
  """TensorFlow's device list as on a machine of ``kind`` (one device of that type)."""
  fake = {"gpu": "GPU", "tpu": "TPU"}.get(kind)
  real = devices._logical_devices  # pylint: disable=protected-access
  monkeypatch.setattr(devices, "_logical_devices",
                      lambda t: [f"/device:{t}:0"] if t == fake else
                      ([] if t in ("GPU", "TPU") else real(t)))


def test_each_choice_per_device_kind():
  table = {kind: (devices.cpu_only(kind), devices.cpu_kernels(kind), devices.xla_auto(kind))
           for kind in devices.KINDS}
  assert table == {"cpu": (True, True, False),
                   "gpu": (False, False, True),
                   "tpu": (False, False, True)}
  with pytest.raises(ValueError, match="device kind 'cuda' is unknown"):
    devices.xla_auto("cuda")


@pytest.mark.parametrize("kind", ["cpu", "gpu", "tpu"])
def test_accelerator_reads_tensorflow_device_list(monkeypatch, kind):
  assert devices.accelerator() == "cpu"  # This machine, as TensorFlow sees it.
  _seen(monkeypatch, kind)
  assert devices.accelerator() == kind
  assert devices.cpu_kernels() is (kind == "cpu")
  assert devices.xla_auto() is (kind != "cpu")


def test_loss_scaling_and_precision_warnings():
  assert [devices.loss_scaling(p) for p in distribute.DTYPE_POLICIES] == [False, False, True]
  assert devices.precision_warning("float32", "cpu") is None
  assert devices.precision_warning("mixed_bfloat16", "cpu") is None
  assert "config.dtype_policy='mixed_float16' on a CPU" in devices.precision_warning(
      "mixed_float16", "cpu")
  assert devices.precision_warning("mixed_bfloat16", "gpu", (8, 0)) is None
  assert devices.precision_warning("mixed_float16", "gpu", (7, 0)) is None
  turing = devices.precision_warning("mixed_bfloat16", "gpu", (7, 5))
  assert "compute capability 7.5" in turing and "use 'mixed_float16'" in turing
  pascal = devices.precision_warning("mixed_float16", "gpu", (6, 1))
  assert "from 7.0 on" in pascal and "use 'float32'" in pascal
  assert devices.gpu_compute_capability() is None  # No GPU here: nothing to warn about.
  assert devices.precision_warning("mixed_bfloat16", "gpu") is None
  assert devices.precision_warning("mixed_float16", "tpu") is None


def test_bfloat16_conv_gradient_probe_tells_the_truth_and_the_trainer_refuses(monkeypatch):
  """The probe's verdict equals what a tape computes for a bfloat16 convolution's
  kernel gradient (exactly 1,024 in bfloat16 where the kernel is right); where it is
  wrong, ``mixed_bfloat16`` is refused in one line naming the field, on every machine
  (the probe's answer set by hand), and the float16 warning stops advising it."""
  k = tf.ones([3, 3, 1, 1], tf.bfloat16)
  with tf.GradientTape() as tape:
    tape.watch(k)
    y = tf.nn.conv2d(tf.ones([16, 10, 10, 1], tf.bfloat16), k, 1, "VALID")
  exact = float(tf.cast(tape.gradient(y, k)[0, 0, 0, 0], tf.float32)) == 1024.0
  assert (devices.bfloat16_conv_gradient_error("cpu") is None) == exact
  assert devices.precision_error("float32", "cpu") is None
  assert devices.precision_error("mixed_float16", "cpu") is None
  monkeypatch.setattr(devices, "_BF16_CONV_PROBE", {"cpu": "the kernel sums 1,024 ones to 512"})
  error = devices.precision_error("mixed_bfloat16", "cpu")
  assert error.startswith("config.dtype_policy='mixed_bfloat16' would train on wrong "
                          "gradients: the kernel sums 1,024 ones to 512") and "'float32'" in error
  assert "'mixed_bfloat16'" not in devices.precision_warning("mixed_float16", "cpu")
  from configs import digits_hyper  # pylint: disable=g-import-not-at-top
  config = digits_hyper.get_config()
  config.dtype_policy = "mixed_bfloat16"
  with pytest.raises(ValueError, match=r"^config.dtype_policy='mixed_bfloat16' would train"):
    loop.device_choices(config, "cpu")
  monkeypatch.setattr(devices, "_BF16_CONV_PROBE", {"cpu": None})
  assert devices.precision_error("mixed_bfloat16", "cpu") is None
  assert "or 'mixed_bfloat16'" in devices.precision_warning("mixed_float16", "cpu")
  assert loop.device_choices(config, "cpu")["loss_scaling"] is False


def _traced_meta_call(model, weights, x):
  """The meta-learners' functional call (``accelerate="meta"``), traced: its op types."""
  labels = tf.constant(np.arange(x.shape[0]) % 3)

  def fn(weights, x):
    with tf.GradientTape() as tape:
      tape.watch(weights)
      out = functional.functional_call(model, weights, x, training=True, accelerate="meta")
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, out))
    return loss, tape.gradient(loss, weights)

  concrete = tf.function(fn).get_concrete_function(weights, x)
  return _op_types(concrete), concrete(weights, x)


def test_cpu_numerics_only_when_no_gpu_or_tpu_is_seen(monkeypatch):
  model = _conv4()
  weights = _weights(model)
  x = tf.constant(np.random.default_rng(0).normal(size=(6, 16, 16, 1)), tf.float32)
  ops, (loss, grads) = _traced_meta_call(model, weights, x)
  assert ops[OP] == 4 and ops["MaxPool"] == 0 and ops["BiasAdd"] == 0, ops  # CPU
  for kind in ("gpu", "tpu"):
    with monkeypatch.context() as m:
      _seen(m, kind)
      other_ops, (other_loss, other_grads) = _traced_meta_call(model, weights, x)
    # Keras' own ops: separate pools, BiasAdd for the conv and dense biases.
    assert other_ops[OP] == 0 and other_ops["MaxPool"] == 4, (kind, other_ops)
    assert other_ops["BiasAdd"] == 5, (kind, other_ops)
    np.testing.assert_allclose(float(other_loss), float(loss), rtol=1e-5)
    for p in weights:
      np.testing.assert_allclose(other_grads[p].numpy(), grads[p].numpy(), rtol=1e-4,
                                 atol=1e-6, err_msg=p)
  assert norm_relu_pool.library() is not None


@pytest.mark.parametrize("kind", ["cpu", "gpu", "tpu"])
@pytest.mark.parametrize("jit", ["auto", "false", "true"])
def test_device_choices_of_the_trainer(kind, jit):
  c = config_lib.base_config()
  c.jit_compile = jit
  got = loop.device_choices(c, kind)
  on_accelerator = kind != "cpu"
  expect_jit = {"auto": on_accelerator, "false": False, "true": True}[jit]
  assert got == {"kind": kind, "jit": expect_jit, "cpu_kernels": not on_accelerator,
                 "fused_blocks": not on_accelerator and not expect_jit,
                 "loss_scaling": False, "warning": None}
  c.meta.fused_blocks = False
  assert loop.device_choices(c, kind)["fused_blocks"] is False
  c.dtype_policy = "mixed_float16"
  got = loop.device_choices(c, kind)
  assert got["loss_scaling"] is True
  assert (got["warning"] is not None) is (kind == "cpu")


def test_trainer_on_a_gpu_machine_compiles_with_xla_and_leaves_the_cpu_kernels(
    monkeypatch, tmp_path):
  """The Trainer's choices follow the device list; its step (first-order MAML on digits)
  runs under each plan and gives the same loss (XLA rounding apart)."""
  c = _digits_config()
  c.jit_compile = "auto"
  c.meta.learner = "fomaml"
  cpu = loop.Trainer(c, str(tmp_path / "cpu"))
  assert (cpu.jit, cpu.fused_blocks, cpu.loss_scaling) == (False, True, False)
  with monkeypatch.context() as m:
    _seen(m, "gpu")
    gpu = loop.Trainer(c, str(tmp_path / "gpu"))
    assert gpu.devices == loop.device_choices(c, "gpu")
    assert (gpu.jit, gpu.fused_blocks) == (True, False)
    gpu_metrics, bad = gpu.train_chunk(gpu.train_iterator(0), 1)
  assert bad == -1
  cpu_metrics, bad = cpu.train_chunk(cpu.train_iterator(0), 1)
  assert bad == -1
  assert gpu_metrics["loss"] == pytest.approx(cpu_metrics["loss"], rel=1e-4)
  assert gpu_metrics["grad_norm"] == pytest.approx(cpu_metrics["grad_norm"], rel=1e-3)


def test_generated_weights_are_computed_on_each_replica_device():
  """No placement of hypernet's own: under MirroredStrategy each replica's generated
  weights live on that replica's device (here the two logical CPUs of conftest)."""
  from configs import digits_hyper  # pylint: disable=g-import-not-at-top
  from hypernet.tasks import protocol# pylint: disable=g-import-not-at-top
  c = digits_hyper.get_config()
  c.model.conv_widths, c.model.dense_widths = (4,), (8,)
  c.hypernet.chunk_size, c.hypernet.hidden = 128, (8,)
  strategy = distribute.get_strategy("mirrored")
  assert strategy.num_replicas_in_sync == 2
  with strategy.scope():
    task = protocol.build_task(c)
  # Eagerly: each replica computes its copy on its own device.
  generated = strategy.run(task.source.weights)
  for path, value in generated.items():
    copies = strategy.experimental_local_results(value)
    assert [tf.DeviceSpec.from_string(t.device).device_index for t in copies] == [0, 1], path
    np.testing.assert_array_equal(copies[0].numpy(), copies[1].numpy())
  # Traced (as in the Trainer's step): every op that makes them is placed on its replica.
  placed = []

  def replica_fn():
    weights = task.source.weights()
    placed.append({tf.DeviceSpec.from_string(t.device).device_index
                   for t in weights.values()})
    return weights

  tf.function(lambda: strategy.run(replica_fn)).get_concrete_function()
  assert sorted(map(sorted, placed)) == [[0], [1]]
  assert keras.config.dtype_policy().name == "float32"
