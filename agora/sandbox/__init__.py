"""Model-written code runs here only: a separate, locked-down process."""
