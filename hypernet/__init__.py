"""hypernet: hypernetworks and meta-learners for TensorFlow 2 / Keras 3.

A *weight source* (a hypernetwork, an inner-loop learner such as MAML, or the target's
own variables) produces the weights of a *target network* as tensors; the target runs on
them through a functional call (:func:`functional_call`, Keras 3 ``stateless_call``,
never ``set_weights``), and the outer optimiser differentiates through everything with
``tf.GradientTape``, to second order where the algorithm needs it::

    import hypernet as hn

    outputs = hn.functional_call(target, {"dense/kernel": w}, x)

The names below are the public surface; every other module is implementation. They are
loaded on first use, so ``import hypernet`` itself does not import TensorFlow (the
command-line entry points print their first line before that import).

Layers of the package (a module imports only from its own layer or lower ones):

* ``hypernet.numerics`` - exact second-order moments, fused kernels, the acceleration policy;
* ``hypernet.core`` - the functional call, the weight source protocol, registries;
* ``hypernet.data`` - loaders and step-indexed ``tf.data`` pipelines;
* ``hypernet.config_lib`` - the config schema, assembled from the registries;
* ``hypernet.hypernetworks``, ``hypernet.meta``, ``hypernet.continual`` - weight sources;
* ``hypernet.keras`` - ``keras.Model`` s over them for ``compile()`` / ``fit()``;
* ``hypernet.tasks`` - what the loop trains (the task protocol and the built-in tasks);
* ``hypernet.training`` - the one training loop, its actions, checkpoints, summaries,
  distribution, command line;
* ``hypernet.train``, ``hypernet.evaluate`` - the entry points.
"""
import importlib as _importlib
import os as _os

# Keras 3 must run on TensorFlow here: the whole package is built on tf.GradientTape.
_os.environ.setdefault("KERAS_BACKEND", "tensorflow")

__version__ = "0.1.0"

# Public name -> "module:attribute" (attribute omitted: the name is a subpackage).
_EXPORTS = {
    # The functional core.
    "functional_call": "hypernet.core.functional:functional_call",
    "variable_paths": "hypernet.core.functional:variable_paths",
    "select_paths": "hypernet.core.functional:select_paths",
    "weight_spec": "hypernet.core.functional:weight_spec",
    "assign_state": "hypernet.core.functional:assign_state",
    "merged_model": "hypernet.core.functional:merged_model",
    "WeightSpec": "hypernet.core.weight_roles:WeightSpec",
    "WeightRole": "hypernet.core.weight_roles:WeightRole",
    "weight_roles": "hypernet.core.weight_roles:weight_roles",
    "override_value": "hypernet.core.ops:override_value",
    "override_layer_outputs": "hypernet.core.ops:override_layer_outputs",
    "layer_paths": "hypernet.core.ops:layer_paths",
    "set_slice": "hypernet.core.ops:set_slice",
    "set_mean": "hypernet.core.ops:set_mean",
    "quantize_weights": "hypernet.core.ops:quantize_weights",
    "check_second_order": "hypernet.numerics.second_order:check_second_order",
    # Weight sources.
    "WeightSource": "hypernet.core.source:WeightSource",
    "Hypernetwork": "hypernet.hypernetworks.base:Hypernetwork",
    "MLPHypernetwork": "hypernet.hypernetworks.mlp:MLPHypernetwork",
    "ChunkedHypernetwork": "hypernet.hypernetworks.chunked:ChunkedHypernetwork",
    "StaticHypernetwork": "hypernet.hypernetworks.static:StaticHypernetwork",
    "LoRAHypernetwork": "hypernet.hypernetworks.lora:LoRAHypernetwork",
    "batched_functional_call": "hypernet.hypernetworks.batched:batched_functional_call",
    # Keras-native training (compile / fit).
    "HyperModel": "hypernet.keras.models:HyperModel",
    "MetaModel": "hypernet.keras.models:MetaModel",
    # Training.
    "train_and_evaluate": "hypernet.training.loop:train_and_evaluate",
    "FusedAdam": "hypernet.numerics.fused_adam:FusedAdam",
    "export_target": "hypernet.training.export:export_target",
    # Subpackages.
    "core": "hypernet.core",
    "numerics": "hypernet.numerics",
    "data": "hypernet.data",
    "hypernetworks": "hypernet.hypernetworks",
    "meta": "hypernet.meta",
    "continual": "hypernet.continual",
    "keras": "hypernet.keras",
    "tasks": "hypernet.tasks",
    "training": "hypernet.training",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
  target = _EXPORTS.get(name)
  if target is None:
    raise AttributeError(f"module 'hypernet' has no attribute {name!r}")
  module_name, _, attribute = target.partition(":")
  module = _importlib.import_module(module_name)
  value = getattr(module, attribute) if attribute else module
  globals()[name] = value  # Later look-ups skip this function.
  return value


def __dir__():
  return sorted(set(globals()) | set(__all__))


# Saved HyperModel / MetaModel files load after `import hypernet` alone: Keras' registry
# gets deferred entries for them once Keras is imported (no TensorFlow import here).
from hypernet.keras import serialization as _keras_serialization  # pylint: disable=g-import-not-at-top,wrong-import-position

_keras_serialization.install()
