"""A vision-language agent against vLLM's real CPU server on the tiny random Idefics3
(agora/serving/model_folders.py ``tiny-random-vlm``): the rollout client sends the board as an
image through vLLM's chat route, the learner scores what vLLM sampled from the same image and
tokens (logprobs within 2e-3 nats at T = 0.7, first PPO ratio 1), the image changes the policy,
and a hot-swapped adapter on the VLM's language model is what vLLM then serves."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import torch

from agora.algos.ppo import PPOLearner, TurnSample
from agora.config.agents import AgentConfig, BaseModelConfig, SamplingConfig
from agora.config.training import PPOConfig
from agora.envs.hanabi import Hanabi
from agora.envs.images import grid_image, image_urls, png_data_url
from agora.envs.tictactoe import TicTacToe
from agora.serving.client import PolicyAdmin, PolicyClient
from agora.serving.model_folders import TINY_VLM, resolve_model
from agora.serving.vllm_server import vllm_service
from agora.stack.procs import free_port
from tests.stack_helpers import FP32, randomize_lora_b

LOGPROB_ATOL = 2e-3
TEMPERATURE = 0.7


@pytest.fixture(scope="module")
def vlm_server(logs_dir) -> Iterator[str]:
    cfg = BaseModelConfig(model=TINY_VLM, port=free_port(), max_model_len=1024, max_loras=2,
                          max_lora_rank=8, dtype="float32")
    svc = vllm_service(resolve_model(TINY_VLM), cfg, "127.0.0.1", logs_dir / "vllm-vlm.log")
    svc.start()
    try:
        svc.wait_healthy(600)
        yield f"http://127.0.0.1:{cfg.port}"
    finally:
        svc.stop()


def vlm_learner(seed: int, ppo: PPOConfig | None = None) -> PPOLearner:
    agent = AgentConfig(name="viewer", base="vlm", lora_rank=8, lora_alpha=16,
                        lora_targets=["q_proj", "v_proj"],
                        sampling=SamplingConfig(temperature=TEMPERATURE, max_tokens=16,
                                                stop=[]))
    learner = PPOLearner(resolve_model(TINY_VLM), agent, ppo or PPOConfig(), seed=seed,
                         compute=FP32)
    randomize_lora_b(learner.model, seed)
    return learner


def board_views(count: int, hanabi: int = 0) -> list[tuple[list[dict], list[str] | None]]:
    """Image observations of different positions; every other one restricted to the legal
    moves (vLLM's structured outputs), as ``sampling.legal_actions_only`` does; then
    ``hanabi`` Hanabi tables (legal moves only, as configs/hanabi_selfplay.yaml plays)."""
    env = TicTacToe(observation="image")
    views = []
    for game in range(count):
        env.reset(game)
        for cell in (4, game % 4, 8 - game % 4)[: game % 3]:
            env.step(f"[{cell}]")
        choices = [a[1:] for a in env.legal_actions()] if game % 2 else None
        views.append((env.observation(env.current_seat), choices))
    table = Hanabi(num_players=2, observation="image")
    for game in range(hanabi):
        table.reset(game)
        table.step(table.legal_actions()[game])  # a move in, so hands and hints differ
        views.append((table.observation(table.current_seat),
                      [a[1:] for a in table.legal_actions()]))
    return views


def play(client: PolicyClient, views) -> list[TurnSample]:
    samples = []
    for messages, choices in views:
        gen = asyncio.run(client.generate(messages, prefill="[", choices=choices))
        assert gen.images == image_urls(messages) and len(gen.images) == 1
        samples.append(TurnSample(gen.prompt_token_ids, gen.completion_token_ids,
                                  gen.logprobs, reward=float(len(samples) % 2),
                                  choices=choices, images=gen.images))
    return samples


def test_learner_scores_what_vllm_sampled_from_the_image_and_the_first_ratio_is_1(
        vlm_server, tmp_path):
    ppo = PPOConfig(batch_turns=8, minibatch_turns=8, epochs=1, kl_coef=0.02)
    learner = vlm_learner(seed=3, ppo=ppo)
    admin = PolicyAdmin(vlm_server)
    admin.load_adapter("viewer", str(learner.save_adapter(tmp_path / "viewer")))
    client = PolicyClient(vlm_server, "viewer", learner.tokenizer, learner.agent.sampling)
    samples = play(client, board_views(6, hanabi=2))
    image_token = learner.tokenizer.convert_tokens_to_ids("<image>")
    for sample in samples:
        # vLLM expanded the image to its placeholder tokens in the ids it returned.
        assert sample.prompt_ids.count(image_token) == 4
    vllm_logp = torch.tensor([x for s in samples for x in s.behaviour_logprobs])
    ours = torch.tensor([x for s in samples for x in learner.sequence_logprobs(s)])
    assert len(ours) >= 12
    assert (ours - vllm_logp).abs().max().item() < LOGPROB_ATOL
    # The picture is part of the policy: the same tokens after another board's image are
    # scored differently (by ~0.03 nats on this random vision tower, 10^4 x the match error).
    other = png_data_url(grid_image(["X"] * 9, 3))
    swapped = [TurnSample(s.prompt_ids, s.completion_ids, s.behaviour_logprobs, s.reward,
                          choices=s.choices, images=[other]) for s in samples if not s.choices]
    moved = torch.tensor([x for s in swapped for x in learner.sequence_logprobs(s)])
    plain = torch.tensor([x for s in swapped for x in s.behaviour_logprobs])
    assert (moved - plain).abs().max().item() > 5 * LOGPROB_ATOL
    # One minibatch, one epoch, a KL term (the reference forward runs with the images too).
    stats = learner.update(samples)
    assert stats["ratio"] == pytest.approx(1.0, abs=2e-3)
    assert stats["clipfrac"] == pytest.approx(0.0)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())


def test_hot_swapped_vlm_adapter_is_what_vllm_serves_next(vlm_server, tmp_path):
    ppo = PPOConfig(batch_turns=4, minibatch_turns=4, epochs=2, learning_rate=5e-2, kl_coef=0.0)
    learner = vlm_learner(seed=5, ppo=ppo)
    admin = PolicyAdmin(vlm_server)
    admin.load_adapter("swapped", str(learner.save_adapter(tmp_path / "v0")))
    client = PolicyClient(vlm_server, "swapped", learner.tokenizer, learner.agent.sampling)
    views = board_views(4)
    before = play(client, views)
    learner.update(before)
    admin.load_adapter("swapped", str(learner.save_adapter(tmp_path / "v1")))
    after = play(client, views)
    # vLLM now samples from the updated adapter: the updated learner scores its tokens as vLLM
    # does, and the v0 logprobs of the same tokens are off.
    new_logp = torch.tensor([x for s in after for x in s.behaviour_logprobs])
    ours = torch.tensor([x for s in after for x in learner.sequence_logprobs(s)])
    assert (ours - new_logp).abs().max().item() < LOGPROB_ATOL
    stale = vlm_learner(seed=5)
    old = torch.tensor([x for s in after for x in stale.sequence_logprobs(s)])
    assert (old - new_logp).abs().max().item() > 50 * LOGPROB_ATOL


# --- the gateway: image parts for vision-language agents only ---------------------------------


@pytest.fixture(scope="module")
def vlm_gateway(vlm_server, redis_url, tmp_path_factory, logs_dir) -> Iterator[str]:
    """``viewer`` on the VLM's server (its adapter loaded as the trainer would), ``reader`` on a
    text-only model (no server: every request to it must be refused before forwarding)."""
    import yaml

    from tests.integration.test_gateway import start_gateway

    folder = tmp_path_factory.mktemp("viewer")
    PolicyAdmin(vlm_server).load_adapter("viewer", str(vlm_learner(seed=7).save_adapter(folder)))
    port = int(vlm_server.rsplit(":", 1)[1])
    data = {
        "name": "vlm-gateway",
        "models": {"vlm": {"model": TINY_VLM, "port": port, "max_model_len": 1024,
                           "max_lora_rank": 8},
                   "text": {"model": "tiny-random", "port": free_port()}},
        "agents": [{"name": "viewer", "base": "vlm", "lora_rank": 8, "lora_alpha": 16,
                    "sampling": {"max_tokens": 4, "stop": ["]"]}},
                   {"name": "reader", "base": "text", "trainable": False}],
        "environment": {"name": "tictactoe", "seats": ["viewer", "viewer"],
                        "observation": "image"},
        "services": {"gateway_port": free_port()},
    }
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    svc, url = start_gateway(path, logs_dir / "gateway-vlm.log", AGORA_REDIS_URL=redis_url)
    try:
        yield url
    finally:
        svc.stop()


def image_message(url: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "Your move?"},
                                         {"type": "image_url", "image_url": {"url": url}}]}]


def post(base: str, path: str, body: dict):
    import httpx

    return httpx.post(base + path, json=body, timeout=120)


def test_gateway_chat_takes_images_for_vlm_agents_only(vlm_gateway):
    board = png_data_url(grid_image(["O", "", "X", "", "", "", "", "", ""], 3))
    ok = post(vlm_gateway, "/v1/chat/completions",
              {"model": "viewer", "messages": image_message(board), "max_tokens": 4})
    assert ok.status_code == 200, ok.text
    assert ok.json()["model"] == "viewer" and ok.json()["usage"]["prompt_tokens"] > 4

    def refused(model: str, url: str, status: int, code: str, part: dict | None = None):
        messages = image_message(url)
        if part is not None:
            messages[0]["content"][1] = part
        resp = post(vlm_gateway, "/v1/chat/completions",
                    {"model": model, "messages": messages, "max_tokens": 4})
        assert resp.status_code == status, resp.text
        error = resp.json()["error"]
        assert error["code"] == code and error["param"] == "messages.0.content.1", error
        return error["message"]

    assert "reads text only" in refused("reader", board, 422, "image_not_supported")
    assert "data URL" in refused("viewer", "http://169.254.169.254/x.png", 422, "invalid_image")
    from PIL import Image

    wide = png_data_url(Image.new("RGB", (4000, 8), "white"))  # a few hundred bytes
    assert "4000x8 pixels" in refused("viewer", wide, 413, "image_too_large")
    import random

    noise = Image.frombytes("RGB", (400, 400), random.Random(0).randbytes(400 * 400 * 3))
    noise = png_data_url(noise)  # incompressible: ~480 kB, under the 1 MiB body limit
    assert "limit is 262144" in refused("viewer", noise, 413, "image_too_large")
    junk = "data:image/png;base64," + "QUJD" * 10
    assert "not a readable image" in refused("viewer", junk, 422, "invalid_image")
    audio = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
    assert "'input_audio' is not supported" in refused("viewer", board, 422, "invalid_content",
                                                         audio)


def test_gateway_episode_shows_the_board_as_an_image_to_a_vlm_agent_and_the_user(vlm_gateway):
    created = post(vlm_gateway, "/v1/episodes",
                   {"env": "tictactoe", "seats": ["user", "viewer"], "observation": "image"})
    assert created.status_code == 201, created.text
    episode = created.json()
    # The user moves first and sees the board as a picture (the legal moves stay listed).
    assert episode["status"] == "your_turn" and episode["turns"] == []
    assert len(image_urls(episode["observation"])) == 1
    moved = post(vlm_gateway, f"/v1/episodes/{episode['id']}/moves", {"move": "[4]"})
    assert moved.status_code == 200, moved.text
    # The agent answered from its own picture of the board (vLLM's chat route with the image).
    assert [t["player"] for t in moved.json()["new_turns"]] == ["user", "viewer"]
    refused = post(vlm_gateway, "/v1/episodes",
                   {"env": "tictactoe", "seats": ["reader", "user"], "observation": "image"})
    assert refused.status_code == 422 and refused.json()["error"]["param"] == "seats.0"
    text_only_env = post(vlm_gateway, "/v1/episodes",
                         {"env": "discussion", "seats": ["viewer", "user"],
                          "task": {"question": "What is 2 + 3?"}, "observation": "image"})
    assert text_only_env.status_code == 422
    assert "shown as text only" in text_only_env.text


def test_eval_of_a_vlm_run_plays_from_images(vlm_server, tmp_path, monkeypatch):
    """`agora eval` builds the run's env as training did: every agent turn sends the board as
    an image (counted on the way to vLLM by wrapping the client's generate)."""
    from agora.serving import client as client_module
    from tests.integration.test_eval_cli import agora_eval, make_run, read_eval
    from tests.stack_helpers import tiny_config

    cfg = tiny_config(name="vlm-eval", models={"tiny": {"model": TINY_VLM, "max_model_len": 1024}},
                      environment={"observation": "image"})
    learner = vlm_learner(seed=9)
    run_dir = make_run(tmp_path, cfg, learner, versions=2)
    sent: list[int] = []
    generate = client_module.PolicyClient.generate

    async def counting(self, messages, prefill="", choices=None):
        sent.append(len(image_urls(messages)))
        return await generate(self, messages, prefill, choices)

    monkeypatch.setattr(client_module.PolicyClient, "generate", counting)
    code, out = agora_eval(run_dir, "--games", 2, "--snapshots", 2, "--policy-url", vlm_server)
    assert code == 0, out
    games = read_eval(run_dir / "eval")[0]["sections"]["games"]
    assert games["evaluated"] == "player@v1"
    assert sent and set(sent) == {1}
