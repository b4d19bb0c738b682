"""Curriculum over difficulty: each (agent, task) has a level; episodes are played at it.

The pieces, one job each:

* ``settings``: the ``curriculum:`` section of a run config and its checks;
* ``ladders``: what a level means for each task (reasoning-gym knobs, Tic-Tac-Toe openings from
  ``openings``, an env's own ``level`` argument);
* ``controller``: the promote/demote rule over a sliding window of successes;
* ``store``: the levels and windows in Redis (``agora:{run}:curriculum:...``), so workers read
  the level the trainer last wrote, and a restarted trainer carries on;
* ``episode``: the worker's side: read the level, shape the episode, label the record;
* ``tracker``: the trainer's side: score consumed episodes, move levels, report them.

Nothing is imported here: ``agora.config.run`` imports ``settings`` while it is itself being
imported, so this package must not pull in modules that import ``agora.config.run`` back.
"""
