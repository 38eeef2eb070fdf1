"""Tasks: what the one train loop trains (weight source, target, objective, data).

:class:`Task` is the protocol; :data:`TASKS` the registry of built-in tasks by
``config.task`` name (classification, multitask_classification, few_shot, sinusoid,
continual); :func:`build_task` builds the one a config names, or the user's
``"package.module:Class"``.
"""
from hypernet.tasks.protocol import TASKS, Task, as_task, build_plugin_task, build_task

__all__ = ["TASKS", "Task", "as_task", "build_plugin_task", "build_task"]
