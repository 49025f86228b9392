"""Run every benchmark: ``python -m bench [ARGS]`` (arguments go to each benchmark).

Example: ``python -m bench --sizes 1000,100000`` for a quicker scale run.
"""

from __future__ import annotations

import sys

from bench import scale, webhooks

BENCHMARKS = [scale.main, webhooks.main]


def main(argv: list[str] | None = None) -> int:
    for bench in BENCHMARKS:
        rc = bench(argv)
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
