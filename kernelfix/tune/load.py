"""``kernelfix.load_tuned(DIR, model)``: the swaps a tune kept, put into the user's model.

    model = build_model()
    model = kernelfix.load_tuned("tuned/", model)

Each kept swap (``report.json``'s ``kept``) is ``kernelfix.load_best(session, original)`` set in the
place of the module it replaces (``model.blocks[0].attn = ...``), checked on its captured call as
load_best checks it. The model object is changed in place and returned.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from kernelfix.capture.errors import SwapError


def load_tuned(
    tune_dir: str | Path, model: nn.Module, *, device: str | torch.device | None = None, check: bool = True
) -> nn.Module:
    """``model`` with every swap the tune in ``tune_dir`` kept. ``device``: where the kernels run (default: the
    model's); ``check``: each kernel against its captured call (load_best's check). Raises SwapError when the
    directory holds no tune or the model lacks a module the tune swapped."""
    from kernelfix.capture.swap import load_best
    from kernelfix.tune.flow import TuneInputError, read_report
    from kernelfix.tune.swaps import relative

    try:
        report = read_report(tune_dir)
    except TuneInputError as e:
        raise SwapError(str(e)) from None
    if report is None:
        raise SwapError(f"{tune_dir} holds no tune (no report.json): run kernelfix tune first")
    if not isinstance(model, nn.Module):
        raise SwapError(f"load_tuned takes the model (an nn.Module), not {type(model).__name__}")
    if device is None:
        device = next((t.device for t in [*model.parameters(), *model.buffers()]), torch.device("cpu"))
    want = report.model_class.rsplit(".", 1)[-1]
    if type(model).__name__ != want:
        raise SwapError(f"{tune_dir} tuned a {want}, not a {type(model).__name__}")
    places = []  # every module to replace, found before any is replaced: a model lacking one is left as it was
    for kept in report.kept:
        cls = next((m.module_class for m in report.modules if m.module == kept.module), None)
        for path in kept.instances or [kept.module]:
            rel = relative(path, report.model_name)
            if rel == "":
                raise SwapError(f"{path} is the whole model: load it with kernelfix.load_best({kept.session!r}, model)")
            parent_path, _, attr = rel.rpartition(".")
            try:
                parent = model.get_submodule(parent_path) if parent_path else model
                original = getattr(parent, attr)
            except AttributeError:
                raise SwapError(f"the model has no module {path} (the tune in {tune_dir} swapped it)") from None
            if not isinstance(original, nn.Module):
                raise SwapError(f"{path} is not a module of this model")
            if type(original).__name__ != (cls or type(original).__name__):
                raise SwapError(
                    f"{path} is a {type(original).__name__}, the tune swapped a {cls} (is the tune already loaded?)"
                )
            places.append((parent, attr, original, kept.session))
    for (
        parent,
        attr,
        original,
        session,
    ) in places:  # each instance with its own weights (load_best builds the kernel from them)
        setattr(parent, attr, load_best(session, original, device=device, check=check))
    return model
