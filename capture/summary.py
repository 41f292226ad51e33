"""What `kernelfix capture` and `kernelfix swap` print for a person (--json prints the records instead)."""

from __future__ import annotations

import os
from pathlib import Path

from kernelfix.capture.schema import CaptureManifest, CompilePath, SwapReport
from kernelfix.capture.task_source import input_summary


def capture_text(m: CaptureManifest, files: list[Path]) -> str:
    ops = ", ".join(
        f"{k.removeprefix('aten.')} x{v}" if v > 1 else k.removeprefix("aten.") for k, v in m.graph_ops.items()
    )
    task = next((f for f in files if f.name == m.task), files[-1] if files else Path(m.task))
    if m.calls:  # --calls: one input set per call, each checked
        return _sets_text(m, files, ops, task)
    lines = [
        f"captured {m.module_path} ({m.module_class.rsplit('.', 1)[-1]}), call {m.call}, on {m.device}"
        + (" in training mode" if m.training else ""),
        *(f"  input   {s}" for s in input_summary(m.inputs)),
        *(f"  output  {o.path}: {o.description}" for o in m.outputs),
        *_state_lines(m),
        f"  graph   {sum(m.graph_ops.values())} ATen ops: {ops}",
        f"  check   reproduces the captured call: {m.check.captured.summary() if m.check.captured else '-'}; {m.check.fresh_inputs}",
        *(f"  note    {n}" for n in m.notes),
        f"  wrote   {', '.join(_rel(f) for f in files)}",
        f"next: kernelfix optimize {_rel(task)} --model M",
    ]
    return "\n".join(lines)


def _sets_text(m: CaptureManifest, files: list[Path], ops: str, task: Path) -> str:
    lines = [
        f"captured {m.module_path} ({m.module_class.rsplit('.', 1)[-1]}), calls {', '.join(map(str, m.calls))}, on {m.device}"
        + (" in training mode" if m.training else "")
    ]
    for k, (call, inputs, outputs, check) in enumerate(
        zip(m.calls, m.input_sets, m.set_outputs, m.set_checks), start=1
    ):
        lines.append(f"  set {k} (call {call})")
        lines += [f"    input   {s}" for s in input_summary(inputs)]
        lines += [f"    output  {o.path}: {o.description}" for o in outputs]
        lines.append(f"    check   reproduces call {call}: {check.captured.summary() if check.captured else '-'}")
    lines += [
        *_state_lines(m),
        f"  graph   {sum(m.graph_ops.values())} ATen ops: {ops}",
        f"  inputs  get_input_sets() draws the {len(m.calls)} sets; get_inputs() the first; {m.check.fresh_inputs}",
        *(f"  note    {n}" for n in m.notes),
        f"  wrote   {', '.join(_rel(f) for f in files)}",
        f"next: kernelfix optimize {_rel(task)} --model M",
    ]
    return "\n".join(lines)


def _state_lines(m: CaptureManifest) -> list[str]:
    """What the call read and wrote in a state argument (a cache), and the dropout masks taken as inputs."""
    lines = []
    for st in m.state:
        kind = st.type.rsplit(".", 1)[-1]
        read = ", ".join(f"{u.path}.{a}" for u in st.units for a in u.inputs) or "nothing (it was empty)"
        wrote = ", ".join(f"{u.path}.{a}" for u in st.units for a in u.outputs) or "no tensor"
        lines.append(
            f"  state   {st.leaf} ({kind}): read {read}; wrote {wrote} (the task's kf_state inputs and output)"
        )
    if m.random:
        masks = ", ".join(f"{r.name} (p={r.p:g})" for r in m.random)
        lines.append(
            f"  dropout masks the call drew are inputs (kf_random): {masks}; a swapped kernel gets fresh ones each call"
        )
    return lines


def swap_text(r: SwapReport) -> str:
    if not r.ok and r.error:
        return f"kernelfix swap: {r.error}"
    best = f"turn {r.best_turn}" if r.best_turn is not None else "the best kernel"
    speed = f", {r.speedup_eager:.2f}x over eager" if r.speedup_eager is not None else ""
    lines = [f"best kernel of {_rel(Path(r.session))} ({best}{speed}) for {r.module_path}"]
    for c in r.checks:
        where = f" (set {c.input_set})" if c.input_set is not None else ""
        lines.append(
            f"  check against the {c.against.replace('_', ' ')}{where}: {'ok' if c.ok else 'FAILED'}, {c.output.summary()}"
            + (f" ({c.note})" if c.note else "")
        )
    if not r.checks:
        lines.append("  not checked (--no-check)")
    if r.compile_path is not None:
        lines.append(f"  {compile_path_text(r.compile_path)}")
    if r.snippet:
        lines += [
            "",
            "Put it in your model, after building it and before running it:",
            "",
            *("    " + s for s in r.snippet.splitlines()),
        ]
    return "\n".join(lines)


def compile_path_text(p: CompilePath) -> str:
    """One line: how the swap runs under torch.compile."""
    if p.kind == "traced":
        calls = f" (calling {', '.join(p.kernels)})" if p.kernels else ""
        return f"under torch.compile: the kernel's forward traced by Dynamo{calls}; {p.note}"
    if p.kind == "custom_op":
        return f"under torch.compile: the custom operator {p.op}; {p.note}"
    return f"under torch.compile: {p.note}"


def _rel(p: Path) -> str:
    try:
        return os.path.relpath(p)
    except ValueError:
        return str(p)
