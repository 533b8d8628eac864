"""The long profile of the HTTP API's schema fuzz (the fast one is tests/test_fuzz_api.py,
whose world and checks this reuses): many generated requests per operation, with and
without the token, valid and invalid ones; then a table of requests sent, the statuses
they got, and the failures found (a 5xx, an answer the schema does not allow, a secret
from outside runs/ in an answer).

    MARAG_DATA=/path/to/data python benchmarks/fuzz_api.py [--examples 500] [--seed-random]

Exit status 1 when anything failed. --seed-random drops Hypothesis' derandomize (each
run then tries other inputs; the test suite's profile stays fixed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the fast profile's world and checks: one definition

from test_fuzz_api import LABELS, MODES, build_world, fuzz_operation  # noqa: E402

from marag.config import data_dir as find_data  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=500, help="generated requests per operation, signed-in state and mode")
    ap.add_argument("--seed-random", action="store_true", help="new inputs each run (not derandomized)")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # the planted links warn on every request that meets them

    with tempfile.TemporaryDirectory() as tmp:
        world = build_world(Path(tmp), REPO, find_data(args.data_dir))
        started = time.perf_counter()
        failed: Counter = Counter()
        for label in LABELS:
            for mode in MODES[label]:
                for signed_in in (True, False):
                    before = len(world.failures)
                    try:
                        fuzz_operation(world, world.operations[label], signed_in=signed_in, mode=mode,
                                       max_examples=args.examples, derandomize=not args.seed_random)  # fmt: skip
                    except Exception as exc:  # noqa: BLE001 - recorded, and the other operations still run
                        if len(world.failures) == before:
                            world.failures.append(f"{label}: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
                        failed[label, signed_in, mode.value] += 1
        seconds = time.perf_counter() - started

    print(f"| operation | token | mode | requests | statuses | failed |\n|---|---|---|---:|---|---:|")
    for (label, signed_in, mode), n in world.sent.items():
        statuses = ", ".join(f"{s}: {c}" for (lbl, signed, m, s), c in sorted(world.statuses.items()) if (lbl, signed, m) == (label, signed_in, mode))
        print(f"| `{label}` | {'yes' if signed_in else 'no'} | {mode} | {n} | {statuses} | {failed[label, signed_in, mode]} |")
    total = sum(world.sent.values())
    print(f"\n{total} requests in {seconds:.0f} s ({total / seconds:.0f}/s); {len(world.failures)} failures")
    for failure in dict.fromkeys(world.failures):
        print(f"- {failure}")
    return 1 if world.failures else 0


if __name__ == "__main__":
    sys.exit(main())
