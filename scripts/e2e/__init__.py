"""The e2e step: serve the LingBot-World realtime benchmark twice, compare, keep evidence.

Entry point: ``python -m scripts e2e`` (``nox -s e2e``). One module per concern;
the logic is in pure functions, processes and files stay at the edges.
"""
