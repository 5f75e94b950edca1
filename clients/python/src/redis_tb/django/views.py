"""``metrics``: the Prometheus text exposition of a registry (``prometheus_client``,
the package's optional ``prometheus`` extra), as a Django view.

::

    path("metrics", redis_tb.django.views.metrics, name="metrics")

Add ``"metrics"`` to ``REDIS_TB["EXCLUDE"]`` so scrapes are not limited.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse


def metrics(request: HttpRequest) -> HttpResponse:
    """The default registry's metrics (``prometheus_client.REGISTRY``), or the
    registry of ``REDIS_TB["METRICS"]`` when it has one."""
    from prometheus_client import REGISTRY, CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

    from .runtime import get_rate_limit  # noqa: PLC0415

    registry = getattr(get_rate_limit().config.metrics, "registry", None) or REGISTRY
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
