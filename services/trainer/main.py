"""Trainer entry point: ``python -m services.trainer.main --config C --run-id R --run-dir D``.

All logic lives in ``agora.train.trainer``; this module parses arguments and sets up logging. With
``trainer.processes: N > 1`` it starts itself again under torchrun (N processes on this machine:
one per GPU); rank 0 is the trainer, the other ranks follow it (agora/algos/distributed.py).
The command is the same for ``agora up``, compose and k8s.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from agora.algos import distributed
from agora.config.run import load_config
from agora.train.learners import run_follower
from agora.train.trainer import Trainer


def torchrun_command(processes: int, argv: list[str]) -> list[str]:
    """This entry point under torchrun: ``--standalone`` (one machine, a free rendezvous port)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={processes}", "-m", "services.trainer.main", *argv]


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description="agora trainer")
    parser.add_argument("--config", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--run-dir", required=True)
    # Default: the environment's (AGORA_REDIS_URL, REDIS_URL), where a password belongs.
    parser.add_argument("--redis-url", default=os.environ.get("AGORA_REDIS_URL")
                        or os.environ.get("REDIS_URL"))
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    if not args.redis_url:
        parser.error("--redis-url (or AGORA_REDIS_URL in the environment) is required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = load_config(args.config)
    parallel = distributed.from_environment()
    processes = cfg.trainer.processes
    if processes > 1 and not parallel.sharded:
        command = torchrun_command(processes, argv)
        logging.getLogger("agora.train.trainer").info("starting %d processes: %s", processes,
                                                " ".join(command))
        os.execv(sys.executable, command)  # same pid: whoever started us still supervises it
    if parallel.world != processes:
        sys.exit(f"trainer.processes is {processes} but {parallel.world} processes were started")
    try:
        if parallel.leader:
            Trainer(cfg, args.run_id, Path(args.run_dir), args.redis_url, resume=args.resume,
                    parallel=parallel).run()
        else:
            run_follower(cfg, parallel)
    finally:
        distributed.stop(parallel)


if __name__ == "__main__":
    main()
