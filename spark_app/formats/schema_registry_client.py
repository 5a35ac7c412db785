"""A client of the Confluent Schema Registry API (Confluent's server, or one that serves its
API, such as Apicurio Registry under /apis/ccompat/v7): schemas by id and by subject version.

Each schema id is asked once per process: ids are immutable in the registry, so the answer,
found or not found, is kept. An unreachable registry (connection refused, timeouts, 5xx) is
retried with backoff up to `timeout_s`, then `RegistryUnavailable`; a record is never blamed
for a registry outage. An https registry is verified against `ca_file` (the option
schemaRegistryCaFile) or the system's CA bundle; a certificate that does not verify is
`RegistryTLSError` at once (retrying cannot help). Credentials (basic auth) go only into the
Authorization header: never into the URL, a repr, a log line or an error message.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from spark_app.api.decoding_options import ValueDecoding

log = logging.getLogger(__name__)

_ACCEPT = "application/vnd.schemaregistry.v1+json, application/json"
# Confluent's error codes for "no such subject / version / schema id".
_NOT_FOUND_CODES = {40401, 40402, 40403}
_FIRST_BACKOFF_S = 0.2
_MAX_BACKOFF_S = 5.0


class RegistryUnavailable(RuntimeError):
    """The registry did not answer (or answered 5xx) within the client's timeout."""


class RegistryRefused(RuntimeError):
    """The registry answered with a client error other than not-found (e.g. 401: the
    credentials are wrong). Retrying cannot help."""


class RegistryTLSError(RegistryRefused):
    """The registry's https certificate does not verify with the CA the client trusts."""


class SchemaNotFound(LookupError):
    """No schema with this id, or no such subject or version."""


