"""Hanabi rules, prompts, bots and rewards, and agreement with TextArena's own HanabiEnv."""

from __future__ import annotations

import copy
import random
import re
import statistics
from pathlib import Path

import pytest
from textarena.envs.Hanabi.env import HanabiEnv

from agora.config.run import ConfigError, load_config
from agora.envs.base import TurnBasedEnv
from agora.envs.hanabi import (
    COLORS,
    FUSE_TOKENS,
    INFO_TOKENS,
    RANK_COUNTS,
    SYSTEM_PROMPT,
    Hanabi,
    card_text,
    draw_order,
    hanabi_rewards,
    parse_action,
)
from agora.envs.registry import make_bot, make_env
from agora.gateway.episodes import EpisodeCreate
from agora.gateway.episodes import build_env as gateway_env
from agora.rollout.seating import build_env


def new(num_players: int = 2, seed: int = 0) -> Hanabi:
    env = Hanabi(num_players=num_players)
    env.reset(seed)
    return env


def user_prompt(env: Hanabi, seat: int) -> str:
    return env.observation(seat)[1]["content"]


def wrong_card(env: Hanabi) -> int:
    """Position of a card the current seat holds that cannot be played now (test-only peek)."""
    return next(i for i, c in enumerate(env.hands[env.current_seat]) if not env.is_playable(c))


def oracle(env: Hanabi, rng: random.Random) -> str:
    """A cheating player that sees its own cards; it reaches 25 in most games, so the agreement
    test also covers the 'all fireworks complete' ending, which honest bots never reach."""
    hand = env.hands[env.current_seat]
    playable = [i for i, c in enumerate(hand) if env.is_playable(c)]
    if playable:
        return f"[Play] {min(playable, key=lambda i: hand[i][1])}"
    useless = [i for i, (c, r) in enumerate(hand) if env.fireworks[c] >= r]
    if useless:
        return f"[Discard] {useless[0]}"
    hints = [a for a in env.legal_actions() if a.startswith("[Reveal]")]
    if env.info_tokens > 4:
        return hints[0]
    twins = [i for i, c in enumerate(hand) if hand.count(c) > 1]
    if twins:
        return f"[Discard] {twins[0]}"
    safe = [i for i, c in enumerate(hand) if env.discards.count(c) < RANK_COUNTS[c[1]] - 1]
    if safe:
        return f"[Discard] {max(safe, key=lambda i: hand[i][1])}"
    return hints[0] if hints else "[Discard] 0"


def play_game(env: Hanabi, players, rng: random.Random) -> None:
    while not env.done:
        player = players[env.current_seat]
        action = player(env, rng) if callable(player) else player.act(env, rng)
        assert action in env.legal_actions(), action
        assert env.step(action).legal, (action, env.outcome().reason)


# --- protocol, deck, seats ---------------------------------------------------------------------


def test_implements_the_env_protocol_and_is_registered():
    env = make_env("hanabi")
    assert isinstance(env, Hanabi)
    assert isinstance(env, TurnBasedEnv)
    assert env.num_seats == 2
    assert Hanabi(num_players=4).num_seats == 4
    for bad in (1, 6):
        with pytest.raises(ValueError, match="2-5 players"):
            Hanabi(num_players=bad)
    assert [env.role(s) for s in range(2)] == ["player0", "player1"]
    assert [Hanabi(3).role(s) for s in range(3)] == ["player0", "player1", "player2"]


def test_deck_is_the_full_set_and_depends_only_on_the_seed():
    order = draw_order(7)
    assert len(order) == 50
    for color in COLORS:
        assert sorted(r for c, r in order if c == color) == [1, 1, 1, 2, 2, 3, 3, 4, 4, 5]
    assert draw_order(7) == order
    assert draw_order(8) != order
    a, b = new(3, seed=11), new(3, seed=11)
    assert a.hands == b.hands and a.deck == b.deck


@pytest.mark.parametrize(("players", "hand"), [(2, 5), (3, 5), (4, 4), (5, 4)])
def test_deal_gives_each_seat_a_hand_and_seat_0_starts(players, hand):
    env = new(players, seed=3)
    assert [len(h) for h in env.hands] == [hand] * players
    assert len(env.deck) == 50 - hand * players
    assert (env.current_seat, env.info_tokens, env.fuse_tokens) == (0, INFO_TOKENS, FUSE_TOKENS)
    assert env.fireworks == dict.fromkeys(COLORS, 0)


