"""Run every benchmark in turn (`make bench`); each writes its JSON under benchmarks/results/."""
from __future__ import annotations

import importlib
import sys
import time

BENCHMARKS = ("accounting", "selection", "mechanisms", "pipelines", "svt_filters", "svt", "clamping", "windows_cap", "statistics")


def main() -> int:
    failures = []
    for name in BENCHMARKS:
        try:
            module = importlib.import_module(f"benchmarks.{name}")
        except ModuleNotFoundError as err:
            if err.name == f"benchmarks.{name}":
                continue  # this benchmark has not been written yet
            raise
        print(f"== benchmarks.{name}", flush=True)
        start = time.perf_counter()
        code = module.main([])
        print(f"== benchmarks.{name} finished in {time.perf_counter() - start:.0f} s (exit {code})", flush=True)
        if code:
            failures.append(name)
    if failures:
        print(f"failed: {', '.join(failures)}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
