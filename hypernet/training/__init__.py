"""The training loop and everything it runs: :mod:`.loop` (``train_and_evaluate``, the
``Trainer``), its periodic actions (:mod:`.actions`), the workdir layout (:mod:`.workdir`),
the task protocol (:mod:`.task_protocol`) and tasks (:mod:`.tasks`, :mod:`.meta_tasks`,
:mod:`.continual_tasks`), targets built from a config (:mod:`.models`; weight sources:
:mod:`hypernet.hypernetworks.source`), objectives,
checkpoints, summaries, distribution, the config schema (:mod:`.config_lib`), the command
line (:mod:`.cli`, TensorFlow-free at import) and export. The top layer below the entry
points ``hypernet.train`` and ``hypernet.evaluate``.

This ``__init__`` imports nothing, so that the command line stays TensorFlow-free."""
