"""Installs hypernet: hypernetworks and meta-learning for TensorFlow 2 / Keras 3.

Supported versions are the ones measured to work (docs/installation.md, "Supported
versions"): Python 3.11, TensorFlow 2.19 to 2.21 with Keras 3.11 to 3.15 (TensorBoard as
TensorFlow). CI runs the full suite on the newest pair and the compatibility subset on
the oldest (.ci/run, .ci/oldest.txt); tools/forward_check.sh tries the next Keras.
"""
from setuptools import find_packages, setup

setup(
    name="hypernet",
    version="0.1.0",
    description=("Hypernetworks and meta-learners for TensorFlow 2: functional calls on "
                 "Keras 3 models, exact higher-order gradients, one training loop."),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    license_files=["LICENSE"],
    packages=find_packages(include=["hypernet", "hypernet.*"]),
    # The fused BatchNorm-ReLU-max-pool kernel's source, compiled on first use
    # (hypernet/numerics/norm_relu_pool.py).
    package_data={"hypernet": ["numerics/kernels/*.cc"]},
    python_requires=">=3.11",
    install_requires=[
        "tensorflow>=2.19,<2.22",
        "keras>=3.11,<3.16",
        "numpy",
        "tensorboard>=2.19,<2.22",
        "absl-py",
        "ml-collections",
        "scikit-learn",
        "pillow",
    ],
    extras_require={
        # matplotlib: tests of experiments/ plots; mkdocs: tests/test_docs.py builds the
        # API reference; tensorflow-datasets: the tfds: data plug-in's test (offline,
        # tfds.testing.mock_data).
        "test": ["pytest", "pytest-xdist", "matplotlib", "mkdocs>=1.6", "mkdocstrings[python]>=0.26",
                 "tensorflow-datasets"],
        # The documentation site and API reference: mkdocs build --strict (mkdocs.yml).
        "docs": ["mkdocs>=1.6", "mkdocstrings[python]>=0.26"],
        "plots": ["matplotlib"],
        # config.data.name = "tfds:NAME" (hypernet/data/plugins.py).
        "tfds": ["tensorflow-datasets"],
        # benchmarks/: the PyTorch references of meta_bench.py and step_ratio.py.
        "bench": ["torch"],
    },
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Science/Research",
        "Intended Audience :: Developers",
        "License :: OSI Approved :: Apache Software License",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.11",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
