from __future__ import annotations

from django.urls import path

from . import views

app_name = "shop"
urlpatterns = [path("orders/<int:order_id>", views.order, name="order")]
