"""The functional core: run any built Keras 3 model on weights given as tensors.

* :func:`functional_call` - the target network on ``{path: tensor}`` (Keras
  ``stateless_call``), returning its outputs and optionally its new non-trainable state;
* :func:`variable_paths`, :func:`select_paths`, :func:`weight_spec` - how weights are
  addressed (``"conv1/kernel"``) and described (shapes, dtypes, roles);
* :class:`WeightSource` - the protocol of what produces a target's weights;
* :func:`override_value` and friends - replace a tensor's value, keep its gradient path
  (straight-through), and the quantisers built on it.
"""
from hypernet.core.functional import (assign_state, functional_call, select_paths,
                                      variable_paths, weight_spec)
from hypernet.core.ops import (binary, int8, layer_paths, override_layer_outputs,
                               override_value, quantize_weights, set_mean, set_slice,
                               ternary, to_dtype)
from hypernet.core.source import IdentitySource, WeightSource
# ``weight_roles`` (the function) is not re-exported here: it would hide the module of
# the same name (``from hypernet.core import weight_roles``).
from hypernet.core.weight_roles import WeightRole, WeightSpec

__all__ = [
    "IdentitySource", "WeightRole", "WeightSource", "WeightSpec", "assign_state", "binary", "functional_call", "int8",
    "layer_paths", "override_layer_outputs", "override_value", "quantize_weights",
    "select_paths", "set_mean", "set_slice", "ternary", "to_dtype", "variable_paths",
    "weight_spec",
]
