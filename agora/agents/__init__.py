"""Scripted players: game bots and the context agents a learner meets (fixed or switching)."""
