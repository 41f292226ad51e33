"""[judge] The knowledge base the feedback picks from: one note per optimization technique.

Each note is ``knowledge/<slug>.md``: TOML front matter between ``+++`` lines (title, the profile
findings that select it, the task kinds it helps, its exemplar's backend, the exemplar, the naive
version and the task they solve, ``claim``: how many times faster the exemplar is than the naive
version on an H100, and ``claim_eager``: its speed against eager PyTorch on the same task, floors the GPU
test holds it to), then a short Markdown body with the parts
**When it applies**, **Triton**, **CUDA** and **Pitfalls**. Exemplars and naive versions are real
candidates (``class ModelNew``) for their task, under ``knowledge/exemplars/``.

    notes = pick(["uncoalesced", "memory_bound"], ops=["elementwise"], k=2)
    text = render(notes)  # titles, bodies and exemplar code for the feedback

A turn's notes are picked in one place, :func:`for_profile` (``NOTES_PER_TURN`` of them): the verdict's
feedback names them by title (tools/feedback/verdict_text.py), the next message carries their text (agent/messages.py).
"""

from __future__ import annotations

import functools
import tomllib
import typing
from collections.abc import Collection, Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING

from pydantic import BaseModel

from kernelfix.tools.verdict import FindingKind

if TYPE_CHECKING:
    from kernelfix.tools.verdict import ProfileReport

__all__ = [
    "FINDINGS",
    "NOTES_PER_TURN",
    "OPS",
    "Note",
    "exemplar_source",
    "for_profile",
    "notes",
    "pick",
    "render",
    "resource",
    "task_ops",
]

# The finding kinds the profile's feedback names, and the task kinds the notes help.
FINDINGS: tuple[str, ...] = typing.get_args(FindingKind)  # the verdict names them once
OPS: tuple[str, ...] = (
    "elementwise",
    "reduction",
    "softmax",
    "normalization",
    "matmul",
    "conv",
    "transpose",
    "scan",
    "gather",
    "fused",
)
PARTS: tuple[str, ...] = ("**When it applies**", "**Triton**", "**CUDA**", "**Pitfalls**")


class Note(BaseModel):
    slug: str
    title: str
    findings: list[str]
    ops: list[str]
    backend: str
    exemplar: str | None = None  # paths relative to the knowledge folder
    naive: str | None = None
    task: str | None = None
    claim: float | None = None  # exemplar at least this many times faster than naive, on an H100
    # The exemplar's speed against eager PyTorch on its task, on an H100, a floor the GPU test holds it to: above 1, that
    # many times faster; below 1, at least that fraction of eager's speed (where eager is cuBLAS at its best).
    claim_eager: float | None = None
    body: str


def _root() -> Traversable:
    return resources.files("kernelfix.prompts") / "knowledge"


def resource(relative: str) -> Traversable:
    """A file of the knowledge base by its path relative to the knowledge folder (as a note names it)."""
    node = _root()
    for part in relative.split("/"):
        node = node / part
    return node


