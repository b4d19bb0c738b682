"""Trainer entry point: ``python -m services.trainer.main --config C --run-id R --run-dir D``.

All logic lives in ``agora.trainer``; this module parses arguments and sets up logging.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from agora.config import load_config
from agora.trainer import Trainer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="agora trainer")
    parser.add_argument("--config", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = load_config(args.config)
    Trainer(cfg, args.run_id, Path(args.run_dir), args.redis_url, resume=args.resume).run()


if __name__ == "__main__":
    main()
