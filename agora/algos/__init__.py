"""The learning algorithms: token-level PPO on LoRA or full weights, its batches and devices."""
