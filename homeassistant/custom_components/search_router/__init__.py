"""Search Router: an Assist conversation agent that asks an explainable search router.

A config entry (the router's URL, its API token, a timeout) becomes one conversation
agent, whose id is the entry id; pick it in an Assist pipeline, or pass it as `agent_id`.
(HA's conversation helpers are imported by name: importing `.conversation` rebinds the
name `conversation` in this package to that submodule.)
"""

from __future__ import annotations

from homeassistant.components.conversation import async_set_agent, async_unset_agent
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant
from homeassistant.helpers import config_validation as cv

from .const import DOMAIN
from .conversation import SearchRouterAgent

CONFIG_SCHEMA = cv.config_entry_only_config_schema(DOMAIN)


async def async_setup_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
    async_set_agent(hass, entry, SearchRouterAgent(hass, entry))
    return True


async def async_unload_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
    async_unset_agent(hass, entry)
    return True
