"""The text of a captured task: Model (the traced forward, weights from a file), get_inputs, get_init_inputs."""

from __future__ import annotations

import builtins
import math
import re
import types
from pathlib import Path

import torch

from kernelfix.capture.errors import CaptureFailed
from kernelfix.capture.export_graph import TaskGraph
from kernelfix.capture.schema import InputLeaf, RandomInput, StateArg, TensorSpec

_FREES = re.compile(r";\s+(?:\w+ = )+None$")  # fx frees each value after its last use: noise in a task
_TRACE = re.compile(r"# File: (.+?):(\d+) in (\S+), code: (.*)$")

_HELPERS = '''
def _normal(shape, dtype, mean, std, lo=None, hi=None, stride=None):
    """Normal(mean, std), clipped to the captured range [lo, hi]."""
    draw = torch.float64 if dtype == torch.float64 else torch.complex64 if dtype.is_complex else torch.float32
    flat = torch.randn(_extent(shape, stride), dtype=draw).mul_(std).add_(mean)
    if lo is not None:
        flat = flat.clamp_(lo, hi)
    return _lay_out(flat.to(dtype), shape, stride)


def _integers(shape, dtype, lo, hi, stride=None):
    """Uniform integers in the captured range [lo, hi] (an index stays a valid index)."""
    return _lay_out(torch.randint(lo, hi + 1, (_extent(shape, stride),), dtype=dtype), shape, stride)


def _bools(shape, p_true, stride=None):
    return _lay_out(torch.rand(_extent(shape, stride)) < p_true, shape, stride)


def _extent(shape, stride):
    if stride is None:
        return math.prod(shape)
    return 0 if 0 in shape else 1 + sum((s - 1) * st for s, st in zip(shape, stride))


def _lay_out(flat, shape, stride):
    """Contiguous, or the captured strides (a transposed or broadcast input stays so)."""
    return flat.view(shape) if stride is None else flat.as_strided(shape, stride)
'''


