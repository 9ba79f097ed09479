"""Schemathesis hooks for scripts/schemathesis.sh (loaded through SCHEMATHESIS_HOOKS).

One rule of the API that JSON Schema cannot state: a flash sale's `begin_at` must
be before its `end_at` (the document says so in words). Generated bodies that hold
two valid times in the wrong order get `end_at` moved to a day after `begin_at`,
so that a request the generator means as valid is valid; everything else,
including every deliberately invalid body, is sent as generated.
"""
from datetime import datetime, timedelta

import schemathesis


def _time(value):
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


@schemathesis.hook
def map_case(context, case):
    body = case.body
    if context.operation is None or context.operation.path != "/api/v1/admin/vouchers":
        return case
    if not isinstance(body, dict):
        return case
    begin, end = _time(body.get("begin_at")), _time(body.get("end_at"))
    if begin is not None and end is not None and begin >= end:
        try:
            body["end_at"] = (begin + timedelta(days=1)).isoformat()
        except OverflowError:  # year 9999: move the start back instead
            body["begin_at"] = (end - timedelta(days=1)).isoformat()
    return case
