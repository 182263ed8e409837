"""loadgen.scrub: a secret value the process sends is replaced in every form a server may echo
it back, and the CLI's streams and log handlers pass text through it."""

from __future__ import annotations

import base64
import io
import json
import logging
from urllib.parse import quote, quote_plus

from loadgen.scrub import MARK, ScrubbingFilter, ScrubbingStream, echo_forms, remember, scrub

VALUE = 'c4n4ry/v+lue&x="q"<t>'


def test_every_echo_form_of_a_remembered_value_is_scrubbed() -> None:
    remember([VALUE])
    for form in (VALUE, quote(VALUE, safe=""), quote_plus(VALUE), json.dumps(VALUE)[1:-1]):
        out = scrub(f"server said: {form} (end)")
        assert out == f"server said: {MARK} (end)", (form, out)
    assert VALUE not in scrub(json.dumps({"echo": {"x-auth": VALUE}}))
    assert "c4n4ry" not in scrub("<pre>c4n4ry/v+lue&amp;x=&quot;q&quot;&lt;t&gt;</pre>")


def test_basic_auth_is_scrubbed_encoded_and_decoded() -> None:
    token = base64.b64encode(b"alice:hunter2-pw").decode()
    forms = echo_forms(f"Basic {token}")
    assert {token, "alice:hunter2-pw", "hunter2-pw"} <= forms
    remember([f"Basic {token}"])
    assert scrub(f"got {token} for alice:hunter2-pw") == f"got {MARK} for {MARK}"
    assert base64.b64encode(b"u:pass-1234").decode() in echo_forms("u:pass-1234")


def test_credential_shapes_are_scrubbed_without_being_known() -> None:
    assert scrub("Authorization: Bearer abc.def") == f"Authorization: Bearer {MARK}"
    assert scrub("GET /v1?key=zzz9&x=1") == f"GET /v1?key={MARK}&x=1"
    assert scrub("key sk-abcdefghijkl used") == f"key {MARK} used"
    assert scrub("Basic dXNlcjpwdw== sent") == f"Basic {MARK} sent"
    assert scrub("a basic check") == "a basic check"  # ordinary words stay
    assert scrub(scrub("api_key=abc123")) == f"api_key={MARK}"  # idempotent


def test_short_values_are_not_scrubbed_from_ordinary_words() -> None:
    remember(["on", "1"])
    assert scrub("one connection 1") == "one connection 1"


def test_streams_and_log_records_are_scrubbed() -> None:
    remember(["stream-secret-42"])
    inner = io.StringIO()
    ScrubbingStream(inner).write("echo: stream-secret-42\n")  # type: ignore[arg-type]
    assert inner.getvalue() == f"echo: {MARK}\n"
    record = logging.LogRecord("t", logging.ERROR, "f", 1, "got %s", ("stream-secret-42",), None)
    assert ScrubbingFilter().filter(record) and record.getMessage() == f"got {MARK}"
