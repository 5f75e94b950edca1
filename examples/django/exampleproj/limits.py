"""Key, plan and cost functions named in settings.REDIS_TB (by dotted path).

They receive the Django request. A stand-in for your auth: API key -> (user, plan).
"""

from __future__ import annotations

from django.http import HttpRequest

API_KEYS = {
    "key-alice": ("alice", "pro"),
    "key-bob": ("bob", "free"),
    "key-root": ("root", "staff"),
}


def account(request: HttpRequest) -> tuple[str, str] | None:
    return API_KEYS.get(request.headers.get("X-Api-Key", ""))


def user_id(request: HttpRequest) -> str | None:
    """The user behind the API key; None (the policy is skipped) when anonymous."""
    acct = account(request)
    return None if acct is None else acct[0]


def plan(request: HttpRequest) -> str | None:
    acct = account(request)
    return None if acct is None else acct[1]


def search_cost(request: HttpRequest) -> float:
    """One token per requested page of 50 results."""
    try:
        size = int(request.GET.get("size", "50"))
    except ValueError:
        size = 50
    return max(1, -(-size // 50))
