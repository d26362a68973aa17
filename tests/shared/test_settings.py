"""Settings come from `BASTION_*` strings, typed; a bad one is named in a sentence."""

from __future__ import annotations

import pytest

from bastion.shared.errors import InvalidInput
from bastion.shared.settings import BusSettings, load_settings


class ServiceSettings(BusSettings, frozen=True, kw_only=True):
    workers: int = 4
    verbose: bool = False
    label: str | None = None
    home: str


def test_variables_are_converted_to_the_field_types() -> None:
    settings = load_settings(
        ServiceSettings,
        {
            "BASTION_NATS_URL": "nats://10.0.0.1:4222",
            "BASTION_REQUEST_TIMEOUT_S": "2.5",
            "BASTION_WORKERS": "16",
            "BASTION_VERBOSE": "true",
            "BASTION_LABEL": "blue",
            "BASTION_HOME": "/srv/bastion",
        },
    )
    assert settings == ServiceSettings(
        nats_url="nats://10.0.0.1:4222",
        request_timeout_s=2.5,
        workers=16,
        verbose=True,
        label="blue",
        home="/srv/bastion",
    )


def test_unset_variables_keep_defaults_and_unrelated_ones_are_ignored() -> None:
    env = {"BASTION_HOME": "/h", "HOME": "/root", "BASTION_UNKNOWN": "x", "NATS_URL": "y"}
    settings = load_settings(ServiceSettings, env)
    assert settings == ServiceSettings(home="/h")
    assert settings.request_timeout_s == 10.0


def test_the_process_environment_is_read_when_no_mapping_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BASTION_DRAIN_TIMEOUT_S", "7")
    assert load_settings(BusSettings).drain_timeout_s == 7.0


@pytest.mark.parametrize(
    ("variable", "value", "rule"),
    [
        ("BASTION_REQUEST_TIMEOUT_S", "abc", "Expected `float`, got `str`"),
        ("BASTION_WORKERS", "4.5", "Expected `int`"),
        ("BASTION_VERBOSE", "yes", "Expected `bool`"),
    ],
)
def test_a_value_that_does_not_convert_is_named_with_its_variable(
    variable: str, value: str, rule: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        load_settings(ServiceSettings, {"BASTION_HOME": "/h", variable: value})
    assert raised.value.message.startswith(f"{variable} is not valid: {rule}")
    assert "`" not in raised.value.message.split(" is not valid")[0]
    assert value not in raised.value.message


def test_a_missing_required_variable_is_named() -> None:
    with pytest.raises(InvalidInput) as raised:
        load_settings(ServiceSettings, {})
    assert raised.value.message == "BASTION_HOME is required: set it in the environment"


def test_settings_are_frozen() -> None:
    settings = load_settings(BusSettings, {})
    with pytest.raises(AttributeError):
        settings.nats_url = "nats://elsewhere:4222"  # type: ignore[misc]
