from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("open", views.open_gate, name="open"),
    path("close", views.close_gate, name="close"),
    path("stream", views.stream, name="stream"),
    path("slow", views.slow, name="slow"),
    path("boom", views.boom, name="boom"),
    path("hold", views.hold, name="hold"),
    path("flood", views.flood, name="flood"),
    path("hold-stream", views.hold_stream, name="hold-stream"),
    path("stats", views.stats, name="stats"),
]
