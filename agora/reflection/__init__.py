"""Multi-agent reflection: an actor answers, a critic writes feedback, the actor refines.

The recipe of "Reinforce LLM Reasoning through Multi-Agent Reflection" (Yuan & Xie, ICML 2025,
DPSDP), as five commands over one run folder (``agora reflect ... CONFIG``):

1. ``oracle``: the actor (the base policy) answers every training problem; a stronger model
   (any OpenAI-compatible endpoint) writes several critiques of each answer and a refinement
   after each critique (``oracle.py``) -> ``oracle.jsonl``.
2. ``sft``: SFT of an actor and a critic LoRA adapter on the oracle data that the ground truth
   vouches for (``sft.py``, TRL's SFTTrainer).
3. ``pairs``: preference pairs from that same data, with no extra inference (``pairs.py``).
4. ``dpo``: DPO of both adapters, starting from (and anchored to) SFT (``dpo.py``, TRL's
   DPOTrainer).
5. ``eval``: actor and critic take turns on held-out problems; pass1@turn1, maj1@turn5 and
   pass1@turn5 (``metrics.py``, ``evaluate.py``).

The state the actor and critic see is Markov, as in the paper: the question plus only the
latest answer (and, for the actor, the latest feedback), never the whole history.
"""
