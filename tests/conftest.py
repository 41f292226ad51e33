"""Shared fixtures: the candidate corpus, and one judge per (task, device, config) so each
task's reference is computed once per test session."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: litellm must not fetch its price list

CORPUS = Path(__file__).parent / "corpus"
HAS_CUDA = torch.cuda.is_available()


def pytest_configure(config):
    # One build cache per test session (the judge hands it to every child): tests see cold
    # builds, share them with each other, and never touch the user's cache. Set
    # KERNELFIX_CACHE to reuse one across sessions.
    if not os.environ.get("KERNELFIX_CACHE"):
        os.environ["KERNELFIX_CACHE"] = config._kernelfix_cache = tempfile.mkdtemp(prefix="kernelfix-test-cache-")


def pytest_unconfigure(config):
    made = getattr(config, "_kernelfix_cache", None)
    if made:  # precompiled headers are hundreds of MB
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop("KERNELFIX_CACHE", None)


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run on the device)")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


@dataclass
class Case:
    path: Path
    expect: dict[str, str]
    devices: list[str]
    task: str = "relu"
    config: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def uses_nvcc(self) -> bool:
        return "load_inline" in self.path.read_text()


_HEADER = re.compile(r"^# (expect|expect-cpu|expect-cuda|devices|task|config): (.+)$", re.M)


def load_cases() -> list[Case]:
    cases = []
    for path in sorted((CORPUS / "candidates").iterdir()):
        head = "\n".join(path.read_text().splitlines()[:8])
        fields = dict(_HEADER.findall(head))
        expect = {}
        for dev in ("cpu", "cuda"):
            value = fields.get(f"expect-{dev}", fields.get("expect"))
            if value:
                expect[dev] = value.strip()
        devices = [d.strip() for d in fields.get("devices", "cpu,cuda").split(",")]
        cases.append(
            Case(path=path, expect=expect, devices=[d for d in devices if d in expect], task=fields.get("task", "relu").strip(), config=json.loads(fields.get("config", "{}")))
        )
    return cases


@pytest.fixture(scope="session")
def judges(tmp_path_factory):
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.judge import Judge

    made: dict[tuple, Judge] = {}

    def get(task: str, device: str, config: dict | None = None) -> Judge:
        key = (task, device, json.dumps(config or {}, sort_keys=True))
        if key not in made:
            cfg = JudgeConfig(**{"device": device, "run_timeout_s": 120, "compile_timeout_s": 600, **(config or {})})
            made[key] = Judge(CORPUS / "tasks" / f"{task}.py", cfg, workdir=tmp_path_factory.mktemp(f"judge-{task}-{device}"))
        return made[key]

    yield get
    for j in made.values():
        j.close()
