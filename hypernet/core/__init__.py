"""The functional core: run any built Keras 3 model on weights given as tensors.

* :func:`functional_call` - the target network on ``{path: tensor}`` (Keras
  ``stateless_call``), returning its outputs and optionally its new non-trainable state;
* :func:`variable_paths`, :func:`select_paths`, :func:`weight_spec` - how weights are
  addressed (``"conv1/kernel"``) and described (shapes, dtypes, roles);
* :class:`WeightSource` - the protocol of what produces a target's weights;
* :func:`override_value` and friends - replace a tensor's value, keep its gradient path
  (straight-through), and the quantisers built on it.
"""
import importlib as _importlib

# Loaded on first use, so that the TensorFlow-free modules (``registry``, ``plugins``) can
# be imported without TensorFlow (the command line validates configs before that import).
_EXPORTS = {
    "assign_state": "functional", "functional_call": "functional",
    "select_paths": "functional", "variable_paths": "functional",
    "weight_spec": "functional",
    "binary": "ops", "int8": "ops", "layer_paths": "ops", "override_layer_outputs": "ops",
    "override_value": "ops", "quantize_weights": "ops", "set_mean": "ops", "set_slice": "ops",
    "ternary": "ops", "to_dtype": "ops",
    "IdentitySource": "source", "WeightSource": "source",
    # ``weight_roles`` (the function) is not re-exported here: it would hide the module of
    # the same name (``from hypernet.core import weight_roles``).
    "WeightRole": "weight_roles", "WeightSpec": "weight_roles",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
  module = _EXPORTS.get(name)
  if module is None:
    raise AttributeError(f"module 'hypernet.core' has no attribute {name!r}")
  value = getattr(_importlib.import_module(f"hypernet.core.{module}"), name)
  globals()[name] = value  # Later look-ups skip this function.
  return value


def __dir__():
  return sorted(set(globals()) | set(__all__))