def render_task(
    tg: TaskGraph,
    *,
    module_path: str,
    module_class: str,
    script: str,
    weights_name: str,
    weights_abs: str,
    weights_sha256: str,
    input_sets: list[list[InputLeaf]] = (),
    calls: list[int] = (),
    backward: bool = False,
    state: list[StateArg] = (),
    random: list[RandomInput] = (),
) -> str:
    """``backward``: the call ran with grad enabled on trainable tensors (training): the task says BACKWARD = True,
    so the judge checks and times its gradients too (docs/backward.md)."""
    imports, forward = forward_source(tg)
    names = ", ".join(f"{i.name} {i.tensor.describe()}" for i in tg.inputs if i.tensor is not None) or "no tensors"
    fixed = [f"{i.path}={i.constant}" for i in tg.inputs if i.constant is not None]
    doc = [
        f"{module_path} ({module_class}) of {Path(script).name}, captured by `kernelfix capture`.",
        "",
        f"Inputs: {names}." + (f" Fixed by the capture: {', '.join(fixed)}." if fixed else ""),
        "forward() is that module's computation as torch.export traced it: ATen operators, shapes fixed to the",
        "captured call's; the comments name the source line each group of operators comes from.",
        "",
        f"Weights: {weights_name} beside this file (or at the path below), the captured module's parameters and",
        "buffers by their names there. get_init_inputs() passes its path to the constructor; a ModelNew takes",
        "the same path and loads the same tensors: torch.load(weights, weights_only=True) is a dict of tensors.",
        "get_inputs() draws fresh tensors of the captured shapes, dtypes, strides and value ranges.",
    ]
    doc += state_doc(state) + random_doc(random)
    if input_sets:
        doc += [
            "",
            f"The module was captured at {len(input_sets)} calls ({', '.join(map(str, calls))}), one per input signature; forward's",
            "dimensions that differ between them are symbolic. get_input_sets() draws one input list per call",
            "(get_inputs() is the first); a kernel is judged at every one:",
            *[
                f"  set {k}: " + ", ".join(f"{i.name} {i.tensor.describe()}" for i in s if i.tensor is not None)
                for k, s in enumerate(input_sets, start=1)
            ],
        ]
    init = [
        "    def __init__(self, weights: str):",
        "        super().__init__()",
        '        w = torch.load(weights, map_location="cpu", weights_only=True)',
    ]
    for a in tg.attrs:
        shape = _annotation(a.value)
        if a.kind == "parameter":
            init.append(f'        self.{a.name} = nn.Parameter(w["{a.key}"])  # {shape}')
        else:
            persistent = "" if a.persistent else ", persistent=False"
            init.append(f'        self.register_buffer("{a.name}", w["{a.key}"]{persistent})  # {shape}, {a.kind}')
    tensors = [i for i in tg.inputs if i.tensor is not None]
    draws = [f"    {i.name} = {_draw(i.tensor)}" for i in tensors]
    parts = [
        '"""' + "\n".join(doc).rstrip() + '\n"""',
        "",
        "\n".join(
            [
                "import hashlib",
                "import math",
                "from pathlib import Path",
                "",
                "import torch",
                "import torch.nn as nn",
                *imports,
            ]
        ),
        "",
        f"WEIGHTS_NAME = {weights_name!r}",
        f"WEIGHTS_SHA256 = {weights_sha256!r}",
        f"CAPTURED_WEIGHTS = {weights_abs!r}  # where capture wrote them: the judge runs a copy of this file from elsewhere",
        *(
            [
                "BACKWARD = True  # captured in training (grad enabled): gradients are judged and timed too; --no-backward for forward only"
            ]
            if backward
            else []
        ),
        "",
        "",
        "def weights_path() -> str:",
        '    """The weights file: beside this file, else where capture wrote it; either must match WEIGHTS_SHA256."""',
        "    for p in (Path(__file__).with_name(WEIGHTS_NAME), Path(CAPTURED_WEIGHTS)):",
        "        if p.is_file():",
        '            with open(p, "rb") as f:',
        '                if hashlib.file_digest(f, "sha256").hexdigest() == WEIGHTS_SHA256:',
        "                    return str(p)",
        '    raise FileNotFoundError(f"{WEIGHTS_NAME} with sha256 {WEIGHTS_SHA256[:12]}... is neither beside {__file__} nor at {CAPTURED_WEIGHTS}")',
        "",
        "",
        "class Model(nn.Module):",
        "\n".join(init),
        "",
        forward,
        "",
        "",
        "def get_inputs():",
        "\n".join(draws) if draws else "    pass",
        f"    return [{', '.join(i.name for i in tensors)}]",
        "",
        "",
        *(_sets_source(input_sets) if input_sets else []),
        "def get_init_inputs():",
        "    return [weights_path()]",
        "",
        _HELPERS.rstrip(),
        "",
    ]
    return "\n".join(parts)


def state_doc(state: list[StateArg]) -> list[str]:
    """What the task's docstring says of a state argument (a cache) the call read and wrote."""
    lines = []
    for s in state:
        kind = s.type.rsplit(".", 1)[-1]
        wrote = ", ".join(f"{u.path}.{a}" for u in s.units for a in u.outputs) or "no tensor"
        read = [f"{u.path}.{a}" for u in s.units for a in u.inputs]
        lines += [
            "",
            f"The call passed a {kind} ({s.leaf}) and wrote into it: {wrote}. forward() takes what it held before the call",
            f"({', '.join(read) + ' as the kf_state_* inputs' if read else 'nothing: it was empty'}) and returns what the call",
            "wrote under ['kf_state'] beside the module's own output; a kernel returns both (the swap writes them back into",
            f"the user's {kind}).",
        ]
    return lines


def random_doc(random: list[RandomInput]) -> list[str]:
    if not random:
        return []
    rates = ", ".join(sorted({f"{r.p:g}" for r in random}))
    return [
        "",
        f"Dropout: the masks the captured call drew are inputs (kf_random_*, True keeps an element; drop rate {rates}), so",
        "the output is a function of the inputs; forward() scales the kept elements by 1 / (1 - p). A swapped kernel is",
        "handed fresh masks at every call.",
    ]