def test_turns_go_round_and_cards_shift_down_with_the_new_card_last():
    env = new(3, seed=5)
    before = list(env.hands[0])
    next_card = env.deck[0]
    env.step("[Discard] 1")
    assert env.hands[0] == before[:1] + before[2:] + [next_card]
    assert env.discards == [before[1]]
    assert env.info_tokens == INFO_TOKENS  # already at the cap: a discard gains nothing
    assert env.current_seat == 1
    env.step("[Discard] 0")
    assert env.current_seat == 2
    env.step("[Discard] 0")
    assert env.current_seat == 0


def test_reset_clears_the_previous_game():
    env = new(2, seed=1)
    env.step(f"[Reveal] player 1 card 0 rank {env.hands[1][0][1]}")
    env.step("nonsense")
    assert env.done
    env.reset(1)
    assert not env.done
    assert env.history == [] and env.log == [] and env.turns == 0
    assert env.hints == [[[None, None]] * 5] * 2
    assert env.hands == new(2, seed=1).hands


# --- playing, tokens, endings ------------------------------------------------------------------


def test_a_right_play_builds_the_firework_and_a_wrong_one_costs_a_fuse_token():
    env = new(2, seed=0)
    seat_hand = env.hands[0]
    right = next((i for i, c in enumerate(seat_hand) if c[1] == 1), None)
    assert right is not None, "seed 0 deals player 0 a 1"
    card = seat_hand[right]
    env.step(f"[Play] {right}")
    assert env.fireworks[card[0]] == 1 and env.score == 1
    wrong = wrong_card(env)
    bad = env.hands[1][wrong]
    env.step(f"[Play] {wrong}")
    assert env.fuse_tokens == FUSE_TOKENS - 1
    assert env.discards == [bad]
    assert "wrong" in env.log[-1]


def test_fifth_wrong_play_ends_the_game_and_keeps_the_score():
    """TextArena ends the game when the fuse count goes below 0: 4 tokens, so 5 wrong plays."""
    env = new(2, seed=0)
    right = next(i for i, c in enumerate(env.hands[0]) if c[1] == 1)
    env.step(f"[Play] {right}")
    for k in range(FUSE_TOKENS + 1):
        assert not env.done, k
        env.step(f"[Play] {wrong_card(env)}")
    outcome = env.outcome()
    assert env.done
    assert outcome.info["end"] == "fuse"
    assert outcome.info["fuse_tokens"] == -1
    assert outcome.info["score"] == 1
    assert (outcome.winner, outcome.draw, outcome.illegal_seat) == (None, True, None)


def test_hints_cost_info_tokens_and_discards_give_them_back():
    env = new(2, seed=2)
    env.step(f"[Reveal] player 1 card 0 color {env.hands[1][0][0]}")
    env.step(f"[Reveal] player 0 card 0 rank {env.hands[0][0][1]}")
    assert env.info_tokens == INFO_TOKENS - 2
    env.step("[Discard] 4")
    assert env.info_tokens == INFO_TOKENS - 1


@pytest.mark.parametrize("players", [2, 3, 4])
def test_after_the_last_draw_everyone_plays_one_more_turn(players):
    env = new(players, seed=9)
    rng, bot = random.Random(9), make_bot("hanabi_simple")
    drawn_by = None
    turns_after = 0
    while not env.done:
        seat = env.current_seat
        env.step(bot.act(env, rng))
        if drawn_by is not None:
            turns_after += 1
        elif not env.deck:
            drawn_by = seat
    assert env.outcome().info["end"] == "deck"
    assert turns_after == players  # the drawer's own last turn included
    assert env.log[-1].startswith(f"player {drawn_by} ")


def test_finished_game_is_a_team_result_with_the_score_in_info():
    env = new(2, seed=4)
    play_game(env, [make_bot("hanabi_simple")] * 2, random.Random(4))
    outcome = env.outcome()
    assert (outcome.winner, outcome.draw, outcome.illegal_seat) == (None, True, None)
    assert [outcome.result_for(s) for s in range(2)] == ["draw", "draw"]
    info = outcome.info
    assert info["score"] == sum(info["fireworks"].values()) == env.score
    assert 0 <= info["score"] <= 25
    assert info["illegal"] == 0 and info["turns"] == env.turns == len(env.history)
    assert info["num_players"] == 2 and info["fuse_tokens"] == FUSE_TOKENS
    with pytest.raises(RuntimeError):
        env.step("[Play] 0")


