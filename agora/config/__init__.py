"""A run is one YAML file: its pydantic models, overrides and generated reference."""
