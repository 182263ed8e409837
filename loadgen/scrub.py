"""The one scrubber: every text peakload stores or prints that a server, a library or the
environment may have written passes through `scrub`. It replaces each secret value this process
sends (registered by `remember` where a request is built) in every form a server may echo it
back, and anything shaped like a credential; `ScrubbingStream` applies it to stdout and stderr.

The known values are process-wide on purpose: the places that print (the CLI's error boundary,
logging, tracebacks) are far from the place that builds the request, and a value once sent stays
secret for the life of the process.
"""

from __future__ import annotations

import base64
import binascii
import html
import io
import json
import logging
import re
import threading
from collections.abc import Iterable
from typing import Any, TextIO
from urllib.parse import quote, quote_plus

MARK = "[REDACTED]"  # upper case: rich does not take it for a markup tag
MIN_SCRUBBED = 4  # shorter values ("1", "on") would blank ordinary words in server messages
_PREFIXED = re.compile(  # what follows these is a credential, whatever it is
    r"(?i)(bearer\s+|authorization\s*[:=]\s*(?:(?:bearer|basic|token)\s+)?|api[-_]?key\s*[:=]\s*|"
    r"[?&#](?:api_?)?key=)(?!\[REDACTED\])[^\s&\"',;<>]+"
)
_KEYLIKE = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")
_BASIC = re.compile(r"(?i)\b(basic\s+)[A-Za-z0-9+/]{6,}={0,2}")
_lock = threading.Lock()
_known: list[str] = []  # every echo form of every remembered value, longest first


def echo_forms(value: str) -> set[str]:
    """`value` as a server may echo it: as sent, percent-encoded (path, query and form style),
    JSON- and HTML-escaped, and for `Basic` / `Bearer` credentials the token alone, base64 of it,
    and decoded `user:pass`."""
    forms = {value, quote(value, safe=""), quote(value), quote_plus(value)}
    forms |= {json.dumps(value)[1:-1], html.escape(value), html.escape(value, quote=False)}
    scheme, _, token = value.partition(" ")
    if token and scheme.lower() in ("basic", "bearer"):
        forms |= {token, quote(token, safe="")}
        if scheme.lower() == "basic":
            try:
                user_pass = base64.b64decode(token, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                user_pass = ""
            forms |= {user_pass, user_pass.partition(":")[2]}
    if ":" in value:  # a user:pass pair may be echoed as its Basic encoding
        forms.add(base64.b64encode(value.encode()).decode())
    return {f for f in forms if len(f) >= MIN_SCRUBBED}


def remember(values: Iterable[str]) -> None:
    """Make `values` (secret values this process sends) known to `scrub`, in all echo forms."""
    forms = set().union(*(echo_forms(v) for v in values if v))
    if not forms:
        return
    with _lock:
        merged = forms | set(_known)
        _known[:] = sorted(merged, key=len, reverse=True)


def scrub(text: str) -> str:
    """`text` with every known secret value (in any echo form) and anything shaped like a
    credential replaced by MARK."""
    for form in _known:
        if form in text:
            text = text.replace(form, MARK)
    text = _BASIC.sub(r"\1" + MARK, _PREFIXED.sub(r"\1" + MARK, text))
    return _KEYLIKE.sub(MARK, text)


def scrub_tree(obj: Any) -> Any:
    """A JSON-like value with every string in it (keys too) scrubbed."""
    if isinstance(obj, str):
        return scrub(obj)
    if isinstance(obj, dict):
        return {scrub_tree(k): scrub_tree(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [scrub_tree(v) for v in obj]
    return obj


class ScrubbingStream(io.TextIOBase):
    """A text stream that scrubs what is written before passing it on (stdout, stderr)."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, s: str) -> int:
        self.inner.write(scrub(s))
        return len(s)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.inner.encoding

    def writable(self) -> bool:
        return True


class ScrubbingFilter(logging.Filter):
    """A log filter (for handlers) that scrubs each record's message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = scrub(record.getMessage())
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def scrub_logging(logger: logging.Logger | None = None) -> None:
    """Put a ScrubbingFilter on every handler of `logger` (default: the root logger)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, ScrubbingFilter) for f in handler.filters):
            handler.addFilter(ScrubbingFilter())