@dataclass(frozen=True)
class SchemaReference:
    """A schema another one imports: `name` is how the importing schema names it (for
    Protobuf, the path of an `import`), `subject` and `version` where the registry keeps it."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    schema_id: int | None  # None: a reader schema given inline, not registered
    version: int | None
    schema: str  # the schema's text as registered (JSON for Avro, .proto source for Protobuf)
    schema_type: str = "AVRO"
    references: tuple[SchemaReference, ...] = ()


class SchemaRegistryClient:
    def __init__(
        self,
        url: str,
        username: str | None = None,
        password: str | None = None,
        timeout_s: float = 60.0,
        ca_file: str | None = None,
    ):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.ca_file = ca_file
        self._tls = _tls_context(ca_file) if self.url.lower().startswith("https://") else None
        self._auth = None
        if username is not None:
            token = base64.b64encode(f"{username}:{password or ''}".encode()).decode()
            self._auth = f"Basic {token}"
        self._by_id: dict[int, RegisteredSchema | None] = {}
        self._lock = threading.Lock()
        self.requests = 0  # how many requests were sent (tests prove the cache with it)

    def __repr__(self) -> str:  # never the credentials
        return f"SchemaRegistryClient({self.url!r}, auth={'basic' if self._auth else 'none'})"

    def schema_by_id(self, schema_id: int) -> RegisteredSchema:
        """The schema a record's id names; asked once per id (a miss is remembered too)."""
        with self._lock:
            if schema_id not in self._by_id:
                try:
                    answer = self._request(f"/schemas/ids/{schema_id}")
                    self._by_id[schema_id] = _registered(answer, schema_id, None)
                except SchemaNotFound:
                    self._by_id[schema_id] = None
            found = self._by_id[schema_id]
        if found is None:
            raise SchemaNotFound(f"schema id {schema_id} is not in the registry at {self.url}")
        return found

    def subject_version(self, subject: str, version: int | str = "latest") -> RegisteredSchema:
        """A subject's schema at `version` (a number or "latest"), asked every call: the
        reader schema is resolved once, when the query starts."""
        quoted = urllib.parse.quote(subject, safe="")
        answer = self._request(f"/subjects/{quoted}/versions/{version}")
        return _registered(answer, int(answer["id"]), int(answer["version"]))

    def register(self, subject: str, schema: str, schema_type: str) -> int:
        """Registers `schema` under `subject` (a new version, or the one the subject has for
        the same schema); its id. A schema the subject's compatibility rule refuses (409) or
        an invalid one (422) raise RegistryRefused with the registry's message."""
        quoted = urllib.parse.quote(subject, safe="")
        body = {"schema": schema, "schemaType": schema_type}
        return int(self._request(f"/subjects/{quoted}/versions", body)["id"])

    def _request(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One GET (a POST of `body`) with retries on outages; raises SchemaNotFound,
        RegistryRefused or RegistryUnavailable."""
        deadline = time.monotonic() + self.timeout_s
        backoff = _FIRST_BACKOFF_S
        while True:
            try:
                return self._request_once(path, body)
            except RegistryUnavailable as exc:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RegistryUnavailable(
                        f"schema registry {self.url} unavailable for {self.timeout_s:g}s "
                        f"({_method(body)} {path}): {exc}"
                    ) from None
                log.warning("schema registry %s: %s; retrying in %.1fs", self.url, exc, backoff)
                time.sleep(min(backoff, remaining))
                backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _request_once(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Accept": _ACCEPT}
        if self._auth:
            headers["Authorization"] = self._auth
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/vnd.schemaregistry.v1+json"
        request = urllib.request.Request(self.url + path, data=data, headers=headers)
        self.requests += 1
        try:
            with urllib.request.urlopen(
                request, timeout=min(self.timeout_s, 10.0), context=self._tls
            ) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            code, message = _error_of(exc)
            if exc.code == 404 and code in _NOT_FOUND_CODES | {None}:
                raise SchemaNotFound(f"GET {path}: not found (error code {code})") from None
            if exc.code >= 500:
                raise RegistryUnavailable(f"HTTP {exc.code}") from None
            raise RegistryRefused(
                f"schema registry {self.url} refused {_method(body)} {path}: HTTP {exc.code} "
                f"(error code {code}){_refusal_hint(exc.code, message)}"
            ) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLCertVerificationError):
                raise RegistryTLSError(self._untrusted(exc.reason)) from None
            raise RegistryUnavailable(str(exc.reason)) from None
        except (OSError, json.JSONDecodeError) as exc:  # refused, timeouts
            raise RegistryUnavailable(str(getattr(exc, "reason", exc))) from None

    def _untrusted(self, error: ssl.SSLCertVerificationError) -> str:
        trusted = (
            f"the CA in option schemaRegistryCaFile={self.ca_file!r}"
            if self.ca_file
            else "the system's CA bundle (option schemaRegistryCaFile unset)"
        )
        return (
            f"schema registry {self.url}: its TLS certificate does not verify with {trusted}: "
            f"{error.verify_message}. Set schemaRegistryCaFile to the CA that signed the "
            "registry's certificate"
        )


def _tls_context(ca_file: str | None) -> ssl.SSLContext:
    """Verifies the registry's certificate and host name: against `ca_file` if given, else
    the system's CA bundle; a CA file that cannot be read is a clear error now."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise RegistryTLSError(
            f"option schemaRegistryCaFile={ca_file!r} is not a readable PEM CA certificate: {exc}"
        ) from None


def _registered(answer: dict[str, Any], schema_id: int, version: int | None) -> RegisteredSchema:
    return RegisteredSchema(
        schema_id=schema_id,
        version=version,
        schema=answer["schema"],
        schema_type=answer.get("schemaType") or "AVRO",
        references=tuple(
            SchemaReference(r["name"], r["subject"], int(r["version"]))
            for r in answer.get("references") or ()
        ),
    )


def _error_of(error: urllib.error.HTTPError) -> tuple[int | None, str]:
    """The registry's error code and message of a refusal (None, "" when it gave none)."""
    try:
        answer = json.loads(error.read())
        return int(answer["error_code"]), str(answer.get("message") or "")[:500]
    except (ValueError, KeyError, TypeError, OSError):
        return None, ""


def _method(body: dict[str, Any] | None) -> str:
    return "GET" if body is None else "POST"


def _refusal_hint(status: int, message: str) -> str:
    if status in (401, 403):
        return " - check the credentials"
    return f": {message}" if message else ""


def client_for(decoding: ValueDecoding) -> SchemaRegistryClient:
    """The registry client of a decoded column's options (basic auth, CA file, timeout)."""
    return SchemaRegistryClient(
        decoding.registry_url,
        decoding.username,
        decoding.password,
        decoding.registry_timeout_ms / 1000,
        ca_file=decoding.ca_file,
    )
