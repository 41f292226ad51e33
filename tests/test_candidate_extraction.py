"""Turning files and model replies into candidate code."""

from kernelfix.tools.candidate import check_code, code_blocks, detect_backend, from_file_text, from_reply
from kernelfix.tools.verdict import Category

GOOD = (
    "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
)


def test_last_complete_python_block_wins():
    reply = f"First try:\n```python\nx = 1\n```\nBetter:\n```python\n{GOOD}```\nDone."
    ext = from_reply(reply)
    assert ext.failure is None and ext.code == GOOD


def test_unclosed_block_is_not_taken():
    reply = f"```python\n{GOOD}```\nand a draft:\n```python\nclass ModelNew:\n"
    assert from_reply(reply).code == GOOD


def test_unlabelled_block_counts_only_if_it_parses():
    assert from_reply(f"```\n{GOOD}```").code == GOOD
    assert from_reply("```\nthis is not python at all {\n```").failure == Category.NO_CODE


def test_labelled_python_preferred_over_other_languages():
    reply = f"```cpp\nint main() {{}}\n```\n```py\n{GOOD}```\n```bash\nls\n```"
    assert from_reply(reply).code == GOOD
    assert [lang for lang, _ in code_blocks(reply)] == ["cpp", "py", "bash"]


def test_reply_without_code_is_format_error():
    ext = from_reply("I would fuse the two loops.")
    assert ext.failure == Category.NO_CODE and ext.code is None and "python" in ext.message


def test_code_without_model_new():
    ext = check_code("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    assert ext.failure == Category.NO_MODEL_NEW


def test_model_new_by_assignment_or_import_counts():
    assert check_code("from somewhere import Impl\nModelNew = Impl\n").failure is None
    assert check_code("from kernels import ModelNew\n").failure is None


def test_syntax_error_names_the_line():
    ext = check_code("class ModelNew:\n    def forward(self, x)\n        return x\n")
    assert ext.failure == Category.SYNTAX and ext.line == 2 and "line 2" in ext.message


def test_py_file_is_code_other_files_are_replies():
    assert from_file_text(GOOD, "cand.py").code == GOOD
    assert from_file_text(f"```python\n{GOOD}```", "reply.md").code == GOOD
    assert from_file_text(GOOD, "reply.txt").failure == Category.NO_CODE


def test_backend_detection():
    assert detect_backend("from torch.utils.cpp_extension import load_inline") == "cuda"
    assert detect_backend("import triton\n@triton.jit\ndef k(): pass") == "triton"
    assert detect_backend("import torch") == "torch"
    assert detect_backend("x = 1") == "unknown"
    assert check_code(GOOD).sha1 == check_code(GOOD).sha1 != check_code(GOOD + "\n").sha1
