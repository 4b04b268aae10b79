"""``lorekeeper serve`` and ``lorekeeper keys``: run the API, manage who may call it."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Annotated

import structlog
import typer
from rich.console import Console
from rich.table import Table

from schemas.errors import ConfigError, LorekeeperError

keys_app = typer.Typer(help="API keys: campaign-scoped, or admin (libraries, ingest, every campaign).")
console = Console()
err_console = Console(stderr=True)
log = structlog.get_logger(__name__)


def _fail(exc: LorekeeperError) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {exc.message}")
    return typer.Exit(2)


def serve_command(
    host: Annotated[str | None, typer.Option(help="Address to bind (default LOREKEEPER_API_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default LOREKEEPER_API_PORT).")] = None,
    direct: Annotated[
        bool, typer.Option("--direct", help="One process with uvicorn, no Ray Serve (quickest on a laptop).")
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait/--detach", help="With RAY_ADDRESS: stay attached (default: deploy and return).")
    ] = False,
    eager: Annotated[
        bool,
        typer.Option(
            "--eager",
            help="--direct: load the search models and start Ray before listening (else they warm in the "
            "background, /health lists them under 'warming', and Ray starts with the first ingest that needs it).",
        ),
    ] = False,
) -> None:
    """Serve the API (REST, MCP, OpenAI passthrough): Ray Serve on local Ray, or deployed to RAY_ADDRESS."""
    from schemas.serving import ServeSettings, get_serve_settings
    from schemas.settings import get_settings

    try:
        settings = get_settings()
        base = get_serve_settings()
        chosen = ServeSettings.model_validate(
            {**base.model_dump(), "api_host": host or base.api_host, "api_port": port or base.api_port}
        )
    except LorekeeperError as exc:
        raise _fail(exc) from None
    if direct:
        _serve_direct(settings, chosen, eager=eager)
    else:
        _serve_ray(settings, chosen, wait=wait)


#: Seconds in-flight requests get to finish after SIGTERM (`podman stop` waits 10 s by default,
#: Kubernetes 30 s: give the container a grace period above this).
GRACE_SECONDS = 20


def _worker_logging() -> dict[str, object]:
    """The replicas log as this command does (schemas.logs): the same JSON lines from every process."""
    from schemas.logs import worker_setup_hook

    hook = worker_setup_hook()
    return {"runtime_env": {"worker_process_setup_hook": hook}} if hook is not None else {}


def _serve_direct(settings, serve_settings, *, eager: bool = False) -> None:  # noqa: ANN001 - lazily imported types
    from jobs import stopping
    from serve.app import create_app
    from serve.services import check_binding, open_services

    try:
        with open_services(settings, serve_settings) as services:
            services.open = check_binding(serve_settings, services.keys)
            warm = getattr(services.search, "warm", None)
            if warm is not None and eager:
                warm()
            if eager:  # Ray up before the API listens, as the ingest routes had it (Ray's atexit stops it)
                from jobs.pipeline import start_ray

                start_ray()
            app = create_app(services, plugins=["jobs.api:mount"])
            if warm is not None and not eager:  # listen now; the models load meanwhile (/health: warming)
                services.warming.start("search", warm)  # after the app's imports, which it would slow down
            console.print(f"Lorekeeper API on http://{serve_settings.api_host}:{serve_settings.api_port} (direct)")
            servers = [_uvicorn(app, serve_settings.api_host, serve_settings.api_port)]
            if serve_settings.mcp_port is not None:  # MCP on a port of its own, in this process
                from serve.mcp import create_mcp_app

                servers.append(_uvicorn(create_mcp_app(services), serve_settings.api_host, serve_settings.mcp_port))
                console.print(f"Lorekeeper MCP on http://{serve_settings.api_host}:{serve_settings.mcp_port}/mcp")

            # SIGTERM: stop accepting, let in-flight requests finish, close the app (its Ray, the
            # ingest runner) and the stores, exit 0. The handler survives the ingest plugin's ray.init
            # (start_ray reclaims it); uvicorn's own would re-raise the signal after shutdown.
            def stop(_signum: int) -> None:
                for server in servers:
                    server.should_exit = True

            stopping.on_sigterm(stop)
            if len(servers) == 1:
                servers[0].run()
            else:
                asyncio.run(_serve_all(servers))
    except LorekeeperError as exc:
        raise _fail(exc) from None


def _uvicorn(app, host: str, port: int):  # noqa: ANN001, ANN202 - uvicorn is imported lazily
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=GRACE_SECONDS)
    return uvicorn.Server(config)


async def _serve_all(servers) -> None:  # noqa: ANN001
    """The API and MCP servers in one loop; when one stops (a failed bind, SIGTERM), both do."""

    async def one(server) -> None:  # noqa: ANN001
        try:
            await server.serve()
        finally:
            for other in servers:
                other.should_exit = True

    await asyncio.gather(*(one(s) for s in servers))


def _init_ray(cluster: str | None, data_dir: Path) -> None:
    """ray.init for ``serve``: the cluster at ``RAY_ADDRESS``, else a warm `lorekeeper up` head, else a Ray of
    our own; keeping the SIGTERM handling the caller set (Ray's own would exit wherever the main thread is)."""
    from jobs import stopping
    from schemas.ray_head import warm_address

    if cluster:
        stopping.init_ray(address=cluster, **_worker_logging())
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    warm = warm_address(data_dir)
    if warm:
        stopping.init_ray(address=warm, **_worker_logging())  # attached: the head outlives this server
        return
    # Logical CPUs are scheduling shares: four deployments must fit a two-core laptop.
    stopping.init_ray(
        address="local",  # a Ray of our own, never a cluster some `ray start` left on this machine
        num_cpus=max(4, os.cpu_count() or 1),
        include_dashboard=False,
        configure_logging=False,
        **_worker_logging(),
    )


def _serve_ray(settings, serve_settings, *, wait: bool) -> None:  # noqa: ANN001
    import threading

    import ray
    from ray import serve

    from jobs import stopping
    from serve.auth import ApiKeys
    from serve.deployments import AppConfig, build_application
    from serve.services import check_binding
    from stores.factory import open_graph_store

    if serve_settings.mcp_port is not None:  # Ray Serve's proxy listens on one port for every route
        raise _fail(
            ConfigError(
                "LOREKEEPER_MCP_PORT",
                "MCP on a port of its own runs with `lorekeeper serve --direct`; on Ray Serve it is /mcp on the "
                "API's port (leave LOREKEEPER_MCP_PORT unset)",
            )
        )
    # Refuse a public address without keys here, before anything starts, exactly as --direct does;
    # the ingress replicas then check again with these same settings, bound into the application.
    graph = open_graph_store(settings)
    try:
        check_binding(serve_settings, ApiKeys(graph, keys_file=serve_settings.api_keys_file))
    except LorekeeperError as exc:
        raise _fail(exc) from None
    finally:
        graph.close()
    # SIGTERM (a container stopped): shut the application down (replicas finish what they hold) and exit 0.
    stop = threading.Event()
    stopping.on_sigterm(lambda _signum: stop.set())
    # The replicas get these very settings bound (build_application), never their own environment.
    cluster = os.environ.get("RAY_ADDRESS")
    try:
        _init_ray(cluster, settings.data_dir)
    except stopping.Interrupted:
        console.print("Lorekeeper API stopped before it started")
        return
    serve.start(http_options={"host": serve_settings.api_host, "port": serve_settings.api_port})
    try:
        app = build_application(AppConfig(), settings, serve_settings)
        serve.run(app, name="lorekeeper", route_prefix="/", blocking=False)
    except Exception as exc:  # a replica failed to start: say why, without a Ray traceback
        err_console.print(f"[red]error:[/red] the application did not start: {exc}")
        raise typer.Exit(1) from None
    console.print(f"Lorekeeper API on http://{serve_settings.api_host}:{serve_settings.api_port} (Ray Serve)")
    if cluster and not wait:
        return
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    # The requests in flight finish first: the ingress replicas drain while every deployment a turn calls
    # (narrator, search, gate) still runs, then the application is deleted while the HTTP proxy still holds
    # the connections. serve.shutdown() alone stops every replica at once and kills the proxy: a turn in
    # flight lost its extraction call and its answer.
    _drain_ingress("lorekeeper", GRACE_SECONDS)
    serve.delete("lorekeeper", _blocking=True)
    serve.shutdown()
    if not cluster:
        ray.shutdown()
    console.print("Lorekeeper API stopped")


def _drain_ingress(app: str, within: float) -> None:
    """Wait (``within`` seconds at most) until the app's ingress replicas hold no request.

    Ray Serve keeps no public count of a replica's requests; its replica actors answer
    ``get_num_ongoing_requests`` (named ``SERVE_REPLICA::<app>#Ingress#<id>`` in the ``serve`` namespace)."""
    import ray
    from ray.util import list_named_actors

    prefix = f"SERVE_REPLICA::{app}#Ingress#"
    replicas = [
        ray.get_actor(actor["name"], namespace=actor["namespace"])
        for actor in list_named_actors(all_namespaces=True)
        if actor["name"].startswith(prefix)
    ]
    deadline = time.monotonic() + within
    while replicas and time.monotonic() < deadline:
        try:
            ongoing = sum(ray.get([r.get_num_ongoing_requests.remote() for r in replicas], timeout=5))
        except Exception as exc:  # a replica gone or stuck: stop waiting, the delete below stops the rest
            log.warning("serve_drain_failed", error=str(exc))
            return
        if ongoing == 0:
            return
        log.info("serve_draining", ongoing_requests=ongoing)
        time.sleep(0.5)


def _keys():  # noqa: ANN202
    from schemas.serving import get_serve_settings
    from schemas.settings import get_settings
    from serve.auth import ApiKeys
    from stores.factory import open_graph_store
    from stores.graph.schema import LOREKEEPER_GRAPH_SCHEMA

    graph = open_graph_store(get_settings())
    graph.ensure_schema(LOREKEEPER_GRAPH_SCHEMA)
    return graph, ApiKeys(graph, keys_file=get_serve_settings().api_keys_file)


@keys_app.command("create")
def create_key(
    name: Annotated[str, typer.Argument(help="Who or what the key is for.")],
    admin: Annotated[bool, typer.Option("--admin", help="Libraries, ingest, keys and every campaign.")] = False,
    campaign: Annotated[list[str] | None, typer.Option("--campaign", "-c", help="A campaign the key may use.")] = None,
    role: Annotated[
        str, typer.Option(help="On its campaigns: player (plays turns, proposes as a player) or gm (runs the table).")
    ] = "player",
    character: Annotated[
        str | None, typer.Option(help="The character entity a player key plays (its own memories).")
    ] = None,
) -> None:
    """Create a key; it is printed once and stored only as a hash."""
    if not admin and not campaign:
        err_console.print("[red]error:[/red] give --admin or at least one --campaign")
        raise typer.Exit(2)
    from schemas.serving import KeyRole

    if role not in {r.value for r in KeyRole}:
        err_console.print(f"[red]error:[/red] --role is player or gm, not {role!r}")
        raise typer.Exit(2)
    graph, keys = _keys()
    try:
        key, info = keys.create(
            name, admin=admin, campaigns=list(campaign or []), role=KeyRole(role), character_entity_id=character
        )
    except LorekeeperError as exc:
        raise _fail(exc) from None
    finally:
        graph.close()
    scope = "admin" if admin else f"{info.role.value} on {', '.join(info.campaigns)}"
    console.print(f"key {info.id} ({scope}):")
    print(key)


@keys_app.command("list")
def list_keys(json_out: Annotated[bool, typer.Option("--json", help="One JSON object per key.")] = False) -> None:
    """The keys (never their secrets)."""
    graph, keys = _keys()
    try:
        found = keys.list()
    finally:
        graph.close()
    if json_out:
        for info in found:
            print(info.model_dump_json())
        return
    table = Table("id", "name", "scope", "role", "created", "revoked")
    for info in found:
        table.add_row(
            info.id,
            info.name,
            "admin" if info.admin else ", ".join(info.campaigns),
            "" if info.admin else info.role.value,
            info.created_at[:19],
            "yes" if info.revoked else "",
        )
    console.print(table)


@keys_app.command("revoke")
def revoke_key(key_id: Annotated[str, typer.Argument(help="The key's id (from `keys list`).")]) -> None:
    """Revoke a key: it stops working within seconds on every server."""
    graph, keys = _keys()
    try:
        keys.revoke(key_id)
    except LorekeeperError as exc:
        raise _fail(exc) from None
    finally:
        graph.close()
    console.print(f"revoked {key_id}")
