"""The swap's side of a state argument (a transformers cache): ``StateBinding`` reads the unit's tensors from the
user's own object, runs the kernel, and writes back what the module would have written, so a ``generate()`` with the
swap sees the cache it expects; ``restore`` puts a recorded object back as it was before a call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from kernelfix.capture.schema import StateArg, StateUnit, StateValue
from kernelfix.capture.state_args import (
    ABSENT,
    MARK,
    STATE_KEY,
    STATE_OUT,
    TOP,
    Path,
    Recorded,
    Snapshot,
    is_state_object,
    key,
    matches,
    resolve,
    show,
    unit_path,
    value_of,
)


@dataclass
class _Bound:
    """One unit of a state argument, its path and its tensors' names worked out once (no parsing per call: this
    runs inside compiled models too)."""

    unit: StateUnit
    path: Path
    keys_in: dict[str, str]
    keys_out: dict[str, str]
    before: list[tuple[str, StateValue]]


class StateBinding:
    """The swap's side of a state object: read a unit's tensors from the user's object before the kernel runs, write
    what the kernel returned back into it afterwards, as the module would have (``instance``: the module being
    replaced, whose own index attribute, such as ``layer_idx``, names its unit)."""

    def __init__(self, specs: list[StateArg], instance: nn.Module | None = None):
        self.specs = specs
        self.instance = instance
        self._args: list[tuple[str, Any, str, str, list[_Bound]]] = []  # (where, index or name, marker, type, units)
        for s in specs:
            m = TOP.fullmatch(s.leaf)
            where, at = ("args", int(m[1])) if m and m[1] is not None else ("kwargs", m[2]) if m else ("nested", s.leaf)
            units = [
                _Bound(
                    unit=u,
                    path=unit_path(u, instance),
                    keys_in={a: key(s.leaf, u, a) for a in u.inputs},
                    keys_out={a: key(s.leaf, u, a) for a in u.outputs},
                    before=sorted(u.before.items(), key=lambda kv: kv[1].kind != "value"),
                )  # flags first: they say why
                for u in s.units
            ]
            self._args.append((where, at, MARK + s.type.rsplit(".", 1)[-1], s.type.rsplit(".", 1)[-1], units))

    @staticmethod
    def _get(where: str, at: Any, args: tuple, kwargs: dict) -> Any:
        if where == "args":
            return args[at] if at < len(args) else None
        return kwargs.get(at) if where == "kwargs" else None

    def is_rewritten(self, args: tuple, kwargs: dict) -> bool:
        """The call already holds the task's marker where the state object was (a captured call, rewritten)."""
        for where, at, marker, _, _ in self._args:
            x = self._get(where, at, args, kwargs)
            if isinstance(x, str) and x == marker:
                return True
        return False

    def flat(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, list[tuple[Any, _Bound]]] | str:
        """The call for the kernel and the units to write back; or why this call is not the captured kind (its
        state is not as it was at the capture: a decode step's cache already holds keys)."""
        args, kwargs = list(args), dict(kwargs)
        state_in: dict[str, torch.Tensor] = {}
        targets = []
        for where, at, marker, kind, units in self._args:
            obj = self._get(where, at, tuple(args), kwargs)
            if obj is None or not is_state_object(obj):
                return f"{where}[{at!r}] is not a {kind}"
            for b in units:
                try:
                    u = resolve(obj, b.path)
                except (AttributeError, IndexError, KeyError, TypeError):
                    return f"the {kind} has no {b.unit.path}"
                for a, want in b.before:
                    now = getattr(u, a, ABSENT)
                    if not matches(want, now):
                        was = {"absent": "absent", "device": "a device", "dtype": want.value}.get(
                            want.kind, repr(want.value)
                        )
                        return (
                            f"{kind}.{show(b.path)}.{a} is {'absent' if now is ABSENT else repr(now)} where the captured call "
                            f"found it {was} (the kernel was judged on the {kind} as it was then)"
                        )
                for a, k in b.keys_in.items():
                    t = getattr(u, a, None)
                    if not isinstance(t, torch.Tensor):
                        return f"{kind}.{show(b.path)}.{a} holds no tensor"
                    state_in[k] = t
                targets.append((u, b))
            if where == "args":
                args[at] = marker
            else:
                kwargs[at] = marker
        if state_in:
            kwargs[STATE_KEY] = state_in
        return tuple(args), kwargs, targets

    def write_back(self, output: Any, targets: list[tuple[Any, _Bound]]) -> Any:
        """Write the kernel's state outputs into the user's units; the module's own output."""
        out, extra = output
        written = extra[STATE_OUT]
        device = None
        for t in written.values():
            device = t.device
            break
        for u, b in targets:
            for a, k in b.keys_out.items():
                setattr(u, a, written[k])
            for a, v in b.unit.after.items():
                val = value_of(v, device if device is not None else torch.device("cpu"))
                if val is ABSENT:
                    if hasattr(u, a):
                        delattr(u, a)
                else:
                    setattr(u, a, val)
        return out


def restore(recorded: list[Recorded]) -> None:
    """Put each state object back as it was before the recorded call (tensors copied again, so a replay may write
    them): a call replayed for timing meets the same state each time."""
    for r in recorded:
        now = Snapshot.take(r.obj)
        for path in sorted(set(now.held) | set(r.before_values), key=len, reverse=True):
            if len(path) == 0:
                continue
            try:
                owner = resolve(r.obj, path[:-1])
            except (AttributeError, IndexError, KeyError, TypeError):
                continue
            want = r.before_values.get(path, ABSENT)
            if isinstance(want, torch.Tensor):
                want = want.clone()
            _set(owner, path[-1], want)


def _set(owner: Any, name: Any, value: Any) -> None:
    if isinstance(owner, (list, dict)):
        if value is ABSENT:
            if isinstance(owner, dict):
                owner.pop(name, None)
            return
        owner[name] = value
    elif isinstance(owner, tuple):
        return
    elif value is ABSENT:
        if name in vars(owner):
            delattr(owner, name)
    else:
        setattr(owner, name, value)
