"""[reference worker] Trials handed over through arenas: ``prepare`` (a trial's inputs in an input arena, an output
arena for the candidate's answer), ``survey``, ``release`` and ``trim``."""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelfix.tools.task_size import tensor_bytes as nbytes
from kernelfix.tools.transport import Arena, TensorSpec, flatten, layout
from kernelfix.tools.transport.protocol import (
    Fds,
    Prepare,
    Prepared,
    Release,
    Released,
    Survey,
    Surveyed,
    TrialPlan,
    Trim,
    Trimmed,
)
from kernelfix.tools.transport.tree import contiguous_spec, spec_of, write
from kernelfix.tools.workers.child import sync
from kernelfix.tools.workers.reference.trial_data import TrialData, free, oom


@dataclass
class Slot:
    arena: Arena
    specs: list[TensorSpec]
    trial: int  # whose inputs it holds now


@dataclass
class Out:
    arena: Arena
    specs: list[TensorSpec] = field(default_factory=list)


SPARES_PER_OWNER = 4  # a trial's input and output arenas, and the in-place check's pair


class Handoff:
    """The part of :class:`ReferenceServer` that hands trials over through arenas: ``prepare``, ``survey``,
    ``release``, ``trim``.

    A trial's GPU arenas, given back with ``keep``, wait as the evaluation's spares (``spares``, by owner) and its
    next trial of the same size takes them again, exported anew: on the H100 a 6 GiB arena took 1.6 ms to make and
    5.6 ms to give back (bench/arena_cost.py), two of them each trial of a 6 GiB ReLU's nine. Only the evaluation
    that released them reuses them: another candidate's process may still map memory it was given (a tensor it kept),
    and must never see a later evaluation's trial there. They go when the stage ends (a release without ``keep``),
    when another judge wants the memory (``trim``) and when an arena cannot be made."""

    def prepare(self, req: Prepare, fds: list[int]) -> None:
        plan = req.trial
        self.plans[plan.index] = plan
        self.seconds = {}
        owner = req.owner
        cached = plan.index in self.cache
        data = self._get(plan, inputs_only=req.inputs_only)
        reply = Prepared(
            index=plan.index,
            skipped=data.skipped,
            cached=cached,
            float64_note=data.float64_note or self.float64_note,
            seconds=self.seconds,
        )
        if data.skipped is not None:
            self.w.say(reply, req.id)
            return
        self.w.phase("handoff", trial=plan.index)
        skel, tensors = flatten(data.payload)
        specs = [spec_of(t) for t in tensors]
        created: list[Arena] = []
        with self._timed("arenas"):  # made (or reused), filled, and the output arena made
            into = req.into
            if into is not None:
                slot = self.slots[into]
                if [(s.dtype, s.shape, s.stride) for s in slot.specs] != [(s.dtype, s.shape, s.stride) for s in specs]:
                    reply.skipped = "its inputs are laid out unlike the tensors they would replace"
                    self.w.say(reply, req.id)
                    return
                for s, t in zip(slot.specs, tensors):
                    write(slot.arena, s, t)
                slot.trial, sid, specs = plan.index, into, slot.specs
            else:
                arena = self._arena(layout(specs), owner)
                for s, t in zip(specs, tensors):
                    write(arena, s, t)
                sid = self._id()
                self.slots[sid] = Slot(arena, specs, plan.index)
                reply.in_arena = arena.spec
                created.append(arena)
            exp_skel, exp = flatten(data.expected)
            exp_specs = [contiguous_spec(t) for t in exp]
            out = self._arena(layout(exp_specs), owner)
            oid = self._id()
            self.outs[oid] = Out(out, exp_specs)
            created.append(out)
            sync(self.device)  # the arena's bytes are complete before the candidate may read them
        reply.seconds = {k: round(v, 4) for k, v in self.seconds.items()}
        reply.slot, reply.inputs, reply.input_specs = sid, skel, specs
        reply.out, reply.out_arena, reply.expected, reply.expected_specs = oid, out.spec, exp_skel, exp_specs
        reply.ref_ms, reply.noise, reply.has_float64, reply.vacuous = (
            data.ref_ms,
            data.noise,
            data.out64 is not None,
            data.vacuous,
        )
        reply.input_bytes, reply.output_bytes = nbytes(data.inputs), nbytes(data.out)
        reply.grads = list(data.grad_keys)
        assert self.w.requests is not None
        self.w.requests.send(Fds().wire() | {"id": req.id}, [a.fd for a in created if a.fd is not None])
        for a in created:
            a.forget_fd()
        self.w.say(reply, req.id)

    def survey(self, req: Survey, fds: list[int]) -> None:
        """Every planned trial's reference, computed once and kept for the candidates to come, summarized:
        what the judge knows of the task before any candidate's trial runs. A trial the cache cannot
        hold ends the survey: the rest would be computed again for each candidate anyway."""
        out = []
        for plan in req.trials:
            self.plans[plan.index] = plan
            data = self._get(plan)
            if plan.index not in self.cache and data.skipped is None:
                out.append(self._summary(plan, data))
                break
            out.append(self._summary(plan, data))
        self.w.say(Surveyed(trials=out, cache_used=self.cache_used), req.id)

    def _summary(self, plan: TrialPlan, data: TrialData) -> Prepared:
        return Prepared(
            index=plan.index,
            skipped=data.skipped,
            ref_ms=data.ref_ms,
            noise=data.noise,
            has_float64=data.out64 is not None,
            float64_note=data.float64_note or self.float64_note,
            vacuous=data.vacuous,
            cached=plan.index in self.cache,
            input_bytes=nbytes(data.inputs),
            output_bytes=nbytes(data.out),
        )

    def _arena(self, size: int, owner: str | None = None) -> Arena:
        """An arena of ``size`` bytes: the owner's spare of that size, exported anew, or a new one. Its memory comes
        from the driver, not torch's allocator: blocks the allocator holds free (a float64 reference's temporaries:
        32 GiB for 45_Average_Pooling_2D) and every spare are given back first when the driver has too little (on
        the H100 that OOM came with 13.7 GiB free)."""
        device = _device_index(self.device)
        spares = self.spares.get(owner or "", [])
        if spares and self.arena_kind == "cuda":
            want = Arena.allocated_size(size, "cuda", device)
            for i, a in enumerate(spares):
                if a.spec.size == want:
                    del spares[i]
                    a.export()
                    return a
        try:
            return Arena.create(size, self.arena_kind, device)
        except Exception as e:
            if not (self.cuda and oom(e)):
                raise
            self._drop_spares()
            free(self.cuda)
            return Arena.create(size, self.arena_kind, device)

    def _give_back(self, arena: Arena, owner: str | None, keep: bool) -> None:
        """An arena this trial is done with: kept as the owner's spare (``keep``, a GPU arena, room left), else released."""
        spares = self.spares.setdefault(owner, []) if keep and owner and arena.spec.kind == "cuda" else None
        if spares is not None and len(spares) < SPARES_PER_OWNER:
            spares.append(arena)
        else:
            arena.release()

    def _drop_one_spare(self) -> bool:
        """Release the largest spare of any owner (its next trial makes one again); whether there was one."""
        kept = [(a.spec.size, o, i) for o, spares in self.spares.items() for i, a in enumerate(spares)]
        if not kept:
            return False
        _, o, i = max(kept)
        self.spares[o].pop(i).release()
        return True

    def _drop_spares(self, owner: str | None = None) -> int:
        """Release the spares (one owner's, or all); the bytes they held."""
        owners = list(self.spares) if owner is None else [owner]
        freed = 0
        for o in owners:
            for a in self.spares.pop(o, []):
                freed += a.spec.size
                a.release()
        return freed

    def trim(self, req: Trim, fds: list[int]) -> None:
        """Another judge's stage wants this GPU's memory: drop the cached trials (each is computed again
        from its seed when asked) and return the allocator's free blocks. Arenas in use stay."""
        freed = self.cache_used + (self.recent[1].size if self.recent is not None else 0) + self._drop_spares()
        self.cache.clear()
        self.cache_used = 0
        self.recent = None
        free(self.cuda)
        import torch

        reserved = torch.cuda.memory_reserved() if self.cuda else 0  # what is left: live tensors, the model
        self.w.say(Trimmed(freed=freed, reserved=reserved, slots=len(self.slots), outs=len(self.outs)), req.id)

    def release(self, req: Release, fds: list[int]) -> None:
        """Arenas a trial is done with: the owner's spares with ``keep`` (its next trial comes), else released, and
        then the owner's spares too (its stage is over)."""
        owner, keep = req.owner, req.keep
        for sid in req.slots:
            s = self.slots.pop(sid, None)
            if s is not None:
                self._give_back(s.arena, owner, keep)
        for oid in req.outs:
            o = self.outs.pop(oid, None)
            if o is not None:
                self._give_back(o.arena, owner, keep)
        if not keep and owner:
            self._drop_spares(owner)
        self.w.say(Released(), req.id)  # arenas are not the allocator's: nothing to empty


def _device_index(device: str) -> int:
    return int(device.split(":")[1]) if ":" in device else 0