def test_perfect_game_scores_25():
    env = new(2, seed=1)
    play_game(env, [oracle, oracle], random.Random(1))
    info = env.outcome().info
    assert (info["end"], info["score"]) == ("perfect", 25)
    assert hanabi_rewards(info, 2) == [1.0, 1.0]


# --- hints and what each seat sees -------------------------------------------------------------


def test_observation_shows_teammates_cards_but_not_ones_own():
    env = new(3, seed=6)
    for seat in range(3):
        messages = env.observation(seat)
        assert [m["role"] for m in messages] == ["system", "user"]
        assert messages[0]["content"] == SYSTEM_PROMPT  # one shared prefix for every seat
        user = messages[1]["content"]
        assert user.startswith(f"You are player {seat} of 3.")
        shown = dict(re.findall(r"^Player (\d) has: (.*)$", user, re.MULTILINE))
        assert set(shown) == {str(s) for s in range(3) if s != seat}
        for other, cards in shown.items():
            expected = ", ".join(f"{i} {card_text(c)}" for i, c in enumerate(env.hands[int(other)]))
            assert cards == expected
        assert "Your cards (from hints): 0 ?, 1 ?, 2 ?, 3 ?, 4 ?" in user
        assert "Last moves: none" in user
        assert "Info tokens 8, fuse tokens 4, deck 35" in user
        assert "Fireworks: white 0, yellow 0, green 0, blue 0, red 0 (score 0)" in user


def test_prompt_gives_the_exact_action_formats():
    # Every example action of the prompt, copied verbatim with its explanation (as an untrained
    # model does), parses as the action it shows.
    examples = [line for line in SYSTEM_PROMPT.splitlines() if line.startswith("[")]
    assert [line.split()[0] for line in examples] == ["[Play]", "[Discard]", "[Reveal]",
                                                      "[Reveal]"]
    for line in examples:
        action = parse_action(line)
        assert action is not None and action.kind == line[1:line.index("]")].lower()
    for line in examples[:2]:  # a play or a discard of an own card is always legal
        assert new(2, seed=0).step(line).legal
    assert "Your move as player 1:" in user_prompt(new(2), 1)


def test_hints_update_the_receivers_knowledge_and_follow_the_card():
    env = new(2, seed=0)
    color, rank = env.hands[1][2]
    env.step(f"[Reveal] player 1 card 2 color {color}")
    assert env.hints[1][2] == [color, None]
    assert f"Your cards (from hints): 0 ?, 1 ?, 2 {color} ?, 3 ?, 4 ?" in user_prompt(env, 1)
    assert "0 ?, 1 ?, 2 ?, 3 ?, 4 ?" in user_prompt(env, 0)  # the hinter learns nothing
    assert f"Last moves: player 0 [Reveal] player 1 card 2 color {color}" in user_prompt(env, 1)
    env.step("[Discard] 0")  # player 1's cards move down: the hinted card is now card 1
    assert env.hints[1][1] == [color, None] and env.hints[1][4] == [None, None]
    env.step(f"[Reveal] player 1 card 1 rank {rank}")
    assert f"(from hints): 0 ?, 1 {color} {rank}, 2 ?, 3 ?, 4 ?" in user_prompt(env, 1)


