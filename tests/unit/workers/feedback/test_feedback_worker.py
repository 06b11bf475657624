"""The feedback worker's edges: Kafka security settings as faust credentials, acks only for what
was applied, one line and exit 2 on bad settings."""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
from collections.abc import Collection
from pathlib import Path
from typing import Any

import faust
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from faust.types.tuples import Message
from prometheus_client import REGISTRY
from typer.testing import CliRunner

from modstream.cli import app
from tests.unit.fakes import FakeSink
from workers.config import Settings
from workers.errors import Misconfigured
from workers.feedback.app import apply
from workers.feedback.handler import FeedbackHandler
from workers.feedback.settings import FeedbackSettings
from workers.kafka.delivery import DeadLetters
from workers.kafka.security import OidcTokens, broker_credentials
from workers.records import InMsg
from workers.runtime.startup import EXIT_MISCONFIGURED
from workers.state.keyspace import Keyspace
from workers.state.reputation import Applied, Bans, Plan, ReporterRecord, Reporters


def credentials(extra: dict[str, Any], password: str | None = None) -> Any:
    return broker_credentials(Settings(kafka_extra=extra, kafka_sasl_password=password).kafka_common())


def test_plaintext_needs_no_credentials() -> None:
    assert credentials({"client.id": "x", "socket.keepalive.enable": True}) is None  # tunables are not security


def test_mutual_tls_loads_the_client_certificate(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    creds = credentials(
        {
            "security.protocol": "SSL",
            "ssl.ca.location": str(cert),
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert isinstance(creds, faust.SSLCredentials)
    assert creds.context.verify_mode == ssl.CERT_REQUIRED and not creds.context.check_hostname
    assert creds.context.get_ca_certs()  # the CA given, not only the system's


def test_a_certificate_that_cannot_be_read_fails_at_start() -> None:
    with pytest.raises((OSError, ssl.SSLError)):
        credentials({"security.protocol": "SSL", "ssl.certificate.location": "/nonexistent.pem"})


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_over_tls_takes_the_separate_password(mechanism: str) -> None:
    creds = credentials(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism, "sasl.username": "u"}, password="s3cret"
    )
    assert isinstance(creds, faust.SASLCredentials)
    assert (creds.username, creds.password, creds.mechanism.value) == ("u", "s3cret", mechanism)
    assert creds.ssl_context is not None


def test_gssapi_keeps_the_kerberos_service_name() -> None:
    creds = credentials(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.service.name": "kfk"}
    )
    assert isinstance(creds, faust.GSSAPICredentials) and creds.kerberos_service_name == "kfk"


def test_oauthbearer_fetches_client_credentials_tokens_from_the_oidc_endpoint() -> None:
    creds = credentials(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": "worker",
            "sasl.oauthbearer.client.secret": "pw",
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
            "sasl.oauthbearer.scope": "kafka",
            "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2",
        }
    )
    assert isinstance(creds, faust.OAuthCredentials) and isinstance(creds.oauth_cb, OidcTokens)
    request = creds.oauth_cb.request()
    assert request.full_url == "https://idp.example/token"
    assert request.data == b"grant_type=client_credentials&scope=kafka"
    assert request.get_header("Authorization") == "Basic d29ya2VyOnB3"  # worker:pw
    assert creds.oauth_cb.extensions() == {"logicalCluster": "lkc-1", "identityPoolId": "pool-2"}


def test_a_token_is_reused_until_it_nearly_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = OidcTokens("https://idp.example/token", "c", "s", None, None)
    fetched = iter([("t1", 0.0), ("t2", float("inf"))])  # the first one already expired
    monkeypatch.setattr(tokens, "_fetch", lambda: next(fetched))
    assert [asyncio.run(tokens.token()) for _ in range(3)] == ["t1", "t2", "t2"]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"security.protocol": "SSL", "ssl.keystore.location": "/k.p12"}, "ssl.keystore.location"),
        ({"security.protocol": "SASL_SSL", "sasl.kerberos.keytab": "/k.tab"}, "sasl.kerberos.keytab"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.oauthbearer.method=oidc"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM"}, "AWS_MSK_IAM"),
        ({"security.protocol": "TLS"}, "TLS"),
    ],
)
def test_a_security_setting_it_cannot_apply_is_refused_by_name(extra: dict[str, str], named: str) -> None:
    with pytest.raises(Misconfigured, match=named):
        credentials(extra)


class Handler:
    def __init__(self, stop: asyncio.Event | None = None) -> None:
        self.stop, self.batches = stop, []

    async def handle(self, msgs: list[InMsg]) -> None:
        if self.stop is not None:
            await self.stop.wait()  # Redis down: retrying until the agent is cancelled
        self.batches.append(msgs)


