"""agora: multi-agent RL post-training for language-model agents.

The packages follow the architecture (docs/architecture.md): ``config`` (the run file),
``envs`` and ``agents`` (the worlds and the scripted players in them), ``rollout`` (workers
that play episodes), ``rewards`` and ``judge`` (scoring), ``sandbox`` (model-written code),
``algos`` (PPO and friends), ``train`` (the trainer around them), ``serving`` (vLLM and the
weights it serves), ``evaluation``, ``reflection``, ``stack`` (the local processes of
``agora up``), ``gateway`` (the REST API), ``ops`` (metrics, dashboards) and ``cli``.
"""
