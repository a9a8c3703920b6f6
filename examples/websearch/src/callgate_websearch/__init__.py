"""WebSearch: an example callgate tool plugin, searching the web through a provider you choose.

The provider is any HTTP(S) endpoint that answers `GET <endpoint>?q=<query>&n=<count>` with JSON
`{"results": [{"title": ..., "url": ..., "snippet": ...}, ...]}` (a thin proxy in front of the
search API you use). Configure it in callgate's configuration file:

    [tools]
    plugins = ["websearch"]

    [tools.settings.websearch]
    endpoint = "https://search.internal.example/v1/search"

Each search is a `network` requirement on the provider's `tcp://host:port`, so the gate decides
it like a Fetch of that host (gated by default; `callgate rules add` or an "always" decision
lets it through), the approver sees the query and the URL, and the request goes through
callgate's network client: the provider's address is resolved once and pinned, and an internal
address is refused unless `[fetch] allow_networks` lists it.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Annotated, ClassVar

from pydantic import Field

from callgate.server.plugins import (
    Arguments,
    Artifact,
    Bindings,
    HttpAccess,
    NetworkRefused,
    Prepared,
    Preview,
    Requirement,
    RequirementKind,
    Service,
    Settings,
    Tool,
    ToolAnnotations,
    ToolContext,
    ToolDefinition,
    ToolResult,
    arguments_invalid,
    network_target,
)

MAX_QUERY_CHARS = 256
MAX_RESPONSE_BYTES = 256 << 10
TIMEOUT_SECONDS = 20.0


class WebSearchArguments(Arguments):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What to search for.")
    max_results: Annotated[int, Field(ge=1, le=10)] = Field(
        default=5, description="How many results to return (1-10)."
    )


class WebSearchArtifact(Artifact):
    url: str
    query: str
    max_results: int


class WebSearch(Tool[WebSearchArguments, WebSearchArtifact]):
    name: ClassVar[str] = "WebSearch"
    description: ClassVar[str] = (
        "Search the web and return the top results: title, URL and a snippet for each."
    )
    arguments: ClassVar[type[Arguments]] = WebSearchArguments
    artifact: ClassVar[type[Artifact]] = WebSearchArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = (RequirementKind.NETWORK.value,)

    def __init__(self, endpoint: str, http: HttpAccess) -> None:
        self._endpoint = endpoint
        self._http = http

    def prepare_args(self, args: WebSearchArguments, ctx: ToolContext) -> Prepared:
        query = " ".join(args.query.split())
        if not query:
            raise arguments_invalid("query", "the query is blank")
        separator = "&" if urllib.parse.urlsplit(self._endpoint).query else "?"
        url = self._endpoint + separator + urllib.parse.urlencode(
            {"q": query, "n": args.max_results}
        )
        target = network_target(url)
        shown = json.dumps(query, ensure_ascii=False)
        return Prepared(
            summary=f"WebSearch {target}",
            requirements=(
                Requirement(
                    kind=RequirementKind.NETWORK.value,
                    scope="",
                    match=target,
                    description=f"search the web for {shown} at {target}",
                ),
            ),
            artifact=WebSearchArtifact(url=url, query=query, max_results=args.max_results),
            preview=Preview(kind="request", text=f"GET {url}\nquery: {shown}\n"),
        )

    async def run(self, artifact: WebSearchArtifact, ctx: ToolContext) -> ToolResult:
        try:
            response = await self._http.request(
                "GET",
                artifact.url,
                headers=(("Accept", "application/json"),),
                timeout=TIMEOUT_SECONDS,
                max_body_bytes=MAX_RESPONSE_BYTES,
            )
        except NetworkRefused as refused:
            return ToolResult.error(refused.code, f"WebSearch: {refused.message}")
        if response.status != 200:
            return ToolResult.error(
                "search_failed", f"WebSearch: the provider answered HTTP {response.status}."
            )
        try:
            results = json.loads(response.body)["results"][: artifact.max_results]
            lines = [
                f"{index}. {item['title']}\n   {item['url']}\n   {item.get('snippet', '')}"
                for index, item in enumerate(results, 1)
            ]
        except (ValueError, KeyError, TypeError):
            return ToolResult.error(
                "search_failed", "WebSearch: the provider's answer was not the expected JSON."
            )
        if not lines:
            return ToolResult(text=f"No results for {json.dumps(artifact.query)}.")
        return ToolResult(text="\n".join(lines))


def _build(bindings: Bindings) -> list[Tool[WebSearchArguments, WebSearchArtifact]]:
    settings = bindings.service(Service.SETTINGS, Settings)
    endpoint = settings.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
        raise ValueError(
            "set [tools.settings.websearch] endpoint to the provider's http(s) URL"
        )
    return [WebSearch(endpoint, bindings.service(Service.NETWORK, HttpAccess))]


definition = ToolDefinition(
    name="websearch",
    build=_build,
    annotations={"WebSearch": ToolAnnotations(read_only=True, open_world=True)},
    requires=Service.NETWORK | Service.SETTINGS,
)
"""What callgate loads from the `callgate.tools` entry point `websearch`."""
