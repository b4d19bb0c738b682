"""What the gateway reads from Redis is not trusted as a path as it is (issue 18): an adapter
path the trainer published must have the trainer's shape before the gateway looks for pinned
versions beside it (and asks vLLM to load them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agora.gateway.run_context import published_versions_dir


@pytest.mark.parametrize(("published", "folder"), [
    ("/runs/r1/adapters/alice/v12", Path("/runs/r1/adapters/alice")),
    ("runs/r1/adapters/alice/v3", Path("runs/r1/adapters/alice")),
    ("/etc/ssh/alice/v1", None),                        # not under adapters/
    ("/runs/r1/adapters/bob/v1", None),                 # another agent's folder
    ("/runs/r1/adapters/alice/latest", None),           # not a version folder
    ("/runs/r1/adapters/alice/../../../etc/adapters/alice/v1", None),
    ("/runs/r1/weights/alice/live", None),              # a full-weight agent: no pinned LoRAs
])
def test_a_published_adapter_path_is_used_only_in_the_trainers_shape(published, folder):
    assert published_versions_dir(published, "alice") == folder
