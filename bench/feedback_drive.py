"""One forward of a candidate inside the NVTX range the judge's profile uses, for a profiler in front.

    python3 bench/feedback_drive.py TASK.py CANDIDATE.py [--build-only]

Builds as the judge builds (kernelfix's load_inline hook: -lineinfo, the build cache), warms up
twice, then runs forward once inside ``kernelfix_candidate``. No sandbox and no checks: this is for
capturing Nsight Compute's raw pages (bench/feedback_capture.sh), not for judging.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    import torch

    from kernelfix.tools.compile import load_inline

    load_inline.install(Path(tempfile.mkdtemp(prefix="kf-drive-")), "cuda")
    task, cand = load(sys.argv[1], "task"), load(sys.argv[2], "candidate")
    if "--build-only" in sys.argv:  # fills the build cache, so the profiled run loads the extension
        return
    torch.manual_seed(0)
    model = cand.ModelNew(*task.get_init_inputs()).cuda()
    with torch.device("cuda"):
        inputs = task.get_inputs()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad():
        for _ in range(2):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("kernelfix_candidate")
        model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main()