class Consumer:
    """faust's consumer as far as a final ack goes: the offsets it may commit."""

    def __init__(self) -> None:
        self.acked: list[int] = []

    def ack(self, message: Message) -> bool:
        self.acked.append(message.offset)
        return True


class ConsumerMessage(Message):
    def on_final_ack(self, consumer: Any) -> bool:
        super().on_final_ack(consumer)
        return bool(consumer.ack(self))


def delivered(offsets: range) -> list[Message]:
    """Messages as faust hands them to a stream: one reference each, the stream's."""
    out = []
    for o in offsets:
        m = ConsumerMessage("feedback", 0, o, 0.0, 0, [], b"k", b"v", None)
        m.incref()
        out.append(m)
    return out


def faust_acks(messages: list[Message], consumer: Consumer) -> None:
    """What take_events does with the batch in hand when the agent returns or is cancelled."""
    for m in messages:
        m.ack(consumer)


async def test_an_applied_batch_is_committed() -> None:
    messages, consumer = delivered(range(3)), Consumer()
    await apply(Handler(), messages, consumer)  # type: ignore[arg-type]
    faust_acks(messages, consumer)
    assert consumer.acked == [0, 1, 2]


async def test_a_graceful_stop_mid_batch_commits_nothing_of_it() -> None:
    messages, consumer = delivered(range(3)), Consumer()
    task = asyncio.create_task(apply(Handler(asyncio.Event()), messages, consumer))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    faust_acks(messages, consumer)
    assert consumer.acked == []  # the batch comes again after the restart


class Reputation:
    """The reputation store as far as the handler goes: what it was asked, and fixed answers."""

    keyspace = Keyspace("t:")

    def __init__(self) -> None:
        self.asked: list[tuple[set[str], set[str]]] = []
        self.plans: list[Plan] = []

    async def reporters(self, actors: Collection[str], posts: Collection[str]) -> Reporters:
        self.asked.append((set(actors), set(posts)))
        return Reporters({"trusted": ReporterRecord(confirmed=20)}, {"p2": frozenset({"r0"})})

    async def apply(self, plan: Plan) -> Applied:
        self.plans.append(plan)
        return Applied({}, {}, 0, {"post": 1, "confirmed": 1}, {"user": 2, "post": 1}, (0.5,))

    async def ban(self, bans: Bans) -> tuple[int, int]:
        return 0, 0


def feedback_record(offset: int, kind: str, post_id: str, actor_id: str) -> InMsg:
    fields = {"kind": kind, "post_id": post_id, "user_id": "u1", "actor_id": actor_id, "label": "spam"}
    value = json.dumps({**fields, "created_at": "2026-01-01T00:00:00Z"}).encode()
    return InMsg("feedback", 0, offset, None, value, 0.0)


def why_reports_weighed() -> list[float]:
    """Reports repeated on a user, reporters confirmed, and report weights observed, so far."""
    samples = [
        ("modstream_feedback_reports_repeated_total", {"target": "user"}),
        ("modstream_feedback_reporters_judged_total", {"outcome": "confirmed"}),
        ("modstream_feedback_report_weight_count", {}),
    ]
    return [REGISTRY.get_sample_value(name, labels) or 0.0 for name, labels in samples]


async def test_the_handler_weighs_reports_by_records_read_before_the_batch_and_counts_why() -> None:
    store = Reputation()
    dlq = DeadLetters("fb.dlq", "g", 10_000)
    handler = FeedbackHandler(store, FakeSink(), dlq, FeedbackSettings().thresholds(), 1.0, 1.0)
    before = why_reports_weighed()
    await handler.handle(
        [feedback_record(0, "user_report", "p1", "trusted"), feedback_record(1, "moderator_label", "p2", "mod")]
    )
    assert store.asked == [({"trusted"}, {"p2"})]
    (batch,) = store.plans
    report, label = batch.changes
    assert report.report is not None and report.report.weight == ReporterRecord(confirmed=20).weight
    assert label.judgement is not None and label.judgement.reporters == {"r0"}
    assert [a - b for a, b in zip(why_reports_weighed(), before, strict=True)] == [2, 1, 1]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"MODSTREAM_FEEDBACK_BATCH_MAX_SIZE": "0"}, "batch_max_size"),
        ({"MODSTREAM_KAFKA_EXTRA": '{"security.protocol": "SSL", "ssl.keystore.location": "/k"}'}, "ssl.keystore"),
    ],
)
def test_the_feedback_command_exits_2_with_one_line(env: dict[str, str], expected: str) -> None:
    result = CliRunner().invoke(app, ["feedback"], env={"MODSTREAM_METRICS_PORT": "0", **env})
    assert result.exit_code == EXIT_MISCONFIGURED, result.output
    assert expected in result.output and "Traceback" not in result.output


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    """A throwaway self-signed certificate and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "modstream-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path
