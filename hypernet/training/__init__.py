"""The training loop (:mod:`.loop`: ``train_and_evaluate``, the ``Trainer``) and what runs
around it: periodic actions (:mod:`.actions`), the workdir layout (:mod:`.workdir`),
checkpoints, summaries, the distribution runtime, the command line (:mod:`.cli`,
TensorFlow-free at import) and export. What it trains is in :mod:`hypernet.tasks`.

This ``__init__`` imports nothing, so that the command line stays TensorFlow-free."""
