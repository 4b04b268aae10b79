"""The Narrator deployment autoscales as the serving settings say (LOREKEEPER_NARRATOR_*_REPLICAS, target
ongoing requests, delays), and an AppConfig's own narrator config still wins."""

from __future__ import annotations

import pytest

from schemas.errors import ConfigError
from schemas.serving import ServeSettings
from serve.deployments import AppConfig, DeploymentConfig, narrator_deployment

pytestmark = pytest.mark.unit


def test_the_settings_shape_the_narrators_autoscaling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOREKEEPER_NARRATOR_ENGINE", "echo")
    monkeypatch.setenv("LOREKEEPER_NARRATOR_MIN_REPLICAS", "2")
    monkeypatch.setenv("LOREKEEPER_NARRATOR_MAX_REPLICAS", "6")
    monkeypatch.setenv("LOREKEEPER_NARRATOR_TARGET_ONGOING_REQUESTS", "3")
    monkeypatch.setenv("LOREKEEPER_NARRATOR_DOWNSCALE_DELAY_S", "15")
    options = narrator_deployment(ServeSettings()).options()
    assert "num_replicas" not in options
    assert options["autoscaling_config"] == {
        "min_replicas": 2,
        "max_replicas": 6,
        "target_ongoing_requests": 3.0,
        "upscale_delay_s": 30.0,
        "downscale_delay_s": 15.0,
    }
    assert AppConfig().narrator is None  # the application takes the settings' deployment


def test_defaults_and_an_explicit_config() -> None:
    autoscaling = narrator_deployment(ServeSettings(narrator_engine="echo")).options()["autoscaling_config"]
    wanted = ("min_replicas", "max_replicas", "target_ongoing_requests")
    assert tuple(autoscaling[key] for key in wanted) == (1, 4, 8)
    fixed = AppConfig(narrator=DeploymentConfig(num_replicas=2)).narrator
    assert fixed is not None and fixed.options()["num_replicas"] == 2


def test_more_minimum_than_maximum_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="NARRATOR_MIN_REPLICAS"):
        ServeSettings(narrator_engine="echo", narrator_min_replicas=5, narrator_max_replicas=2)
