"""Dropout in a captured call: the masks it drew become the task's inputs, so the task is a function the judge can check.

A training step's dropout draws a new mask every call; a task must give the same output for the same inputs. So,
during the captured call, dropout (``F.dropout``, ``torch.dropout``, and the attention dropout of
``F.scaled_dot_product_attention``) runs through :class:`RandomDraws`, a torch function mode that draws each mask
itself, keeps it, and computes the same thing from it (``x * mask / (1 - p)``; attention as its math, the mask on the
weights): the call's output is exactly a function of the masks. Export then traces the module under
:class:`ReplayMasks`, which takes the masks from the ``kf_random`` keyword instead of drawing them: the task's forward
multiplies by its mask inputs, and get_inputs() draws masks with the captured drop rate. A swapped kernel gets fresh
masks at every call (:func:`draw_masks`), as dropout does.

A dropout with p = 0, or outside training, draws nothing and is left alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

RANDOM_KEY = "kf_random"  # the keyword the flat call passes the masks in

_DROPOUTS = {F.dropout, torch.dropout, torch.nn.functional.dropout}
_SDPA = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}


@dataclass
class Draw:
    """One mask a call drew: its name among the task's inputs, the drop rate, and the mask (True: kept)."""

    name: str
    p: float
    mask: torch.Tensor
    op: str


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


def _dropout_args(args: tuple, kwargs: dict) -> tuple[torch.Tensor, float, bool]:
    return (
        _arg(args, kwargs, 0, "input", None),
        float(_arg(args, kwargs, 1, "p", 0.5)),
        bool(_arg(args, kwargs, 2, "training", _arg(args, kwargs, 2, "train", True))),
    )


def _sdpa_parts(args: tuple, kwargs: dict) -> dict:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    defaults = (None, None, None, None, 0.0, False, None, False)
    return {n: _arg(args, kwargs, i, n, d) for i, (n, d) in enumerate(zip(names, defaults))}


def sdpa_math(parts: dict, mask: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product attention as its definition, with the dropout ``mask`` (True: kept) on the weights."""
    q, k, v = parts["query"], parts["key"], parts["value"]
    p = float(parts["dropout_p"])
    scale = parts["scale"] if parts["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    if parts["enable_gqa"] and k.shape[-3] != q.shape[-3]:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], dim=-3)
    w = torch.matmul(q, k.transpose(-2, -1)) * scale
    L, S = q.shape[-2], k.shape[-2]
    if parts["is_causal"]:
        causal = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        w = w.masked_fill(~causal, float("-inf"))
    m = parts["attn_mask"]
    if m is not None:
        w = w.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else w + m
    w = torch.softmax(w, dim=-1)
    w = w * (mask.to(w.dtype) * (1.0 / (1.0 - p)))
    return torch.matmul(w, v)


def _weights_shape(parts: dict) -> tuple[int, ...]:
    q, k = parts["query"], parts["key"]
    return (*q.shape[:-1], k.shape[-2])


class _Masks(TorchFunctionMode):
    """Dropout computed from explicit masks: where they come from is the subclass's business."""

    def mask_for(self, op: str, shape: tuple[int, ...], p: float, device: torch.device) -> torch.Tensor:
        raise NotImplementedError

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _DROPOUTS:
            x, p, training = _dropout_args(args, kwargs)
            if training and 0.0 < p and isinstance(x, torch.Tensor):
                mask = self.mask_for("dropout", tuple(x.shape), p, x.device)
                return x * (mask.to(x.dtype) * (1.0 / (1.0 - p)))
        elif func in _SDPA:
            parts = _sdpa_parts(args, kwargs)
            p = float(parts["dropout_p"] or 0.0)
            if p > 0.0:
                mask = self.mask_for("attention_dropout", _weights_shape(parts), p, parts["query"].device)
                return sdpa_math(parts, mask)
        return func(*args, **kwargs)


class RandomDraws(_Masks):
    """During the captured call: each dropout draws its mask here, which is kept (:attr:`draws`)."""

    def __init__(self) -> None:
        super().__init__()
        self.draws: list[Draw] = []
        self._on = False

    @classmethod
    def start(cls, module: torch.nn.Module) -> RandomDraws:
        mode = cls()
        if module.training:  # outside training dropout draws nothing: no mode, no cost
            mode.__enter__()
            mode._on = True
        return mode

    def stop(self) -> None:
        if self._on:
            self.__exit__(None, None, None)
            self._on = False

    def mask_for(self, op: str, shape: tuple[int, ...], p: float, device: torch.device) -> torch.Tensor:
        mask = torch.rand(shape, device=device) >= p
        self.draws.append(Draw(name=f"{op}_{len(self.draws)}", p=p, mask=mask, op=op))
        return mask


@dataclass
class ReplayMasks(_Masks):
    """While export traces the module: each dropout takes the next mask of ``masks`` (the kf_random inputs)."""

    masks: dict[str, torch.Tensor] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()
        self._next = 0

    def mask_for(self, op: str, shape: tuple[int, ...], p: float, device: torch.device) -> torch.Tensor:
        if self._next >= len(self.names):
            raise RuntimeError("the module drew more dropout masks while traced than in the captured call")
        name = self.names[self._next]
        self._next += 1
        return self.masks[name]


def draw_masks(specs: list[tuple[str, float, tuple[int, ...]]], device: torch.device) -> dict[str, torch.Tensor]:
    """Fresh masks for a swapped kernel's call: each (name, p, shape) kept with probability 1 - p."""
    return {name: torch.rand(shape, device=device) >= p for name, p, shape in specs}
