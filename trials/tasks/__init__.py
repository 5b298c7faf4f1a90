"""Tasks in the Harbor format (and imported Terminal-Bench folders): models, loading, checking."""

from .check import check_task_set
from .harbor import Problem
from .load import inspect_task, load_task, load_task_set
from .model import (
    AgentConfig,
    Author,
    EnvironmentConfig,
    SolutionConfig,
    Task,
    TaskConfig,
    TaskMeta,
    VerifierConfig,
)

__all__ = [
    "AgentConfig",
    "Author",
    "EnvironmentConfig",
    "Problem",
    "SolutionConfig",
    "Task",
    "TaskConfig",
    "TaskMeta",
    "VerifierConfig",
    "check_task_set",
    "inspect_task",
    "load_task",
    "load_task_set",
]
