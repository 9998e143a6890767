"""Benchmarks of the kit's own development (`nox -s timings`): not commands of the kit, never asserted in tests."""