def _sets_source(input_sets: list[list[InputLeaf]]) -> list[str]:
    """get_input_sets(): one list per captured call, drawn as get_inputs() draws."""
    lines = ["def get_input_sets():", "    sets = []"]
    for s in input_sets:
        tensors = [i for i in s if i.tensor is not None]
        lines += [f"    {i.name} = {_draw(i.tensor)}" for i in tensors]
        lines.append(f"    sets.append([{', '.join(i.name for i in tensors)}])")
    return [*lines, "    return sets", "", ""]


def forward_source(tg: TaskGraph) -> tuple[list[str], str]:
    """(import lines, the forward method indented for the class body)."""
    code = tg.graph.python_code(root_module="self", verbose=True)
    lines = []
    for line in code.src.strip().splitlines():
        stripped = line.strip()
        if stripped == "# No stacktrace found for following nodes":
            continue
        m = _TRACE.search(line)
        if m:
            line = line[: m.start()] + f"# {Path(m[1]).name}:{m[2]} in {m[3]}: {m[4].strip()}"
        lines.append("    " + _FREES.sub("", line) if line.strip() else "")
    body = "\n".join(lines)
    return _imports(code.globals, body), body


def _imports(glob: dict, body: str) -> list[str]:
    """Import lines for the names fx's code refers to."""
    out = []
    for name, obj in sorted(glob.items()):
        if name in ("torch",) or not re.search(rf"\b{re.escape(name)}\b", body):
            continue
        if getattr(builtins, name, None) is obj:
            continue
        if isinstance(obj, types.ModuleType):
            out.append(f"import {obj.__name__}" if obj.__name__ == name else f"import {obj.__name__} as {name}")
        elif obj is torch.device:
            out.append("from torch import device")
        elif isinstance(obj, float) and (math.isinf(obj) or math.isnan(obj)):
            out.append(f"{name} = float({str(obj)!r})")
        elif obj is type(None):
            out.append(f"{name} = type(None)")
        elif callable(obj) and getattr(obj, "__module__", None) and "<" not in getattr(obj, "__qualname__", "<"):
            out.append(f"from {obj.__module__} import {obj.__qualname__} as {name}")
        else:
            raise CaptureFailed(
                f"the traced forward refers to {name} ({type(obj).__name__}), which a task file cannot import"
            )
    return out


def _annotation(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}[{', '.join(map(str, t.shape))}]"


def _num(v: float | None) -> str:
    return "0.0" if v is None else f"{v:.6g}" if math.isfinite(v) else repr(v)


def _bound(v: float | None) -> str:
    """A range end in full: rounded, it could cut off the captured extreme or step past it."""
    return "0.0" if v is None else repr(v)


def _draw(t: TensorSpec) -> str:
    shape = f"[{', '.join(map(str, t.shape))}]"
    dtype = f"torch.{t.dtype}"
    stride = "" if t.contiguous else f", stride=[{', '.join(map(str, t.stride))}]"
    if t.kind == "bool":
        return f"_bools({shape}, p_true={_num(t.p_true)}{stride})"
    if t.kind == "int":
        return f"_integers({shape}, {dtype}, lo={int(t.min or 0)}, hi={int(t.max or 0)}{stride})"
    if t.kind == "complex":
        return f"_normal({shape}, {dtype}, mean=0.0, std=1.0{stride})"
    std = t.std if t.std is not None else 0.0
    return f"_normal({shape}, {dtype}, mean={_num(t.mean)}, std={_num(std)}, lo={_bound(t.min)}, hi={_bound(t.max)}{stride})"


def input_summary(inputs: list[InputLeaf]) -> list[str]:
    def one(i: InputLeaf) -> str:
        if i.tensor:
            return f"{i.name}: {i.tensor.describe()}"
        if (i.constant or "").startswith("'kernelfix-state:"):
            return f"{i.path}: a {i.constant.strip(chr(39)).split(':', 1)[1]} (its state: below)"
        return f"{i.path} = {i.constant} (fixed)"

    return [one(i) for i in inputs]
