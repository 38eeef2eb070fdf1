"""Supported versions in the tests: version facts, and the compatibility subset (kept here).

The compatibility subset is what CI runs on the oldest supported TensorFlow / Keras pair
(``.ci/run`` -> ``.ci/compat_subset.sh .ci/oldest.txt``) and what
``tools/forward_check.sh`` runs against the newest Keras pre-release: the tests that
reach into TensorFlow's and Keras' internals (the functional call, exact second order,
the fused kernels and their dispatch, plain bias adds, meta-learners, hypernetworks,
batched weights, the device choices). ``conftest.py`` gives every test listed here the
pytest marker ``compat_subset``: ``python -m pytest -m compat_subset``.
``python tests/supported.py`` prints the files that hold the subset (the scripts collect
only those; neither it nor this module imports Keras).
"""
import importlib.metadata
import sys

import pytest


def _version(text):
  return tuple(int(part) for part in text.split(".")[:2])


def _keras_version():
  """The installed Keras' version, from its distribution: ``keras``, or ``keras-nightly``
  (what a TensorFlow release candidate installs; the same ``keras`` package)."""
  for name in ("keras", "keras-nightly"):
    try:
      return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      pass
  raise importlib.metadata.PackageNotFoundError("keras (neither keras nor keras-nightly)")


KERAS_VERSION = _keras_version()
KERAS = _version(KERAS_VERSION)


def requires_keras(minimum: str, feature: str):
  """Skips a test (or a ``pytest.param``) on Keras older than ``minimum``, naming the
  Keras feature it needs."""
  return pytest.mark.skipif(
      KERAS < _version(minimum),
      reason=f"needs Keras >= {minimum} ({feature}); Keras {KERAS_VERSION} is installed")


# "file" (every test in it), "file::test_function" (every parametrisation of it) or
# "file::test_function[id]" (one parametrisation).
COMPAT_SUBSET = (
    "test_functional.py",
    "test_devices.py::test_each_choice_per_device_kind",
    "test_devices.py::test_cpu_numerics_only_when_no_gpu_or_tpu_is_seen",
    "test_devices.py::test_generated_weights_are_computed_on_each_replica_device",
    "test_second_order.py::test_first_and_second_order_match_finite_differences",
    "test_second_order.py::test_layer_normalization_exact_values_and_keras_as_shipped",
    "test_second_order.py::test_maml_meta_gradient_through_layer_normalization_matches_finite_differences",
    "test_second_order.py::test_layers_that_cannot_be_exact_are_refused_by_second_order_learners",
    "test_second_order.py::test_batch_renormalisation_is_refused_by_second_order_learners",
    "test_second_order.py::test_inner_tape_traced_and_outer_tape_outside_stays_exact",
    "test_fused_norm.py::test_fused_call_matches_keras_values_and_moving_statistics",
    "test_fused_norm.py::test_other_calls_run_keras_own_code",
    "test_fused_norm.py::test_second_order_through_the_fused_kernel_matches_float64_exact",
    "test_norm_relu_pool.py::test_float64_values_first_and_second_derivatives_match_reference",
    "test_norm_relu_pool.py::test_conv4_traced_call_fuses_every_block_with_the_same_values",
    "test_norm_relu_pool.py::test_second_order_maml_meta_gradients_through_the_kernel",
    "test_norm_relu_pool.py::test_dispatch_only_for_a_2x2_valid_pool_of_a_fused_batch_norm_relu",
    "test_plain_bias.py::test_meta_learners_calls_have_no_bias_add_other_calls_keep_it",
    "test_plain_bias.py::test_same_values_and_shapes_as_keras_own_add_where_its_bias_add_shortcut_applies",
    "test_plain_bias.py::test_einsum_dense_bias_matches_keras_own_call",
    "test_accel.py::test_meta_calls_equal_the_wrapped_path_bit_for_bit_without_bias_add",
    "test_pool_first.py::test_values_equal_and_bias_relu_on_the_pooled_tensor",
    "test_pool_first.py::test_float64_hessian_vector_products_match_keras_order",
    "test_pool_first.py::test_not_rewritten",
    "test_meta.py::test_maml_toy_exact",
    "test_meta.py::test_maml_second_order_through_batchnorm_matches_finite_differences",
    "test_meta.py::test_hypernetwork_plus_maml_meta_gradient_matches_finite_differences",
    "test_meta.py::test_unrecorded_second_order_inner_gradient_raises",
    # Second order through conv4 + BatchNorm; the other learners' cases take 2-5x longer.
    "test_meta_batch.py::test_conv4_meta_batch_matches_per_task_loop[metasgd]",
    "test_meta_batch.py::test_a_meta_batch_whose_trace_raises_leaves_the_process_usable",
    # AutoGraph's conversion rules (compat.exempt_from_autograph).
    "test_compat.py::test_a_users_tf_function_traces_hypernet_as_written",
    "test_compat.py::test_a_loss_fn_handed_to_hypernet_is_traced_as_written_or_converted_by_its_tf_function",
    "test_hypernetworks.py::test_hyperfan_init_variance_matches_target_layer",
    "test_hypernetworks.py::test_gradients_match_float64_finite_differences",
    "test_hypernetworks.py::test_checkpoint_round_trip_restores_every_parameter",
    "test_batched.py::test_batched_equals_python_loop",
    "test_ops.py::test_square_worked_example",
    "test_ops.py::test_functional_call_overrides_inside_mirrored_strategy",
)


def in_subset(nodeid: str) -> bool:
  """Whether a pytest node id (``tests/test_x.py::test_y[params]``) is in the subset."""
  path, _, name = nodeid.partition("::")
  entry = path.rsplit("/", 1)[-1]
  return (entry in COMPAT_SUBSET or f"{entry}::{name.split('[')[0]}" in COMPAT_SUBSET
          or f"{entry}::{name}" in COMPAT_SUBSET)


def subset_files() -> list:
  """The test files that hold the subset, as paths from the repository root."""
  return sorted({f"tests/{entry.split('::')[0]}" for entry in COMPAT_SUBSET})


if __name__ == "__main__":
  sys.stdout.write(" ".join(subset_files()) + "\n")
