"""Optional bearer/basic credentials on the endpoint (HttpConfig.Headers can carry Authorization)."""

from __future__ import annotations

import pytest
import requests

from crhelper.testing import ResponseServer, make_event
from crhelper.transports.http_config import ENV_BASIC_AUTH, ENV_BEARER_TOKEN, EndpointConfig, EndpointConfigError

TOKEN = "tok-" + "9" * 20


def test_bearer_token_required_and_compared(serve, response_server: ResponseServer) -> None:
    server = serve(EndpointConfig(bearer_token=TOKEN))
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "auth"}))
    missing = requests.post(server.url, json=event, timeout=10)
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"].startswith("Bearer")
    wrong = requests.post(server.url, json=event, headers={"Authorization": f"Bearer {TOKEN}x"}, timeout=10)
    assert wrong.status_code == 401 and wrong.json()["Field"] == "Authorization"
    assert TOKEN not in wrong.text
    basic_instead = requests.post(server.url, json=event, auth=("u", TOKEN), timeout=10)
    assert basic_instead.status_code == 401
    assert response_server.captures == []
    good = requests.post(server.url, json=event, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert good.status_code == 200
    assert response_server.wait_for(event["RequestId"])["Status"] == "SUCCESS"


def test_basic_credentials(serve, response_server: ResponseServer) -> None:
    server = serve(EndpointConfig(basic_auth=("ros", "pa:ss")))
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "basic"}))
    assert requests.post(server.url, json=event, auth=("ros", "wrong"), timeout=10).status_code == 401
    assert requests.post(server.url, json=event, headers={"Authorization": "Basic !!!"}, timeout=10).status_code == 401
    assert requests.post(server.url, json=event, auth=("ros", "pa:ss"), timeout=10).status_code == 200
    response_server.wait_for(event["RequestId"])


def test_auth_is_checked_before_the_body_is_interpreted(serve) -> None:
    server = serve(EndpointConfig(bearer_token=TOKEN))
    reply = requests.post(server.url, data=b"{garbage", headers={"Content-Type": "application/json"}, timeout=10)
    assert reply.status_code == 401


def test_secrets_come_from_the_environment_and_stay_out_of_repr() -> None:
    config = EndpointConfig().with_secrets_from_env({ENV_BEARER_TOKEN: TOKEN, ENV_BASIC_AUTH: "u:p:w"})
    assert config.bearer_token == TOKEN and config.basic_auth == ("u", "p:w")
    assert TOKEN not in repr(config) and "p:w" not in repr(config)
    with pytest.raises(EndpointConfigError, match=ENV_BASIC_AUTH):
        EndpointConfig().with_secrets_from_env({ENV_BASIC_AUTH: "no-colon"})
    with pytest.raises(EndpointConfigError, match="overload_status"):
        EndpointConfig(overload_status=429)
