"""Ledger URLs as they may be shown: `masked_url` hides the credentials a URL carries, before it goes into a
report, a status line, a log or an error message."""
from __future__ import annotations

import re
from urllib.parse import unquote_plus

from sqlalchemy.engine import make_url

MASK = "***"
"""What stands in for a hidden secret: SQLAlchemy's own mask for a password, so reports keep their form."""
SECRET_NAME_PARTS = ("pass", "pwd", "secret", "token", "key")
"""A query parameter is secret when its name, percent-decoded and lower-cased, contains one of these.

That covers the parameters that carry a secret: password (libpq, SQLAlchemy), passwd and pwd (other drivers'
spellings, which users carry over), sslpassword (the passphrase of the client's private key),
oauth_client_secret (libpq 18) and any *token* or *secret*; and those that name where secret material lies:
sslkey (the client's private key), passfile (a file of passwords) and sslkeylogfile (where TLS session keys are
written). It matches no other libpq parameter, so host, port, dbname, user, sslmode, options and the rest stay
visible to tell which ledger a report used. Certificates are public: sslcert, sslrootcert, sslcrl and sslcrldir
stay visible too, since they help diagnose a failed TLS connection."""
_SCHEME = re.compile(r"([\w+.-]+://)(.*)", re.DOTALL)  # SQLAlchemy's is [\w+]+://
_NAME = re.compile(r"(?:^|[?;])([^?;=]*)=")  # a parameter's name, at the start of a query part or after ? or ;
_VALUE = re.compile(r"=([^&]*)")


def masked_url(url: str) -> str:
    """`url` with its userinfo password and the values of its secret query parameters (`SECRET_NAME_PARTS`)
    replaced by `MASK`.

    A URL SQLAlchemy cannot parse (a malformed port, no scheme, ...) is masked more, since where its secrets
    lie is unsure: its whole userinfo and every `=value`; so is one whose masked form would not parse. Where an
    unencoded `@`, `?` or `:` makes a URL ambiguous, every reading's secrets are masked. Idempotent; never
    raises."""
    found = _SCHEME.fullmatch(url)
    scheme, rest = found.groups() if found else ("", url)
    masked = scheme + _masked(rest, strict=False)
    return masked if _parses(url) and _parses(masked) else scheme + _masked(rest, strict=True)


def _masked(rest: str, strict: bool) -> str:
    """`rest`, the URL after its scheme, with each secret (`_secret_spans`) replaced by `MASK`."""
    hidden = [False] * len(rest)
    for start, end in _secret_spans(rest, strict):
        hidden[start:end] = [True] * (end - start)
    return _collapse(rest, hidden)


def _parses(url: str) -> bool:
    try:
        make_url(url)
    except Exception:  # ArgumentError, or ValueError from a port that is not a number
        return False
    return True


def _secret_spans(rest: str, strict: bool) -> list[tuple[int, int]]:
    """(start, end) of each secret in `rest`, the URL after its scheme: the query values, then the userinfo's
    password (strict: the whole userinfo up to the last `@`)."""
    spans = _value_spans(rest, strict)
    at = _userinfo_end(rest, [] if strict else spans)
    if at >= 0 and strict:
        spans.append((0, at))
    elif at >= 0 and (colon := rest.find(":", 0, at)) >= 0:
        spans.append((colon + 1, at))
    return spans


def _value_spans(rest: str, strict: bool) -> list[tuple[int, int]]:
    """The values of the secret parameters after the first `?` (strict: of all of them; strict without a `?`:
    every `=value` after the last `@`, as in `host=h password=p`)."""
    query = rest.find("?")
    if query < 0:
        after = rest.rfind("@") + 1
        return [found.span(1) for found in _VALUE.finditer(rest, after)] if strict else []
    spans, start = [], query + 1
    for part in rest[start:].split("&"):
        for found in _NAME.finditer(part):
            if strict or any(p in unquote_plus(found.group(1)).lower() for p in SECRET_NAME_PARTS):
                spans.append((start + found.end(), start + len(part)))
                break
        start += len(part) + 1
    return spans


def _userinfo_end(rest: str, values: list[tuple[int, int]]) -> int:
    """Where the userinfo ends: the last `@` outside the query `values` (a password may hold an unencoded `@`,
    and so may a query value); -1 without one, or without a host (`sqlite:///PATH`)."""
    if rest.startswith("/"):
        return -1
    ats = [i for i, c in enumerate(rest) if c == "@" and not any(start <= i < end for start, end in values)]
    return ats[-1] if ats else -1


def _collapse(text: str, hidden: list[bool]) -> str:
    """`text` with each run of hidden characters replaced by one `MASK`."""
    out, index = [], 0
    while index < len(text):
        if not hidden[index]:
            out.append(text[index])
            index += 1
            continue
        while index < len(text) and hidden[index]:
            index += 1
        out.append(MASK)
    return "".join(out)
