"""The kit's own package: pin -> series -> checkout -> lint/test/e2e -> pr.

Modules further down that list may import modules further up, never the
other way round.
"""
