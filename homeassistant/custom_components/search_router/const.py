"""Names shared by the config flow and the agent."""

from __future__ import annotations

DOMAIN = "search_router"

CONF_URL = "url"
CONF_API_TOKEN = "api_token"
CONF_TIMEOUT = "timeout"

DEFAULT_URL = "http://127.0.0.1:8080"
# Assist waits on the agent; the router's own request deadline is 15 s by default, so a
# slow router is cut off here first and the user hears why instead of silence.
DEFAULT_TIMEOUT_S = 10.0

# Sent with every request from this agent. The router never hands a request carrying it
# back to Home Assistant's conversation agents, so a sentence cannot loop between the two.
ORIGIN_HEADER = "X-Search-Router-Origin"
ORIGIN_ASSIST = "assist"
