"""Experiment scripts: run sets of configs, write markdown tables and PNG plots.

Run them as modules from the repository root, e.g.
``python -m experiments.digits_sweep --out=/tmp/hypernet/digits_sweep``.
"""
