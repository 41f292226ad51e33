"""The judge as a Python library: ``Judge`` (api.py), a pool of judges (judge_pool.py) and the sources a caller may
pass (sources.py). kernelfix.Judge names it; kernelfix.serve and kernelfix.rewards stand on it."""
