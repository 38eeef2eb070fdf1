"""The functional core: run any built Keras 3 model on weights given as tensors.

* :func:`functional_call` - the target network on ``{path: tensor}`` (Keras
  ``stateless_call``), returning its outputs and optionally its new non-trainable state;
* :func:`variable_paths`, :func:`select_paths`, :func:`weight_spec` - how weights are
  addressed (``"conv1/kernel"``) and described (shapes, dtypes, roles);
  :func:`merged_model` - given weights written into a plain Keras clone (export);
* :class:`WeightSource` - the protocol of what produces a target's weights;
* :func:`override_value` and friends - replace a tensor's value, keep its gradient path
  (straight-through), and the quantisers built on it.
"""
import importlib as _importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # For readers and the API reference; at run time: __getattr__ below.
  from hypernet.core.functional import (assign_state, functional_call, merged_model,
                                        select_paths, variable_paths, weight_spec)
  from hypernet.core.ops import (binary, int8, layer_paths, override_layer_outputs,
                                 override_value, quantize_weights, set_mean, set_slice,
                                 ternary, to_dtype)
  from hypernet.core.source import IdentitySource, WeightSource
  # ``weight_roles`` (the function) is not re-exported here: it would hide the module of
  # the same name (``from hypernet.core import weight_roles``).
  from hypernet.core.weight_roles import WeightRole, WeightSpec

__all__ = [
    "IdentitySource", "WeightRole", "WeightSource", "WeightSpec", "assign_state", "binary",
    "functional_call", "int8", "layer_paths", "merged_model", "override_layer_outputs",
    "override_value",
    "quantize_weights", "select_paths", "set_mean", "set_slice", "ternary", "to_dtype",
    "variable_paths", "weight_spec",
]

# Loaded on first use, so that the TensorFlow-free modules (``registry``, ``plugins``) can
# be imported without TensorFlow (the command line validates configs before that import).
_MODULES = {
    "IdentitySource": "source", "WeightSource": "source",
    "WeightRole": "weight_roles", "WeightSpec": "weight_roles",
    "assign_state": "functional", "functional_call": "functional",
    "merged_model": "functional",
    "select_paths": "functional", "variable_paths": "functional",
    "weight_spec": "functional",
}


def __getattr__(name: str):
  if name not in __all__:
    raise AttributeError(f"module 'hypernet.core' has no attribute {name!r}")
  module = _MODULES.get(name, "ops")
  value = getattr(_importlib.import_module(f"hypernet.core.{module}"), name)
  globals()[name] = value  # Later look-ups skip this function.
  return value


def __dir__():
  return sorted(set(globals()) | set(__all__))
