"""Schemathesis hooks for scripts/schemathesis.sh (loaded through SCHEMATHESIS_HOOKS).

Two rules of the API that JSON Schema cannot state. An `Idempotency-Key` sent
again with another body is refused (422) by design, and the generator repeats
small keys ("0", "A") across cases: a valid generated key is made unique, so that
a request the generator means as valid is valid (cases meant as invalid are
sent as generated, all of them). And a flash sale's `begin_at` must
be before its `end_at` (the document says so in words). A generated body that
holds two valid times in the wrong order (or equal) gets `end_at` a second or two
after `begin_at` (or, at the end of the years allowed, `begin_at` before `end_at`;
failing both, a fixed window in 2000), so that a request the generator means as
valid is valid. And the operations of a queue or raffle sale (a sale's
challenge, queue and raffle) find one only when the id names it: schemathesis.sh
makes a queue sale asking a proof of work (for the challenge), one asking none
(for the queue) and a raffle sale, and names them in ST_POW_SALE, ST_QUEUE_SALE
and ST_RAFFLE_SALE, and a case meant as valid whose generated id is a valid one (a
positive 64-bit integer) is sent to that sale. A beacon submission meant as valid
goes to a raffle schemathesis.sh made with a round whose signature is known
(ST_BEACON_SALE), with that round and signature: a generated signature never
verifies. And paying goes to an order the shopper placed (ST_ORDER). Everything else, including every deliberately invalid body or id, is
sent as generated.
"""
import os
import re
import uuid
from datetime import datetime, timedelta, timezone

import schemathesis

_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)


def _time(value):
    """The instant an RFC 3339 string names (a leap second as the one before it,
    plus 0.999999 s), or None."""
    match = isinstance(value, str) and _TIME.match(value)
    if not match:
        return None
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    leap = second == "60"
    text = f"{year}-{month}-{day}T{hour}:{minute}:{'59' if leap else second}{fraction or ''}"
    text += "+00:00" if offset in ("Z", "z") else offset
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed + timedelta(microseconds=999_999) if leap else parsed


def _within_years(t):
    return 1 <= t.year <= 9998


_KEY = re.compile(r"^[!-~]{1,255}$")


def _unique_key(case):
    headers = case.headers or {}
    for name in list(headers):
        if name.lower() == "idempotency-key" and isinstance(headers[name], str) and _KEY.match(headers[name]):
            headers[name] = f"st-{uuid.uuid4().hex}"


def _raffle_draw(body):
    """A raffle with valid times gets a draw a minute from now, before its end.
    Every sale meant as valid gets the default beacon (quicknet): a generated
    public key is no curve point, and the service checks it in every mode."""
    body.pop("beacon", None)
    if body.get("admission") != "raffle":
        return
    begin, end = _time(body.get("begin_at")), _time(body.get("end_at"))
    if begin is None or end is None:
        return
    if body.get("draw_at") is not None and _time(body.get("draw_at")) is None:
        return
    now = datetime.now(timezone.utc)
    draw = (now + timedelta(seconds=60)).replace(microsecond=0)
    body["draw_at"] = draw.isoformat()
    if end <= draw + timedelta(seconds=60):
        later = draw + timedelta(days=1)
        body["end_at"] = later.isoformat()
        if begin >= later:
            body["begin_at"] = now.replace(microsecond=0).isoformat()


_BEACON_PATH = "/api/v1/vouchers/{id}/raffle/beacon"

def _beacon(body):
    """A valid beacon submission names the round whose signature is known (the
    raffle schemathesis.sh made for it): a random signature never verifies."""
    if isinstance(body, dict) and os.environ.get("ST_BEACON_SIGNATURE"):
        body["round"] = int(os.environ["ST_BEACON_ROUND"])
        body["signature"] = os.environ["ST_BEACON_SIGNATURE"]


_SALES = (
    (re.compile(r"^/api/v1/vouchers/\{id\}/raffle/beacon$"), "id", "ST_BEACON_SALE"),
    (re.compile(r"^/api/v1/vouchers/\{id\}/challenge$"), "id", "ST_POW_SALE"),
    (re.compile(r"^/api/v1/vouchers/\{id\}/queue(/.*)?$"), "id", "ST_QUEUE_SALE"),
    (re.compile(r"^/api/v1/vouchers/\{id\}/raffle(/.*)?$"), "id", "ST_RAFFLE_SALE"),
    # Paying needs an order of the caller's; the stateful phase's links reach one
    # only with some seeds.
    (re.compile(r"^/api/v1/orders/\{order_id\}/pay$"), "order_id", "ST_ORDER"),
)


_INT64_MAX = 2**63 - 1


def _negative(case):
    """Whether the case is generated to break the schema (sent as generated)."""
    meta = getattr(case, "meta", None)
    generation = getattr(meta, "generation", None)
    return str(getattr(generation, "mode", "positive")) == "negative"


def _admission_sale(context, case):
    """A valid id of an admission operation becomes the sale made for it."""
    if context.operation is None or not case.path_parameters:
        return
    param = next((p for pattern, p, _ in _SALES if pattern.match(context.operation.path)), None)
    if param is None:
        return
    generated = case.path_parameters.get(param)
    valid = (isinstance(generated, int) and not isinstance(generated, bool) and 0 < generated <= _INT64_MAX) or (
        isinstance(generated, str)
        and generated.isascii()
        and generated.isdigit()
        and 0 < int(generated) <= _INT64_MAX
    )
    if not valid:
        return
    for pattern, name, var in _SALES:
        if pattern.match(context.operation.path) and os.environ.get(var):
            made = os.environ[var]
            case.path_parameters[name] = int(made) if isinstance(generated, int) else made
            return


@schemathesis.hook
def map_case(context, case):
    # A case generated to break the schema (a header left out, a value out of
    # range) goes as generated: changing it would have schemathesis revalidate it
    # as valid and send the header it meant to leave out (a missing Authorization
    # then reaches the server with the configured token).
    if _negative(case):
        return case
    _unique_key(case)
    _admission_sale(context, case)
    body = case.body
    if context.operation is not None and context.operation.path == _BEACON_PATH:
        _beacon(body)
    if context.operation is None or context.operation.path != "/api/v1/admin/vouchers":
        return case
    if not isinstance(body, dict):
        return case
    _fix_window(body)
    _raffle_draw(body)
    return case


def _fix_window(body):
    begin, end = _time(body.get("begin_at")), _time(body.get("end_at"))
    if begin is None or end is None or begin < end:
        return
    try:
        later = (begin + timedelta(seconds=1)).replace(microsecond=0) + timedelta(seconds=1)
        if _within_years(later):
            body["end_at"] = later.isoformat()
            return
    except OverflowError:
        pass
    try:
        earlier = (end - timedelta(seconds=2)).replace(microsecond=0)
        if _within_years(earlier):
            body["begin_at"] = earlier.isoformat()
            return
    except OverflowError:
        pass
    body["begin_at"], body["end_at"] = "2000-01-01T00:00:00Z", "2000-01-02T00:00:00Z"
