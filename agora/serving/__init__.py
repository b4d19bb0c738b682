"""The policy server (vLLM, never our code): starting it, its client, the weights it serves."""
