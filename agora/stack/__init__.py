"""The embedded stack of ``agora up``: local processes, Redis, supervision and preflight checks."""