def test_mark_playable_marks_exactly_the_cards_that_fit_the_fireworks_now():
    env = Hanabi(num_players=2, mark_playable=True)
    env.reset(0)
    plain = new(2, seed=0)
    ones = [i for i, (_, rank) in enumerate(env.hands[1]) if rank == 1]
    assert ones and len(ones) < 5  # seed 0 deals player 1 some 1s and some others
    shown = re.search(r"^Player 1 has: (.*)$", user_prompt(env, 0), re.MULTILINE).group(1)
    marked = [int(part.split()[0]) for part in shown.split(", ") if part.endswith("(playable)")]
    assert marked == ones  # at the start exactly the 1s fit
    assert "(playable)" not in user_prompt(plain, 0)  # off by default: prompts as before
    # An own card is marked once its hints prove it fits: a 1 told its rank fits any firework.
    card = ones[0]
    env.step(f"[Reveal] player 1 card {card} rank 1")
    mine = re.search(r"\(from hints\): (.*)$", user_prompt(env, 1), re.MULTILINE).group(1)
    assert [p for p in mine.split(", ") if p.endswith("(playable)")] == [f"{card} ? 1 (playable)"]
    env.step(f"[Play] {card}")  # player 1 plays it; that firework is now 1
    color = env.log[-1].split("(")[1].split()[0]
    assert env.fireworks[color] == 1
    # A 1 told only its rank no longer proves it fits once some firework has started.
    assert not env.known_playable(None, 1) and env.known_playable(color, 2)
    assert env.known_playable(next(c for c in COLORS if c != color), 1)


def test_mark_playable_is_an_option_of_the_hanabi_section():
    path = Path(__file__).parents[2] / "configs/hanabi_selfplay.yaml"
    assert load_config(path).environment.hanabi.mark_playable is False
    cfg = load_config(path, ["environment.hanabi.mark_playable=true"])
    env = build_env(cfg, {"seed": 0})
    assert "(playable)" in user_prompt(env, 0)
    with pytest.raises(ConfigError, match="hanabi.mark_playable"):
        load_config(path, ["environment.hanabi.mark_playable=true",
                           "environment.observation=image"])
    with pytest.raises(ConfigError, match="mark_playabel"):
        load_config(path, ["environment.hanabi.mark_playabel=true"])
    # The gateway builds a user's game from its episode spec, which has no options section.
    user_game = gateway_env(EpisodeCreate(env="hanabi", seats=["user", "policy"],
                                          observation="image"))
    assert isinstance(user_game, Hanabi) and not user_game.mark_playable


def test_discard_pile_is_shown_grouped_by_color():
    env = new(2, seed=0)
    assert "Discarded: none" in user_prompt(env, 0)
    for _ in range(4):
        env.step("[Discard] 0")
    ranks = {c: sorted(r for cc, r in env.discards if cc == c) for c in COLORS}
    expected = "; ".join(c + " " + " ".join(map(str, rs)) for c, rs in ranks.items() if rs)
    assert f"Discarded: {expected}" in user_prompt(env, 0)


def test_last_moves_show_one_round():
    env = new(3, seed=0)
    for _ in range(5):
        env.step("[Discard] 0")
    last = re.search(r"Last moves: (.*)", user_prompt(env, env.current_seat)).group(1)
    assert [m.split(" [")[0] for m in last.split("; ")] == ["player 2", "player 0", "player 1"]


# --- illegal moves and the legal-action list ---------------------------------------------------


def true_hint(env: Hanabi, target: int, card: int, kind: str) -> str:
    color, rank = env.hands[target][card]
    return f"[Reveal] player {target} card {card} " + (
        f"color {color}" if kind == "color" else f"rank {rank}"
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "format"),
        ("play 0", "format"),
        ("[Play]", "format"),
        ("[Discard] x", "format"),
        ("[Play] 5", "no card 5"),
        ("[Reveal] Player 0 card 0 rank 1", "format"),  # TextArena's regex is case-sensitive
        ("[Reveal] player 0 card 0", "format"),
        ("[Reveal] player 1 card 0 rank 1", "own cards"),
        ("[Reveal] player 2 card 0 rank 1", "no player 2"),
        ("[Reveal] player 0 card 7 rank 1", "no card 7"),
        ("[Reveal] player 0 card 0 color purple", "not a color"),
        ("[Reveal] player 0 card 0 color Red", "not a color"),  # read as 'R'
        ("[Reveal] player 0 card 0 rank 6", "not between 1 and 5"),
        ("[Reveal] player 0 card 0 rank 0", "not between 1 and 5"),
        ("[Reveal] player 0 card 0 rank 4", "not true"),  # player 0's card 0 is a red 5
        ("[Reveal] player 0 card 0 color blue", "not true"),
        ("[Reveal] player 0 card 0 color 1", "not true"),  # the color is read as ''
    ],
)
def test_illegal_or_unparsable_move_forfeits(text, reason):
    env = new(2, seed=0)
    env.step("[Discard] 0")  # seat 1 is to move
    assert env.hands[0][0] == ("red", 5)
    hands = copy.deepcopy(env.hands)
    result = env.step(text)
    assert (result.legal, result.done) == (False, True)
    outcome = env.outcome()
    assert reason in outcome.reason
    assert (outcome.illegal_seat, outcome.winner, outcome.draw) == (1, None, False)
    assert outcome.result_for(1) == "illegal" and outcome.result_for(0) == "loss"
    assert outcome.info["illegal"] == 1 and outcome.info["end"] == "illegal"
    assert outcome.info["turns"] == 1 and env.history == ["[Discard] 0", text]
    assert env.hands == hands


