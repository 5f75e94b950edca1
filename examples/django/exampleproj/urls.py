from __future__ import annotations

from django.urls import path

from redis_tb.django.views import metrics

from . import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("items/<int:item_id>", views.item, name="item"),
    path("async/items/<int:item_id>", views.async_item, name="async-item"),
    path("quota", views.quota, name="quota"),
    path("search", views.search, name="search"),
    path("orders", views.orders, name="orders"),
    path("exports/", views.exports, name="exports"),
    path("flaky", views.flaky, name="flaky"),
    path("login", views.login, name="login"),
    path("stream", views.stream, name="stream"),
]
