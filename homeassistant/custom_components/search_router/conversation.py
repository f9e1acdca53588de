"""The conversation agent: a sentence from Assist → the router's `/search` → spoken answer.

Assist's `conversation_id` is the router's `session_id`, so "how tall is it?" after a
question about a tower is asked as the question it stands for. The answer's speech has
one sentence per part (speech.py); the response's `data.search_router` carries the trace
id, each part's route, stage and confidence, and a link to the trace in the router's
`/ui`, so Assist's pipeline debug view shows why. A router that is down, slow or refuses
the token is said aloud as an error response; no exception reaches Home Assistant.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from homeassistant.components import conversation
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant
from homeassistant.helpers import intent
from homeassistant.helpers.aiohttp_client import async_get_clientsession
from homeassistant.util import ulid

from .client import RouterClient, RouterError
from .const import CONF_API_TOKEN, CONF_TIMEOUT, CONF_URL, DEFAULT_TIMEOUT_S
from .speech import debug_data, speech_of

_LOGGER = logging.getLogger(__name__)


class RouterResponse(intent.IntentResponse):
    """An intent response that also carries the router's explanation in its data."""

    def __init__(self, language: str, router: dict[str, Any]) -> None:
        super().__init__(language=language)
        self.router = router

    def as_dict(self) -> dict[str, Any]:
        data = super().as_dict()
        data["data"]["search_router"] = self.router
        return data


class SearchRouterAgent(conversation.AbstractConversationAgent):
    """Asks the router configured in one config entry."""

    def __init__(self, hass: HomeAssistant, entry: ConfigEntry) -> None:
        self.hass = hass
        self.entry = entry

    @property
    def supported_languages(self) -> list[str] | Literal["*"]:
        # The router's decomposition, keyword rules and exemplars are English.
        return ["en"]

    def _client(self) -> RouterClient:
        data = self.entry.data
        return RouterClient(
            async_get_clientsession(self.hass),
            data[CONF_URL],
            data.get(CONF_API_TOKEN) or None,
            float(self.entry.options.get(CONF_TIMEOUT, data.get(CONF_TIMEOUT, DEFAULT_TIMEOUT_S))),
        )

    async def async_process(
        self, user_input: conversation.ConversationInput
    ) -> conversation.ConversationResult:
        conversation_id = user_input.conversation_id or ulid.ulid_now()
        client = self._client()
        try:
            body = await client.search(user_input.text, conversation_id)
        except RouterError as exc:
            _LOGGER.warning("search router: %s (%s)", exc, exc.kind)
            return self._error(user_input.language, conversation_id, str(exc), exc.kind)
        except Exception:  # noqa: BLE001 - Assist must get an answer, never a traceback
            _LOGGER.exception("search router: unexpected failure")
            return self._error(
                user_input.language,
                conversation_id,
                "Something went wrong asking the search router.",
                "unexpected",
            )
        router = debug_data(body, client.url)
        response = RouterResponse(user_input.language, router)
        response.response_type = (
            intent.IntentResponseType.ACTION_DONE
            if router["acted"]
            else intent.IntentResponseType.QUERY_ANSWER
        )
        response.async_set_speech(speech_of(body))
        if router["trace_url"]:
            response.async_set_card("Search router trace", router["trace_url"])
        return conversation.ConversationResult(response=response, conversation_id=conversation_id)

    def _error(
        self, language: str, conversation_id: str, message: str, kind: str
    ) -> conversation.ConversationResult:
        response = RouterResponse(language, {"error": kind})
        response.async_set_error(intent.IntentResponseErrorCode.UNKNOWN, message)
        return conversation.ConversationResult(response=response, conversation_id=conversation_id)
