from __future__ import annotations

from django.urls import include, path, re_path

from . import views

urlpatterns = [
    path("items/<int:item_id>", views.item, name="item"),
    path("async/items/<int:item_id>", views.async_item, name="async-item"),
    path("shop/", include("djangoapp.shop_urls")),
    re_path(r"^legacy/(?P<item_id>[0-9]{1,4})$", views.item, name="legacy"),
    path("fail", views.fail, name="fail"),
    path("boom", views.boom, name="boom"),
    path("refund", views.refund, name="refund"),
    path("arefund", views.arefund, name="arefund"),
    path("deco", views.deco, name="deco"),
    path("adeco", views.adeco, name="adeco"),
    path("closed", views.closed, name="closed"),
    path("decofail", views.decofail, name="decofail"),
    path("exempt", views.exempt, name="exempt"),
    path("exempt-own", views.exempt_own, name="exempt-own"),
]
