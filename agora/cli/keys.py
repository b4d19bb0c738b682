"""``agora keys ...``: the gateway's API keys (stored hashed in Redis, see ``agora.gateway.keys``).

    agora keys create alice --rate 60     # prints the key once; 60 requests per minute
    agora keys create ops --scope admin   # may also start, read and stop training runs
    agora keys list
    agora keys revoke alice

The Redis is the gateway's: ``--redis-url``, else ``AGORA_REDIS_URL`` / ``REDIS_URL``, else
``redis://127.0.0.1:6390/0``. The embedded stack's Redis has a fresh password per start: give
the run's directory that ``agora up`` printed (``--run runs/<run-id>``) and the CLI reads the
password from the run's 0600 file, so it is never printed. If the gateway has a
``AGORA_GATEWAY_KEY_PEPPER``, the CLI needs the same one in its environment.
"""

from __future__ import annotations

import os
from pathlib import Path

import redis
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agora.gateway.keys import KeyStore, KeyStoreError
from agora.stack.redis_server import run_redis_url

DEFAULT_REDIS_URL = "redis://127.0.0.1:6390/0"
PEPPER_ENV = "AGORA_GATEWAY_KEY_PEPPER"

keys_app = typer.Typer(add_completion=False, no_args_is_help=True,
                       help="API keys of the gateway: create, list, revoke.")
console = Console()
RedisUrl = typer.Option(None, "--redis-url", help="the gateway's Redis (default: "
                        "AGORA_REDIS_URL, REDIS_URL, or the embedded stack's)")
RunDir = typer.Option(None, "--run", help="the embedded stack's run directory that `agora up` "
                      "printed: its Redis, password read from the run's files")


def _store(redis_url: str | None, run_dir: Path | None = None) -> KeyStore:
    if redis_url and run_dir:
        console.print("[bold red]error[/]: give --redis-url or --run, not both")
        raise typer.Exit(2)
    if run_dir:
        try:
            redis_url = run_redis_url(run_dir)
        except ValueError as err:
            console.print(f"[bold red]error[/]: --run: {escape(str(err))}", soft_wrap=True)
            raise typer.Exit(2) from None
    url = (redis_url or os.environ.get("AGORA_REDIS_URL") or os.environ.get("REDIS_URL")
           or DEFAULT_REDIS_URL)
    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
    try:
        client.ping()
    except redis.AuthenticationError as err:
        console.print(f"[bold red]error[/]: Redis refused us ({escape(str(err))}): it needs a "
                      "password; pass the --run directory that `agora up` printed "
                      "(or --redis-url redis://:PASSWORD@host:port/0)")
        raise typer.Exit(2) from None
    except (redis.RedisError, ValueError) as err:
        console.print(f"[bold red]error[/]: cannot reach Redis: {escape(str(err))} (is the "
                      "stack up? or pass --redis-url)")
        raise typer.Exit(2) from None
    return KeyStore(client, os.environ.get(PEPPER_ENV, ""))


def _fail(err: Exception) -> typer.Exit:
    console.print(f"[bold red]error[/]: {escape(str(err))}", soft_wrap=True)
    return typer.Exit(2)


@keys_app.command("create")
def create(
    name: str = typer.Argument(..., help="who the key is for (shown in metrics and listings)"),
    rate: int = typer.Option(None, "--rate", help="requests per minute (default: the "
                             "gateway's AGORA_GATEWAY_DEFAULT_RATE, 600; 0 there: unlimited)"),
    scope: str = typer.Option("chat", "--scope", help="chat: models, agents, chat, its own "
                              "episodes. admin: also training runs (/v1/runs)"),
    redis_url: str = RedisUrl,
    run_dir: Path = RunDir,
) -> None:
    """Create a key and print it (only now: it is stored hashed). Once any key exists, the
    gateway requires one on every route except /health and /metrics."""
    try:
        key = _store(redis_url, run_dir).create(name, rate, scope)
    except KeyStoreError as err:
        raise _fail(err) from None
    # Plain print: the key alone on stdout so scripts can capture it (KEY=$(agora keys create x)).
    print(key)
    limit = f"{rate} requests/minute" if rate else "the gateway's default rate"
    Console(stderr=True).print(f"[green]created[/] {scope} key '{escape(name)}' ({limit}); "
                               "store it now, it is shown only once")


@keys_app.command("revoke")
def revoke(name: str = typer.Argument(...), redis_url: str = RedisUrl,
           run_dir: Path = RunDir) -> None:
    """Revoke a key at once (the next request with it is refused)."""
    try:
        _store(redis_url, run_dir).revoke(name)
    except KeyStoreError as err:
        raise _fail(err) from None
    console.print(f"[green]revoked[/] key '{escape(name)}'")


@keys_app.command("list")
def list_keys(redis_url: str = RedisUrl, run_dir: Path = RunDir) -> None:
    """Key names, rates and creation times (never the keys themselves)."""
    keys = _store(redis_url, run_dir).list()
    if not keys:
        console.print("no keys: the gateway is open (unless AGORA_GATEWAY_REQUIRE_KEYS=1)")
        return
    table = Table(title="gateway API keys")
    for column in ("name", "scope", "key starts", "rate / min", "created"):
        table.add_column(column)
    for key in keys:
        table.add_row(key.name, key.scope, key.hint + "...", str(key.rate or "default"),
                      key.created)
    console.print(table)
