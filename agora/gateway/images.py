"""Image parts in the gateway's chat and episode requests (docs/vlm.md).

Checked here, before anything reaches vLLM, because only the gateway knows which agents see
images and what a public request may cost:
- an image sent to an agent on a text-only model is a 422 naming the part (vLLM would answer a
  500-ish error about its processor, or silently drop it);
- images travel as base64 data URLs only: a URL would make the policy server fetch from the
  network on a caller's behalf;
- a decoded image over ``max_image_bytes``, or larger than ``max_image_side`` pixels on a side
  (a small PNG can hold a huge canvas), is a 413; an unreadable one a 422;
- content parts other than text and images (audio, video, embeddings) are refused.
"""

from __future__ import annotations

import base64
import binascii
import io

from agora.envs.images import data_url_payload
from agora.gateway.errors import GatewayError

ALLOWED_PARTS = ("text", "image_url")


def image_parts(messages: list) -> list[tuple[str, object]]:
    """(param path, the part's ``image_url``) of every image part; raises 422 for a part of
    another kind than text or image."""
    found = []
    for m, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for p, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            where = f"messages.{m}.content.{p}"
            if kind not in ALLOWED_PARTS:
                raise GatewayError(422, f"{where}: content part type {kind!r} is not supported; "
                                   "use 'text' or 'image_url'", "invalid_content", param=where)
            if kind == "image_url":
                found.append((where, part.get("image_url")))
    return found


def check_image(where: str, image_url: object, max_bytes: int, max_side: int) -> None:
    try:
        encoded = data_url_payload(image_url.get("url") if isinstance(image_url, dict) else None)
    except ValueError:
        raise GatewayError(422, f"{where}: send images as base64 data URLs "
                           "(data:image/png;base64,...); the policy servers fetch no URLs",
                           "invalid_image", param=where) from None
    if len(encoded) * 3 // 4 > max_bytes:  # refused before decoding anything
        raise GatewayError(413, f"{where}: image of about {len(encoded) * 3 // 4} bytes; the "
                           f"limit is {max_bytes}", "image_too_large", param=where)
    try:
        from PIL import Image, UnidentifiedImageError

        raw = base64.b64decode(encoded, validate=True)
        with Image.open(io.BytesIO(raw)) as image:  # reads the header only
            width, height = image.size
    except (binascii.Error, ValueError, UnidentifiedImageError, OSError) as err:
        raise GatewayError(422, f"{where}: not a readable image ({type(err).__name__})",
                           "invalid_image", param=where) from None
    if max(width, height) > max_side:
        raise GatewayError(413, f"{where}: image of {width}x{height} pixels; the limit is "
                           f"{max_side} pixels a side", "image_too_large", param=where)


def check_image_parts(messages: list, agent: str, sees_images: bool, max_bytes: int,
                      max_side: int) -> None:
    """Raise the GatewayError a request's image parts deserve, if any (see module doc)."""
    for where, image_url in image_parts(messages):
        if not sees_images:
            raise GatewayError(422, f"{where}: agent '{agent}' reads text only (its base model "
                               "is not a vision-language model); send text, or ask a "
                               "vision-language agent", "image_not_supported", param=where)
        check_image(where, image_url, max_bytes, max_side)
