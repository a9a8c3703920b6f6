"""The `[network]` table is validated where it is configured, and its older spelling still
reads."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from callgate.server.app import egress_settings
from callgate.server.config import ConfigError, load_config
from callgate.server.net.addresses import Endpoint


def test_network_settings_load_with_their_defaults() -> None:
    config = load_config(None, {}, environ={})
    assert config.allow_networks() == []
    settings = egress_settings(config)
    assert (settings.max_connections, settings.max_bytes) == (256, 4 << 30)


def test_allow_networks_reads_under_either_name_but_not_both() -> None:
    new = load_config(None, {"network": {"allow_networks": ["127.0.0.0/8"]}}, environ={})
    old = load_config(None, {"fetch": {"allow_networks": ["127.0.0.0/8"]}}, environ={})
    assert new.allow_networks() == old.allow_networks() == ["127.0.0.0/8"]
    with pytest.raises(ConfigError, match=r"older name of network\.allow_networks"):
        load_config(
            None,
            {"network": {"allow_networks": ["10.0.0.0/8"]}, "fetch": {"allow_networks": ["::1"]}},
            environ={},
        )


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"allow_networks": ["not-a-network"]}, "network.allow_networks"),
        ({"methods": {"example.org": ["GET"]}}, "network.methods"),
        ({"methods": {"example.org:80": ["get it"]}}, "network.methods"),
        ({"max_connections_per_call": 0}, "network.max_connections_per_call"),
        ({"max_bytes_per_call": 10}, "network.max_bytes_per_call"),
        ({"connect_timeout_seconds": 0}, "network.connect_timeout_seconds"),
        ({"proxy": "http://elsewhere"}, "network.proxy"),
    ],
)
def test_bad_network_settings_stop_the_start_naming_the_key(
    table: dict[str, object], key: str
) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, {"network": table}, environ={})


def test_method_limits_become_the_proxys_patterns() -> None:
    config = load_config(
        None, {"network": {"methods": {"*.example.org:80": ["get", "HEAD"]}}}, environ={}
    )
    [(pattern, methods)] = egress_settings(config).methods
    assert pattern.covers(Endpoint.parse("api.example.org:80"))
    assert methods == frozenset({"GET", "HEAD"})


@pytest.mark.parametrize("name", ["HTTP_PROXY", "https_proxy", "NO_PROXY", "ALL_PROXY"])
def test_the_proxy_variables_cannot_be_passed_through(name: str) -> None:
    with pytest.raises(ConfigError, match="always set by the server"):
        load_config(None, {"bash": {"env_passthrough": [name]}}, environ={})


def test_the_proxy_holds_no_more_connections_than_the_open_file_limit_allows() -> None:
    """Each connection may hold six descriptors: where the hard limit cannot make room for
    them beside the server's own, the proxy holds fewer at once."""
    program = (
        "from callgate.server.app import build_egress\n"
        "from callgate.server.config import load_config\n"
        "import resource\n"
        "proxy = build_egress(load_config(None, {}, environ={}))\n"
        "print(proxy.settings.max_open_total, resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 8192)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    held, soft = (int(x) for x in done.stdout.split())
    assert soft == 8192
    assert held == (8192 - 4096) // 6
