"""Observations seen as images (agora/envs/images.py): what the board picture shows, what each
``environment.observation`` mode puts in a seat's messages, and the checks that refuse an image
view for envs and models that cannot take it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agora.algos.ppo import language_model_targets
from agora.config.run import RunConfig
from agora.envs.images import decode_data_url, grid_image, has_images, image_urls, png_data_url
from agora.envs.tictactoe import TicTacToe
from agora.stack.preflight import vision_problems
from tests.stack_helpers import tiny_config

CELL = 32


def dark(image, x: int, y: int) -> bool:
    return sum(image.getpixel((x, y))) < 200


def test_board_picture_shows_marks_in_their_cells_and_survives_the_data_url():
    cells = ["O", "", "X", "", "", "", "", "", ""]
    url = png_data_url(grid_image(cells, 3, cell_px=CELL))
    assert url.startswith("data:image/png;base64,")
    image = decode_data_url(url)
    assert image.size == (3 * CELL, 3 * CELL) and image.mode == "RGB"
    # An X crosses its cell's centre; an O is a ring (dark on the rim, white in the middle);
    # an empty cell's centre is white.
    assert dark(image, 2 * CELL + CELL // 2, CELL // 2)
    assert not dark(image, CELL // 2, CELL // 2)
    assert dark(image, CELL // 5 + 1, CELL // 2)
    assert not dark(image, CELL + CELL // 2, CELL // 2)
    # Grid lines between the cells.
    assert dark(image, CELL, CELL + CELL // 2) and dark(image, CELL // 2, 2 * CELL)


def test_data_urls_that_are_not_base64_images_are_refused():
    with pytest.raises(ValueError, match="base64 data URL"):
        decode_data_url("https://example.com/board.png")


@pytest.mark.parametrize("mode", ["text", "image", "both"])
def test_tictactoe_observation_modes(mode):
    env = TicTacToe(observation=mode)
    env.reset(0)
    env.step("[4]")
    messages = env.observation(1)
    system, user = messages
    assert isinstance(system["content"], str) and "X" in system["content"]
    if mode == "text":
        assert isinstance(user["content"], str) and "3 | O | 5" in user["content"]
        assert not has_images(messages)
        return
    texts = " ".join(p["text"] for p in user["content"] if p["type"] == "text")
    [url] = image_urls(messages)
    # The picture is the board as it is now: O in the centre cell.
    picture = decode_data_url(url)
    assert dark(picture, 32 + 16 - 9, 32 + 16)  # the O's rim
    assert not dark(picture, 32 + 16, 32 + 16)  # its hole
    # The legal moves stay text in both modes; the text board only with "both".
    assert "Free cells: [0] [1] [2] [3] [5]" in texts
    assert ("3 | O | 5" in texts) == (mode == "both")


def test_image_mode_sees_a_new_picture_after_each_move():
    env = TicTacToe(observation="image")
    env.reset(0)
    before = image_urls(env.observation(0))
    env.step("[0]")
    after = image_urls(env.observation(1))
    assert before != after


def test_image_observation_is_refused_for_envs_that_cannot_draw_themselves():
    cfg = tiny_config().model_dump()
    cfg["environment"]["observation"] = "image"
    RunConfig.model_validate(cfg)  # tictactoe draws itself
    story = {"name": "story", "seats": ["player", "player"], "observation": "image"}
    with pytest.raises(ValidationError, match="observation: story is shown as text only"):
        RunConfig.model_validate({**cfg, "environment": story})


def test_preflight_names_text_only_models_given_an_image_view():
    cfg = tiny_config(environment={"observation": "image"})
    [problem] = vision_problems(cfg)
    assert problem.startswith("models.tiny.model: 'tiny-random' reads text only")
    cfg = tiny_config(environment={"observation": "image"},
                      models={"tiny": {"model": "tiny-random-vlm"}})
    assert vision_problems(cfg) == []
    assert vision_problems(tiny_config()) == []  # a text view needs nothing


def test_lora_targets_of_a_vlm_are_its_language_model_only():
    import torch
    from transformers import AutoModelForImageTextToText

    from agora.serving.model_folders import TINY_VLM, resolve_model

    model = AutoModelForImageTextToText.from_pretrained(resolve_model(TINY_VLM),
                                                        dtype=torch.float32)
    names = language_model_targets(model, ["q_proj", "v_proj"], None)
    assert len(names) == 4 and all("text_model" in n for n in names)
    # The vision tower has q_proj too: never adapted.
    assert any("vision" in n and n.endswith("q_proj") for n, _ in model.named_modules())
    top = language_model_targets(model, ["q_proj", "v_proj"], [1])
    assert sorted(top) == sorted(n for n in names if ".layers.1." in n) and len(top) == 2
    with pytest.raises(ValueError, match="name no module"):
        language_model_targets(model, ["w_proj"], None)


@pytest.mark.parametrize("mode", ["image", "both"])
def test_hanabi_picture_shows_teammates_cards_in_their_suits_colours(mode):
    from agora.envs.hanabi import Hanabi
    from agora.envs.images import CARD_FILL

    env = Hanabi(num_players=2, observation=mode)
    env.reset(3)
    messages = env.observation(0)
    [url] = image_urls(messages)
    picture = decode_data_url(url)
    texts = " ".join(p["text"] for p in messages[1]["content"] if p["type"] == "text")
    assert "Info tokens 8" in texts and "Your move as player 0:" in texts
    assert ("Player 1 has:" in texts) == (mode == "both")
    # Row 1 is player 1's hand: each card filled with its suit's colour (inside the rim).
    card_px, label_px = 28, 4 * 28
    for index, (color, _rank) in enumerate(env.hands[1]):
        x, y = label_px + index * (card_px + 4) + 5, 4 + (card_px + 8) + 5
        expected = CARD_FILL[color].lstrip("#")
        assert picture.getpixel((x, y)) == tuple(int(expected[i:i + 2], 16) for i in (0, 2, 4))
    # Player 0's own cards: nothing hinted yet, so grey.
    x, y = label_px + 5, 4 + 2 * (card_px + 8) + 5
    assert picture.getpixel((x, y)) == (0x9a, 0x9a, 0x9a)


def test_text_of_shows_image_parts_as_placeholders():
    from agora.envs.images import text_of

    env = TicTacToe(observation="image")
    env.reset(0)
    shown = text_of(env.observation(0)[1]["content"])
    assert shown.startswith("Board:[image]\nFree cells: [0]") and "data:" not in shown
    assert text_of("plain") == "plain"


def test_vlm_learner_refuses_what_it_does_not_do_yet():
    from agora.algos.ppo import PPOLearner
    from agora.config.agents import AgentConfig
    from agora.config.training import PPOConfig
    from agora.serving.model_folders import TINY_VLM, resolve_model
    from tests.stack_helpers import FP32

    full = AgentConfig(name="viewer", base="vlm", finetune="full")
    with pytest.raises(ValueError, match="agents.viewer.finetune: 'full' is not supported"):
        PPOLearner(resolve_model(TINY_VLM), full, PPOConfig(), compute=FP32)
