"""Model folders in the shared cache (agora/serving/model_folders.py)."""

from __future__ import annotations

from agora.serving.model_folders import TINY_RANDOM, resolve_model


def test_a_published_model_resolves_without_writing_to_the_cache(tmp_path, monkeypatch):
    """Rollout containers mount the model cache read-only: once a model is published there,
    resolving it must write nothing (no lock file, no rebuild), or every episode fails with
    EROFS (issue 19's first compose run)."""
    monkeypatch.setenv("AGORA_CACHE", str(tmp_path))
    published = tmp_path / "models" / TINY_RANDOM
    published.mkdir(parents=True)
    (published / "config.json").write_text("{}")
    before = sorted(p.name for p in (tmp_path / "models").iterdir())
    assert resolve_model(TINY_RANDOM) == str(published)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == before == [TINY_RANDOM]