def test_a_hint_with_no_info_token_left_forfeits():
    env = new(2, seed=1)
    for _ in range(INFO_TOKENS):
        other = 1 - env.current_seat
        assert env.step(true_hint(env, other, 0, "rank")).legal
    assert env.info_tokens == 0
    assert not any(a.startswith("[Reveal]") for a in env.legal_actions())
    env.step(true_hint(env, 1, 0, "color"))
    assert (env.outcome().illegal_seat, env.outcome().info["illegal"]) == (0, 1)
    assert "no info tokens" in env.outcome().reason


def test_a_hint_about_an_emptied_slot_is_illegal():
    """After the last draw every seat plays one more turn with a full hand, so only a hint can
    name a slot emptied meanwhile; TextArena pads the hand with None and accepts that hint."""
    env = new(2, seed=0)
    while env.deck:
        env.step("[Discard] 0")
    done_seat = env.current_seat
    env.step("[Discard] 0")  # its last turn: 4 cards left, no draw
    assert len(env.hands[done_seat]) == 4 and not env.done
    assert not any(f"player {done_seat} card 4" in a for a in env.legal_actions())
    env.step(f"[Reveal] player {done_seat} card 4 rank 1")
    assert f"player {done_seat} has no card 4" in env.outcome().reason


def all_canonical_moves(env: Hanabi) -> list[str]:
    moves = [f"[{k}] {i}" for k in ("Play", "Discard") for i in range(6)]
    for target in range(env.num_seats + 1):
        for card in range(6):
            moves += [f"[Reveal] player {target} card {card} color {c}" for c in COLORS]
            moves += [f"[Reveal] player {target} card {card} rank {r}" for r in range(0, 7)]
    return moves


@pytest.mark.parametrize("players", [2, 4])
def test_legal_actions_are_exactly_the_legal_canonical_moves(players):
    rng = random.Random(players)
    checked = 0
    for seed in range(3):
        env = new(players, seed=seed)
        while not env.done:
            legal = set(env.legal_actions())
            assert len(legal) == len(env.legal_actions())
            if env.turns % 7 == 0 or not env.deck:
                for move in all_canonical_moves(env):
                    trial = copy.deepcopy(env)
                    assert trial.step(move).legal == (move in legal), move
                    checked += 1
            env.step(rng.choice(sorted(legal)))
    assert checked > 1500


# --- scripted bots -----------------------------------------------------------------------------


def test_hanabi_bots_are_registered():
    assert make_bot("hanabi_random").name == "hanabi_random"
    assert make_bot("hanabi_simple").name == "hanabi_simple"


@pytest.mark.parametrize("players", [2, 3, 4])
def test_simple_bot_scores_well_above_random_and_neither_moves_illegally(players):
    """Measured over seeds 0-49: random 2.7 / 1.8 / 2.0 and simple 15.6 / 14.4 / 13.9 (2/3/4
    players). The simple bot plays only cards the hints prove playable, so it never misplays."""
    scores: dict[str, list[int]] = {}
    for name in ("hanabi_random", "hanabi_simple"):
        bot = make_bot(name)
        for seed in range(50):
            env = new(players, seed)
            play_game(env, [bot] * players, random.Random(seed))
            info = env.outcome().info
            assert env.outcome().illegal_seat is None
            scores.setdefault(name, []).append(info["score"])
            if name == "hanabi_simple":
                assert info["fuse_tokens"] == FUSE_TOKENS and info["end"] == "deck"
    simple = statistics.mean(scores["hanabi_simple"])
    rand = statistics.mean(scores["hanabi_random"])
    assert simple >= rand + 8, (simple, rand)
    assert min(scores["hanabi_simple"]) >= 8


