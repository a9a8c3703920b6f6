"""The `callgate` command: serve, and client commands (tools, call, mcp, approvals, rules,
health)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

STATE_DIR_HELP = (
    "state directory (default: $CALLGATE_STATE_DIR, else $XDG_STATE_HOME/callgate, "
    "else ~/.local/state/callgate)"
)


# What `callgate health` says of the command cgroups' condition (app.SandboxReportingHealth).
LIMITS_CONDITIONS = {
    "recreated": "they had vanished and were made again",
    "unavailable": "they are gone and cannot be made again: sandboxed commands are refused",
}


def _state_dir(args: argparse.Namespace) -> Path:
    """--state-dir, else where `callgate serve` puts it with this environment."""
    from callgate.client import default_state_dir

    return Path(args.state_dir) if args.state_dir else default_state_dir()


def _serve(args: argparse.Namespace) -> int:
    from callgate.server.app import App
    from callgate.server.config import ConfigError, load_config
    from callgate.server.core.definitions import DefinitionBuildError
    from callgate.server.logs import configure_logging
    from callgate.server.sandbox.probe import SandboxUnavailable

    overrides: dict[str, Any] = {}
    if args.listen:
        overrides["listen"] = args.listen
    for key in (
        "workspace",
        "state_dir",
        "approval_mode",
        "sandbox",
        "metrics_listen",
        "shutdown_grace_seconds",
    ):
        value = getattr(args, key)
        if value is not None:
            overrides[key] = value
    try:
        config = load_config(args.config or os.environ.get("CALLGATE_CONFIG"), overrides)
        configure_logging(config.log_level)
        app = App(config)
    except (ConfigError, SandboxUnavailable, DefinitionBuildError) as exc:
        print(f"callgate: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        async with app.running() as running:
            print(f"callgate: serving on {', '.join(running.addresses)}", file=sys.stderr)
            print(f"callgate: workspace {app.workspace}", file=sys.stderr)
            print(
                f"callgate: sandbox {running.sandbox.mode.value}"
                + (f" (WARNING: {running.sandbox.warning})" if running.sandbox.warning else ""),
                file=sys.stderr,
            )
            if running.token_dir is not None:
                print(
                    f"callgate: tokens in {running.token_dir}/{{agent,approver,admin}}",
                    file=sys.stderr,
                )
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    print("callgate: shutting down", file=sys.stderr)
                    break

    try:
        anyio.run(main)
    except (ConfigError, SandboxUnavailable, DefinitionBuildError) as exc:
        # Found only at start, binding a listener.
        print(f"callgate: {exc}", file=sys.stderr)
        return 2
    except BaseExceptionGroup as group:
        found = group.subgroup((ConfigError, SandboxUnavailable, DefinitionBuildError))
        if found is None or found.exceptions != group.exceptions:
            raise
        print(f"callgate: {found.exceptions[0]}", file=sys.stderr)
        return 2
    return 0


def _default_target(args: argparse.Namespace) -> str:
    """$CALLGATE_TARGET, else the socket in the state directory."""
    return (
        os.environ.get("CALLGATE_TARGET")
        or f"unix://{_state_dir(args).resolve() / 'callgate.sock'}"
    )


def _client_settings(args: argparse.Namespace) -> tuple[str, str]:
    state_dir = _state_dir(args)
    target = args.target or _default_target(args)
    token = os.environ.get("CALLGATE_TOKEN", "")
    token_file = args.token_file or (str(state_dir / "tokens" / args.role) if not token else None)
    if token_file:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SystemExit(
                f"callgate: cannot read the token file {token_file} ({exc.strerror}); "
                "start the server first or pass --token-file"
            ) from None
    return target, token


def _tools(args: argparse.Namespace) -> int:
    from callgate.client import CallgateClient, CallgateClientError

    target, token = _client_settings(args)

    async def main() -> int:
        async with (
            CallgateClient(target, token=token) as client,
            await client.open_session(args.workspace or "") as session,
        ):
            for spec in await session.tools():
                if args.json:
                    print(json.dumps(spec.to_openai()))
                else:
                    print(f"{spec.name}: {(spec.description.splitlines() or [''])[0]}")
        return 0

    try:
        return anyio.run(main)
    except CallgateClientError as exc:
        print(f"callgate: {exc.reason or exc.code}: {exc.message}", file=sys.stderr)
        return 2


def _call(args: argparse.Namespace) -> int:
    from callgate.client import CallDeniedError, CallgateClient, CallgateClientError

    target, token = _client_settings(args)

    async def main() -> int:
        async with CallgateClient(target, token=token) as client:
            if args.session:
                # A named session outlives this command: the next `--session NAME` reopens it.
                session = await client.open_session(args.workspace or "", name=args.session)
                return await run(session)
            async with client.open_session(args.workspace or "") as session:
                return await run(session)

    async def run(session: Any) -> int:
        result = await session.run(args.tool, args.arguments, wait=args.wait, on_gated=_say_waiting)
        print(result.text)
        if result.is_error:
            print(f"callgate: tool error: {result.error_code}", file=sys.stderr)
            return 1
        return 0

    try:
        return anyio.run(main)
    except CallDeniedError as exc:
        print(f"callgate: denied: {exc.message}", file=sys.stderr)
        return 3
    except CallgateClientError as exc:
        detail = "; ".join(f"{f}: {d}" for f, d in exc.violations)
        print(
            f"callgate: {exc.reason or exc.code}: {exc.message}"
            + (f" ({detail})" if detail and detail not in exc.message else ""),
            file=sys.stderr,
        )
        return 2


def _say_waiting(call: Any) -> None:
    """One line on stderr while a gated `callgate call` waits for its approver."""
    from .display import visible

    deadline = call.expire_time
    until = (
        f"; denied at {deadline.astimezone(UTC):%H:%M:%S} UTC if nobody decides"
        if deadline is not None
        else ""
    )
    print(
        f"callgate: waiting for an approver (callgate approvals or callgate console) to decide "
        f"{visible(call.tool_name)} {visible(call.execution_id)}{until}",
        file=sys.stderr,
        flush=True,
    )


def _session_list(args: argparse.Namespace) -> int:
    from callgate.client import CallgateClient, CallgateClientError

    from .display import visible

    target, token = _client_settings(args)

    async def main() -> int:
        async with CallgateClient(target, token=token) as client:
            for session in await client.list_sessions():
                used = session.last_used_time or session.create_time
                when = f"{used.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if used else "-"
                print(
                    f"{visible(session.name) or '-'}\t{session.session_id}\t"
                    f"{visible(session.workspace)}\tlast used {when}"
                )
        return 0

    try:
        return anyio.run(main)
    except CallgateClientError as exc:
        return _client_error(exc)


def _session_close(args: argparse.Namespace) -> int:
    from callgate.client import CallgateClient, CallgateClientError

    from .display import visible

    target, token = _client_settings(args)

    async def main() -> int:
        async with CallgateClient(target, token=token) as client:
            matches = [
                s for s in await client.list_sessions() if args.name in (s.name, s.session_id)
            ]
            if not matches:
                print(f"callgate: you have no open session {visible(args.name)}", file=sys.stderr)
                return 1
            session = await client.get_session(matches[0].session_id)
            await session.close()
            print(f"closed {visible(args.name)} ({matches[0].session_id})")
        return 0

    try:
        return anyio.run(main)
    except CallgateClientError as exc:
        return _client_error(exc)


def _client_error(exc: Exception) -> int:
    from callgate.client import CallgateClientError

    from .display import visible

    assert isinstance(exc, CallgateClientError)
    label = exc.reason or (exc.code.name if exc.code is not None else "error")
    print(f"callgate: {visible(label)}: {visible(exc.message)}", file=sys.stderr)
    return 2


def _approvals(args: argparse.Namespace) -> int:
    from callgate.client import CallgateClient, CallgateClientError

    from .console import ApproverConsole, read_lines

    target, token = _client_settings(args)

    async def main() -> int:
        async with CallgateClient(target, token=token) as client:
            console = ApproverConsole(client.approvals, sys.stdout, once=args.once)
            return await console.run(read_lines(sys.stdin.fileno()))

    try:
        return anyio.run(main)
    except KeyboardInterrupt:
        print(file=sys.stdout, flush=True)
        return 130
    except CallgateClientError as exc:
        return _client_error(exc)


def _mcp_http_token(args: argparse.Namespace, agent_token: str) -> str:
    """The HTTP token (checked), after saying where it is; the token itself is never printed."""
    from callgate.server.credentials import token_dir

    from .mcp_token import MCP_TOKEN_FILE_NAME, check_http_token, resolve_http_token

    http_token = resolve_http_token(
        Path(args.http_token_file) if args.http_token_file else None,
        os.environ,
        token_dir(_state_dir(args)) / MCP_TOKEN_FILE_NAME,
    )
    check_http_token(http_token.value, agent_token)
    print(
        f"callgate: mcp HTTP token {'generated in' if http_token.created else 'from'} "
        f"{http_token.source}; clients send it as 'Authorization: Bearer <token>'",
        file=sys.stderr,
    )
    return http_token.value


def _console(args: argparse.Namespace) -> int:
    from .mcp_bridge import is_loopback, parse_http_address
    from .web_console import Target, bind, parse_target, serve

    try:
        targets = [parse_target(text) for text in args.targets] or [
            Target("local", _default_target(args))
        ]
        host, port = parse_http_address(args.listen)
    except ValueError as exc:
        print(f"callgate: {exc}", file=sys.stderr)
        return 2
    if not is_loopback(host):
        print(
            f"callgate: --listen: {host} is not a loopback address; the console serves loopback "
            "only (reach it through an SSH tunnel or kubectl port-forward)",
            file=sys.stderr,
        )
        return 2
    try:
        sock = bind(host, port)
    except OSError as exc:
        print(f"callgate: cannot listen on {args.listen}: {exc.strerror}", file=sys.stderr)
        return 2

    def started(url: str) -> None:
        shown = ", ".join(f"{t.name} ({t.address})" for t in targets)
        print(f"callgate: console at {url} for {shown}; log in with an approver token")
        sys.stdout.flush()

    try:
        anyio.run(functools.partial(serve, targets, sock, started=started))
    except KeyboardInterrupt:
        return 130
    return 0


def _mcp(args: argparse.Namespace) -> int:
    from callgate.client import CallgateClientError

    from .mcp_bridge import is_loopback, parse_http_address, serve_http, serve_stdio

    target, token = _client_settings(args)
    if args.approval_timeout < 0:
        print("callgate: --approval-timeout must be zero or more seconds", file=sys.stderr)
        return 2
    if args.pending_after < 0:
        print("callgate: --pending-after must be zero or more seconds", file=sys.stderr)
        return 2
    options: dict[str, Any] = {
        "workspace": args.workspace or "",
        "approval_timeout": args.approval_timeout,
        "pending_after": args.pending_after,
        "session_name": args.session or "",
    }
    if not args.http and (args.http_token_file or args.http_allow_remote):
        print("callgate: --http-token-file and --http-allow-remote need --http", file=sys.stderr)
        return 2
    if args.http:
        try:
            host, _ = parse_http_address(args.http)
        except ValueError as exc:
            print(f"callgate: --http: {exc}", file=sys.stderr)
            return 2
        if not is_loopback(host):
            if not args.http_allow_remote:
                print(
                    f"callgate: --http: {host} is not a loopback address; give only a port to "
                    "serve on 127.0.0.1, or pass --http-allow-remote behind a TLS proxy",
                    file=sys.stderr,
                )
                return 2
            print(
                f"callgate: WARNING: mcp serving on {host} without TLS: the bearer token and every "
                "call cross the network in clear text; terminate TLS in a reverse proxy",
                file=sys.stderr,
            )
        try:
            options["http_token"] = _mcp_http_token(args, token)
        except ValueError as exc:
            print(f"callgate: mcp: {exc}", file=sys.stderr)
            return 2
        options["allow_remote"] = args.http_allow_remote
    try:
        if args.http:
            anyio.run(lambda: serve_http(target, token, args.http, **options))
        else:
            anyio.run(lambda: serve_stdio(target, token, **options))
    except CallgateClientError as exc:
        return _client_error(exc)
    except OSError as exc:  # the --http address cannot be bound, say
        print(f"callgate: mcp: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def _rules(args: argparse.Namespace) -> int:
    from callgate.client import CallgateClient, CallgateClientError, RuleEffect

    from .display import render_rules, visible

    target, token = _client_settings(args)

    async def main() -> int:
        async with CallgateClient(target, token=token) as client:
            approvals = client.approvals
            match args.rules_command:
                case "list":
                    print(render_rules(await approvals.list_rules(args.session or "")))
                case "add":
                    rule = await approvals.create_rule(
                        RuleEffect(args.effect), args.kind, args.match, args.scope
                    )
                    print(visible(rule.rule_id))
                case "rm":
                    await approvals.delete_rule(args.rule_id)
                    print(f"deleted {visible(args.rule_id)}")
        return 0

    try:
        return anyio.run(main)
    except CallgateClientError as exc:
        return _client_error(exc)


def _since(text: str) -> datetime:
    """`--since`/`--until`: an ISO 8601 time (UTC when it has no offset) or an age such as
    `90s`, `15m`, `2h`, `7d` (that long before now)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text[-1:] in units and text[:-1].isdigit() and len(text) <= 12:
            return datetime.now(UTC) - timedelta(seconds=int(text[:-1]) * units[text[-1]])
        value = datetime.fromisoformat(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an ISO 8601 time nor an age such as 15m, 2h or 7d"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return value


def _audit(args: argparse.Namespace) -> int:
    from callgate.client import AuditEvent, CallgateClient, CallgateClientError

    from .display import visible

    target, token = _client_settings(args)

    def show(event: AuditEvent) -> None:
        if args.json:
            print(json.dumps(event.model_dump(mode="json"), sort_keys=True), flush=True)
            return
        data = json.dumps(event.data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        fields = (
            str(event.seq),
            event.time.isoformat(timespec="milliseconds"),
            event.kind,
            event.session_id or "-",
            event.execution_id or "-",
            event.principal or "-",
            data,
        )
        print(" ".join(visible(f) for f in fields), flush=True)

    async def main() -> int:
        filters: dict[str, Any] = {
            "session_id": args.session or "",
            "execution_id": args.execution or "",
            "kind": args.kind or "",
            "start_time": args.since,
            "end_time": args.until,
        }
        async with CallgateClient(target, token=token) as client:
            if args.follow:
                async with aclosing(
                    client.audit.watch(**filters, after_seq=args.after_seq)
                ) as events:
                    async for event in events:
                        show(event)
                return 0
            shown = 0
            async with aclosing(client.audit.events(**filters)) as events:
                async for event in events:
                    if args.limit and shown >= args.limit:
                        break
                    show(event)
                    shown += 1
        return 0

    try:
        return anyio.run(main)
    except KeyboardInterrupt:
        return 130
    except CallgateClientError as exc:
        return _client_error(exc)


def _health(args: argparse.Namespace) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    target, _ = (
        args.target
        or os.environ.get("CALLGATE_TARGET")
        or f"unix://{_state_dir(args).resolve() / 'callgate.sock'}",
        "",
    )

    async def main() -> int:
        async with grpc.aio.insecure_channel(target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            call = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            try:
                response = await call
            except grpc.aio.AioRpcError as exc:
                print(f"callgate: unhealthy: {exc.code().name}", file=sys.stderr)
                return 1
            name = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
            print(name)
            trailer = {key: str(value) for key, value in await call.trailing_metadata() or ()}
            if "callgate-sandbox-mode" in trailer:
                print(f"callgate: sandbox {trailer['callgate-sandbox-mode']}", file=sys.stderr)
            if "callgate-sandbox-seccomp" in trailer:
                print(f"callgate: seccomp {trailer['callgate-sandbox-seccomp']}", file=sys.stderr)
            if "callgate-sandbox-limits" in trailer:
                condition = trailer.get("callgate-sandbox-limits-condition", "ok")
                said = LIMITS_CONDITIONS.get(condition, condition)
                print(
                    f"callgate: command limits {trailer['callgate-sandbox-limits']}"
                    + ("" if condition == "ok" else f" ({said})"),
                    file=sys.stderr,
                )
            if trailer.get("callgate-command-families") == "gated":
                print(
                    "callgate: command families allow nothing by themselves (no sandbox holds "
                    "them): every command they would allow waits for a human",
                    file=sys.stderr,
                )
            return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1

    return anyio.run(main)


def _add_mcp_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    client_options: Callable[[argparse.ArgumentParser], None],
) -> None:
    mcp = sub.add_parser(
        "mcp",
        help="an MCP server (stdio, or streamable HTTP with --http) over one callgate session",
        description="Serves the session's tools to an MCP client: tools/call runs Prepare, "
        "Approve and Invoke; a gated call waits for a human approver (callgate approvals); "
        "a denied call is an error result with the reason.",
    )
    client_options(mcp)
    mcp.add_argument("--workspace", help="workspace for the session (default: the server's)")
    mcp.add_argument(
        "--http",
        metavar="ADDR",
        help="serve streamable HTTP on PORT or HOST:PORT (path /mcp; host default 127.0.0.1), "
        "not stdio; every request needs 'Authorization: Bearer <token>'",
    )
    mcp.add_argument(
        "--http-token-file",
        dest="http_token_file",
        metavar="FILE",
        help="the token HTTP clients must send (a mode 0600 file; or $CALLGATE_MCP_TOKEN; "
        "default: generated once in <state-dir>/tokens/mcp-http)",
    )
    mcp.add_argument(
        "--http-allow-remote",
        dest="http_allow_remote",
        action="store_true",
        help="allow a non-loopback --http host (no TLS: put a TLS-terminating proxy in front)",
    )
    mcp.add_argument(
        "--approval-timeout",
        dest="approval_timeout",
        type=float,
        default=600.0,
        help="seconds a gated call waits for an approver (default 600)",
    )
    mcp.add_argument(
        "--pending-after",
        dest="pending_after",
        type=float,
        default=4.0,
        help="seconds after which a gated call is answered as awaiting an approver, to a client "
        "that asked for no progress (keep it below the client's own timeout; the same call "
        "made again returns its outcome); 0: wait up to --approval-timeout (default 4)",
    )
    mcp.add_argument(
        "--session",
        help="the named callgate session to use, shared by every bridge of this name "
        "(default: one derived from the agent token, so that all of an agent's connections "
        "share it)",
    )
    mcp.set_defaults(func=_mcp)


def _parser() -> argparse.ArgumentParser:  # noqa: PLR0915 - one flat table of subcommands
    parser = argparse.ArgumentParser(prog="callgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the server")
    serve.add_argument("--config", help="TOML configuration file (or $CALLGATE_CONFIG)")
    serve.add_argument(
        "--listen", action="append", help="unix:///path.sock or host:port (repeatable)"
    )
    serve.add_argument("--workspace", help="the default workspace (also an allowed root)")
    serve.add_argument(
        "--state-dir",
        dest="state_dir",
        help="state directory: tokens, journal, socket; never inside the workspace "
        "(default: $XDG_STATE_HOME/callgate, else ~/.local/state/callgate)",
    )
    serve.add_argument("--approval-mode", dest="approval_mode", choices=["interactive", "headless"])
    serve.add_argument("--sandbox", choices=["auto", "bwrap", "none"])
    serve.add_argument(
        "--metrics",
        dest="metrics_listen",
        metavar="ADDR",
        help="serve Prometheus /metrics over HTTP on HOST:PORT (no authentication)",
    )
    serve.add_argument(
        "--shutdown-grace",
        dest="shutdown_grace_seconds",
        type=float,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long running calls may finish before they are cancelled",
    )
    serve.set_defaults(func=_serve)

    def client_options(p: argparse.ArgumentParser, role: str = "agent") -> None:
        p.add_argument(
            "--target",
            help="server address (default: the socket in the state dir, or $CALLGATE_TARGET)",
        )
        p.add_argument("--state-dir", dest="state_dir", help=STATE_DIR_HELP)
        p.add_argument(
            "--token-file",
            dest="token_file",
            help=f"token file (default <state-dir>/tokens/{role}; or $CALLGATE_TOKEN)",
        )
        p.set_defaults(role=role)

    tools = sub.add_parser("tools", help="list the tools a session offers")
    client_options(tools)
    tools.add_argument("--workspace", help="workspace for the session (default: the server's)")
    tools.add_argument(
        "--json", action="store_true", help="print each tool as an OpenAI function spec"
    )
    tools.set_defaults(func=_tools)

    call = sub.add_parser(
        "call", help="prepare, approve and invoke one tool call, and print the result"
    )
    client_options(call)
    call.add_argument("tool", help="tool name, e.g. ReadFile")
    call.add_argument(
        "arguments", help='the arguments as one JSON object, e.g. \'{"path": "README.md"}\''
    )
    call.add_argument("--workspace", help="workspace for the session (default: the server's)")
    call.add_argument(
        "--session",
        metavar="NAME",
        help="run in your session of this name, opened if needed and kept open afterwards "
        "(its reads, processes, tasks and session approvals carry over to the next call)",
    )
    call.add_argument(
        "--wait",
        type=float,
        default=None,
        help="seconds to wait for a human approval (default: until the server's approval deadline)",
    )
    call.set_defaults(func=_call)

    approvals = sub.add_parser(
        "approvals",
        help="a terminal approver: show each pending call in full and decide it",
        description="Shows each pending call and AskUser question in full as it arrives and "
        "reads a decision: [o]nce, [s]ession, [a]lways, [d]eny (asks for a note), [k]skip. "
        "Everything from the server is shown with control and invisible characters escaped.",
    )
    client_options(approvals, role="approver")
    approvals.add_argument(
        "--once", action="store_true", help="exit after the first decision or answer"
    )
    approvals.set_defaults(func=_approvals)

    console = sub.add_parser(
        "console",
        help="a web approval console for one or several callgate servers",
        description="Serves a web page (loopback only) where an approver logs in with an "
        "approver token and decides pending calls of every --target live: previews with "
        "diffs, once / session / always / deny with a note, batches of one model turn, "
        "AskUser answers and each call's audit trail.",
    )
    console.add_argument(
        "--target",
        dest="targets",
        action="append",
        default=[],
        metavar="[NAME=]ADDRESS",
        help="a callgate server (unix:///path.sock or host:port), repeatable: one per agent "
        "pod; NAME is shown on its calls (default: the local server)",
    )
    console.add_argument(
        "--listen",
        default="127.0.0.1:8470",
        help="loopback address to serve on (default 127.0.0.1:8470; port 0: any free port)",
    )
    console.add_argument("--state-dir", dest="state_dir", help=STATE_DIR_HELP)
    console.set_defaults(func=_console)

    rules = sub.add_parser("rules", help="list, add or remove allow and deny rules")
    rules_sub = rules.add_subparsers(dest="rules_command", required=True)
    rules_list = rules_sub.add_parser("list", help="the rules in force")
    client_options(rules_list, role="approver")
    rules_list.add_argument("--session", help="only the rules that apply to this session")
    rules_add = rules_sub.add_parser("add", help="create a rule and print its ID")
    client_options(rules_add, role="approver")
    rules_add.add_argument("--effect", required=True, choices=["allow", "deny"])
    rules_add.add_argument(
        "--kind", required=True, help="requirement kind, e.g. filesystem.write, command.execute"
    )
    rules_add.add_argument(
        "--match",
        required=True,
        help="exact path | tree:<root> | Network(host:port) | exact command | Bash(<words>:*)",
    )
    rules_add.add_argument(
        "--scope", required=True, help="session:<id> or workspace:<absolute root>"
    )
    rules_rm = rules_sub.add_parser("rm", help="delete a session or workspace rule")
    client_options(rules_rm, role="approver")
    rules_rm.add_argument("rule_id", help="the rule's ID (see `callgate rules list`)")
    for command in (rules_list, rules_add, rules_rm):
        command.set_defaults(func=_rules)

    audit = sub.add_parser(
        "audit",
        help="print the audit journal (oldest first); --follow keeps printing new events",
        description="One line per event: seq, time, kind, session, execution, principal, data "
        "(JSON). Server strings are shown with control and invisible characters escaped.",
    )
    client_options(audit, role="approver")
    audit.add_argument("--session", help="only this session's events")
    audit.add_argument("--execution", help="only this call's events")
    audit.add_argument(
        "--kind", help='an event kind ("call.finished") or a family ending in "." ("process.")'
    )
    audit.add_argument("--since", type=_since, help="ISO 8601 time or an age: 90s, 15m, 2h, 7d")
    audit.add_argument("--until", type=_since, help="ISO 8601 time or an age: 90s, 15m, 2h, 7d")
    audit.add_argument(
        "--limit",
        type=_count,
        default=0,
        help="print at most this many events (default 0: all)",
    )
    audit.add_argument(
        "--follow", "-f", action="store_true", help="keep printing events as they are committed"
    )
    audit.add_argument(
        "--after-seq",
        dest="after_seq",
        type=int,
        default=0,
        help="with --follow: start after this seq (default 0: the whole journal first)",
    )
    audit.add_argument("--json", action="store_true", help="print each event as a JSON object")
    audit.set_defaults(func=_audit)

    _add_mcp_parser(sub, client_options)

    sessions = sub.add_parser("session", help="your open sessions: list them, close one")
    session_sub = sessions.add_subparsers(dest="session_command", required=True)
    listing = session_sub.add_parser("list", help="your open sessions, oldest first")
    client_options(listing)
    listing.set_defaults(func=_session_list)
    closing = session_sub.add_parser("close", help="close a session by its name or its ID")
    client_options(closing)
    closing.add_argument("name", help="the session's name (or its ses_ ID)")
    closing.set_defaults(func=_session_close)

    health = sub.add_parser("health", help="check the server's health over gRPC")
    health.add_argument("--target")
    health.add_argument("--state-dir", dest="state_dir", help=STATE_DIR_HELP)
    health.set_defaults(func=_health)
    return parser


# The exit status of a process killed by SIGPIPE, as a shell reports it.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (BrokenPipeError, BaseExceptionGroup) as exc:
        if isinstance(exc, BaseExceptionGroup) and exc.split(BrokenPipeError)[1] is not None:
            raise
        # The reader of our output went away (`callgate audit | head`): end quietly, with
        # stdout on /dev/null so that flushing it at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":
    raise SystemExit(main())
