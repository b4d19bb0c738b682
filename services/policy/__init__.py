"""The policy service."""
