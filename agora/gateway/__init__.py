"""The public gateway's logic (the FastAPI app itself is ``services/gateway/app.py``).

One module per concern, so the app stays a list of routes:

| module | what |
|---|---|
| ``errors`` | every error in OpenAI's ``{"error": {...}}`` shape |
| ``settings`` | ``AGORA_GATEWAY_*`` environment settings |
| ``proxy`` | body limits and forwarding to vLLM (plain and streamed) |
| ``upstream`` | the shared HTTP client to vLLM (httpx API on aiohttp's pool) |
| ``run_context`` | the run the gateway serves: versions, adapters on disk, training metrics |
| ``models`` | ``agent``, ``agent@latest``, ``agent@v12`` -> a served LoRA name (pinned on demand) |
| ``keys``, ``auth`` | hashed API keys in Redis; bearer auth and per-key rate limits |
| ``episodes`` | a user plays a game or a discussion against agents, turn by turn |
| ``runs`` | start, watch and stop ``agora up`` runs as managed subprocesses |
| ``observe`` | ``agora_gateway_*`` Prometheus metrics |
"""
