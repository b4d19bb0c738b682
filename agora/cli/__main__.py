"""``python -m agora.cli``: the same app as the ``agora`` command."""
from agora.cli.main import app

app()