def test_bots_mix_in_one_game():
    env = new(4, seed=2)
    play_game(env, [make_bot("hanabi_simple"), make_bot("hanabi_random")] * 2, random.Random(2))
    assert env.outcome().draw


# --- rewards -----------------------------------------------------------------------------------


def test_hanabi_rewards_give_every_seat_the_score_over_25():
    assert hanabi_rewards({"score": 0}, 2) == [0.0, 0.0]
    assert hanabi_rewards({"score": 10}, 3) == [0.4, 0.4, 0.4]
    assert hanabi_rewards({"score": 25}, 4) == [1.0] * 4
    for bad in (-1, 26):
        with pytest.raises(ValueError):
            hanabi_rewards({"score": bad}, 2)
    env = new(3, seed=1)
    play_game(env, [make_bot("hanabi_simple")] * 3, random.Random(1))
    assert hanabi_rewards(env.outcome().info, 3) == [env.score / 25] * 3


# --- cross-check against TextArena's own HanabiEnv ---------------------------------------------

TEXTARENA_ENDS = {
    "The deck has run out.": "deck",
    "The team ran out of fuse tokens.": "fuse",
    "All 5s have been played successfully.": "perfect",
}


def textarena_env(players: int, seed: int) -> HanabiEnv:
    """TextArena's Hanabi with the same deal as ``new(players, seed)``.

    Nothing needs aligning by hand: its state's constructor calls ``random.seed(seed)`` on the
    global ``random`` and then deals and draws with ``deck.pop(random.randrange(len(deck)))``,
    which ``draw_order`` reproduces with a private generator. That holds only while nothing else
    draws from the global ``random`` during the game, so every player here has its own
    ``random.Random``; the hands are compared after every move anyway.
    """
    env = HanabiEnv()
    env.reset(num_players=players, seed=seed)
    return env


def textarena_cards(cards) -> list[tuple[str, int]]:
    """Its cards as ours; it refills hands with None once the deck is empty."""
    return [(c.suit.value, c.rank) for c in cards if c is not None]


def assert_same_state(ours: Hanabi, theirs: HanabiEnv) -> None:
    state = theirs.state.game_state
    if not ours.done:  # at the end TextArena has moved on to the next player; ours stays
        assert theirs.state.current_player_id == ours.current_seat
    for seat in range(ours.num_seats):
        assert textarena_cards(state["player_hands"][seat]) == ours.hands[seat]
    assert {s.value: v for s, v in state["fireworks"].items()} == ours.fireworks
    assert (state["info_tokens"], state["fuse_tokens"]) == (ours.info_tokens, ours.fuse_tokens)
    assert textarena_cards(state["discard_pile"]) == ours.discards
    assert len(state["deck"]) == len(ours.deck)
    assert theirs.state.turn == ours.turns


def test_agrees_with_textarena_on_240_bot_games():
    """Same moves through both envs give the same cards, tokens, turn order, end and score.

    TextArena details found on the way (textarena 0.7.4, not in its registry, so imported from
    ``textarena.envs.Hanabi.env``): fuse tokens start at 4 and the game ends below 0; the score
    on every ending is the fireworks' sum (``env.rewards``), and its state rewards are 0 for all
    (draw) or 1 for all (25 points); hands are padded with ``None`` after the deck runs out.
    """
    players_by_kind = {
        "random": lambda n: [make_bot("hanabi_random")] * n,
        "simple": lambda n: [make_bot("hanabi_simple")] * n,
        "oracle": lambda n: [oracle] * n,
        "mixed": lambda n: [make_bot("hanabi_simple"), oracle, make_bot("hanabi_random")][:n]
        + [oracle] * max(0, n - 3),
    }
    ends: dict[str, int] = {}
    for players in (2, 3, 4, 5):
        for seed in range(60):
            kind = list(players_by_kind)[seed % 4]
            seats = players_by_kind[kind](players)
            ours, theirs = new(players, seed), textarena_env(players, seed)
            rng = random.Random(seed)
            while not ours.done:
                assert_same_state(ours, theirs)
                seat = seats[ours.current_seat]
                action = seat(ours, rng) if callable(seat) else seat.act(ours, rng)
                assert ours.step(action).legal
                done, _ = theirs.step(action)
                assert theirs.state.error_count == 0, (players, seed, action)
                assert done == ours.done, (players, seed, ours.history)
            assert_same_state(ours, theirs)
            info = ours.outcome().info
            reason = theirs.state.game_info[0]["reason"]
            assert TEXTARENA_ENDS[reason] == info["end"], (players, seed)
            assert theirs.rewards == dict.fromkeys(range(players), info["score"])
            assert theirs.state.rewards == dict.fromkeys(
                range(players), 1 if info["end"] == "perfect" else 0
            )
            ends[info["end"]] = ends.get(info["end"], 0) + 1
    # Every ending must occur often, or the agreement says little (62 fuse, 125 deck, 53 perfect).
    assert ends.keys() == {"deck", "fuse", "perfect"}
    assert min(ends.values()) >= 30, ends


