"""pip's index settings reach uv (scripts/legs/pipconfig.py)."""

from scripts.legs import pipconfig

PIP_CONFIG_LIST = """\
:env:.find-links='/srv/mirror/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.extra-index-url='file:///srv/mirror/a/simple file:///srv/mirror/b/simple'
global.index-url='https://global.example/simple'
install.index-url='https://install.example/simple'
global.constraint='/srv/mirror/constraints.txt'
"""
SETTINGS = pipconfig.pip_settings(PIP_CONFIG_LIST)


def test_pip_settings_reach_uv_with_pips_best_match_unless_uv_is_configured() -> None:
    settings = pipconfig.pip_settings(
        PIP_CONFIG_LIST + ":env:.index-url='https://env.example/simple'\n"
    )
    assert (
        settings["index-url"] == "https://env.example/simple"
    )  # environment over install over global
    assert SETTINGS["index-url"] == "https://install.example/simple"
    assert settings["find-links"] == "/srv/mirror/wheels"
    assert pipconfig.uv_index_args(SETTINGS, {}) == [
        "--index-url",
        "https://install.example/simple",
        "--extra-index-url",
        "file:///srv/mirror/a/simple",
        "--extra-index-url",
        "file:///srv/mirror/b/simple",
        "--find-links",
        "/srv/mirror/wheels",
        "--index-strategy",
        "unsafe-best-match",
    ]
    assert pipconfig.uv_index_args(SETTINGS, {"UV_INDEX_URL": "https://mine.example/simple"}) == []
    assert pipconfig.uv_index_args(SETTINGS, {}, extras=False) == [
        "--index-url",
        "https://install.example/simple",
    ]
    assert pipconfig.uv_index_args({}, {}) == []
    assert (
        pipconfig.uv_environ(SETTINGS, {})["SSL_CERT_FILE"] == "/etc/ssl/certs/ca-certificates.crt"
    )
    assert (
        pipconfig.uv_environ(SETTINGS, {"SSL_CERT_FILE": "/mine.pem"})["SSL_CERT_FILE"]
        == "/mine.pem"
    )
