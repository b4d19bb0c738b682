"""The trainer around the algorithms: queueing, checkpoints, opponent pool, curriculum, tracking."""
