"""Sandbox overhead on this machine: start-up per task, the code harness's fixed cost, and scoring
throughput at 1 vs 2 threads.

    .venv/bin/python benchmarks/sandbox_startup.py [--n 40] [--backend bubblewrap]

Start-up is the wall time of a sandbox whose program does nothing (``/bin/true``; then the
stdlib-only interpreter with ``pass``), minus nothing: it is what a task pays before its tests run.
The target is <= 50 ms per task. The harness's fixed cost is one HumanEval-shaped program whose
check makes one call (the verdict process, the fork of the model's process, one round trip).
Throughput scores HumanEval's canonical solutions (all 164, all passing) through the scoring path
(harness + sandbox) with 1 and then 2 threads. Timings taken while other jobs share the CPUs are
upper bounds: say the load (``uptime``) beside them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from quantladder import sandbox  # noqa: E402
from quantladder.benchmarks.code import data, score  # noqa: E402


def _startup(argv, interp, n, backend) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = sandbox.run_sandboxed(argv, {"main.py": "pass\n"}, sandbox.Limits(wall_s=10), backend=backend,
                                  extra_ro_binds=interp.ro_binds if interp else (),
                                  hidden=interp.hidden if interp else ())
        times.append((time.perf_counter() - t0) * 1000.0)
        if r.kind != "ok":
            raise SystemExit(f"sandbox run failed: {r}")
    return times


def _summary(ms: list[float]) -> str:
    ms = sorted(ms)
    p90 = ms[int(0.9 * (len(ms) - 1))]
    return f"median {statistics.median(ms):.1f} ms, p90 {p90:.1f} ms, min {ms[0]:.1f} ms (n={len(ms)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="start-ups per measurement")
    ap.add_argument("--backend", default="bubblewrap")
    ap.add_argument("--items", type=int, default=164, help="HumanEval problems scored per thread count")
    args = ap.parse_args()

    print(f"backend: {sandbox.check_backend(args.backend)}")
    py = sandbox.host_python()
    _startup(["/bin/true"], None, 3, args.backend)  # warm the page cache
    true_ms = _startup(["/bin/true"], None, args.n, args.backend)
    py_ms = _startup([py.exe, "-I", "-S", "main.py"], py, args.n, args.backend)
    print(f"sandbox start-up, /bin/true:           {_summary(true_ms)}")
    print(f"sandbox start-up + python -I -S pass:   {_summary(py_ms)}")
    target = statistics.median(true_ms) <= 50.0
    print(f"target start-up <= 50 ms per task:      {'met' if target else 'NOT met'}")
    trivial = score.Program("script", "def f():\n    return 1\n", "def check(candidate):\n    assert candidate() == 1\n",
                            "f")
    settings = score.ScoreSettings(backend=args.backend, limits=sandbox.Limits(wall_s=10, cpu_s=10))
    harness_ms = []
    for _ in range(args.n):
        t0 = time.perf_counter()
        if not score.run_program(trivial, settings)["passed"]:
            raise SystemExit("the trivial program failed")
        harness_ms.append((time.perf_counter() - t0) * 1000.0)
    print(f"code harness, one call, verdict:        {_summary(harness_ms)}")

    items = data.load_humaneval(limit=args.items)
    gens = [{"item_id": i.item_id, "code": i.prompt + i.extra["canonical_solution"]} for i in items]
    settings = score.ScoreSettings(limits=sandbox.Limits(wall_s=10, cpu_s=10))
    rates = {}
    for threads in (1, 2):
        t0 = time.perf_counter()
        v = score.score_generations(items, gens, settings, threads=threads)
        dt = time.perf_counter() - t0
        ok = sum(x["correct"] for x in v)
        rates[threads] = len(v) / dt
        print(f"scoring, {threads} thread(s): {len(v)} programs in {dt:.2f} s = {rates[threads]:.1f} programs/s, "
              f"{1000 * dt / len(v):.1f} ms/program, {ok}/{len(v)} passed")
    print(f"speed-up 2 vs 1 threads: x{rates[2] / rates[1]:.2f}")


if __name__ == "__main__":
    main()
