"""Installs hypernet: hypernetworks and meta-learning for TensorFlow 2 / Keras 3."""
from setuptools import find_packages, setup

setup(
    name="hypernet",
    version="0.1.0",
    description=("Hypernetworks and meta-learners for TensorFlow 2: functional calls on "
                 "Keras 3 models, exact higher-order gradients, one training loop."),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["hypernet", "hypernet.*"]),
    python_requires=">=3.9",
    install_requires=[
        "tensorflow>=2.16",
        "keras>=3.0",
        "numpy",
        "tensorboard",
        "absl-py",
        "ml-collections",
        "scikit-learn",
        "pillow",
    ],
    extras_require={
        "test": ["pytest", "matplotlib"],  # matplotlib: tests of experiments/ plots
        "plots": ["matplotlib"],
        # benchmarks/: the PyTorch references of meta_bench.py and step_ratio.py.
        "bench": ["torch"],
    },
)
