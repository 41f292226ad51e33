"""Try swaps in the user's model: load each best kernel, check the model's output, time the model.

A trial puts one or more kernels (``kernelfix.load_best``) into a *swapped view* of the model: a copy
of the modules on the path to each swapped one, sharing every parameter, buffer and untouched module
with the original (:func:`swapped_view`), so the original stays as it was, the two are timed side by
side, and a large model is not held twice. Then, eager and under
``torch.compile(fullgraph=True)``: the swapped model's output (and, with --backward, the gradients of
the model's other parameters) against the original's, within the judge's tolerance; and the forward
(or training step) of both, in paired rounds (:mod:`kernelfix.tune.timing`). The keep rule is
:func:`kernelfix.tune.decide.explain`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn as nn

from kernelfix.capture.check import HALF, compare_outputs, truth_rule
from kernelfix.capture.errors import SwapCheckFailed, SwapError
from kernelfix.capture.summary import compile_path_text
from kernelfix.tools.config import JudgeConfig
from kernelfix.tune.decide import compare, explain
from kernelfix.tune.model_call import ModelCall
from kernelfix.tune.model_profile import step_fn
from kernelfix.tune.timing import paired_rounds
from kernelfix.tune.tune_config import TuneConfig
from kernelfix.tune.tune_report import Comparison, SwapTrial


def relative(module_path: str, model_name: str) -> str:
    """``model.blocks.0.attn`` -> ``blocks.0.attn`` (the path below the model)."""
    if module_path == model_name:
        return ""
    if not module_path.startswith(model_name + "."):
        raise SwapError(f"{module_path} is not a module of {model_name}")
    return module_path[len(model_name) + 1 :]


def swapped_view(root: nn.Module, replacements: dict[str, nn.Module]) -> nn.Module:
    """``root`` with the modules at these paths (below it) replaced, the rest shared: each module on a path is a
    shallow copy with its own table of submodules, so the original keeps its own."""
    if "" in replacements:
        return replacements[""]
    copies: dict[int, nn.Module] = {}

    def own(module: nn.Module) -> nn.Module:
        if id(module) not in copies:
            new = copy.copy(module)
            new._modules = dict(module._modules)
            copies[id(module)] = new
        return copies[id(module)]

    top = own(root)
    for path, replacement in replacements.items():
        *parents, last = path.split(".")
        node = top
        for part in parents:
            child = node._modules.get(part)
            if child is None:
                raise SwapError(f"the model has no submodule {path!r} (no {part!r})")
            node._modules[part] = node = own(child) if id(child) not in {id(c) for c in copies.values()} else child
        if last not in node._modules:
            raise SwapError(f"the model has no submodule {path!r}")
        node._modules[last] = replacement
    return top


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


class Trials:
    """Swap trials on one model and its call; the compiled original is made once and shared."""

    def __init__(
        self,
        call: ModelCall,
        *,
        model_name: str,
        cfg: TuneConfig,
        judge_cfg: JudgeConfig,
        backward: bool,
        say: Callable[[str], None] = lambda s: None,
    ):
        self.call, self.model_name, self.cfg, self.judge_cfg, self.backward, self.say = (
            call,
            model_name,
            cfg,
            judge_cfg,
            backward,
            say,
        )
        self.root = call.module
        self.device = call.device
        self._compiled: nn.Module | None = None
        self.fullgraph = True
        self.notes: list[str] = []
        import torch._dynamo

        for key in ("cache_size_limit", "recompile_limit"):  # one compiled frame per model tried, all kept
            if hasattr(torch._dynamo.config, key):
                setattr(torch._dynamo.config, key, max(getattr(torch._dynamo.config, key), 64))

    # ------------------------------------------------------------------ one trial

    def trial(
        self, swaps: list[tuple[str, str]], best_turns: list[int | None] | None = None, targets: list[str] | None = None
    ) -> SwapTrial:
        """``swaps``: (module path, session dir) pairs, tried together (every instance of a target, each with its own
        weights); ``targets``: what they are, as the table names them."""
        t = SwapTrial(
            modules=[m for m, _ in swaps],
            sessions=list(dict.fromkeys(s for _, s in swaps)),
            best_turns=list(best_turns or []),
            targets=targets or [m for m, _ in swaps],
        )
        kernels: dict[str, nn.Module] = {}
        for module_path, session in swaps:
            try:
                rel = relative(module_path, self.model_name)
                original = self.root.get_submodule(rel) if rel else self.root
                kernels[rel] = _load(session, original, self.device)
            except SwapCheckFailed as e:
                t.reason = f"{module_path}: its kernel does not reproduce the module: {e}"
                return t
            except (SwapError, AttributeError) as e:
                t.reason = f"{module_path}: cannot swap it in: {e}"
                return t
        view = swapped_view(self.root, kernels)
        t.eager = self._compare("eager", self.root, view)
        if self.backward and t.eager.error is None:
            t.grads = self._grads_check(view, set(kernels))
        if t.eager.error is None and (t.eager.output is None or t.eager.output.ok) and (t.grads is None or t.grads.ok):
            t.compiled = self._compiled_comparison(view)
        t.fallbacks = sum(getattr(k, "fallbacks", 0) for k in kernels.values())
        t.compile_paths = {
            m: compile_path_text(k.compile_path)
            for (m, _), k in zip(swaps, kernels.values())
            if getattr(k, "compile_path", None) is not None
        }
        t.kept, t.reason = explain(t.eager, t.compiled, self.cfg)
        if t.grads is not None and not t.grads.ok:
            t.kept, t.reason = False, f"breaks the model's gradients: {t.grads.summary()}"
        if t.fallbacks:
            t.reason += f"; {t.fallbacks} calls fell back to the original module (a call unlike every captured one)"
        return t

    def _compare(self, mode: str, before: nn.Module, after: nn.Module) -> Comparison:
        try:
            want = step_fn(before, self.call, backward=False)()
            got = step_fn(after, self.call, backward=False)()
        except Exception as e:
            return Comparison(mode=mode, error=f"the swapped model raised: {_first_line(e)}")
        check = compare_outputs(_detached(got), _detached(want), self.judge_cfg)
        if not check.ok and _half(
            want
        ):  # bfloat16's rounding through a deep model: judged against the model in float32
            try:
                check = truth_rule(_detached(got), _detached(want), self._truth(), self.judge_cfg, check)
            except (
                Exception
            ) as e:  # the model does not run in float32 (or the copy does not fit): the element-wise check stands
                self.notes.append(
                    f"no float32 run of the model to judge half-precision outputs against: {_first_line(e)}"
                )
        if not check.ok:
            return Comparison(mode=mode, output=check)
        fns = [step_fn(before, self.call, backward=self.backward), step_fn(after, self.call, backward=self.backward)]
        try:
            (b, a), calls = paired_rounds(fns, self.device, rounds=self.cfg.rounds, round_ms=self.cfg.round_ms)
        except Exception as e:  # a backward that fails, a fault mid-timing: this swap's result, not the tune's end
            return Comparison(mode=mode, output=check, error=f"raised while timed: {_first_line(e)}")
        c = compare(mode, b, a, calls, self.cfg)
        c.output = check
        return c

    def _truth(self):
        """The original model's output in float32 (a copy; made once): what the half-precision outputs are measured against."""
        if getattr(self, "_truth_out", None) is None:
            wide = copy.deepcopy(self.root).float()
            with torch.no_grad():
                self._truth_out = _detached(step_fn(wide, self.call, backward=False)())
            del wide
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        return self._truth_out

    def _compiled_comparison(self, view: nn.Module) -> Comparison:
        original = self.compiled_original()
        if original is None:
            return Comparison(mode="compiled", error=self.notes[-1])
        try:
            swapped = torch.compile(view, fullgraph=self.fullgraph, backend=self.cfg.compile_backend)
            step_fn(swapped, self.call, backward=False)()
        except Exception as e:
            how = "fullgraph=True" if self.fullgraph else "torch.compile"
            return Comparison(mode="compiled", error=f"the swapped model does not compile with {how}: {_first_line(e)}")
        c = self._compare("compiled", original, swapped)
        if not self.fullgraph:
            c.note = "compiled without fullgraph: the original model does not compile with fullgraph=True"
        return c

    def compiled_original(self) -> nn.Module | None:
        if self._compiled is not None:
            return self._compiled
        for fullgraph in (True, False):
            try:
                compiled = torch.compile(self.root, fullgraph=fullgraph, backend=self.cfg.compile_backend)
                step_fn(compiled, self.call, backward=False)()
                self._compiled, self.fullgraph = compiled, fullgraph
                if not fullgraph:
                    self.notes.append(
                        "the original model does not compile with fullgraph=True: the compiled timings compile both without it"
                    )
                return compiled
            except Exception as e:
                err = _first_line(e)
        self.notes.append(
            f"the original model does not compile ({self.cfg.compile_backend}): {err}; no compiled timing"
        )
        return None

    def _grads_check(self, view: nn.Module, swapped: set[str]):
        """The gradients of every parameter outside the swapped modules (shared by both models) after one step
        of each: what flows back through a swapped module's backward reaches them."""
        names = [
            n
            for n, p in self.root.named_parameters()
            if p.requires_grad and not any(n == s or n.startswith(s + ".") for s in swapped if s)
        ]
        params = dict(self.root.named_parameters())

        def grads(model: nn.Module) -> dict[str, torch.Tensor | None]:
            step_fn(model, self.call, backward=True)()
            return {n: None if params[n].grad is None else params[n].grad.detach().clone() for n in names}

        want = grads(self.root)
        try:
            got = grads(view)
        except Exception as e:
            from kernelfix.capture.schema import OutputCheck

            return OutputCheck(ok=False, problem=f"the swapped model's backward raised: {_first_line(e)}")
        return compare_outputs(got, want, self.judge_cfg)


def _load(session: str, original: nn.Module, device: torch.device) -> nn.Module:
    from kernelfix.capture.swap import load_best

    return load_best(session, original, device=device)


def _detached(obj):
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, obj)


def _half(out) -> bool:
    import torch.utils._pytree as pytree

    return any(isinstance(x, torch.Tensor) and x.dtype in HALF for x in pytree.tree_leaves(out))
