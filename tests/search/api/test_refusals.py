"""What the HTTP layer refuses is counted in `search_refused_total{status,type}`, over real
HTTP on loopback: the refusals a page on another site, a rebound DNS name, a client
without the token and a careless script get, each once, and nothing else."""

from __future__ import annotations

import httpx
from pydantic import SecretStr

from tests.search.observability.test_metrics import samples, value
from tests.support.app import build_app, scripted_config, uvicorn_server

TOKEN = "s3cret-token-value"


def test_each_refusal_is_counted_by_status_and_type_and_never_as_a_request() -> None:
    config = scripted_config({"kiwix": {}, "ha": {}}, keywords={"ha": ["lights"]}, max_parts=2)
    config.server.api_token = SecretStr(TOKEN)
    config.server.max_body_bytes = 4096
    auth = {"authorization": f"Bearer {TOKEN}"}
    with (
        uvicorn_server(build_app(config)) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        statuses = [
            client.post(
                "/search", json={"query": "lights"}, headers={**auth, "host": "evil.example"}
            ),
            client.post(
                "/search",
                json={"query": "lights"},
                headers={**auth, "origin": "http://evil.example"},
            ),
            client.post(
                "/search", content=b"lights", headers={**auth, "content-type": "text/plain"}
            ),
            client.post("/search", json={"query": "lights"}),  # no token
            client.post(
                "/search", json={"query": "lights"}, headers={"authorization": "Bearer no"}
            ),
            client.post(
                "/search", content=b"{nope", headers={**auth, "content-type": "application/json"}
            ),
            client.post(
                "/search", json={"query": "lights on; kiwi facts; tide tables"}, headers=auth
            ),
            client.post("/search", json={"query": "x" * 5000}, headers=auth),
            client.get("/nope", headers=auth),
            client.post("/search", json={"query": "lights"}, headers=auth),  # served
        ]
        scrape = client.get("/metrics", headers=auth)
    assert [r.status_code for r in statuses] == [403, 403, 415, 401, 401, 400, 422, 413, 404, 200]
    assert TOKEN not in scrape.text
    data = samples(scrape.text)
    refused = {
        (dict(labels)["status"], dict(labels)["type"]): count
        for (name, labels), count in data.items()
        if name == "search_refused_total"
    }
    assert refused == {
        ("403", "forbidden_host"): 1,
        ("403", "forbidden_origin"): 1,
        ("415", "unsupported_media_type"): 1,
        ("401", "unauthorized"): 2,
        ("400", "invalid_json"): 1,
        ("422", "too_many_parts"): 1,
        ("413", "body_too_large"): 1,
        ("404", "not_found"): 1,
    }
    # Only the request that reached the router is a request.
    requests = {
        dict(labels)["status"]: count
        for (name, labels), count in data.items()
        if name == "search_requests_total"
    }
    assert requests == {"200": 1}
    assert value(data, "search_request_duration_seconds_count") == 1