TEXTS = [
    # (template, legal in both); {c}/{r} are player 1's card 0, which player 0 may hint.
    ("[Play] 0", True),
    ("[play] 4", True),
    ("[PLAY]3", True),
    ("I will [Play] 2 now", True),
    ("[Discard] 1", True),
    ("[discard]0", True),
    ("[Play] 07", True),
    ("[Play] \u0663", True),  # Arabic-Indic three: Python's \d matches it, int() reads 3
    ("[Discard] 12", True),  # the first digit: card 1
    ("Player 1: [Play] 3", True),  # the first digit anywhere: card 1
    ("[Reveal] player 1 card 0 color {c}", True),
    ("[reveal] player 1 card 0 rank {r}", True),
    ("[Reveal] player 1 card 0 rank {r} color {c}", True),  # the color wins
    ("[Reveal] [Play] player 1 card 0 color {c}", True),  # [reveal] is looked for first
    ("[Play] 0 [Reveal] player 1 card 0 rank {r}", True),
    ("", False),
    ("Play 0", False),
    ("[Play]", False),
    ("[Play] x", False),
    ("[Play] 5", False),
    ("[Discard] 9", False),
    ("[Reveal] Player 1 card 0 color {c}", False),
    ("[Reveal] player 1 card 0 color {C}", False),
    ("[Reveal] player 0 card 0 rank 1", False),
    ("[Reveal] player 2 card 0 rank {r}", False),
    ("[Reveal] player 1 card 7 rank {r}", False),
    ("[Reveal] player 1 card 0 rank 6", False),
    ("[Reveal] player 1 card 0 rank 0", False),
    ("[Reveal] player 1 card 0 color purple", False),
    ("[Reveal] player 1 card 0", False),
    ("[Reveal] card 0 color {c}", False),
    ("[Reveal] player 1 card 0 color {c} rank 9", False),
    ("[Reveal]", False),
]


@pytest.mark.parametrize(("template", "legal"), TEXTS)
def test_odd_texts_are_read_as_textarena_reads_them(template, legal):
    ours, theirs = new(2, seed=3), textarena_env(2, seed=3)
    color, rank = ours.hands[1][0]
    text = template.format(c=color, C=color.title(), r=rank)
    result = ours.step(text)
    theirs.step(text)
    assert result.legal == legal
    assert (theirs.state.error_count == 0) == legal  # it counts an invalid move, then a retry
    if legal:
        assert_same_state(ours, theirs)
        assert parse_action(text).canonical() in ours.log[-1]


@pytest.mark.parametrize("kind", ["color", "rank", "empty color"])
def test_false_hints_are_illegal_here_though_textarena_accepts_them(kind):
    """TextArena's rules say hints must be accurate but never check; we forfeit a lie."""
    ours, theirs = new(2, seed=3), textarena_env(2, seed=3)
    color, rank = ours.hands[1][0]
    lie = {
        "color": f"color {next(c for c in COLORS if c != color)}",
        "rank": f"rank {rank % 5 + 1}",
        "empty color": "color 1",
    }[kind]
    text = f"[Reveal] player 1 card 0 {lie}"
    theirs.step(text)
    assert theirs.state.error_count == 0 and theirs.state.game_state["info_tokens"] == 7
    assert not ours.step(text).legal
    assert "not true" in ours.outcome().reason
