"""Hypernetworks: Keras models that generate the weights of a target network.

:class:`MLPHypernetwork` (one output head per target tensor), :class:`ChunkedHypernetwork`
(one shared generator over chunk embeddings), :class:`StaticHypernetwork` (Ha et al.
2016's tiled conv kernels), :class:`LoRAHypernetwork` (generated low-rank adapters
``W_0 + scale * A @ B`` on a frozen base), all subclasses of :class:`Hypernetwork` and each optionally
conditional (task ids or embeddings); :func:`batched_functional_call` runs a target on
``S`` generated weight sets in one pass; :class:`HypernetworkSource` is a hypernetwork as
a :class:`hypernet.core.source.WeightSource`.
"""
from hypernet.hypernetworks.base import Hypernetwork
from hypernet.hypernetworks.batched import batched_functional_call, reduce_state
from hypernet.hypernetworks.chunked import ChunkedHypernetwork
from hypernet.hypernetworks.lora import LoRAHypernetwork
from hypernet.hypernetworks.mlp import MLPHypernetwork
from hypernet.hypernetworks.source import (HypernetworkSource, build_hypernetwork,
                                           build_weight_source)
from hypernet.hypernetworks.static import StaticHypernetwork

__all__ = ["ChunkedHypernetwork", "Hypernetwork", "HypernetworkSource", "LoRAHypernetwork",
           "MLPHypernetwork",
           "StaticHypernetwork", "batched_functional_call", "build_hypernetwork",
           "build_weight_source", "reduce_state"]
