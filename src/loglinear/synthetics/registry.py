"""The task registry: `TASKS` (name -> class, a `Registry`) and `get_task(name, **kwargs)`."""

from __future__ import annotations

import inspect
from typing import Any

from loglinear.registry import Registry
from loglinear.synthetics.compositional_mqar import CompositionalMQAR
from loglinear.synthetics.compression import Compression
from loglinear.synthetics.cycle_nav import CycleNavigation
from loglinear.synthetics.flip_flop import FlipFlop
from loglinear.synthetics.forgetting_mqar import ForgettingMQAR
from loglinear.synthetics.fuzzy_in_context_recall import FuzzyInContextRecall
from loglinear.synthetics.in_context_recall import InContextRecall
from loglinear.synthetics.memorization import Memorization
from loglinear.synthetics.mod_arith import ModularArithmetic, ModularArithmeticBrackets
from loglinear.synthetics.mqar import MQAR
from loglinear.synthetics.niah import NeedleInAHaystack
from loglinear.synthetics.noisy_in_context_recall import NoisyInContextRecall
from loglinear.synthetics.parity import Parity
from loglinear.synthetics.regbench import RegBench
from loglinear.synthetics.selective_copying import SelectiveCopying
from loglinear.synthetics.stacked_mqar import StackedMQAR
from loglinear.synthetics.task import Task
from loglinear.synthetics.word_problems import (
    A5WordProblem,
    S3WordProblem,
    S5TranspositionsWordProblem,
    S5WordProblem,
)

TASKS: Registry[type[Task]] = Registry(
    "task",
    ((cls.name, cls) for cls in (
        MQAR,
        Parity,
        CycleNavigation,
        ModularArithmetic,
        ModularArithmeticBrackets,
        S3WordProblem,
        S5WordProblem,
        A5WordProblem,
        S5TranspositionsWordProblem,
        FlipFlop,
        InContextRecall,
        FuzzyInContextRecall,
        NoisyInContextRecall,
        SelectiveCopying,
        Compression,
        Memorization,
        ForgettingMQAR,
        CompositionalMQAR,
        NeedleInAHaystack,
        StackedMQAR,
        RegBench,
    )),
    base=Task,
)


def task_arguments(name: str) -> dict[str, inspect.Parameter]:
    """The keyword arguments task `name` accepts (its constructor's parameters)."""
    cls = TASKS[name]
    return {k: p for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self"}


def get_task(name: str, **kwargs: Any) -> Task:
    """Build task `name`; an unknown name, an unknown or missing keyword, or a bad value is a
    ValueError that names the valid choices or the bound that failed."""
    parameters = task_arguments(name)
    unknown = sorted(set(kwargs) - set(parameters))
    if unknown:
        raise ValueError(f"unknown argument(s) {unknown} for task {name!r}; valid: {sorted(parameters)}")
    missing = sorted(k for k, p in parameters.items() if p.default is inspect.Parameter.empty and k not in kwargs)
    if missing:
        raise ValueError(f"task {name!r} needs argument(s) {missing} (no default, on purpose: say it explicitly)")
    return TASKS[name](**kwargs)
