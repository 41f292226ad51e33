"""The recorded call in the form a task takes: plain tensors and values in, plain tensors out.

Most calls already are. Two kinds are not, and are rewritten here before export (``kf_*`` keywords):

- a state object among the arguments (a transformers cache): its units' tensors before the call go in ``kf_state``,
  and what the call wrote there comes out beside the module's output (capture/state_args.py);
- dropout in training: the masks the call drew go in ``kf_random`` (capture/randomness.py).

:func:`task_call` gives the rewritten call and a module export can trace on it: a shallow copy of the user's
module (the same parameters and submodules, so the weights keep their names) whose forward takes the ``kf_*``
keywords, rebuilds what the module expects, and calls the module's own forward.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from typing import Any

import torch.nn as nn

from kernelfix.capture.randomness import RANDOM_KEY, ReplayMasks
from kernelfix.capture.schema import RandomInput, StateArg
from kernelfix.capture.script import CapturedCall
from kernelfix.capture.state_args import STATE_KEY, flat_call, state_call


def needs_rewrite(c: CapturedCall) -> bool:
    return bool(c.random) or any(r.spec is not None for r in c.state_args)


def task_call(c: CapturedCall) -> CapturedCall:
    """``c`` as a task takes it (itself when it needs no rewrite)."""
    if not needs_rewrite(c):
        return c
    args, kwargs, output = flat_call(c.args, c.kwargs, c.output, c.state_args)
    if c.random:
        kwargs[RANDOM_KEY] = {d.name: d.mask for d in c.random}
    return dataclasses.replace(c, module=traceable(c.module, c), args=args, kwargs=kwargs, output=output)


def state_specs(c: CapturedCall) -> list[StateArg]:
    return [r.spec for r in c.state_args if r.spec is not None]


def random_specs(c: CapturedCall) -> list[RandomInput]:
    return [RandomInput(name=d.name, p=d.p, op=d.op) for d in c.random]


def traceable(module: nn.Module, c: CapturedCall) -> nn.Module:
    """A shallow copy of ``module`` whose forward takes the rewritten call."""
    original = module.forward
    names = [d.name for d in c.random]

    def forward(*args: Any, **kwargs: Any) -> Any:
        masks = kwargs.pop(RANDOM_KEY, None)
        if masks is None:
            return state_call(original, c.state_args, args, kwargs)
        with ReplayMasks(masks=masks, names=names):
            return state_call(original, c.state_args, args, kwargs)

    sig = inspect.signature(original)
    params = list(sig.parameters.values())
    extra = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None) for k in (STATE_KEY, RANDOM_KEY)]
    at = next((i for i, p in enumerate(params) if p.kind == inspect.Parameter.VAR_KEYWORD), len(params))
    forward.__signature__ = sig.replace(parameters=[*params[:at], *extra, *params[at:]])
    clone = copy.copy(module)
    clone.forward = forward
    return clone
