"""Hanabi self-play on TextArena's rules (``textarena/envs/Hanabi/env.py``), forfeit on a bad move.

Same as TextArena 0.7.4 (tests/unit/test_hanabi.py replays games through its ``HanabiEnv`` to keep
the two in agreement):

* 50 cards: colors white, yellow, green, blue, red; per color three 1s, two 2s/3s/4s, one 5.
  The deal and every draw use TextArena's procedure (``deck.pop(randrange(len(deck)))`` on a
  generator seeded with the episode seed), so a seed gives the same cards in both envs.
* Hands of 5 cards (2-3 players) or 4 (4-5); seat 0 moves first, turns go round.
  A played or discarded card leaves its slot, the cards after it move down one, and the new card
  goes last: position 0 is always the oldest card.
* 8 info tokens (a hint costs one, a discard gives one back up to 8; discarding at 8 is allowed
  and gains nothing; playing a 5 gives nothing) and 4 fuse tokens: a wrong play costs one and
  the wrong card goes to the discard pile. The game ends when a wrong play finds no fuse token
  left (the count goes below 0: five wrong plays), when all fireworks reach 5, or, once the last
  card has been drawn, when the player who drew it has played one more turn.
  The score is the sum of the fireworks in every case (TextArena does not zero it on a blow-up).
* A hint names ONE card of one teammate and one attribute of it:
  ``[Reveal] player N card X color C`` or ``[Reveal] player N card X rank R``.
* Action syntax with TextArena's own regular expressions (see ``parse_action``): ``[reveal]`` is
  looked for first, then ``[play]``, then ``[discard]`` (case-insensitive); Play and Discard take
  the first digit anywhere in the text; Reveal reads ``player N``, ``card X``, ``color C`` and
  ``rank R`` case-sensitively, and a color wins over a rank when both are given.

Differences, by design:

* An illegal or unparsable move forfeits at once (TextArena lets the player retry, then skips
  its turn), because the learner must pay for the move that caused it, as in tictactoe.py.
* A hint must be true. TextArena's rules text says "Hints must be accurate" but never checks,
  and broadcasts whatever was claimed; a lie here is an illegal move, so the hints shown in
  prompts are facts a player can rely on.
* Slots emptied after the deck runs out do not exist here. TextArena pads the hand with
  ``None`` and accepts a hint about that slot (every seat's own last turn comes with a full
  hand, so only a hint can name one); here naming a card that is not in the hand is illegal.

Cooperative, so nobody beats anybody: a finished game is ``Outcome(winner=None, draw=True)`` for
every seat, and the team result is ``info["score"]`` (0-25); ``hanabi_rewards`` turns it into the
same reward for every seat. A forfeit is ``illegal_seat`` = the offender (the others' result is
'loss': the team lost the game).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from pydantic import Field

from agora.envs.base import ChatMessage, Outcome, StepResult
from agora.envs.images import ObservationMode, card_rows_image, image_part, png_data_url, text_part
from agora.envs.spec import DefaultPlay, EnvOptions, EnvSpec

COLORS = ("white", "yellow", "green", "blue", "red")  # TextArena's Suit order: it fixes the deck
RANK_COUNTS = {1: 3, 2: 2, 3: 2, 4: 2, 5: 1}
MAX_SCORE = 25
INFO_TOKENS = 8
FUSE_TOKENS = 4
MIN_PLAYERS, MAX_PLAYERS = 2, 5

Card = tuple[str, int]  # (color, rank)
Hint = list  # [color | None, rank | None]: what a player was told about one of its own cards

# TextArena's patterns, kept verbatim so odd texts are read the same way.
_REVEAL = re.compile(r"\[reveal\]", re.IGNORECASE)
_PLAY = re.compile(r"\[play\]", re.IGNORECASE)
_DISCARD = re.compile(r"\[discard\]", re.IGNORECASE)
_DIGIT = re.compile(r"(\d)")
_HINT_PLAYER = re.compile(r"player (\d+)")
_HINT_CARD = re.compile(r"card (\d)")
_HINT_COLOR = re.compile(r"color ([A-Z]|[a-z]*)")
_HINT_RANK = re.compile(r"rank (\d)")

# Concrete examples, not placeholders: untrained SmolLM2 copied "[Play] X" verbatim (0% legal
# moves over a 500-s run, so every game scored the same and PPO had nothing to learn from); a
# copied "[Play] 2" is a legal move.
SYSTEM_PROMPT = (
    "Cooperative Hanabi. The team builds one firework per color (white, yellow, green, blue, "
    "red) from 1 up to 5; each card played scores 1, 25 at most. You see your teammates' cards, "
    "not yours. Cards are numbered from 0, oldest first; a new card goes last.\n"
    "Reply with one action, for example:\n"
    "[Play] 2 - play your card 2; a wrong card costs a fuse token\n"
    "[Discard] 0 - discard your card 0, regain an info token\n"
    "[Reveal] player 1 card 3 color red - tell player 1 their card 3 is red\n"
    "[Reveal] player 1 card 4 rank 2 - tell player 1 their card 4 is a 2\n"
    "A hint must be true and costs an info token. The game ends when all fireworks are "
    "complete, on a wrong play with 0 fuse tokens, or a round after the deck runs out."
)


def hand_size_for(num_players: int) -> int:
    return 5 if num_players <= 3 else 4


def draw_order(seed: int) -> list[Card]:
    """All 50 cards in the order TextArena's ``HanabiEnv.reset(num_players, seed)`` draws them.

    TextArena seeds the global ``random`` with the seed, builds the deck color by color, and
    draws each card (deal first, player 0's hand first) with ``deck.pop(randrange(len(deck)))``.
    The sequence of ``randrange`` calls does not depend on the moves, so the whole order can be
    drawn up front from a private generator with the same seed.
    """
    deck = [(c, r) for c in COLORS for r, n in RANK_COUNTS.items() for _ in range(n)]
    rng = random.Random(seed)
    return [deck.pop(rng.randrange(len(deck))) for _ in range(len(deck))]


def card_text(card: Card) -> str:
    return f"{card[0]} {card[1]}"


def hint_text(hint: Hint) -> str:
    """What a player knows about one own card: ``red ?``, ``? 3``, ``red 3`` or ``?``."""
    color, rank = hint
    if color is None and rank is None:
        return "?"
    return f"{color or '?'} {rank or '?'}"


@dataclass
class Action:
    """A move as TextArena's regexes read it; fields a pattern did not find are None."""

    kind: str  # play | discard | reveal
    card: int | None = None
    target: int | None = None  # reveal: the teammate
    color: str | None = None  # reveal: may be '' ("color " followed by no lowercase letters)
    rank: int | None = None

    def canonical(self) -> str:
        if self.kind == "play":
            return f"[Play] {self.card}"
        if self.kind == "discard":
            return f"[Discard] {self.card}"
        what = f"color {self.color}" if self.color is not None else f"rank {self.rank}"
        return f"[Reveal] player {self.target} card {self.card} {what}"


def _int(digits: str) -> int | None:
    """int() of a regex match; None for more digits than int() converts (over 4300)."""
    try:
        return int(digits)
    except ValueError:
        return None


def parse_action(text: str) -> Action | None:
    """The move in ``text`` read the way TextArena reads it; None when it names no move.

    Like TextArena, ``\\d`` also matches non-ASCII decimal digits (``int('٣') == 3``).
    """
    if _REVEAL.search(text):
        player = _HINT_PLAYER.findall(text)
        card = _HINT_CARD.findall(text)
        color = _HINT_COLOR.findall(text)
        rank = _HINT_RANK.findall(text)
        return Action(
            kind="reveal",
            target=_int(player[0]) if player else None,
            card=int(card[0]) if card else None,
            color=color[0] if color else None,
            rank=int(rank[0]) if rank else None,
        )
    for kind, pattern in (("play", _PLAY), ("discard", _DISCARD)):
        if pattern.search(text):
            digit = _DIGIT.search(text)
            return Action(kind=kind, card=int(digit.group(1)) if digit else None)
    return None


class IllegalMove(ValueError):
    """Why a move breaks the rules; the message becomes the forfeit reason."""


class Hanabi:
    """2-5 seats playing one team game; forfeit on the first illegal move."""

    name = "hanabi"
    # A safety bound, never the game's end: every play or discard uses one of the 50 cards and
    # each hint needs a token, which only the 8 at the start and discards (or a played 5) give,
    # so a game ends within ~110 moves plus a last round.
    max_episode_turns = 256

    def __init__(self, num_players: int = 2, observation: ObservationMode = "text",
                 mark_playable: bool = False) -> None:
        if not MIN_PLAYERS <= num_players <= MAX_PLAYERS:
            raise ValueError(f"Hanabi needs {MIN_PLAYERS}-{MAX_PLAYERS} players, got {num_players}")
        self.num_seats = num_players
        self.hand_size = hand_size_for(num_players)
        self.observation_mode = observation  # text | image | both (agora/envs/images.py)
        self.mark_playable = mark_playable  # HanabiOptions.mark_playable
        self.reset(0)

    # --- protocol ---------------------------------------------------------------------------

    def reset(self, seed: int = 0) -> None:
        order = draw_order(seed)
        n, h = self.num_seats, self.hand_size
        self.hands: list[list[Card]] = [order[p * h : (p + 1) * h] for p in range(n)]
        self.hints: list[list[Hint]] = [[[None, None] for _ in range(h)] for _ in range(n)]
        self.deck: list[Card] = order[n * h :]
        self.fireworks: dict[str, int] = {c: 0 for c in COLORS}
        self.discards: list[Card] = []
        self.info_tokens = INFO_TOKENS
        self.fuse_tokens = FUSE_TOKENS
        self.last_round_seat: int | None = None  # who drew the last card
        self.turns = 0  # legal moves played
        self.log: list[str] = []  # one line per legal move, for prompts
        self.history: list[str] = []  # raw action texts, as submitted
        self._seat = 0
        self._done = False
        self._outcome = Outcome(winner=None, draw=False)

    @property
    def current_seat(self) -> int:
        return self._seat

    @property
    def done(self) -> bool:
        return self._done

    @property
    def score(self) -> int:
        return sum(self.fireworks.values())

    def role(self, seat: int) -> str:
        return f"player{seat}"

    def legal_actions(self) -> list[str]:
        """Plays and discards of every own card, then every true hint if a token is left."""
        seat = self._seat
        size = len(self.hands[seat])
        actions = [f"[Play] {i}" for i in range(size)] + [f"[Discard] {i}" for i in range(size)]
        if self.info_tokens > 0:
            for other in self.teammates(seat):
                for i, (color, rank) in enumerate(self.hands[other]):
                    actions.append(f"[Reveal] player {other} card {i} color {color}")
                    actions.append(f"[Reveal] player {other} card {i} rank {rank}")
        return actions

    def observation(self, seat: int) -> list[ChatMessage]:
        # The system prompt is the same for every seat and game so that it is a shared prefix;
        # everything that varies is in the user message. Cards as "red 3", the words a hint
        # uses. Mid-game, with the chat template: ~390 SmolLM2 tokens for 2 players (the system
        # message ~200 of them), ~470 for 4. Hints are shown at the cards' current positions
        # (TextArena only broadcasts them once, at the positions of that moment).
        fireworks = ", ".join(f"{c} {v}" for c, v in self.fireworks.items())
        lines = [
            f"You are player {seat} of {self.num_seats}.",
            f"Fireworks: {fireworks} (score {self.score})",
            f"Info tokens {self.info_tokens}, fuse tokens {self.fuse_tokens}, "
            f"deck {len(self.deck)}",
            f"Discarded: {self._discard_summary()}",
        ]
        table = len(lines)  # the lines from here to the hints are what the picture shows
        for other in self.teammates(seat):
            cards = ", ".join(f"{i} {card_text(c)}{self._mark(self.is_playable(c))}"
                              for i, c in enumerate(self.hands[other]))
            lines.append(f"Player {other} has: {cards}")
        mine = ", ".join(f"{i} {hint_text(h)}{self._mark(self.known_playable(*h))}"
                         for i, h in enumerate(self.hints[seat]))
        lines.append(f"Your cards (from hints): {mine}")
        recent = self.log[-self.num_seats :]
        lines.append("Last moves: " + ("; ".join(recent) if recent else "none"))
        lines.append(f"Your move as player {seat}:")
        system = {"role": "system", "content": SYSTEM_PROMPT}
        if self.observation_mode == "text":
            return [system, {"role": "user", "content": "\n".join(lines)}]
        picture = png_data_url(self.table_image(seat))
        head, tail = lines[:-2], lines[-2:]
        if self.observation_mode == "image":
            # The fireworks line, the hands and the hints are in the picture; the rest is text.
            head = [lines[0], *lines[2:table], "Table (fireworks, hands, your cards):"]
        parts = [text_part("\n".join(head) + "\n"), image_part(picture),
                 text_part("\n" + "\n".join(tail))]
        return [system, {"role": "user", "content": parts}]

    def table_image(self, seat: int):
        """What ``seat`` sees, drawn: the fireworks (each suit's top card), every teammate's
        hand face up, its own cards as far as hints tell (agora/envs/images.py)."""
        fireworks = [(color, str(value)) for color, value in self.fireworks.items()]
        rows = [("fireworks", fireworks)]
        for other in self.teammates(seat):
            rows.append((f"player {other}",
                         [(color, str(rank)) for color, rank in self.hands[other]]))
        rows.append(("your cards", [(color, str(rank) if rank else "?")
                                    for color, rank in self.hints[seat]]))
        return card_rows_image(rows)

    def step(self, action: str) -> StepResult:
        if self._done:
            raise RuntimeError("step() on a finished game")
        seat = self._seat
        self.history.append(action)
        try:
            line = self._apply(seat, action)
        except IllegalMove as illegal:
            return self._forfeit(seat, str(illegal))
        self.turns += 1
        self.log.append(f"player {seat} {line}")
        self._check_end(seat)
        if not self._done:
            self._seat = (seat + 1) % self.num_seats
        return StepResult(legal=True, done=self._done, reason=self._outcome.reason)

    def outcome(self) -> Outcome:
        return self._outcome

    # --- what a seat may know (bots use these, never ``hands[own seat]``) --------------------

    def teammates(self, seat: int) -> list[int]:
        """The other seats in turn order after ``seat`` (the next player first)."""
        return [(seat + k) % self.num_seats for k in range(1, self.num_seats)]

    def is_playable(self, card: Card) -> bool:
        return self.fireworks[card[0]] == card[1] - 1

    def known_playable(self, color: str | None, rank: int | None) -> bool:
        """Whether what a player was told about a card (its hint) proves it fits the fireworks
        now: the rank is known and so is the color, or every firework stands one below it."""
        if rank is None:
            return False
        if color is not None:
            return self.fireworks[color] == rank - 1
        return all(v == rank - 1 for v in self.fireworks.values())

    def _mark(self, playable: bool) -> str:
        return " (playable)" if self.mark_playable and playable else ""

    # --- rules -------------------------------------------------------------------------------

    def _apply(self, seat: int, text: str) -> str:
        """Carry out the move or raise IllegalMove; returns the move's line for the log."""
        action = parse_action(text)
        if action is None:
            raise IllegalMove("the move does not follow the [Play] X / [Discard] X / [Reveal] "
                              "player N card X color C|rank R format")
        if action.kind == "reveal":
            return self._reveal(seat, action)
        if action.card is None:
            raise IllegalMove(f"the move does not follow the [{action.kind.title()}] X format")
        hand = self.hands[seat]
        if action.card >= len(hand):
            raise IllegalMove(f"there is no card {action.card} in your hand (0-{len(hand) - 1})")
        card = hand.pop(action.card)
        self.hints[seat].pop(action.card)
        if action.kind == "play":
            if self.is_playable(card):
                self.fireworks[card[0]] += 1
                result = "played"
            else:
                self.fuse_tokens -= 1
                self.discards.append(card)
                result = "wrong, fuse -1"
        else:
            self.discards.append(card)
            self.info_tokens = min(INFO_TOKENS, self.info_tokens + 1)
            result = "discarded"
        if self.deck:
            hand.append(self.deck.pop(0))
            self.hints[seat].append([None, None])
        return f"{action.canonical()} ({card_text(card)} {result})"

    def _reveal(self, seat: int, action: Action) -> str:
        # Checked in TextArena's order, so both refuse the same texts (only the reasons differ).
        if self.info_tokens == 0:
            raise IllegalMove("no info tokens left to give a hint")
        if action.target is None or action.card is None or (
            action.color is None and action.rank is None
        ):
            raise IllegalMove("the hint does not follow the [Reveal] player N card X color C "
                              "or [Reveal] player N card X rank R format")
        if action.target == seat:
            raise IllegalMove("a hint about your own cards is not allowed")
        if not 0 <= action.target < self.num_seats:
            raise IllegalMove(f"there is no player {action.target} (0-{self.num_seats - 1})")
        hand = self.hands[action.target]
        if action.card >= len(hand):
            raise IllegalMove(f"player {action.target} has no card {action.card}")
        if action.color and action.color not in COLORS:
            raise IllegalMove(f"'{action.color}' is not a color ({', '.join(COLORS)})")
        if action.rank is not None and not 1 <= action.rank <= 5:
            raise IllegalMove(f"rank {action.rank} is not between 1 and 5")
        color, rank = hand[action.card]
        if action.color is not None:
            if action.color != color:
                raise IllegalMove(f"the hint is not true: card {action.card} of player "
                                  f"{action.target} is not {action.color or 'that color'}")
            self.hints[action.target][action.card][0] = color
        else:
            if action.rank != rank:
                raise IllegalMove(f"the hint is not true: card {action.card} of player "
                                  f"{action.target} is not rank {action.rank}")
            self.hints[action.target][action.card][1] = rank
        self.info_tokens -= 1
        return action.canonical()

    def _check_end(self, seat: int) -> None:
        """TextArena's ``_check_game_end``, in its order, after every legal move."""
        if not self.deck:
            if self.last_round_seat is None:
                self.last_round_seat = seat
            elif self.last_round_seat == seat:
                self._finish("deck", "the deck ran out and everyone had a last turn")
        if self.fuse_tokens < 0:
            self._finish("fuse", "a wrong play with no fuse token left")
        if all(v == 5 for v in self.fireworks.values()):
            self._finish("perfect", "all fireworks are complete")

    def _forfeit(self, seat: int, reason: str) -> StepResult:
        self._finish("illegal", reason, illegal_seat=seat)
        return StepResult(legal=False, done=True, reason=reason)

    def _finish(self, end: str, reason: str, illegal_seat: int | None = None) -> None:
        self._done = True
        self._outcome = Outcome(
            winner=None,
            draw=illegal_seat is None,
            illegal_seat=illegal_seat,
            reason=reason,
            info={
                "score": self.score,
                "end": end,  # deck | fuse | perfect | illegal
                "fireworks": dict(self.fireworks),
                "fuse_tokens": self.fuse_tokens,  # -1 after the blow-up, as in TextArena
                "info_tokens": self.info_tokens,
                "turns": self.turns,
                "illegal": int(illegal_seat is not None),
                "num_players": self.num_seats,
                "deck_left": len(self.deck),
            },
        )

    def team_progress(self) -> float:
        """The team reward if the game ended now (score / 25): ``reward.team_credit: to_go``
        credits a move with the final reward minus this value before it."""
        return self.score / MAX_SCORE

    def team_rewards(self) -> list[float]:
        """Per seat, the team's score over 25 (a cooperative game: one shared reward). The
        game verifier uses this instead of win/draw/loss, which would all be 'draw'."""
        return hanabi_rewards(self.outcome().info, self.num_seats)

    def _discard_summary(self) -> str:
        """``red 1 1 3; blue 2``: the pile grouped by color, ranks sorted (fewer tokens)."""
        groups = []
        for color in COLORS:
            ranks = sorted(r for c, r in self.discards if c == color)
            if ranks:
                groups.append(color + " " + " ".join(map(str, ranks)))
        return "; ".join(groups) or "none"


def hanabi_rewards(info: dict, num_seats: int) -> list[float]:
    """The team's score over 25 for every seat: one shared result, so one shared reward.

    A forfeit still reports the fireworks built before it; the caller gives the illegal move
    its penalty (docs/architecture.md "Learning": the penalty goes to the illegal move alone).
    """
    score = int(info["score"])
    if not 0 <= score <= MAX_SCORE:
        raise ValueError(f"a Hanabi score is between 0 and {MAX_SCORE}, got {score}")
    return [score / MAX_SCORE] * num_seats


class HanabiOptions(EnvOptions):
    """``environment.name: hanabi`` (agora/envs/hanabi.py).

    ``mark_playable``: each prompt marks "(playable)" on the cards that fit the fireworks now:
    a teammate's card, and an own card its hints prove fits (``known_playable``). Nothing
    hidden is shown: the player can work out the same from the fireworks line and the hints,
    but a 135M model does not learn that comparison from a few hundred demonstrations, and it
    is what the scripted bot decides by (play a card known playable, hint a playable one).
    Text observations only (an image view draws the cards without marks)."""

    mark_playable: bool = Field(False, description="mark '(playable)' on the cards that fit "
                                "the fireworks now (a teammate's; an own card its hints prove)")


def build(section, payload: dict) -> Hanabi:
    """From a run's environment section, or the gateway's episode spec (no options there: a
    user's game is shown unmarked, as an image view would be)."""
    options = getattr(section, "hanabi", None) or HanabiOptions()
    return Hanabi(num_players=len(section.seats), observation=section.observation,
                  mark_playable=options.mark_playable)


def check(section) -> None:
    if section.hanabi.mark_playable and section.observation != "text":
        raise ValueError("hanabi.mark_playable: marks are written in text observations only "
                         f"(observation: {section.observation})")


SPEC = EnvSpec(
    "hanabi", seats=(2, 5), make=lambda seats: Hanabi(num_players=seats),
    build=build, options=HanabiOptions, check=check, images=True,
    bots={"hanabi_random": "agora.agents.bots:HanabiRandomBot",
          "hanabi_simple": "agora.agents.bots:HanabiSimpleBot"},
    cooperative=True, evaluation="duplicate", demonstrators=("hanabi_simple",),
    metrics={"hanabi_score": "hanabi: the team's fireworks at the end, 0-25 (0-n after a forfeit)"},
    play=DefaultPlay("[", 14, ("\n",)))
