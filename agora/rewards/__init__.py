"""Rewards: verifiers that score answers, and the schemes that turn scores into turn rewards."""
