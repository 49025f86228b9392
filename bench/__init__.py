"""Loch benchmarks; ``python -m bench`` runs them all (see :mod:`bench.scale`)."""
