"""Benchmarks: ``python -m bench`` prints one table, metaq side by side with peer clients."""
