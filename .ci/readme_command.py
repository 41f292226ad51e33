"""Print the README's test command: the fenced line after its "test-command" marker (.ci/run runs it)."""

import re
import sys
from pathlib import Path

text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
m = re.search(r"<!-- test-command:[^>]*-->\s*```bash\n(.+?)\n```", text, re.S)
if m is None:
    sys.exit("README.md has no test command after its test-command marker")
print(m.group(1).strip())
