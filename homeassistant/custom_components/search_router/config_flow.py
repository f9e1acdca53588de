"""Set-up from the UI: the router's URL, its API token (optional), and a timeout.

The flow checks the router answers and accepts the token before saving, so a typo is
reported here rather than as a spoken error later.
"""

from __future__ import annotations

from typing import Any

import voluptuous as vol
from homeassistant import config_entries
from homeassistant.data_entry_flow import FlowResult
from homeassistant.helpers.aiohttp_client import async_get_clientsession

from .client import RouterClient, RouterError
from .const import CONF_API_TOKEN, CONF_TIMEOUT, CONF_URL, DEFAULT_TIMEOUT_S, DEFAULT_URL, DOMAIN

SCHEMA = vol.Schema(
    {
        vol.Required(CONF_URL, default=DEFAULT_URL): str,
        vol.Optional(CONF_API_TOKEN, default=""): str,
        vol.Optional(CONF_TIMEOUT, default=DEFAULT_TIMEOUT_S): vol.All(
            vol.Coerce(float), vol.Range(min=1, max=60)
        ),
    }
)


class SearchRouterConfigFlow(config_entries.ConfigFlow, domain=DOMAIN):
    """One entry per router."""

    VERSION = 1

    async def async_step_user(self, user_input: dict[str, Any] | None = None) -> FlowResult:
        errors: dict[str, str] = {}
        if user_input is not None:
            url = str(user_input[CONF_URL]).strip().rstrip("/")
            if not url.startswith(("http://", "https://")):
                errors[CONF_URL] = "invalid_url"
            else:
                data = {**user_input, CONF_URL: url}
                client = RouterClient(
                    async_get_clientsession(self.hass),
                    url,
                    data.get(CONF_API_TOKEN) or None,
                    float(data.get(CONF_TIMEOUT, DEFAULT_TIMEOUT_S)),
                )
                try:
                    await client.check()
                except RouterError as exc:
                    errors["base"] = (
                        "invalid_auth" if exc.kind == "invalid_auth" else "cannot_connect"
                    )
                else:
                    await self.async_set_unique_id(url)
                    self._abort_if_unique_id_configured()
                    return self.async_create_entry(title=f"Search router ({url})", data=data)
        return self.async_show_form(step_id="user", data_schema=SCHEMA, errors=errors)
