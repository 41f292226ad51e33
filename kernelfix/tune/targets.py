"""Which parts of a model to optimize, as an expert chooses them: one target per kind of module, covering the most time.

- **One target per kind.** Modules of the same class and forward code, with parameters of the same shapes and
  dtypes, called the same way (model_profile.module_kind), are one target: the 16 attentions of a 16-layer decoder
  differ only in their weights, so one kernel serves them all. Its share is the instances' summed share
  ("LlamaAttention x16: 41.2%"); each instance's share is kept.
- **Worth a kernel** (each target alone): it computes (some op besides views and copies), runs two or more compute
  ops per call (one op alone, a Linear's GEMM, competes with the library's kernel), holds at least ``min_share`` of
  the step, is not the whole model, and is not a stack (a module holding a list of several modules of one class: a
  model's layers is a model, not a kernel).
- **Cover the most time.** Decided from the smallest targets up: a target whose instances hold targets already chosen
  is chosen over them when what it adds beyond them (its share less theirs, with the ops that make that up) is itself
  worth a kernel (at least ``min_share`` and two compute ops per call) and more than the largest of them: then most of
  its time is its own work, which one kernel fuses (an attention's projections, rotary embedding and softmax beside
  its q_norm and k_norm; a CNN block beside its BatchNorm). Otherwise the time is in its parts and it is tuned through
  them (a decoder layer adds two residual adds to its attention, MLP and norms). Chosen targets never overlap, so each
  swap is measured alone and together.
- ``excluded``: targets capture cannot take; their children are chosen in their place.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from kernelfix.tune.tune_report import Instance, ModuleRow


@dataclass
class Part:
    """One module the step called (``path`` below the model; "" is the model)."""

    path: str
    kind: str
    share: float
    self_share: float
    ms: float
    calls: float  # per step
    ops: Counter  # compute ops per step, its subtree's
    shapes: list[str] = field(default_factory=list)
    kernel_share: float | None = None
    cpu_share: float | None = None
    work: float = (
        0.0  # the share of its ops' own time (on a CPU, without the Python of its forward and the profiler's cost)
    )

    @property
    def per_call(self) -> float:
        return sum(self.ops.values()) / max(self.calls, 1e-9)


def _under(path: str, prefix: str) -> bool:
    return prefix == "" or path.startswith(prefix + ".")


def natural(path: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path))


def choose(
    parts: dict[str, Part],
    *,
    classes: dict[str, str],
    model_name: str,
    model_class: str,
    min_share: float,
    stacks: set[str] = frozenset(),
    excluded: dict[str, str] | None = None,
) -> list[ModuleRow]:
    """One row per kind of module, largest share first; the chosen targets ranked (``rank``), the others with why."""
    excluded = excluded or {}
    groups: dict[str, list[str]] = {}
    for path in sorted(parts, key=natural):
        groups.setdefault(parts[path].kind if path else "", []).append(path)
    reason: dict[str, str | None] = {}
    why: dict[str, str] = {}
    members: dict[str, list[str]] = {k: list(v) for k, v in groups.items()}  # instances still the target's own
    chosen: list[str] = []

    def share_of(paths: list[str]) -> float:
        return sum(parts[p].share for p in paths)

    def alone(k: str) -> str | None:
        """Why the target is not worth a kernel on its own (None: it is)."""
        first = parts[members[k][0]]
        name = f"{classes.get(first.path, model_class)}"
        if first.path == "":
            return "the whole model: tune optimizes its parts"
        if k in excluded:
            return excluded[k]
        if not first.ops:
            return "views and copies only: no arithmetic for a kernel"
        if any(p in stacks for p in members[k]):
            return f"a stack of layers ({name} holds a list of modules of one class): a model of its own, tuned through its parts"
        if first.per_call < 1.5:
            op = first.ops.most_common(1)[0][0].removeprefix("aten::")
            return f"one op per call ({op}): a kernel for it alone competes with the library's"
        s = share_of(members[k])
        if s < min_share:
            return f"{100 * s:.2g}% of the step: at most {1 / (1 - s):.3f}x however fast its kernel"
        return None

    depth = {k: max(p.count(".") + (p != "") for p in v) for k, v in groups.items()}
    for k in sorted(groups, key=lambda k: (-depth[k], k)):  # the smallest first, the model last
        r = alone(k)
        if r is not None:
            reason[k] = r
            continue
        inner = [(c, p) for c in chosen for p in members[c] if any(p != q and _under(p, q) for q in members[k])]
        if not inner:
            chosen.append(k)
            why[k] = "chosen: no smaller target inside it"
            continue
        first = members[k][0]
        below = [p for _, p in inner if _under(p, first)]
        # What it adds is measured by its ops' own time: on a CPU a module's share also holds its forward's Python.
        rest = sum(parts[p].work for p in members[k]) - sum(parts[p].work for _, p in inner)
        rest_ops = parts[first].ops - sum((parts[p].ops for p in below), Counter())
        rest_per_call = sum(rest_ops.values()) / max(parts[first].calls, 1e-9)
        names = sorted({classes.get(p, p) for _, p in inner})
        largest = max(sum(parts[p].work for cc, p in inner if cc == c) for c in {c for c, _ in inner})
        if rest >= min_share and rest_per_call >= 1.5 and rest > largest:
            chosen.append(k)
            why[k] = (
                f"chosen over {', '.join(names)} inside it: it adds {100 * rest:.1f}% of the step beyond them "
                f"({', '.join(o.removeprefix('aten::') for o, _ in rest_ops.most_common(3))}), one kernel for all of it"
            )
            for c in {c for c, _ in inner}:
                covered = [p for cc, p in inner if cc == c]
                members[c] = [p for p in members[c] if p not in covered]
                if not members[c]:
                    chosen.remove(c)
                    reason[c] = f"inside {_label(groups[k], classes, model_name)}, whose kernel covers it"
                elif share_of(members[c]) < min_share:
                    chosen.remove(c)
                    reason[c] = (
                        f"{len(covered)} of its instances inside {_label(groups[k], classes, model_name)}, whose kernel covers "
                        f"them; the other {len(members[c])} hold {100 * share_of(members[c]):.2g}% of the step"
                    )
        else:
            short = (
                f"under {100 * min_share:g}% of the step"
                if rest < min_share
                else "one op per call: alone it competes with the library's"
                if rest_per_call < 1.5
                else f"less than the largest of them, {100 * largest:.2g}%: the time is in its parts"
            )
            reason[k] = (
                f"holds {', '.join(names)}, chosen; what it adds beyond them ({100 * max(rest, 0):.2g}% of the step) is not "
                f"worth a kernel of its own ({short}): tuned through them"
            )
    rows = []
    for k, paths in groups.items():
        own = members[k] if k in chosen else paths
        first = parts[own[0]]
        s = share_of(own)
        rows.append(
            ModuleRow(
                module=model_name if first.path == "" else f"{model_name}.{first.path}",
                module_class=classes.get(first.path, model_class),
                kind=k or None,
                calls=round(first.calls, 3),
                shapes=first.shapes[:8],
                share=round(s, 6),
                self_share=round(sum(parts[p].self_share for p in own), 6),
                ms=round(sum(parts[p].ms for p in own), 6),
                amdahl=None if first.path == "" or s >= 1 else round(1 / (1 - s), 4),
                ops={o.removeprefix("aten::"): round(v) for o, v in first.ops.most_common()},
                candidate=k in chosen,
                reason=None if k in chosen else reason.get(k),
                chosen_because=why.get(k) if k in chosen else None,
                instances=[Instance(module=f"{model_name}.{p}", share=round(parts[p].share, 6)) for p in own]
                if len(own) > 1
                else [],
                kernel_share=_sum(parts, own, "kernel_share"),
                cpu_share=_sum(parts, own, "cpu_share"),
            )
        )
    rows.sort(key=lambda r: (-r.share, natural(r.module)))
    for n, r in enumerate([r for r in rows if r.candidate], start=1):
        r.rank = n
    return rows


def _label(paths: list[str], classes: dict[str, str], model_name: str) -> str:
    name = classes.get(paths[0], paths[0])
    return f"{name} x{len(paths)}" if len(paths) > 1 else f"{model_name}.{paths[0]}"


def _sum(parts: dict[str, Part], paths: list[str], attr: str) -> float | None:
    xs = [getattr(parts[p], attr) for p in paths]
    return None if any(x is None for x in xs) else round(sum(xs), 6)
