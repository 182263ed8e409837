"""Password hashing for the `users` table: scrypt (hashlib, backed by OpenSSL), never a fast hash.

Why scrypt and not argon2id: both are memory-hard KDFs the OWASP Password Storage Cheat Sheet
recommends; scrypt is in the standard library, so no compiled dependency joins the audit. The
cost is OWASP's "N=2^15 (32 MiB), r=8, p=3" line: about 0.3-0.6 s per hash on a 2-core machine,
32 MiB per login in flight. The stored string carries its own parameters and salt:

    scrypt$n=32768,r=8,p=3$<salt, base64>$<key, base64>

so a later change of COST verifies old hashes and `needs_rehash` tells which to upgrade.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

SCHEME = "scrypt"
SALT_BYTES = 16
KEY_BYTES = 32
MIN_PASSWORD_CHARS = 8
MAX_PASSWORD_CHARS = 1024  # a longer one is refused, not hashed (scrypt's cost is per byte too)


@dataclass(frozen=True, slots=True)
class Cost:
    """scrypt's parameters: n (CPU/memory cost, a power of 2), r (block size), p (parallelism).
    Memory used is 128 * n * r bytes."""

    n: int = 2**15
    r: int = 8
    p: int = 3

    def maxmem(self) -> int:
        return 2 * 128 * self.n * self.r  # room for OpenSSL's own bookkeeping


COST = Cost()


def check_password(password: str) -> None:
    """ValueError (a message a person can act on) for a password too short, too long, or with
    control characters; None when it may be hashed."""
    if len(password) < MIN_PASSWORD_CHARS:
        raise ValueError(f"the password must have at least {MIN_PASSWORD_CHARS} characters")
    if len(password) > MAX_PASSWORD_CHARS:
        raise ValueError(f"the password must have at most {MAX_PASSWORD_CHARS} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in password):
        raise ValueError("the password must not contain control characters (or a newline)")


def _derive(password: str, salt: bytes, cost: Cost) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8"),
        salt=salt,
        n=cost.n,
        r=cost.r,
        p=cost.p,
        maxmem=cost.maxmem(),
        dklen=KEY_BYTES,
    )


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def hash_password(password: str, cost: Cost = COST) -> str:
    """The string to store for `password` (a fresh random salt each call); ValueError for a
    password `check_password` refuses."""
    check_password(password)
    salt = secrets.token_bytes(SALT_BYTES)
    key = _derive(password, salt, cost)
    return f"{SCHEME}$n={cost.n},r={cost.r},p={cost.p}${_b64(salt)}${_b64(key)}"


def parse(stored: str) -> tuple[Cost, bytes, bytes]:
    """(cost, salt, key) of a stored string; ValueError if it is not one `hash_password` made."""
    try:
        scheme, params, salt, key = stored.split("$")
        if scheme != SCHEME:
            raise ValueError
        values = dict(kv.split("=", 1) for kv in params.split(","))
        cost = Cost(int(values["n"]), int(values["r"]), int(values["p"]))
        return cost, _unb64(salt), _unb64(key)
    except (ValueError, KeyError) as exc:
        raise ValueError("not a peakload password hash (scrypt$n=..,r=..,p=..$salt$key)") from exc


def verify_password(password: str, stored: str) -> bool:
    """True when `password` derives the stored key (constant-time comparison). A malformed
    stored string, or a password no one could have set, is False, never an exception."""
    if len(password) > MAX_PASSWORD_CHARS:
        return False
    try:
        cost, salt, key = parse(stored)
    except ValueError:
        return False
    return hmac.compare_digest(_derive(password, salt, cost), key)


def needs_rehash(stored: str, cost: Cost = COST) -> bool:
    """True when the stored hash was made with other parameters than `cost` (or is malformed)."""
    try:
        return parse(stored)[0] != cost
    except ValueError:
        return True


# Verified when a name is unknown, so a wrong name costs what a wrong password does (a login's
# time does not tell which names exist). Made once, on first use.
_dummy: list[str] = []


def burn_time(password: str) -> None:
    """Spend one verification's time on nothing (see `_dummy`)."""
    if not _dummy:
        _dummy.append(hash_password("x" * MIN_PASSWORD_CHARS))
    verify_password(password, _dummy[0])
