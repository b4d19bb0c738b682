"""Random-weight models of the sizes agora's users train, built from a config (no download).

Why random weights are enough for a throughput bench: the cost of a forward and backward depends
on the architecture and the token count, not on the weights' values. The SmolLM2 tokenizer is
used for every shape (so the Tic-Tac-Toe turns are the same tokens); the vocabulary is then
SmolLM2's 49,152 rows, which is what the update's logits cost at completion positions anyway.

    shape   architecture   layers  hidden  params   LoRA layers (top half, as the configs do)
    135m    Llama (SmolLM2-135M)  30   576   ~135M   15-29
    0.5b    Qwen2 (Qwen2-0.5B)    24   896   ~360M   12-23   (Qwen's own vocabulary: 494M)
    1.5b    Qwen2 (Qwen2-1.5B)    28  1536   ~1.4B   14-27
"""

from __future__ import annotations

from pathlib import Path

SHAPES = {
    "135m": ("llama", dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                           num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0,
                           rms_norm_eps=1e-5, tie_word_embeddings=True,
                           max_position_embeddings=8192)),
    "0.5b": ("qwen2", dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                           num_attention_heads=14, num_key_value_heads=2, rope_theta=1000000.0,
                           rms_norm_eps=1e-6, tie_word_embeddings=True,
                           max_position_embeddings=32768)),
    "1.5b": ("qwen2", dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                           num_attention_heads=12, num_key_value_heads=2, rope_theta=1000000.0,
                           rms_norm_eps=1e-6, tie_word_embeddings=True,
                           max_position_embeddings=32768)),
}


def shape_model(shape: str) -> Path:
    """A cached folder with random weights of ``shape`` and the SmolLM2 tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from agora.serving.model_folders import TINY_RANDOM, cache_dir, resolve_model

    folder = cache_dir() / "bench-shapes" / shape
    if (folder / "config.json").exists():
        return folder
    kind, fields = SHAPES[shape]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(TINY_RANDOM))
    config = AutoConfig.for_model(kind, vocab_size=len(tokenizer),
                                  bos_token_id=tokenizer.bos_token_id,
                                  eos_token_id=tokenizer.eos_token_id, **fields)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def top_half_layers(model_path: Path | str) -> list[int]:
    from transformers import AutoConfig

    depth = AutoConfig.from_pretrained(model_path).num_hidden_layers
    return list(range(depth // 2, depth))
