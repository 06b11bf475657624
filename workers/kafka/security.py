"""librdkafka's security settings (``MODSTREAM_KAFKA_EXTRA``, ``MODSTREAM_KAFKA_SASL_PASSWORD``) as
faust/aiokafka credentials, so the feedback worker connects exactly as the moderation worker does.

TLS (server verification, mutual TLS, CRLs, ciphers), SASL PLAIN and SCRAM, GSSAPI with a ticket
cache, and OAUTHBEARER with an OIDC token endpoint map; a security setting that cannot (an inline
PEM certificate, librdkafka's own kinit, unsecured test tokens) is a :class:`Misconfigured` naming it,
never a connection made without it. librdkafka's other tunables mean nothing to aiokafka.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

import faust
from aiokafka.abc import AbstractTokenProvider

from workers.errors import Misconfigured

SECURITY_PREFIXES = ("ssl.", "sasl.", "security.", "enable.ssl.")
# A token is renewed this long before the endpoint says it expires.
TOKEN_MARGIN_S = 60.0


def _ssl_context(conf: Mapping[str, str]) -> ssl.SSLContext:
    cafile = conf.get("ssl.ca.location")
    # "probe" is librdkafka's word for the system's CA store, which the default context loads anyway.
    context = ssl.create_default_context(cafile=None if cafile == "probe" else cafile, cadata=conf.get("ssl.ca.pem"))
    if "ssl.certificate.location" in conf or "ssl.key.location" in conf:  # mutual TLS
        context.load_cert_chain(
            conf["ssl.certificate.location"],
            conf.get("ssl.key.location"),
            conf.get("ssl.key.password"),
        )
    if crl := conf.get("ssl.crl.location"):
        context.load_verify_locations(crl)
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if ciphers := conf.get("ssl.cipher.suites"):
        context.set_ciphers(ciphers)
    if conf.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        context.check_hostname = False
    if conf.get("enable.ssl.certificate.verification", "true").lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


# What each librdkafka key means here; a security key absent from this map is refused.
_TLS = {
    "ssl.ca.location",
    "ssl.ca.pem",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.crl.location",
    "ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification",
}
_OIDC = {
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.extensions",
}
_SASL = {"sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password", "sasl.kerberos.service.name"}
SUPPORTED = {"security.protocol", *_TLS, *_SASL, *_OIDC}


class OidcTokens(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka ships no types
    """librdkafka's ``sasl.oauthbearer.method=oidc``: client-credentials tokens from the endpoint,
    reused until shortly before they expire."""

    def __init__(self, url: str, client_id: str, secret: str, scope: str | None, extensions: str | None) -> None:
        self.url, self.client_id, self.secret, self.scope = url, client_id, secret, scope
        self._extensions = dict(kv.split("=", 1) for kv in extensions.split(",")) if extensions else {}
        self._token, self._expires = "", 0.0

    def request(self) -> urllib.request.Request:
        form = {"grant_type": "client_credentials", **({"scope": self.scope} if self.scope else {})}
        basic = base64.b64encode(f"{self.client_id}:{self.secret}".encode()).decode()
        return urllib.request.Request(
            self.url,
            data=urllib.parse.urlencode(form).encode(),
            headers={"Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded"},
        )

    def _fetch(self) -> tuple[str, float]:
        with urllib.request.urlopen(self.request(), timeout=10) as resp:
            body = json.load(resp)
        return str(body["access_token"]), time.monotonic() + float(body.get("expires_in", 300)) - TOKEN_MARGIN_S

    async def token(self) -> str:
        if time.monotonic() >= self._expires:
            self._token, self._expires = await asyncio.to_thread(self._fetch)
        return self._token

    def extensions(self) -> dict[str, str]:
        return self._extensions


def broker_credentials(common: Mapping[str, Any]) -> faust.types.auth.CredentialsT | None:
    """The librdkafka client settings ``common`` (``Settings.kafka_common()``) as faust credentials."""
    conf = {k: str(v) for k, v in common.items() if k.startswith(SECURITY_PREFIXES)}
    if unsupported := sorted(set(conf) - SUPPORTED):
        raise Misconfigured(f"the feedback worker cannot apply these Kafka security settings: {', '.join(unsupported)}")
    protocol = conf.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise Misconfigured(f"security.protocol={protocol!r} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
    context = _ssl_context(conf) if protocol.endswith("SSL") else None
    if not protocol.startswith("SASL"):
        return faust.SSLCredentials(context) if context else None
    mechanism = conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI")).upper()  # librdkafka's default
    if mechanism == "OAUTHBEARER":
        return faust.OAuthCredentials(oauth_cb=_oidc(conf), ssl_context=context)
    if mechanism == "GSSAPI":
        service = conf.get("sasl.kerberos.service.name", "kafka")
        return faust.GSSAPICredentials(kerberos_service_name=service, ssl_context=context, mechanism=mechanism)
    if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise Misconfigured(f"sasl.mechanism={mechanism!r} is not one of PLAIN, SCRAM-SHA-256/512, GSSAPI, OAUTHBEARER")
    return faust.SASLCredentials(
        username=conf.get("sasl.username"), password=conf.get("sasl.password"), ssl_context=context, mechanism=mechanism
    )


def _oidc(conf: Mapping[str, str]) -> OidcTokens:
    if conf.get("sasl.oauthbearer.method", "default").lower() != "oidc":
        raise Misconfigured("OAUTHBEARER needs sasl.oauthbearer.method=oidc (unsecured test tokens are not supported)")
    needed = ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret")
    if missing := [k for k in needed if not conf.get(k)]:
        raise Misconfigured(f"OAUTHBEARER with oidc needs {', '.join(missing)}")
    url, client_id, secret = (conf[k] for k in needed)
    return OidcTokens(
        url,
        client_id,
        secret,
        conf.get("sasl.oauthbearer.scope"),
        conf.get("sasl.oauthbearer.extensions"),
    )
