"""Observations seen as images (docs/vlm.md): an env draws its state with Pillow and puts it in
the seat's chat messages as an OpenAI ``image_url`` content part holding a PNG data URL.

Why data URLs: the image travels inside the message, so the rollout worker sends it to vLLM as
it is, the episode record keeps exactly the bytes the policy saw (the learner recomputes the
pixels from them), and nothing has to serve files.

``observation`` (``environment.observation``) says what the seat gets: ``text`` (the text view
only, as before), ``image`` (the picture replaces the text drawing of the board; the rules and
the legal moves stay text) or ``both``.
"""

from __future__ import annotations

import base64
import io
from typing import Any, Literal

ObservationMode = Literal["text", "image", "both"]
DATA_URL_PREFIX = "data:image/png;base64,"


def png_data_url(image: Any) -> str:
    """A Pillow image as a PNG data URL (lossless: a board's lines stay sharp)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return DATA_URL_PREFIX + base64.b64encode(buffer.getvalue()).decode("ascii")


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def image_urls(messages: list[dict[str, Any]]) -> list[str]:
    """The image URLs of chat messages, in the order the chat template places them."""
    urls: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            urls.extend(part["image_url"]["url"] for part in content
                        if isinstance(part, dict) and part.get("type") == "image_url")
    return urls


def text_of(content: str | list[dict[str, Any]]) -> str:
    """A message's text, its image parts shown as ``[image]`` (for logs and the CLI)."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") if part.get("type") == "text" else "[image]"
                   for part in content)


def has_images(messages: list[dict[str, Any]]) -> bool:
    return bool(image_urls(messages))


def data_url_payload(url: object) -> str:
    """The base64 text of an image data URL; ValueError for anything else (a URL to fetch)."""
    if not isinstance(url, str) or not url.startswith("data:image/") or ";base64," not in url:
        raise ValueError("an image must be a base64 data URL (data:image/...;base64,...)")
    return url.split(";base64,", 1)[1]


def decode_data_url(url: str):
    """A data URL's image as RGB Pillow image (what the learner's processor takes)."""
    from PIL import Image

    raw = base64.b64decode(data_url_payload(url), validate=True)
    return Image.open(io.BytesIO(raw)).convert("RGB")


def grid_image(cells: list[str], columns: int, cell_px: int = 32):
    """A board of ``len(cells) / columns`` rows as black lines on white, each cell's mark
    (one short string) drawn centred in it: how Tic-Tac-Toe looks to a vision agent."""
    from PIL import Image, ImageDraw

    rows = len(cells) // columns
    image = Image.new("RGB", (columns * cell_px, rows * cell_px), "white")
    draw = ImageDraw.Draw(image)
    for c in range(1, columns):
        draw.line([(c * cell_px, 0), (c * cell_px, rows * cell_px)], fill="black", width=2)
    for r in range(1, rows):
        draw.line([(0, r * cell_px), (columns * cell_px, r * cell_px)], fill="black", width=2)
    pad = cell_px // 5
    for index, mark in enumerate(cells):
        x0, y0 = (index % columns) * cell_px + pad, (index // columns) * cell_px + pad
        x1, y1 = x0 + cell_px - 2 * pad, y0 + cell_px - 2 * pad
        if mark == "X":
            draw.line([(x0, y0), (x1, y1)], fill="black", width=3)
            draw.line([(x0, y1), (x1, y0)], fill="black", width=3)
        elif mark == "O":
            draw.ellipse([(x0, y0), (x1, y1)], outline="black", width=3)
        elif mark:
            draw.text((x0, y0), mark, fill="black")
    return image


# Card faces: the suit's colour (white cards get a grey rim to show on white) and the rank.
CARD_FILL = {"white": "#f4f4f4", "yellow": "#f2d024", "green": "#3aa655", "blue": "#3b6fd6",
             "red": "#d63b3b", None: "#9a9a9a"}


def card_rows_image(rows: list[tuple[str, list[tuple[str | None, str]]]], card_px: int = 28):
    """Rows of cards, each row a label and its cards as (colour or None, text on the card):
    how a Hanabi table looks to a vision agent (fireworks, each teammate's hand, what the seat
    knows of its own cards: an unknown colour is grey, an unknown rank '?')."""
    from PIL import Image, ImageDraw

    label_px = 4 * card_px
    width = label_px + max(len(cards) for _, cards in rows) * (card_px + 4) + 4
    height = len(rows) * (card_px + 8) + 4
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    for r, (label, cards) in enumerate(rows):
        top = 4 + r * (card_px + 8)
        draw.text((4, top + card_px // 3), label, fill="black")
        for c, (color, text) in enumerate(cards):
            left = label_px + c * (card_px + 4)
            box = [(left, top), (left + card_px, top + card_px)]
            draw.rectangle(box, fill=CARD_FILL.get(color, CARD_FILL[None]), outline="#555555",
                           width=2)
            draw.text((left + card_px // 3, top + card_px // 3), text, fill="black")
    return image