def parse(slug: str, text: str) -> Note:
    """One note from its file's text: ``+++`` TOML front matter, then the Markdown body."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "+++":
        raise ValueError(f"{slug}: a note starts with a +++ line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "+++")
    except StopIteration:
        raise ValueError(f"{slug}: the front matter has no closing +++ line") from None
    meta = tomllib.loads("\n".join(lines[1:end]))
    return Note(slug=slug, body="\n".join(lines[end + 1 :]).strip(), **meta)


@functools.cache
def _all() -> tuple[Note, ...]:
    found = [(f.name[: -len(".md")], f) for f in _root().iterdir() if f.name.endswith(".md") and f.is_file()]
    return tuple(parse(slug, f.read_text(encoding="utf-8")) for slug, f in sorted(found))


def notes() -> list[Note]:
    """Every note, by slug."""
    return list(_all())


def pick(findings: Sequence[str], ops: Collection[str] = (), k: int = 3, exclude: Collection[str] = ()) -> list[Note]:
    """At most ``k`` notes for the profile's ``findings`` (most important first), skipping ``exclude`` slugs.

    Each finding ranks the notes it selects: most overlap with ``ops`` (the task's kinds) first, then
    notes for which the finding is the main one (earlier in their ``findings`` list), then the more
    specialized (fewer ``ops``), then by slug.
    Notes are then taken round-robin: the best note of every finding, in the findings' order, then the
    second best of each, and so on, so a second finding is not crowded out by the first's runners-up.
    """
    ops_set, skip = set(ops), set(exclude)
    ranked: list[list[Note]] = []
    for finding in dict.fromkeys(findings):  # in order, once each
        matching = [n for n in _all() if finding in n.findings and n.slug not in skip]
        matching.sort(key=lambda n: (-len(ops_set & set(n.ops)), n.findings.index(finding), len(n.ops), n.slug))
        ranked.append(matching)
    out: list[Note] = []
    seen: set[str] = set()
    depth = 0
    while len(out) < k and any(depth < len(r) for r in ranked):
        for r in ranked:
            if depth < len(r) and r[depth].slug not in seen and len(out) < k:
                out.append(r[depth])
                seen.add(r[depth].slug)
        depth += 1
    return out


NOTES_PER_TURN = 2  # notes a turn gets by its findings


def for_profile(profile: "ProfileReport | None", exclude: Collection[str] = ()) -> list[Note]:
    """The notes a correct candidate's profile findings call for (most costly first), ``NOTES_PER_TURN`` of them,
    leaving out ``exclude`` (slugs an earlier turn's message carried already): where every turn's notes are picked."""
    if profile is None or not profile.findings:
        return []
    ops = task_ops(profile.task_flops, profile.min_bytes)
    return pick([_selector(f) for f in profile.findings], ops=ops, k=NOTES_PER_TURN, exclude=exclude)


def _selector(finding) -> str:
    """The name notes select a finding by: its kind, and for contended atomics the use too ("contended_atomics:counter"),
    so a counter handing out work does not get the histogram's privatization note (the finding's own fix says what to do)."""
    if finding.kind == "contended_atomics" and finding.use not in (None, "data"):
        return f"{finding.kind}:{finding.use}"
    return finding.kind


def task_ops(task_flops: float | None, min_bytes: float | None) -> list[str]:
    """The task kinds a profile's numbers suggest, to rank notes: matmul/conv where the task does many
    FLOPs per byte it must move, else the memory-bound kinds."""
    if task_flops and min_bytes and task_flops / min_bytes >= 16:
        return ["matmul", "conv"]
    return ["elementwise", "reduction", "transpose", "normalization"]


def exemplar_source(note: Note) -> str | None:
    """The exemplar's code, or None where the note has none."""
    if not note.exemplar:
        return None
    f = resource(note.exemplar)
    return f.read_text(encoding="utf-8") if f.is_file() else None


def _section(note: Note, code: str | None) -> str:
    text = f"### {note.title}\n\n{note.body}\n"
    if code:
        claim = f", {note.claim:g}x faster than the naive way on an H100" if note.claim else ""
        if note.claim_eager:
            claim += (
                f", {note.claim_eager:g}x eager PyTorch's speed"
                if note.claim_eager >= 1
                else f"; eager PyTorch stays faster on its task: this one reaches {note.claim_eager:g}x its speed"
            )
        text += (
            f"\nExemplar ({note.backend}{claim}; its task: {note.task or 'n/a'}):\n```python\n{code.rstrip()}\n```\n"
        )
    return text


def render(notes: Sequence[Note], with_code: bool = True, max_chars: int = 6000) -> str:
    """The notes as feedback text: each title, body and (``with_code``) exemplar, within ``max_chars``.

    Over the limit, the exemplars of the later notes go first, then whole later notes; a single
    note still over the limit is cut at ``max_chars``.
    """
    notes = list(notes)
    codes = [exemplar_source(n) if with_code else None for n in notes]

    def joined() -> str:
        return "\n".join(_section(n, c) for n, c in zip(notes, codes)).strip()

    text = joined()
    for i in reversed(range(len(codes))):
        if len(text) <= max_chars:
            return text
        if codes[i]:
            codes[i] = None
            text = joined()
    while len(text) > max_chars and len(notes) > 1:
        notes.pop()
        codes.pop()
        text = joined()
    return text if len(text) <= max_chars else text[: max(0, max_chars - 1)].rstrip() + "…"
