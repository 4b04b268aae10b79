"""The Ray path's replicas see the settings the caller bound, never their own environment.

``lorekeeper serve --host 0.0.0.0`` refuses before Ray starts (test_serve_hardening); this checks the
second line of defence: an application built for a public address with no key, started anyway,
never serves — its ingress replica refuses with the very host it was given, not the loopback default
it would read from an empty environment.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.servers import free_port

pytestmark = [pytest.mark.servers, pytest.mark.ray, pytest.mark.slow]


def test_an_ingress_bound_to_a_public_address_without_keys_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray
    from ray import serve

    from schemas.serving import EngineKind, ServeSettings
    from schemas.settings import load_settings
    from serve.deployments import AppConfig, DeploymentConfig, build_application

    for name in [k for k in os.environ if k.startswith("LOREKEEPER_")]:
        monkeypatch.delenv(name)  # nothing to read: whatever the replicas know, they were handed
    settings = load_settings(data_dir=tmp_path / "data")
    public = ServeSettings(api_host="0.0.0.0", narrator_engine=EngineKind.ECHO, narrator_model="echo-bound")
    config = AppConfig(
        plugins=[],
        mcp=False,
        narrator=DeploymentConfig(num_replicas=1, num_cpus=0.25),
        search=DeploymentConfig(num_cpus=0.25),
        gate=DeploymentConfig(num_cpus=0.25),
        ingress=DeploymentConfig(num_cpus=0.25),
    )
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=4, include_dashboard=False, configure_logging=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": free_port()})
        with pytest.raises(RuntimeError):
            serve.run(build_application(config, settings, public), name="bound", route_prefix="/", blocking=True)
        ingress = serve.status().applications["bound"].deployments["Ingress"]
        assert ingress.status.value == "DEPLOY_FAILED", ingress
        assert "not loopback" in " ".join(ingress.message.split()), ingress.message
        # the narrator replica, which did start, holds exactly the bound serving settings
        narrator = serve.get_deployment_handle("Narrator", app_name="bound")
        assert narrator.model_name.remote().result(timeout_s=60) == "echo-bound"
    finally:
        serve.shutdown()
        ray.shutdown()
