"""[any] Which trials an evaluation runs, and under which seeds.

``trials`` correctness trials drawn from ``get_inputs()`` under their own seeds,
one ``fresh`` trial (new contents for the timed tensors after timing), and one
varied trial per input variant, each varying a different correctness trial's
inputs. The float64 reference runs on the first trial (the task's own input
distribution) and on the varied ones. Seeds derive from the judge's seed, which
is random per judge unless the user fixes it: no candidate can know its inputs.
"""

from __future__ import annotations

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.transport.protocol import Purpose, TrialPlan


def plan(seed: int, config: JudgeConfig) -> list[TrialPlan]:
    n = config.trials
    purposes: list[Purpose] = ["correctness"] * n + ["fresh"] + ["varied"] * len(config.input_variants)
    trials = [TrialPlan(index=i, seed=seed + 1009 * (i + 1), purpose=p) for i, p in enumerate(purposes)]
    for k, (t, variant) in enumerate(zip([t for t in trials if t.purpose == "varied"], config.input_variants)):
        t.variant, t.variant_of = variant, k % n
    for t in trials:
        t.float64 = config.float64_reference and (t.index == 0 or t.variant is not None)
    return trials
